"""Ape-X-style DQN on CartPole-v1 over a sharded prioritized buffer on Ray, in one file.

    python examples/apex_cartpole.py                       # stops once a greedy return >= 495
    python examples/apex_cartpole.py --total-steps 3000    # a quick smoke run
    python examples/apex_cartpole.py --address auto        # on a running Ray cluster

Several collector actors (Ray actors, one process each) step their own CartPoles with
epsilon-greedy copies of the Q-network and add every batched step through a
``ShardWriter`` of their own shard of a ``ShardedReplayBuffer`` (shards hold
``PrioritizedReplayBuffer``s). As in Ape-X, an actor gives each step its initial priority:
it holds a step back until the next one arrives, computes the step's ``|td error|`` with its
own copy of the Q-network, and adds it with ``writer.add_batch(step, priorities=...)`` (the
last step of a round, whose successor is not known yet, goes in without, at the largest
priority so far). Each actor has its own
exploration floor (Ape-X's ``eps_i = 0.4 ** (1 + 7 i / (N - 1))``, reached after a shared
linear decay). The learner (this process) reads 2-step windows from
``rb.as_dataset(batch_size, num_steps=2)`` (fan-outs kept in flight), trains Double DQN
with the importance weights of the draws, and sends ``|td error|`` back with
``update_priorities``; every round the actors get the newest weights. Collection and
training overlap: the actors collect round r+1 while the learner trains on what is stored.
Stopping: a collector's ``run`` is one bounded round (it flushes its writer and returns), so
the learner stops them by launching no further round, waits for the last one
(``ray.get``) and shuts Ray down: no actor is cut off in the middle of an add. (Actors in an
endless loop on a ``SharedReplayBuffer`` stop on the learner's ``close()`` instead:
docs/many_writers.md.)
"""

import argparse
import time

import gymnasium as gym
import numpy as np
import ray
import torch
from torch import nn

from replaybuf import PrioritizedReplayBuffer
from replaybuf.drivers import EpisodeReturns, StepDriver
from replaybuf.ray import ShardedReplayBuffer
from replaybuf.trajectory import StepType, collect_data_spec

parser = argparse.ArgumentParser()
parser.add_argument("--total-steps", type=int, default=150_000)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--actors", type=int, default=2, help="collector actors (one shard each)")
parser.add_argument("--envs-per-actor", type=int, default=2)
parser.add_argument("--learning-rate", type=float, default=2.3e-3)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--gamma", type=float, default=0.99)
parser.add_argument("--learning-starts", type=int, default=1_000)
parser.add_argument("--steps-per-round", type=int, default=256, help="env steps (all actors) per round")
parser.add_argument("--gradient-steps", type=int, default=64, help="gradient steps per round")
parser.add_argument("--exploration-steps", type=int, default=10_000)
parser.add_argument("--eval-every", type=int, default=5_000)
parser.add_argument("--address", default=None, help="a Ray cluster to join (default: start one here)")
args = parser.parse_args()


def q_net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2))


@ray.remote(num_cpus=0)
class Collector:
    """One actor process: its CartPoles, a copy of the Q-network, a writer of its shard."""

    def __init__(self, writer, index: int, actors: int, envs: int, seed: int, gamma: float):
        torch.set_num_threads(1)
        self.envs = gym.make_vec("CartPole-v1", num_envs=envs, vectorization_mode="sync")
        self.q = q_net()
        self.rng = np.random.default_rng(seed + index)
        self.floor = 0.4 ** (1 + 7 * index / max(1, actors - 1))  # Ape-X's per-actor epsilon
        self.epsilon = 1.0
        self.episodes = EpisodeReturns()
        self.writer, self.gamma = writer, gamma
        self.pending = None  # the step whose successor (and so whose td error) is not known yet
        self.driver = StepDriver(self.envs, self.policy, [self.add, self.episodes], 1, seed=seed + index)

    def add(self, step):
        """Add the held-back step with its priority ``|td error| + 1e-3``, now that ``step`` follows it."""
        if self.pending is not None:
            self.writer.add_batch(self.pending, priorities=self.priorities(self.pending, step))
        self.pending = step

    def priorities(self, step, following) -> np.ndarray:
        with torch.no_grad():
            value = self.q(torch.as_tensor(step.observation)).gather(1, torch.as_tensor(step.action)[:, None])
            next_q = self.q(torch.as_tensor(following.observation)).max(dim=1).values
        target = torch.as_tensor(step.reward) + self.gamma * torch.as_tensor(step.discount) * next_q
        valid = step.step_type != StepType.LAST  # the learner does not learn from a LAST step
        return np.where(valid, (value.squeeze(1) - target).abs().numpy(), 0.0) + 1e-3

    def policy(self, observation):
        with torch.no_grad():
            greedy = self.q(torch.as_tensor(observation)).argmax(dim=1).numpy()
        explore = self.rng.random(len(observation)) < self.epsilon
        return np.where(explore, self.rng.integers(0, 2, len(observation)), greedy)

    def run(self, weights, steps: int, progress: float) -> list[float]:
        """Collect ``steps`` batched steps with the given weights; returns finished episodes' returns."""
        self.q.load_state_dict(weights)
        self.epsilon = max(self.floor, 1.0 - progress)
        done = len(self.episodes.returns)
        for _ in range(steps):
            self.driver.run()
        self.writer.add_batch(self.pending)  # its successor comes next round: the largest priority
        self.pending = None
        self.writer.flush()
        return self.episodes.returns[done:]


