"""Hindsight relabelling: a relabelled sample of 256 on the same episodes, in one run.

Episodes of BitFlipping with 15 bits (15 steps each; observation, achieved and desired goals
of 15 float32 bits), one environment, ``--stored`` transitions in a buffer of ``--capacity``,
"future" goals for 80% of the batch (SB3's n_sampled_goal=4):
(a) replaybuf's UniformReplayBuffer(respect_episodes=True, her=HindsightRelabel(...)).get_next(256)
    (NumPy arrays out; rewards from ``sparse_reward``, BitFlippingEnv's rule written vectorised);
(a') the same buffer's items without ``her=``: the floor of (a), a plain episode-aware sample;
(a'') TorchUniformReplayBuffer(her=...) on the CPU with the same items and draws (goals drawn on
    the host, written and rewarded with torch ops);
(b) replaybuf.sb3.HerReplayBuffer.sample(256) (SB3's API: torch tensors out, rewards through
    the VecEnv's env_method, as SB3's);
(c) SB3 2.9.2's HerReplayBuffer.sample(256);
(d) cpprb's HindsightReplayBuffer(prioritized=False, additional_goals=4).sample(256), run in
    bench/.venvs/cpprb (``python bench/venvs.py cpprb``) as a subprocess that samples n times
    per request; cpprb relabels when an episode ends and stores the relabelled copies, so its
    sample is a plain one (its buffer holds 5x the transitions).

Timed by bench/harness.py's ``interleave``: every contender is a ``run(n)`` (cpprb's a request
to its process), repetitions alternate between contenders, timed in CPU seconds of this
process plus cpprb's (torch on one thread), so that a loaded machine's waits count for none;
each figure is the median over the rounds, each ratio the median of the per-round ratios.
    .venv/bin/python bench/her.py [--quick] [--capacity N] [--stored N] [--rounds N] [--seconds S]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Timing, interleave, repeat  # noqa: E402

BITS, B, N_SAMPLED_GOAL = 15, 256, 4


def episodes(stored: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``stored`` BitFlipping-like steps: episodes of BITS steps, one bit flipped per step."""
    rng = np.random.default_rng(seed)
    count = -(-stored // BITS)
    start = rng.integers(0, 2, (count, 1, BITS))
    flips = rng.integers(0, BITS, (count, BITS))
    onehot = np.eye(BITS, dtype=np.int64)[flips]  # [episode, step, bit]
    states = (start + np.cumsum(onehot, axis=1)) % 2
    obs = np.concatenate([start, states[:, :-1]], axis=1).reshape(-1, BITS)[:stored]
    next_obs = states.reshape(-1, BITS)[:stored]
    goal = np.repeat(rng.integers(0, 2, (count, BITS)), BITS, axis=0)[:stored]
    done = np.zeros(stored, bool)
    done[BITS - 1 :: BITS] = True
    reward = -(np.abs(next_obs - goal).sum(axis=1) > 0).astype(np.float32)
    return {
        "obs": obs.astype(np.float32),
        "next_obs": next_obs.astype(np.float32),
        "goal": goal.astype(np.float32),
        "action": flips.reshape(-1)[:stored],
        "reward": reward.astype(np.float32),
        "done": done,
    }


def sparse_reward(achieved: np.ndarray, desired: np.ndarray, info: object) -> np.ndarray:
    """BitFlippingEnv's reward, vectorised: 0 where every bit matches, else -1 (cpprb gets the same)."""
    return -(np.abs(achieved - desired).sum(axis=1) > 0).astype(np.float32)


def bitflip_env():
    from stable_baselines3.common.envs import BitFlippingEnv
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: BitFlippingEnv(n_bits=BITS)])


def fill_sb3(buffer, data: dict[str, np.ndarray]) -> None:
    for t in range(data["obs"].shape[0]):
        obs = {
            "observation": data["obs"][t : t + 1],
            "achieved_goal": data["obs"][t : t + 1],
            "desired_goal": data["goal"][t : t + 1],
        }
        next_obs = {
            "observation": data["next_obs"][t : t + 1],
            "achieved_goal": data["next_obs"][t : t + 1],
            "desired_goal": data["goal"][t : t + 1],
        }
        buffer.add(obs, next_obs, data["action"][t : t + 1], data["reward"][t : t + 1], data["done"][t : t + 1], [{}])


