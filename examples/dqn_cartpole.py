"""DQN on CartPole-v1 from a replaybuf buffer, in one file, top to bottom (CleanRL style).

    python examples/dqn_cartpole.py                     # stops once a greedy return >= 495
    python examples/dqn_cartpole.py --total-steps 2000  # a quick smoke run

A StepDriver steps 4 CartPoles with an epsilon-greedy policy and adds every batched step
to a UniformReplayBuffer (``observers=[rb.add_batch]``). Training reads 2-step windows
from ``rb.as_dataset(batch_size, num_steps=2)``: window (t, t+1) is the transition
o_t, a_t -> r_t, discount_t, o_{t+1}. Windows starting at a boundary item (the env was
resetting) are masked; discount is 0 only on termination, so time-limit truncation
still bootstraps. Targets are Double DQN's; the best greedy weights are kept.
"""

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from replaybuf import UniformReplayBuffer
from replaybuf.drivers import EpisodeReturns, StepDriver
from replaybuf.trajectory import StepType, collect_data_spec

parser = argparse.ArgumentParser()
parser.add_argument("--total-steps", type=int, default=100_000)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--num-envs", type=int, default=4)
parser.add_argument("--learning-rate", type=float, default=2.3e-3)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--gamma", type=float, default=0.99)
parser.add_argument("--learning-starts", type=int, default=1_000)
parser.add_argument("--train-every", type=int, default=256, help="env steps between training phases")
parser.add_argument("--gradient-steps", type=int, default=64, help="gradient steps per phase")
parser.add_argument("--exploration-steps", type=int, default=10_000)
parser.add_argument("--eval-every", type=int, default=5_000)
args = parser.parse_args()

torch.manual_seed(args.seed)
torch.set_num_threads(1)
rng = np.random.default_rng(args.seed)

# -- environment, buffer, networks ------------------------------------------------------
envs = gym.make_vec("CartPole-v1", num_envs=args.num_envs, vectorization_mode="sync")
spec = collect_data_spec(envs)
rb = UniformReplayBuffer(spec, batch_size=args.num_envs, max_length=25_000, seed=args.seed)

num_actions = int(envs.single_action_space.n)
q_network = nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, num_actions))
target_network = nn.Sequential(
    nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, num_actions)
)
target_network.load_state_dict(q_network.state_dict())
optimizer = torch.optim.Adam(q_network.parameters(), lr=args.learning_rate)
epsilon = 1.0


def greedy(observation):
    with torch.no_grad():
        return q_network(torch.as_tensor(observation)).argmax(dim=1).numpy()


def epsilon_greedy(observation):
    explore = rng.random(len(observation)) < epsilon
    return np.where(explore, rng.integers(0, num_actions, len(observation)), greedy(observation))


def evaluate(episodes=20, seed=0):
    env = gym.make_vec("CartPole-v1", num_envs=episodes, vectorization_mode="sync")
    observation, _ = env.reset(seed=seed)
    returns, done = np.zeros(episodes), np.zeros(episodes, bool)
    while not done.all():
        observation, reward, terminated, truncated, _ = env.step(greedy(observation))
        returns += np.where(done, 0.0, reward)
        done |= terminated | truncated
    return returns.mean()


# -- collect and train ------------------------------------------------------------------
episodes = EpisodeReturns()
driver = StepDriver(
    envs,
    epsilon_greedy,
    observers=[rb.add_batch, episodes],
    num_steps=args.train_every,
    seed=args.seed,
)
dataset = None
steps, next_eval, best, best_weights, loss_value = 0, args.eval_every, -1.0, None, float("nan")
start = time.time()
while steps < args.total_steps:
    epsilon = max(0.04, 1.0 - 0.96 * steps / args.exploration_steps)
    steps += driver.run()
    if steps < args.learning_starts:
        continue
    dataset = dataset or iter(rb.as_dataset(sample_batch_size=args.batch_size, num_steps=2))
    for _ in range(args.gradient_steps):
        trajectories, _ = next(dataset)  # every leaf is [batch_size, 2, ...]
        observation = torch.as_tensor(trajectories.observation)
        action = torch.as_tensor(trajectories.action[:, 0])
        reward = torch.as_tensor(trajectories.reward[:, 0])
        discount = torch.as_tensor(trajectories.discount[:, 0])
        valid = torch.as_tensor(trajectories.step_type[:, 0] != StepType.LAST).float()
        with torch.no_grad():  # Double DQN: the online network picks, the target network values
            next_action = q_network(observation[:, 1]).argmax(dim=1, keepdim=True)
            next_q = target_network(observation[:, 1]).gather(1, next_action).squeeze(1)
            target = reward + args.gamma * discount * next_q
        q = q_network(observation[:, 0]).gather(1, action[:, None]).squeeze(1)
        loss = (nn.functional.smooth_l1_loss(q, target, reduction="none") * valid).sum() / valid.sum().clamp(min=1)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(q_network.parameters(), 10.0)
        optimizer.step()
        loss_value = loss.item()
    target_network.load_state_dict(q_network.state_dict())
    if steps >= next_eval or steps >= args.total_steps:
        next_eval += args.eval_every
        score = evaluate(seed=10_000 + steps)
        recent = np.mean(episodes.returns[-10:]) if episodes.returns else float("nan")
        print(f"step {steps}: loss {loss_value:.4f}, training return {recent:.1f}, greedy return {score:.1f}")
        if score > best:
            best, best_weights = score, {k: v.clone() for k, v in q_network.state_dict().items()}
        if best >= 495:
            break

if best_weights is not None:
    q_network.load_state_dict(best_weights)
print(f"env steps {steps}, wall time {time.time() - start:.1f} s, final loss {loss_value:.4f}")
print(f"mean greedy return over 20 fresh episodes: {evaluate(seed=1_000_000 + args.seed):.1f}")