def evaluate(q, episodes=20, seed=0):
    env = gym.make_vec("CartPole-v1", num_envs=episodes, vectorization_mode="sync")
    observation, _ = env.reset(seed=seed)
    returns, done = np.zeros(episodes), np.zeros(episodes, bool)
    while not done.all():
        with torch.no_grad():
            action = q(torch.as_tensor(observation)).argmax(dim=1).numpy()
        observation, reward, terminated, truncated, _ = env.step(action)
        returns += np.where(done, 0.0, reward)
        done |= terminated | truncated
    return returns.mean()


def main():
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    spec = collect_data_spec(gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync"))
    rb = ShardedReplayBuffer(
        spec,
        shards=args.actors,
        batch_size=args.actors * args.envs_per_actor,
        max_length=50_000 // args.envs_per_actor // args.actors,
        buffer_class=PrioritizedReplayBuffer,
        buffer_options={"alpha": 0.6, "beta": 0.4},
        seed=args.seed,
    )
    collectors = [
        Collector.remote(rb.writer(i), i, args.actors, args.envs_per_actor, args.seed, args.gamma)
        for i in range(args.actors)
    ]
    q, target = q_net(), q_net()
    target.load_state_dict(q.state_dict())
    optimizer = torch.optim.Adam(q.parameters(), lr=args.learning_rate)
    per_actor = max(1, args.steps_per_round // (args.actors * args.envs_per_actor))
    round_steps = per_actor * args.actors * args.envs_per_actor
    steps, next_eval, best, best_weights, loss_value = 0, args.eval_every, -1.0, None, float("nan")
    updates = 0  # priority updates sent
    returns: list[float] = []
    dataset = None
    start = time.time()

    def launch():
        weights = ray.put({k: v.clone() for k, v in q.state_dict().items()})
        progress = 0.96 * steps / args.exploration_steps
        return [c.run.remote(weights, per_actor, progress) for c in collectors]

    running = launch()
    while steps < args.total_steps:
        if steps >= args.learning_starts:  # train while the actors collect the next round
            dataset = dataset or iter(rb.as_dataset(sample_batch_size=args.batch_size, num_steps=2))
            for _ in range(args.gradient_steps):
                trajectories, info = next(dataset)  # every leaf is [batch_size, 2, ...]
                observation = torch.as_tensor(trajectories.observation)
                action = torch.as_tensor(trajectories.action[:, 0])
                reward = torch.as_tensor(trajectories.reward[:, 0])
                discount = torch.as_tensor(trajectories.discount[:, 0])
                valid = torch.as_tensor(trajectories.step_type[:, 0] != StepType.LAST).float()
                weight = torch.as_tensor(info.weights) * valid
                with torch.no_grad():  # Double DQN
                    next_action = q(observation[:, 1]).argmax(dim=1, keepdim=True)
                    next_q = target(observation[:, 1]).gather(1, next_action).squeeze(1)
                    td_target = reward + args.gamma * discount * next_q
                value = q(observation[:, 0]).gather(1, action[:, None]).squeeze(1)
                loss = (nn.functional.smooth_l1_loss(value, td_target, reduction="none") * weight).sum()
                loss = loss / valid.sum().clamp(min=1)
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(q.parameters(), 10.0)
                optimizer.step()
                loss_value = loss.item()
                td = (value - td_target).abs().detach().numpy() * valid.numpy() + 1e-3
                rb.update_priorities(info.ids, td, wait=False)
                updates += 1
            target.load_state_dict(q.state_dict())
        for finished in ray.get(running):
            returns.extend(finished)
        steps += round_steps
        running = launch()
        if steps >= next_eval or steps >= args.total_steps:
            next_eval += args.eval_every
            score = evaluate(q, seed=10_000 + steps)
            recent = np.mean(returns[-10:]) if returns else float("nan")
            print(
                f"step {steps}: loss {loss_value:.4f}, training return {recent:.1f}, greedy return {score:.1f}, "
                f"stored {rb.num_frames()}, {time.time() - start:.0f} s",
                flush=True,
            )
            if score > best:
                best, best_weights = score, {k: v.clone() for k, v in q.state_dict().items()}
            if best >= 495:
                break
    ray.get(running)
    if best_weights is not None:
        q.load_state_dict(best_weights)
    print(f"env steps {steps}, wall time {time.time() - start:.1f} s, final loss {loss_value:.4f}")
    _, info = rb.get_next(256, num_steps=2)  # the priorities sent make a batch's probabilities unequal
    spread = info.probabilities.max() / info.probabilities.min()
    print(f"priority updates sent {updates}; a batch's probabilities max/min {spread:.1f}")
    print(f"mean greedy return over 20 fresh episodes: {evaluate(q, seed=1_000_000 + args.seed):.1f}", flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