def sb3_contenders(capacity: int, data: dict[str, np.ndarray]) -> dict:
    import torch
    from stable_baselines3 import HerReplayBuffer as SB3Her

    from replaybuf.sb3 import HerReplayBuffer

    torch.set_num_threads(1)
    env = bitflip_env()
    made = {}
    for name, kind in (
        ("replaybuf.sb3.HerReplayBuffer.sample", HerReplayBuffer),
        ("SB3 HerReplayBuffer.sample", SB3Her),
    ):
        buffer = kind(
            capacity, env.observation_space, env.action_space, env, device="cpu", n_sampled_goal=N_SAMPLED_GOAL
        )
        fill_sb3(buffer, data)
        made[name] = lambda buffer=buffer: buffer.sample(B)
    return made


def native_parts(reward) -> tuple:
    """The native buffers' data_spec and ``HindsightRelabel`` (80% "future" goals, ``reward``)."""
    import replaybuf
    from replaybuf import ArraySpec

    goal = ArraySpec((BITS,), np.float32)
    spec = {
        "observation": {"observation": goal, "achieved_goal": goal, "desired_goal": goal},
        "next_observation": {"observation": goal, "achieved_goal": goal, "desired_goal": goal},
        "action": ArraySpec((), np.int64),
        "reward": ArraySpec((), np.float32),
        "done": ArraySpec((), np.bool_),
    }
    her = replaybuf.HindsightRelabel(
        goal_field=("observation/desired_goal", "next_observation/desired_goal"),
        achieved_field="next_observation/achieved_goal",
        compute_reward=reward,
        ratio=1 - 1 / (N_SAMPLED_GOAL + 1),
    )
    return spec, her


def fill_native(buffer, data: dict[str, np.ndarray]) -> None:
    for start in range(data["obs"].shape[0]):
        t = slice(start, start + 1)
        buffer.add_batch(
            {
                "observation": {
                    "observation": data["obs"][t],
                    "achieved_goal": data["obs"][t],
                    "desired_goal": data["goal"][t],
                },
                "next_observation": {
                    "observation": data["next_obs"][t],
                    "achieved_goal": data["next_obs"][t],
                    "desired_goal": data["goal"][t],
                },
                "action": data["action"][t],
                "reward": data["reward"][t],
                "done": data["done"][t],
            }
        )


def native_contender(capacity: int, data: dict[str, np.ndarray]) -> dict:
    import replaybuf

    spec, her = native_parts(sparse_reward)
    buffer = replaybuf.UniformReplayBuffer(
        spec, 1, capacity, seed=0, respect_episodes=True, episode_end_field="done", her=her
    )
    fill_native(buffer, data)
    plain = replaybuf.UniformReplayBuffer(spec, 1, capacity, seed=0, respect_episodes=True, episode_end_field="done")
    plain.load_state_dict(buffer.state_dict())  # the same items: what a sample costs without relabelling
    return {
        "replaybuf get_next(256) with her=": lambda: buffer.get_next(B),
        "replaybuf get_next(256) without her (floor)": lambda: plain.get_next(B),
    }


def torch_contender(capacity: int, data: dict[str, np.ndarray]) -> dict:
    """TorchUniformReplayBuffer(her=) on the CPU (goals drawn on the host, applied with torch ops)."""
    import torch

    from replaybuf.torch import TorchUniformReplayBuffer

    def reward(achieved, desired, info):  # sparse_reward with tensors
        return -((achieved - desired).abs().sum(dim=1) > 0).float()

    torch.set_num_threads(1)
    spec, her = native_parts(reward)
    buffer = TorchUniformReplayBuffer(spec, 1, capacity, seed=0, episode_end_field="done", her=her)
    fill_native(buffer, data)
    return {"replaybuf TorchUniformReplayBuffer(her=) get_next(256), CPU": lambda: buffer.get_next(B)}


