"""Asynchronous PPO on CartPole-v1: actor processes with lagging policies, one learner, in one file.

    python examples/async_ppo_cartpole.py                        # stops once a greedy return >= 495
    python examples/async_ppo_cartpole.py --max-staleness none   # the same, staleness unbounded
    python examples/async_ppo_cartpole.py --max-updates 8        # a quick smoke run

Actor processes (``spawn``) each step ``--envs-per-actor`` CartPoles with their own copy of
the policy and send fixed-length chunks (``--chunk-steps`` steps of every env: observations,
actions, the behaviour policy's log-probabilities, rewards, episode ends, the observations
after each step) through a queue, tagged with the version of the policy that acted. An
actor loads the learner's newest weights (from shared memory) only every ``--sync-every``
chunks, so its policy lags the learner's by a few versions.

The learner (this process) computes each chunk's advantages when the chunk arrives, with GAE
over the chunk and its current value network, and adds the chunk's items (one per step and
env) to a ``UniformReplayBuffer`` with ``max_times_sampled=1`` (each item is drawn once) and
``max_staleness=2`` (items acted by a policy older than ``policy_version - 2`` are never
drawn). An update draws ``--batch-size`` items with ``get_next`` (``EmptyBufferError``: wait
for the next chunk), trains PPO's clipped objective for ``--epochs`` passes over them (the
importance ratio is the learner's policy against the stored behaviour log-probability, the
policy that really acted), then sets ``buffer.policy_version`` and publishes its weights.

Stopping (at the target, after ``--max-updates``, or on Ctrl-C, which the actors ignore so
that the learner can stop them, and which the learner reads as a flag between steps): the
learner sets a stop event, drains the queue until
every actor has returned (an actor blocked on a full queue checks the event every 0.1 s),
joins them and prints their exit codes. docs/sample_rules.md ("An asynchronous PPO learner") has the results.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import resource
import signal
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import replaybuf

OBSERVATION, ACTIONS = 4, 2


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-staleness", default="2", help="an int, or 'none' for no bound")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--actors", type=int, default=3)
    parser.add_argument("--envs-per-actor", type=int, default=4)
    parser.add_argument("--chunk-steps", type=int, default=32, help="steps of every env per chunk")
    parser.add_argument("--sync-every", type=int, default=4, help="chunks between an actor's weight loads")
    parser.add_argument("--batch-size", type=int, default=512, help="items per update (each drawn once)")
    parser.add_argument("--epochs", type=int, default=8, help="passes over an update's items")
    parser.add_argument("--minibatch", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--clip", type=float, default=0.2)
    parser.add_argument("--max-updates", type=int, default=400)
    parser.add_argument("--eval-every", type=int, default=5, help="updates between greedy evaluations")
    parser.add_argument("--target", type=float, default=495.0, help="stop once a greedy evaluation reaches it")
    parser.add_argument("--buffer-chunks", type=int, default=2048, help="chunks the buffer holds")
    parser.add_argument(
        "--start-method",
        default="spawn",
        choices=["spawn", "forkserver", "fork"],
        help="how actor processes start (fork: no re-import of torch per actor; safe here, no threads yet)",
    )
    args = parser.parse_args(argv)
    args.max_staleness = None if args.max_staleness.lower() == "none" else int(args.max_staleness)
    return args


def policy_net() -> nn.Module:
    return nn.Sequential(nn.Linear(OBSERVATION, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, ACTIONS))


def value_net() -> nn.Module:
    return nn.Sequential(nn.Linear(OBSERVATION, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))


# -- actors (each in its own process) ------------------------------------------------------
def actor(index, args, weights, version, lock, chunks, stop):
    """Step CartPoles with a lagging copy of the policy; send chunks until ``stop`` is set."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the learner stops us
    torch.set_num_threads(1)
    torch.manual_seed(args.seed + 1000 + index)
    envs = gym.make_vec(
        "CartPole-v1",
        num_envs=args.envs_per_actor,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    policy = policy_net()
    flat = nn.utils.parameters_to_vector(policy.parameters()).detach()
    shared = np.frombuffer(weights, np.float32)
    observation, _ = envs.reset(seed=args.seed + 100 * index)
    returns, acted, sent = np.zeros(args.envs_per_actor), 0, 0
    T, E = args.chunk_steps, args.envs_per_actor
    while not stop.is_set():
        if sent % args.sync_every == 0:  # the only place the actor's policy changes
            with lock:
                flat.copy_(torch.from_numpy(shared))
                acted = version.value
            nn.utils.vector_to_parameters(flat, policy.parameters())
        chunk = {
            "observation": np.zeros((T, E, OBSERVATION), np.float32),
            "next_observation": np.zeros((T, E, OBSERVATION), np.float32),
            "action": np.zeros((T, E), np.int64),
            "log_prob": np.zeros((T, E), np.float32),
            "reward": np.zeros((T, E), np.float32),
            "terminated": np.zeros((T, E), bool),
            "done": np.zeros((T, E), bool),
        }
        finished = []
        for t in range(T):
            with torch.no_grad():
                dist = torch.distributions.Categorical(logits=policy(torch.as_tensor(observation)))
                action = dist.sample()
                log_prob = dist.log_prob(action)
            after, reward, terminated, truncated, info = envs.step(action.numpy())
            done = terminated | truncated
            next_observation = after.copy()  # SAME_STEP autoreset: `after` is the reset observation where done
            for e in np.flatnonzero(done):
                next_observation[e] = info["final_obs"][e]
            chunk["observation"][t], chunk["next_observation"][t] = observation, next_observation
            chunk["action"][t], chunk["log_prob"][t] = action.numpy(), log_prob.numpy()
            chunk["reward"][t], chunk["terminated"][t], chunk["done"][t] = reward, terminated, done
            returns += reward
            finished.extend(returns[done].tolist())
            returns[done] = 0.0
            observation = after
        message = (index, acted, chunk, finished)
        while not stop.is_set():  # a full queue: wait, but never past the stop
            try:
                chunks.put(message, timeout=0.1)
                sent += 1
                break
            except queue.Full:
                pass
    envs.close()


# -- the learner ---------------------------------------------------------------------------
def gae(value, chunk, args):
    """Advantages and value targets of one chunk ([T, E] each): GAE(gamma, lambda) with the
    learner's current value network; bootstraps from the next observation unless terminated
    (a time-limit truncation bootstraps), and never carries an advantage across an episode end."""
    with torch.no_grad():
        v = value(torch.as_tensor(chunk["observation"])).squeeze(-1).numpy()
        v_next = value(torch.as_tensor(chunk["next_observation"])).squeeze(-1).numpy()
    alive, going = 1.0 - chunk["terminated"], 1.0 - chunk["done"]
    delta = chunk["reward"] + args.gamma * alive * v_next - v
    advantage = np.zeros(delta.shape, np.float32)
    running = np.zeros(delta.shape[1])
    for t in reversed(range(delta.shape[0])):
        running = delta[t] + args.gamma * args.gae_lambda * going[t] * running
        advantage[t] = running
    return advantage, advantage + v.astype(np.float32)


def evaluate(policy, episodes=20, seed=0):
    env = gym.make_vec("CartPole-v1", num_envs=episodes, vectorization_mode="sync")
    observation, _ = env.reset(seed=seed)
    returns, done = np.zeros(episodes), np.zeros(episodes, bool)
    while not done.all():
        with torch.no_grad():
            action = policy(torch.as_tensor(observation)).argmax(dim=1).numpy()
        observation, reward, terminated, truncated, _ = env.step(action)
        returns += np.where(done, 0.0, reward)
        done |= terminated | truncated
    env.close()
    return float(returns.mean())


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    start, cpu_start = time.time(), time.process_time()
    items_per_chunk = args.chunk_steps * args.envs_per_actor
    spec = {
        "observation": replaybuf.ArraySpec((OBSERVATION,), np.float32),
        "action": replaybuf.ArraySpec((), np.int64),
        "log_prob": replaybuf.ArraySpec((), np.float32),  # the behaviour policy's, at acting time
        "advantage": replaybuf.ArraySpec((), np.float32),  # GAE at arrival
        "value_target": replaybuf.ArraySpec((), np.float32),
        "policy_version": replaybuf.ArraySpec((), np.int64),  # the version that acted
    }
    # One add_batch per chunk: the buffer's streams are a chunk's positions (step, env).
    rb = replaybuf.UniformReplayBuffer(
        spec,
        batch_size=items_per_chunk,
        max_length=args.buffer_chunks,
        seed=args.seed,
        max_times_sampled=1,
        max_staleness=args.max_staleness,
    )
    policy, value = policy_net(), value_net()
    optimizer = torch.optim.Adam([*policy.parameters(), *value.parameters()], lr=args.learning_rate, eps=1e-5)

    context = mp.get_context(args.start_method)
    flat = nn.utils.parameters_to_vector(policy.parameters()).detach()
    weights = context.RawArray("f", flat.numel())
    shared = np.frombuffer(weights, np.float32)
    shared[:] = flat.numpy()
    version, lock = context.RawValue("q", 0), context.Lock()
    chunks, stop = context.Queue(maxsize=4 * args.actors), context.Event()
    actors = [
        context.Process(target=actor, args=(i, args, weights, version, lock, chunks, stop), daemon=True)
        for i in range(args.actors)
    ]
    for p in actors:
        p.start()

    def publish(new_version):
        with lock:
            shared[:] = nn.utils.parameters_to_vector(policy.parameters()).detach().numpy()
            version.value = new_version

    def receive(block):
        """Add every chunk waiting in the queue (or the next one, waiting for it)."""
        received = 0
        while True:
            try:
                index, acted, chunk, finished = (
                    chunks.get(timeout=1.0) if block and not received else chunks.get_nowait()
                )
            except queue.Empty:
                if block and not received and not any(p.is_alive() for p in actors):
                    raise RuntimeError("every actor process has died") from None
                if block and not received and not interrupted:
                    continue
                return received
            advantage, value_target = gae(value, chunk, args)
            rb.add_batch(
                {
                    "observation": chunk["observation"].reshape(-1, OBSERVATION),
                    "action": chunk["action"].reshape(-1),
                    "log_prob": chunk["log_prob"].reshape(-1),
                    "advantage": advantage.reshape(-1),
                    "value_target": value_target.reshape(-1),
                    "policy_version": np.full(items_per_chunk, acted, np.int64),
                }
            )
            stats["chunks"] += 1
            stats["first_chunk"] = stats["first_chunk"] or time.time() - start
            stats["lag_on_arrival"] = max(stats["lag_on_arrival"], updates - acted)
            if index not in sending:
                sending.add(index)
                if len(sending) == args.actors:
                    print(f"all {args.actors} actors sending after {time.time() - start:.1f} s", flush=True)
            episode_returns.extend(finished)
            received += 1

    stats = {"chunks": 0, "lag_on_arrival": 0, "first_chunk": 0.0}
    sending: set[int] = set()  # actors whose first chunk arrived
    episode_returns: list[float] = []
    trained_ids: list[np.ndarray] = []
    updates, max_staleness_seen, best, best_weights, score = 0, 0, -1.0, None, float("nan")
    loss_value = float("nan")
    print(f"update 0: greedy return {evaluate(policy, seed=10_000):.1f} (a uniformly random policy: ~22)", flush=True)
    # Ctrl-C sets a flag the loop reads between steps: a KeyboardInterrupt raised at any
    # bytecode could cut a queue read in half (the queue's pipe then never parses again, and
    # draining it hangs) or an add to the buffer.
    interrupted = []
    previous_handler = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        while updates < args.max_updates and not interrupted:
            receive(block=False)
            try:
                items, info = rb.get_next(args.batch_size)  # each item drawn once, none staler than the bound
            except replaybuf.EmptyBufferError:
                receive(block=True)
                continue
            trained_ids.append(np.asarray(info.ids).ravel())
            max_staleness_seen = max(max_staleness_seen, int(updates - items["policy_version"].min()))
            observation = torch.as_tensor(items["observation"])
            action = torch.as_tensor(items["action"])
            behaviour = torch.as_tensor(items["log_prob"])
            advantage = torch.as_tensor(items["advantage"])
            target = torch.as_tensor(items["value_target"])
            for _ in range(args.epochs):
                for part in torch.randperm(args.batch_size).split(args.minibatch):
                    adv = advantage[part]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    log_prob = torch.distributions.Categorical(logits=policy(observation[part])).log_prob(action[part])
                    ratio = (log_prob - behaviour[part]).exp()  # against the policy that acted
                    clipped = ratio.clamp(1 - args.clip, 1 + args.clip)
                    policy_loss = -torch.min(ratio * adv, clipped * adv).mean()
                    value_loss = (value(observation[part]).squeeze(-1) - target[part]).pow(2).mean()
                    loss = policy_loss + 0.5 * value_loss
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_([*policy.parameters(), *value.parameters()], 0.5)
                    optimizer.step()
                    loss_value = loss.item()
            updates += 1
            rb.policy_version = updates  # items acted by versions < updates - max_staleness go
            publish(updates)
            if updates % args.eval_every == 0 or updates == args.max_updates:
                score = evaluate(policy, seed=10_000 + updates)
                recent = np.mean(episode_returns[-20:]) if episode_returns else float("nan")
                print(
                    f"update {updates}: loss {loss_value:.3f}, training return {recent:.1f}, "
                    f"greedy return {score:.1f}, "
                    f"max staleness {max_staleness_seen}, eligible {rb.num_eligible()}, stored {rb.num_frames()}, "
                    f"{time.time() - start:.0f} s",
                    flush=True,
                )
                if score > best:
                    best, best_weights = score, {k: v.clone() for k, v in policy.state_dict().items()}
                if best >= args.target:
                    break
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        if interrupted:  # Ctrl-C: stop here, shut the actors down and report (they ignore it)
            print(f"interrupted after update {updates}", flush=True)
        stop.set()  # actors return at their next chunk (or within 0.1 s when blocked on the queue)
        deadline = time.time() + 60
        while any(p.is_alive() for p in actors) and time.time() < deadline:
            try:
                while True:
                    chunks.get_nowait()  # drain, so no actor's queue feeder blocks its exit
            except queue.Empty:
                pass
            for p in actors:
                p.join(timeout=0.05)
        for p in actors:
            if p.is_alive():  # not expected; never leave a process behind
                p.terminate()
                p.join()
        chunks.close()
        chunks.join_thread()

    wall, cpu = time.time() - start, time.process_time() - cpu_start
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    trained = np.concatenate(trained_ids) if trained_ids else np.zeros(0, np.int64)
    state = rb.state_dict()
    times = state["sample_rules"]["times"]  # draws per stored item, oldest first
    stored_ids = np.arange(state["steps"] * items_per_chunk - times.shape[0], state["steps"] * items_per_chunk)
    added = stats["chunks"] * items_per_chunk
    consumed_stored = np.flatnonzero(times >= 1)
    # every trained id is distinct; each trained item still stored was drawn exactly once,
    # and no stored item was drawn that the learner did not train on
    once = (
        np.unique(trained).shape[0] == trained.shape[0]
        and times.max(initial=0) <= 1
        and np.array_equal(np.sort(stored_ids[consumed_stored]), np.sort(trained[trained >= stored_ids[0]]))
        if times.shape[0]
        else trained.shape[0] == 0
    )
    overwritten_unused = max(0, added - times.shape[0]) - int(np.count_nonzero(trained < stored_ids[0]))
    dropped = times.shape[0] - consumed_stored.shape[0] - rb.num_eligible()
    print(
        f"updates {updates}, items received {added}, items trained {trained.shape[0]} (each sampled once: {once}), "
        f"items dropped as stale {dropped}, left eligible {rb.num_eligible()}, overwritten unused "
        f"{overwritten_unused}, max staleness seen {max_staleness_seen} (bound {args.max_staleness}), "
        f"max lag on arrival {stats['lag_on_arrival']}"
    )
    actors_cpu = children.ru_utime + children.ru_stime
    print(
        f"wall time {wall:.1f} s (first chunk at {stats['first_chunk']:.1f} s), learner cpu {cpu:.1f} s, "
        f"actors cpu {actors_cpu:.1f} s, "
        f"load average {os.getloadavg()[0]:.1f}, best greedy return {best:.1f}"
    )
    exit_codes = [p.exitcode for p in actors]
    print(
        f"actors exited: exit codes {exit_codes}, pids {[p.pid for p in actors]}, "
        f"live children {len(context.active_children())}"
    )
    if best_weights is not None:
        policy.load_state_dict(best_weights)
    print(f"mean greedy return over 20 fresh episodes: {evaluate(policy, seed=1_000_000 + args.seed):.1f}", flush=True)


if __name__ == "__main__":  # spawn children import this file: keep them out
    main()
