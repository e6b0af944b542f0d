"""Offline DQN on CartPole-v1 from a Minari dataset, top to bottom.

    python examples/offline_dqn_cartpole.py            # the run docs/offline.md reports
    python examples/offline_dqn_cartpole.py --quick    # a smoke run (tests/test_minari_example.py)

1. The demo's own agent (``replaybuf demo``'s DQN, ``replaybuf.agents.loop.train_dqn``)
   learns CartPole online for ``--online-steps`` steps.
2. Its epsilon-greedy policy plays ``--episodes`` episodes in an env wrapped by Minari's
   ``DataCollector``: that is the Minari dataset ``replaybuf/cartpole-dqn-v0``, written
   under a temporary ``MINARI_DATASETS_PATH`` (``--root`` to keep it).
3. ``replaybuf.minari.load`` fills a buffer with it, and a fresh DQN learns from that buffer
   alone (no env step) with 2-step windows, as the online demo does.
4. Both greedy policies are evaluated over 20 episodes; the script prints the dataset's mean
   return, the behaviour agent's greedy return and the offline agent's.
"""

import argparse
import os
import tempfile
import time
import warnings

import gymnasium as gym
import minari
import numpy as np
import torch

import replaybuf
import replaybuf.minari
from replaybuf.agents.dqn import DqnAgent
from replaybuf.agents.loop import DqnConfig, evaluate, train_dqn

parser = argparse.ArgumentParser()
parser.add_argument("--online-steps", type=int, default=30_000, help="env steps of the behaviour agent")
parser.add_argument("--episodes", type=int, default=40, help="episodes recorded into the dataset")
parser.add_argument("--epsilon", type=float, default=0.3, help="random actions while recording")
parser.add_argument("--gradient-steps", type=int, default=8_000, help="offline gradient steps")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--root", default=None, help="Minari root to keep the dataset in (default: a temp dir)")
parser.add_argument("--quick", action="store_true", help="a smoke run: tiny budgets everywhere")
args = parser.parse_args()
if args.quick:
    args.online_steps, args.episodes, args.gradient_steps = 600, 2, 100
warnings.simplefilter("ignore", UserWarning)  # Minari's advice on dataset metadata
torch.set_num_threads(1)
os.environ["MINARI_DATASETS_PATH"] = args.root or tempfile.mkdtemp(prefix="minari-")
start = time.perf_counter()

# -- 1. the behaviour agent, trained online -----------------------------------------------
config = DqnConfig(total_steps=args.online_steps, seed=args.seed, eval_every=2_500, learning_starts=500)
behaviour = train_dqn(config).agent
behaviour_return = np.mean(evaluate("CartPole-v1", behaviour.greedy_policy, 20, seed=100))

# -- 2. its episodes, recorded by Minari ----------------------------------------------------
collector = minari.DataCollector(gym.make("CartPole-v1"))
behaviour.epsilon = args.epsilon
recorder = replaybuf.EpisodeDriver(collector, behaviour.collect_policy, observers=[], num_episodes=args.episodes)
recorder.run()
dataset = collector.create_dataset(
    "replaybuf/cartpole-dqn-v0", algorithm_name="replaybuf demo DQN, epsilon-greedy", description=__doc__
)
collector.close()
dataset_return = np.mean([episode.rewards.sum() for episode in dataset.iterate_episodes()])

# -- 3. offline: the dataset into a buffer, a fresh agent trained from it alone ---------------
buffer = replaybuf.minari.load("replaybuf/cartpole-dqn-v0", batch_size=1, seed=args.seed)
spec = buffer.data_spec
agent = DqnAgent(
    spec.observation,
    spec.action,
    hidden=config.hidden,
    learning_rate=1e-3,
    target_update_period=200,
    double_q=True,
    max_grad_norm=10.0,
    seed=args.seed,
)
windows = iter(buffer.as_dataset(sample_batch_size=128, num_steps=2))
losses = [agent.train(next(windows)[0]) for _ in range(args.gradient_steps)]

# -- 4. evaluation ----------------------------------------------------------------------------
offline_return = np.mean(evaluate("CartPole-v1", agent.greedy_policy, 20, seed=100))
print(f"dataset: {dataset.total_episodes} episodes, {dataset.total_steps} steps, mean return {dataset_return:.1f}")
print(f"buffer: {buffer.num_frames()} items ({type(buffer).__name__}), one per step and per episode end")
print(f"behaviour agent (online, {args.online_steps} steps), greedy return: {behaviour_return:.1f}")
print(f"offline agent ({args.gradient_steps} gradient steps, last loss {losses[-1]:.4f}), ", end="")
print(f"greedy return: {offline_return:.1f}")
print(f"wall time: {time.perf_counter() - start:.0f} s")