CPPRB = """
import sys, time
import numpy as np
from cpprb import HindsightReplayBuffer
capacity, path = int(sys.argv[1]), sys.argv[2]
data = dict(np.load(path))
bits = data["obs"].shape[1]
def reward(state, action, goal):  # sparse_reward of bench/her.py
    return -(np.abs(state - goal).sum(axis=1) > 0).astype(np.float32)
env_dict = {"obs": {"shape": bits}, "act": {"dtype": np.int64}, "next_obs": {"shape": bits}, "done": {}}
buffer = HindsightReplayBuffer(capacity * 5, env_dict, max_episode_len=bits, reward_func=reward,
                               goal_shape=bits, additional_goals=4, prioritized=False)
for t in range(data["obs"].shape[0]):
    buffer.add(obs=data["obs"][t], act=data["action"][t], next_obs=data["next_obs"][t], done=data["done"][t])
    if data["done"][t]:
        buffer.on_episode_end(data["goal"][t])
buffer.sample(256)
print("ready", flush=True)
for line in sys.stdin:  # n samples per request; the reply is this process's CPU seconds so far
    for _ in range(int(line)):
        buffer.sample(256)
    print(time.process_time(), flush=True)
"""


class CpprbProcess:
    """cpprb in its own venv, filled with the same episodes; ``run(n)`` samples n times there,
    and ``cpu`` is that process's CPU seconds as of its last reply."""

    def __init__(self, capacity: int, data_path: Path):
        python = Path(__file__).resolve().parent / ".venvs" / "cpprb" / "bin" / "python"
        self.process, self.cpu = None, 0.0
        if not python.exists():
            print("bench/.venvs/cpprb is missing (python bench/venvs.py cpprb): no cpprb figures", file=sys.stderr)
            return
        self.process = subprocess.Popen(
            [str(python), "-c", CPPRB, str(capacity), str(data_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            print("cpprb failed to start", file=sys.stderr)
            self.process.kill()
            self.close()
            self.process = None

    def run(self, n: int) -> None:
        self.process.stdin.write(f"{n}\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("cpprb's process stopped")
        self.cpu = float(reply)

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=60)
            self.process.stdout.close()


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and short rounds (smoke test)")
    parser.add_argument("--capacity", type=int, default=1_000_000, help="buffer size in transitions (SB3's default)")
    parser.add_argument("--stored", type=int, default=200_000, help="transitions added before sampling")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds per contender per round")
    args = parser.parse_args(argv)
    if args.quick:
        args.capacity, args.stored, args.rounds, args.seconds = 3000, 1500, 2, 0.05
    data = episodes(args.stored)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "episodes.npz"
        np.savez(path, **data)
        cpprb = CpprbProcess(args.capacity, path)
        try:
            steps = {
                **native_contender(args.capacity, data),
                **torch_contender(args.capacity, data),
                **sb3_contenders(args.capacity, data),
            }
            runs = {name: repeat(step) for name, step in steps.items()}
            if cpprb.process is not None:
                runs["cpprb HindsightReplayBuffer.sample"] = cpprb.run
            # CPU seconds of this process and cpprb's (a shared machine's waits count for nobody)
            clock = lambda: time.process_time() + cpprb.cpu  # noqa: E731
            times, _ = interleave(runs, Timing(args.rounds, args.seconds, args.seconds / 2), clock)
        finally:
            cpprb.close()
    results: dict[str, list[float]] = {}
    for name, got in times.items():
        if isinstance(got, Exception):
            raise got
        results[name] = [1 / seconds for seconds in got]  # samples per second, round by round
    print(
        f"BitFlipping {BITS} bits, capacity {args.capacity}, stored {args.stored}, batch {B}, "
        f"median of {args.rounds} rounds"
    )
    for name, rates in results.items():
        print(f"{statistics.median(rates):10.0f} samples/s  {name}  (rounds: {', '.join(f'{r:.0f}' for r in rates)})")
    for ours in ("replaybuf get_next(256) with her=", "replaybuf.sb3.HerReplayBuffer.sample"):
        for peer in ("SB3 HerReplayBuffer.sample", "cpprb HindsightReplayBuffer.sample"):
            if peer in results:
                ratios = [a / b for a, b in zip(results[ours], results[peer], strict=True)]
                listed = ", ".join(f"{r:.2f}" for r in ratios)
                print(f"{ours} / {peer}: median {statistics.median(ratios):.2f}x (rounds: {listed})")
    return results


if __name__ == "__main__":
    main()
