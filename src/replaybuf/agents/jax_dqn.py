"""DQN in pure JAX on gymnax's CartPole-v1, trained from a replaybuf JAX buffer.

The whole loop runs on the device inside one jitted ``lax.scan``: act epsilon-greedily in
``num_envs`` vectorised environments, add the step's transitions to a replaybuf functional
buffer and sample a training batch from it in one ``add_and_sample`` (the write before the
read, so the donated buffer is updated in place), take one Adam step on the Q-network, and
copy it to the target network every ``target_every`` environment steps. ``jax.vmap`` trains ``seeds``
independent agents at once, each with its own buffer, networks and environments. The scan
runs in chunks (the carry donated between them) so that a progress line and a greedy
evaluation can come between chunks; each agent's best network so far is kept (DQN's greedy
policy swings from one evaluation to the next) and evaluated at the end on fresh episodes,
as the PyTorch demo does.

Hyper-parameters follow the usual CleanRL / PureJaxRL CartPole DQN. Plain jax + optax: a
two-layer MLP needs no network library.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from replaybuf.jax import make_buffer
from replaybuf.specs import ArraySpec

__all__ = ["JaxDqnConfig", "JaxDqnRun", "train_jax_dqn"]


@dataclasses.dataclass(frozen=True)
class JaxDqnConfig:
    seed: int = 1
    seeds: int = 4  # agents trained at once under vmap
    total_steps: int = 500_000  # environment steps per agent
    chunk_steps: int = 25_000  # environment steps per jitted chunk (a progress line and an evaluation each)
    num_envs: int = 10
    buffer_size: int = 10_000  # transitions per agent
    batch_size: int = 128
    learning_starts: int = 10_000
    learning_rate: float = 2.5e-4
    gamma: float = 0.99
    target_every: int = 500  # environment steps between target network copies
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_anneal: int = 250_000  # environment steps
    hidden: tuple[int, int] = (120, 84)
    eval_episodes: int = 20
    env_id: str = "CartPole-v1"


class JaxDqnRun(NamedTuple):
    """What ``train_jax_dqn`` measured: one row per chunk, one column per agent."""

    steps: list[int]  # environment steps per agent at the end of each chunk
    train_returns: np.ndarray  # [chunks, seeds]: mean return of the training episodes ended in the chunk
    eval_returns: np.ndarray  # [chunks, seeds]: mean greedy return after the chunk
    losses: np.ndarray  # [chunks, seeds]: mean TD loss over the chunk's updates
    buffer_steps: np.ndarray  # [seeds]: steps each agent's buffer received (per stream)
    wall_time: float
    final_returns: np.ndarray  # [seeds]: mean greedy return of each agent's best kept network on fresh episodes


class _Carry(NamedTuple):
    params: Any
    target: Any
    opt_state: Any
    buffer: Any
    env_state: Any
    obs: jax.Array
    key: jax.Array
    step: jax.Array  # environment steps of this agent so far
    episode_return: jax.Array  # [num_envs]: running return of each environment's episode


def _init_mlp(key: jax.Array, sizes: list[int]) -> list[tuple[jax.Array, jax.Array]]:
    layers = []
    for k, (fan_in, fan_out) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):  # noqa: B905
        bound = jnp.sqrt(6.0 / (fan_in + fan_out))  # Glorot uniform
        layers.append((jax.random.uniform(k, (fan_in, fan_out), jnp.float32, -bound, bound), jnp.zeros(fan_out)))
    return layers


def _q_values(params: list, obs: jax.Array) -> jax.Array:
    x = obs
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def _transition_spec(obs_shape: tuple[int, ...]) -> dict:
    return {
        "obs": ArraySpec(obs_shape, np.float32),
        "action": ArraySpec((), np.int32),
        "reward": ArraySpec((), np.float32),
        "terminal": ArraySpec((), np.bool_),
        "next_obs": ArraySpec(obs_shape, np.float32),
    }


def _builders(config: JaxDqnConfig) -> tuple[Callable, Callable, Callable]:
    """``(init(key) -> carry, chunk(carry) -> (carry, stats), evaluate(params, key) -> mean return)``
    for one agent; the caller vmaps and jits them."""
    env, env_params = gymnax.make(config.env_id)
    actions = env.action_space(env_params).n
    obs_shape = env.observation_space(env_params).shape
    buffer = make_buffer(
        _transition_spec(obs_shape), batch_size=config.num_envs, max_length=config.buffer_size // config.num_envs
    )
    optimizer = optax.adam(config.learning_rate)
    sizes = [int(np.prod(obs_shape)), *config.hidden, actions]
    env_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    env_reset = jax.vmap(env.reset, in_axes=(0, None))

    @jax.vmap
    def collect_step(key: jax.Array, env_state: Any, action: jax.Array) -> tuple:
        """gymnax's ``step`` with its reset written out, so that the transition keeps the true
        next observation and tells termination from the time limit. Returns ``(next_obs, obs,
        env_state, reward, done, terminal)``: ``obs`` the next step's (reset where done);
        ``terminal`` is done before the step limit, where the target must not bootstrap (the
        limit is no state of CartPole: the PyTorch demo bootstraps there too)."""
        step_key, reset_key = jax.random.split(key)
        next_obs, next_state, reward, done, _ = env.step_env(step_key, env_state, action, env_params)
        reset_obs, reset_state = env.reset_env(reset_key, env_params)
        env_state = jax.tree.map(lambda new, old: jnp.where(done, new, old), reset_state, next_state)
        terminal = done & (next_state.time < env_params.max_steps_in_episode)
        return next_obs, jnp.where(done, reset_obs, next_obs), env_state, reward, done, terminal

    def init(key: jax.Array) -> _Carry:
        key, net_key, env_key = jax.random.split(key, 3)
        params = _init_mlp(net_key, sizes)
        obs, env_state = env_reset(jax.random.split(env_key, config.num_envs), env_params)
        return _Carry(
            params,
            params,
            optimizer.init(params),
            buffer.init(),
            env_state,
            obs,
            key,
            jnp.zeros((), jnp.int32),
            jnp.zeros(config.num_envs, jnp.float32),
        )

    def td_loss(params: list, target: list, batch: dict) -> jax.Array:
        q = jnp.take_along_axis(_q_values(params, batch["obs"]), batch["action"][:, None], axis=1)[:, 0]
        bootstrap = jnp.max(_q_values(target, batch["next_obs"]), axis=1)
        goal = batch["reward"] + config.gamma * (1.0 - batch["terminal"].astype(jnp.float32)) * bootstrap
        return jnp.mean((q - lax.stop_gradient(goal)) ** 2)

    def update(carry: _Carry, _: None) -> tuple[_Carry, tuple[jax.Array, jax.Array, jax.Array]]:
        key, act_key, explore_key, env_key, sample_key = jax.random.split(carry.key, 5)
        fraction = jnp.minimum(carry.step / config.epsilon_anneal, 1.0)
        epsilon = config.epsilon_start + fraction * (config.epsilon_end - config.epsilon_start)
        greedy = jnp.argmax(_q_values(carry.params, carry.obs), axis=1).astype(jnp.int32)
        random = jax.random.randint(act_key, (config.num_envs,), 0, actions, jnp.int32)
        action = jnp.where(jax.random.uniform(explore_key, (config.num_envs,)) < epsilon, random, greedy)
        next_obs, obs, env_state, reward, done, terminal = collect_step(
            jax.random.split(env_key, config.num_envs), carry.env_state, action
        )
        transition = {"obs": carry.obs, "action": action, "reward": reward, "terminal": terminal, "next_obs": next_obs}
        state, batch, info = buffer.add_and_sample(carry.buffer, transition, sample_key, config.batch_size)
        step = carry.step + config.num_envs

        def learn(args: tuple) -> tuple:
            params, opt_state = args
            loss, grads = jax.value_and_grad(td_loss)(params, carry.target, batch)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        ready = (step >= config.learning_starts) & jnp.all(info.valid)
        params, opt_state, loss = lax.cond(
            ready, learn, lambda args: (*args, jnp.float32(jnp.nan)), (carry.params, carry.opt_state)
        )
        sync = ready & (step % config.target_every < config.num_envs)
        target = jax.tree.map(lambda new, old: jnp.where(sync, new, old), params, carry.target)
        episode_return = carry.episode_return + reward
        ended = (jnp.sum(jnp.where(done, episode_return, 0.0)), jnp.sum(done))
        carry = _Carry(
            params, target, opt_state, state, env_state, obs, key, step, jnp.where(done, 0.0, episode_return)
        )
        return carry, (loss, *ended)

    def chunk(carry: _Carry) -> tuple[_Carry, dict]:
        carry, (losses, ended_sum, ended_count) = lax.scan(
            update, carry, None, length=config.chunk_steps // config.num_envs
        )
        learned = ~jnp.isnan(losses)
        count = jnp.sum(ended_count)
        return carry, {
            "loss": jnp.sum(jnp.where(learned, losses, 0.0)) / jnp.maximum(jnp.sum(learned), 1),
            "train_return": jnp.sum(ended_sum) / jnp.maximum(count, 1),
        }

    def evaluate(params: list, key: jax.Array) -> jax.Array:
        """Mean return of ``eval_episodes`` greedy episodes (each to its end or the step limit)."""
        reset_key, key = jax.random.split(key)
        obs, env_state = env_reset(jax.random.split(reset_key, config.eval_episodes), env_params)

        def act(carry: tuple, _: None) -> tuple:
            obs, env_state, key, returns, running = carry
            key, step_key = jax.random.split(key)
            action = jnp.argmax(_q_values(params, obs), axis=1).astype(jnp.int32)
            obs, env_state, reward, done, _ = env_step(
                jax.random.split(step_key, config.eval_episodes), env_state, action, env_params
            )
            return (obs, env_state, key, returns + reward * running, running & ~done), None

        start = (obs, env_state, key, jnp.zeros(config.eval_episodes), jnp.ones(config.eval_episodes, bool))
        (_, _, _, returns, _), _ = lax.scan(act, start, None, length=env_params.max_steps_in_episode)
        return jnp.mean(returns)

    return init, chunk, evaluate


def train_jax_dqn(config: JaxDqnConfig, progress: Callable[[int, dict], None] | None = None) -> JaxDqnRun:
    """Train ``config.seeds`` agents at once; ``progress(steps, figures)`` after each chunk."""
    init, chunk, evaluate = _builders(config)
    keys = jax.random.split(jax.random.key(config.seed), config.seeds)
    carry = jax.jit(jax.vmap(init))(keys)
    run_chunk = jax.jit(jax.vmap(chunk), donate_argnums=0)
    run_eval = jax.jit(jax.vmap(evaluate))
    eval_keys = jax.random.split(jax.random.key(1_000_000 + config.seed), config.seeds)
    steps, train_returns, eval_returns, losses = [], [], [], []
    best, best_scores = jax.tree.map(jnp.copy, carry.params), jnp.full(config.seeds, -jnp.inf)
    keep = jax.jit(lambda better, new, old: jax.tree.map(lambda a, b: jnp.where(_lead(better, a), a, b), new, old))
    started = time.perf_counter()
    for _ in range(max(1, config.total_steps // config.chunk_steps)):
        carry, figures = run_chunk(carry)
        scores = run_eval(carry.params, eval_keys)
        better = scores >= best_scores  # DQN's greedy policy swings between chunks: keep each agent's best
        best, best_scores = keep(better, carry.params, best), jnp.where(better, scores, best_scores)
        steps.append(int(carry.step[0]))
        train_returns.append(np.asarray(figures["train_return"]))
        losses.append(np.asarray(figures["loss"]))
        eval_returns.append(np.asarray(scores))
        if progress is not None:
            progress(
                steps[-1], {"train_return": train_returns[-1], "eval_return": eval_returns[-1], "loss": losses[-1]}
            )
    return JaxDqnRun(
        steps,
        np.stack(train_returns),
        np.stack(eval_returns),
        np.stack(losses),
        np.asarray(carry.buffer.steps),
        time.perf_counter() - started,
        np.asarray(run_eval(best, jax.random.split(jax.random.key(2_000_000 + config.seed), config.seeds))),
    )


def _lead(mask: jax.Array, like: jax.Array) -> jax.Array:
    """``mask [seeds]`` shaped to broadcast against ``like [seeds, ...]``."""
    return mask.reshape(mask.shape + (1,) * (like.ndim - 1))
