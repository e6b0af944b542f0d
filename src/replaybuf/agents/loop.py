"""The DQN collect/train/evaluate loop behind ``replaybuf demo``.

Each iteration a StepDriver collects ``train_every`` env steps with the epsilon-greedy
policy into the buffer (``observers=[buffer.add_batch, returns]``), then the agent takes
``gradient_steps`` steps on ``as_dataset(batch_size, num_steps=2)`` batches. Every
``eval_every`` env steps a greedy policy is evaluated; the best weights are kept and
training stops early once an evaluation reaches ``stop_return`` or after ``time_limit``
seconds. The returned agent
holds the best weights.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from replaybuf.agents.dqn import DqnAgent
from replaybuf.drivers import EpisodeReturns, StepDriver
from replaybuf.errors import ArgumentError
from replaybuf.trajectory import collect_data_spec

__all__ = ["BACKENDS", "DqnConfig", "DqnRun", "evaluate", "make_buffer", "train_dqn"]

BACKENDS = {
    "numpy": ("replaybuf", "UniformReplayBuffer"),
    "tf": ("replaybuf.tf", "TFUniformReplayBuffer"),
    "torch": ("replaybuf.torch", "TorchUniformReplayBuffer"),
}


@dataclasses.dataclass
class DqnConfig:
    """Hyperparameters of a DQN run (defaults solve CartPole-v1 in a few minutes on a CPU)."""

    env_id: str = "CartPole-v1"
    total_steps: int = 100_000
    seed: int = 1
    backend: str = "numpy"
    num_envs: int = 4
    buffer_size: int = 100_000
    learning_starts: int = 1_000
    train_every: int = 256
    gradient_steps: int = 64
    batch_size: int = 128
    learning_rate: float = 2.3e-3
    gamma: float = 0.99
    target_update_period: int = 64
    double_q: bool = True
    max_grad_norm: float | None = 10.0
    hidden: tuple[int, ...] = (128, 128)
    epsilon_start: float = 1.0
    epsilon_end: float = 0.04
    exploration_steps: int = 10_000
    eval_every: int = 2_500
    eval_episodes: int = 20
    stop_return: float = 495.0
    time_limit: float = 240.0


@dataclasses.dataclass
class DqnRun:
    """What a run produced: the trained agent (best weights) and its learning curve."""

    agent: DqnAgent
    steps: int
    episode_steps: list[int]
    episode_returns: list[float]
    losses: list[float]
    evaluations: list[tuple[int, float]]
    best_return: float
    wall_time: float


def make_buffer(backend: str, data_spec: Any, batch_size: int, max_length: int, seed: int | None = None) -> Any:
    """A uniform replay buffer of the named backend: numpy, tf or torch.

    Raises:
        ArgumentError: an unknown backend, or one whose module cannot be imported yet.
    """
    if backend not in BACKENDS:
        raise ArgumentError(f"backend: expected one of {sorted(BACKENDS)}, got {backend!r}")
    module_name, class_name = BACKENDS[backend]
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as err:
        raise ArgumentError(
            f"backend {backend!r} needs {module_name}.{class_name}, which is not available ({err}); use --backend numpy"
        ) from None
    return cls(data_spec, batch_size=batch_size, max_length=max_length, seed=seed)


def evaluate(env_id: str, policy: Callable[[Any], Any], num_episodes: int, seed: int) -> list[float]:
    """The return of one episode in each of ``num_episodes`` parallel envs under ``policy``."""
    import gymnasium as gym

    env = gym.make_vec(env_id, num_envs=num_episodes, vectorization_mode="sync")
    try:
        observation, _ = env.reset(seed=seed)
        returns = np.zeros(num_episodes)
        done = np.zeros(num_episodes, bool)
        while not done.all():
            observation, reward, terminated, truncated, _ = env.step(policy(observation))
            returns += np.where(done, 0.0, reward)
            done |= terminated | truncated
    finally:
        env.close()
    return returns.tolist()


def train_dqn(config: DqnConfig, on_iteration: Callable[[DqnRun], None] | None = None) -> DqnRun:
    """Train DQN from a replay buffer; ``on_iteration(run)`` is called after each iteration.

    Raises:
        ArgumentError: an unknown or unavailable backend.
    """
    import gymnasium as gym

    start = time.perf_counter()
    env = gym.make_vec(config.env_id, num_envs=config.num_envs, vectorization_mode="sync")
    spec = collect_data_spec(env)
    buffer = make_buffer(
        config.backend,
        spec,
        config.num_envs,
        math.ceil(config.buffer_size / config.num_envs),
        config.seed,
    )
    agent = DqnAgent(
        spec.observation,
        spec.action,
        hidden=config.hidden,
        learning_rate=config.learning_rate,
        gamma=config.gamma,
        target_update_period=config.target_update_period,
        double_q=config.double_q,
        max_grad_norm=config.max_grad_norm,
        seed=config.seed,
    )
    returns = EpisodeReturns()
    driver = StepDriver(env, agent.collect_policy, [buffer.add_batch, returns], config.train_every, seed=config.seed)
    run = DqnRun(agent, 0, [], [], [], [], -math.inf, 0.0)
    best_weights = None
    dataset = None
    next_eval = config.eval_every
    try:
        while run.steps < config.total_steps:
            fraction = min(1.0, run.steps / max(1, config.exploration_steps))
            agent.epsilon = config.epsilon_start + fraction * (config.epsilon_end - config.epsilon_start)
            seen = len(returns.returns)
            run.steps += driver.run()
            run.episode_returns += returns.returns[seen:]
            run.episode_steps += [run.steps] * (len(returns.returns) - seen)
            if run.steps >= config.learning_starts:
                if dataset is None:
                    dataset = iter(buffer.as_dataset(sample_batch_size=config.batch_size, num_steps=2))
                for _ in range(config.gradient_steps):
                    trajectories, _ = next(dataset)
                    run.losses.append(agent.train(trajectories))
            if run.steps >= next_eval or run.steps >= config.total_steps:
                next_eval += config.eval_every
                score = float(
                    np.mean(
                        evaluate(
                            config.env_id,
                            agent.greedy_policy,
                            config.eval_episodes,
                            10_000 + run.steps,
                        )
                    )
                )
                run.evaluations.append((run.steps, score))
                if score > run.best_return:
                    run.best_return = score
                    best_weights = {k: v.clone() for k, v in agent.q_network.state_dict().items()}
            if on_iteration is not None:
                on_iteration(run)
            if run.best_return >= config.stop_return or time.perf_counter() - start > config.time_limit:
                break
    finally:
        env.close()
    if best_weights is not None:
        agent.q_network.load_state_dict(best_weights)
    run.wall_time = time.perf_counter() - start
    return run
