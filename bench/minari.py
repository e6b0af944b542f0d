"""Load throughput of a Minari dataset: ``replaybuf.minari.load`` against TorchRL's
``MinariExperienceReplay`` building a buffer from the same dataset.

Two CartPole-v1 datasets of ``--steps`` transitions each are recorded into a temporary Minari
root (HDF5, Minari's default): ``random`` (a uniform random policy: ~22-step episodes, the
per-episode cost shows) and ``balancing`` (a pole-balancing rule with 10% random actions:
episodes of up to 500 steps, the per-step cost shows). Each repetition times, from a cold
start of the buffer, until the buffer holds the dataset:

- replaybuf, ``numpy``: ``load(id)``, which builds a ``PyUniformReplayBuffer`` (one stream,
  a chunk of items per ``add_batch``);
- replaybuf, ``numpy-stream`` and ``torch``: ``load(id, buffer)`` into a given
  ``UniformReplayBuffer(spec, 1, n)`` and ``replaybuf.torch.TorchUniformReplayBuffer(spec, 1,
  n, device="cpu")``: buffers of ``batch_size`` streams, one ``add_batch`` per item;
- torchrl: ``MinariExperienceReplay(id, batch_size=256, root=<new temp dir>,
  load_from_local_minari=True)`` (its only way to build from a local dataset: it reads the
  whole HDF5 file into a TensorDict, copies it episode by episode into a preallocated one and
  writes that as a memory map under ``root``), in TorchRL's own environment
  (``bench/venvs.py torchrl-minari``).

Figures are transitions per second; ratios are replaybuf / TorchRL medians of ``--reps``
repetitions within one run, each loader warmed up by one untimed load first. Run from the
repository root:

    .venv/bin/python bench/minari.py [--steps 200000] [--reps 5] [--quick] [--loaders numpy,torch,torchrl]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This file is named minari.py: keep its folder off the path, or ``import minari`` finds it.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import numpy as np  # noqa: E402

LOADERS = ("numpy", "numpy-stream", "torch", "torchrl")
PEER_SCRIPT = r"""
import json, shutil, sys, tempfile, time, warnings
warnings.simplefilter("ignore")
from torchrl.data.datasets.minari_data import MinariExperienceReplay
dataset_id, reps = sys.argv[1], int(sys.argv[2])
seconds = []
for _ in range(reps + 1):  # the first is a warm-up (first reads, lazy imports), not reported
    root = tempfile.mkdtemp(prefix="torchrl-minari-")
    start = time.perf_counter()
    replay = MinariExperienceReplay(dataset_id, batch_size=256, root=root, load_from_local_minari=True)
    seconds.append(time.perf_counter() - start)
    assert len(replay) > 0
    del replay
    shutil.rmtree(root)
print(json.dumps(seconds[1:]))
"""


def record(dataset_id: str, steps: int, policy: str, seed: int = 0) -> int:
    """Record ``steps`` CartPole transitions as a Minari dataset; return its transitions."""
    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    episodes, total = [], 0
    while total < steps:
        observation, _ = env.reset(seed=int(rng.integers(2**31)))
        observations, actions, rewards, terminations, truncations = [observation], [], [], [], []
        done = False
        while not done:
            balance = observation[2] + 0.5 * observation[3] > 0
            greedy = policy == "balancing" and rng.random() > 0.1
            action = int(balance) if greedy else int(rng.integers(2))
            observation, reward, terminated, truncated, _ = env.step(action)
            observations.append(observation)
            actions.append(action)
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
            done = terminated or truncated
        episodes.append(
            EpisodeBuffer(
                observations=np.array(observations),
                actions=np.array(actions),
                rewards=np.array(rewards),
                terminations=np.array(terminations),
                truncations=np.array(truncations),
            )
        )
        total += len(actions)
    minari.create_dataset_from_buffers(
        dataset_id, episodes, env="CartPole-v1", algorithm_name=policy, description=f"bench/minari.py {policy}"
    )
    return total


def time_replaybuf(dataset_id: str, target: str, reps: int) -> list[float]:
    import replaybuf
    import replaybuf.minari

    seconds = []
    for _ in range(reps + 1):  # the first is a warm-up (imports, first reads), not reported
        start = time.perf_counter()
        if target == "numpy":
            buffer = replaybuf.minari.load(dataset_id, progress=False)
        else:
            import minari

            from replaybuf.torch import TorchUniformReplayBuffer

            dataset = minari.load_dataset(dataset_id)
            buffer = TorchUniformReplayBuffer(
                replaybuf.collect_data_spec(dataset), 1, dataset.total_steps + dataset.total_episodes, device="cpu"
            )
            replaybuf.minari.load(dataset, buffer, progress=False)
        seconds.append(time.perf_counter() - start)
        assert buffer.num_frames() > 0
        del buffer
    return seconds[1:]


def time_torchrl(dataset_id: str, reps: int) -> list[float]:
    venvs = _bench_module("venvs")
    python = venvs.ensure("torchrl-minari")
    out = subprocess.run(
        [str(python), "-c", PEER_SCRIPT, dataset_id, str(reps)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # not bench/: this file would shadow the minari package there too
    )
    if out.returncode:
        raise RuntimeError(f"TorchRL's run failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _bench_module(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000, help="transitions per dataset")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (medians are reported)")
    parser.add_argument("--quick", action="store_true", help="500 steps, 1 repetition: a smoke run")
    parser.add_argument("--loaders", default=",".join(LOADERS), help=f"comma-separated, of {', '.join(LOADERS)}")
    args = parser.parse_args(argv)
    steps, reps = (500, 1) if args.quick else (args.steps, args.reps)
    loaders = args.loaders.split(",")
    unknown = set(loaders) - set(LOADERS)
    if unknown:
        parser.error(f"--loaders: unknown {sorted(unknown)}")
    root = tempfile.mkdtemp(prefix="replaybuf-bench-minari-")
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = root
    rows = []
    try:
        import warnings

        warnings.simplefilter("ignore", UserWarning)  # Minari's advice on metadata
        for policy in ("random", "balancing"):
            dataset_id = f"bench/cartpole-{policy}-v0"
            transitions = record(dataset_id, steps, policy)
            print(f"recorded {dataset_id}: {transitions} transitions", file=sys.stderr, flush=True)
            figures = {name: time_replaybuf(dataset_id, name, reps) for name in loaders if name != "torchrl"}
            if "torchrl" in loaders:
                figures["torchrl"] = time_torchrl(dataset_id, reps)
            print(f"{dataset_id}: seconds per load {figures}", file=sys.stderr, flush=True)
            rates = {name: transitions / statistics.median(s) for name, s in figures.items()}
            for name, rate in rates.items():
                ratio = f"{rate / rates['torchrl']:.2f}x" if "torchrl" in rates else "-"
                rows.append((policy, transitions, name, rate, ratio))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if previous is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous
    print(f"| dataset | transitions | loader | transitions/s (median of {reps}) | vs TorchRL |")
    print("| --- | --- | --- | --- | --- |")
    for policy, transitions, name, rate, ratio in rows:
        print(f"| {policy} | {transitions} | {name} | {rate:,.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
