"""Study: What does the torch buffer's CPU sample cost beside index_select, at default and one thread?
Answer: docs/gpu.md.

Micro-benchmark of the PyTorch buffer on the CPU, beside its peers, in one run.

  sample: 256 random items of 84x84x4 uint8 (Atari frames) from
    - TorchUniformReplayBuffer.get_next(256)                 (device='cpu')
    - UniformReplayBuffer.get_next(256) + torch.from_numpy    (NumPy buffer, handed to torch)
    - torch.index_select on a plain tensor of the same frames (the floor: one gather)
    - x[idx] and NumPy take on the same frames                 (what naive code does)
  insert: single steps (batch_size=1) of a frame, and of a CartPole-sized item.

Figures are medians of repeated runs; MB/s counts the sampled bytes. Sampling is measured
at torch's default intra-op thread count and at one thread: on a machine whose cores are
busy, torch's parallel gather can collapse (threads wait for each other). Run:
    .venv/bin/python bench/studies/torch_micro.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from harness import Timing  # noqa: E402
from replaybuf import ArraySpec, UniformReplayBuffer  # noqa: E402
from replaybuf.torch import TorchUniformReplayBuffer  # noqa: E402

FRAME = (84, 84, 4)
SAMPLE = 256


def rates(cases: dict[str, Callable[[], object]], per_call: float, timing: Timing) -> list[tuple[str, float]]:
    """``per_call`` over each case's median seconds per call, the cases interleaved by the harness."""
    times, _ = harness.interleave({name: harness.repeat(fn) for name, fn in cases.items()}, timing)
    return [
        (name, per_call / statistics.median(t) if isinstance(t, list) else float("nan")) for name, t in times.items()
    ]


def bench_sample(streams: int, steps: int, timing: Timing) -> list[tuple[str, float]]:
    spec = {"frame": ArraySpec(FRAME, np.uint8)}
    ours = TorchUniformReplayBuffer(spec, streams, steps, seed=0)
    host = UniformReplayBuffer(spec, streams, steps, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(steps):  # fill every slot, so no page is faulted in while sampling
        frames = rng.integers(0, 256, (streams,) + FRAME, dtype=np.uint8)
        ours.add_batch({"frame": frames})
        host.add_batch({"frame": frames})
    plain = torch.from_numpy(rng.integers(0, 256, (streams * steps,) + FRAME, dtype=np.uint8))
    plain_np = plain.numpy()
    generator = torch.Generator().manual_seed(0)

    def idx() -> torch.Tensor:
        return torch.randint(0, streams * steps, (SAMPLE,), generator=generator)

    cases = {
        "torch buffer get_next(256)": lambda: ours.get_next(SAMPLE),
        "numpy buffer get_next(256) + torch.from_numpy": lambda: torch.from_numpy(host.get_next(SAMPLE)[0]["frame"]),
        "plain torch.index_select (floor)": lambda: torch.index_select(plain, 0, idx()),
        "plain x[idx] (naive torch)": lambda: plain[idx()],
        "plain NumPy take": lambda: plain_np.take(idx().numpy(), axis=0),
    }
    return rates(cases, SAMPLE * int(np.prod(FRAME)) / 1e6, timing)


def bench_insert(timing: Timing) -> list[tuple[str, float]]:
    frame_spec = {"frame": ArraySpec(FRAME, np.uint8), "action": ArraySpec((), np.int64)}
    small_spec = {
        "observation": ArraySpec((4,), np.float32),
        "action": ArraySpec((), np.int64),
        "reward": ArraySpec((), np.float32),
        "discount": ArraySpec((), np.float32),
    }
    frame_np = {"frame": np.ones((1,) + FRAME, np.uint8), "action": np.zeros(1, np.int64)}
    small_np = {
        "observation": np.ones((1, 4), np.float32),
        "action": np.zeros(1, np.int64),
        "reward": np.ones(1, np.float32),
        "discount": np.ones(1, np.float32),
    }
    frame_t = {k: torch.from_numpy(v) for k, v in frame_np.items()}
    small_t = {k: torch.from_numpy(v) for k, v in small_np.items()}
    results = []
    for label, spec, items in (
        ("frame, NumPy in", frame_spec, frame_np),
        ("frame, torch in", frame_spec, frame_t),
        ("CartPole item, NumPy in", small_spec, small_np),
        ("CartPole item, torch in", small_spec, small_t),
    ):
        ours = TorchUniformReplayBuffer(spec, 1, 1000)
        host = UniformReplayBuffer(spec, 1, 1000)
        for _ in range(1000):  # touch every page first: measure steady-state adds
            ours.add_batch(items)
            host.add_batch(items)
        cases = {
            f"{name} buffer add_batch ({label})": partial(b.add_batch, items)
            for name, b in (("torch", ours), ("numpy", host))
        }
        results += rates(cases, 1, timing)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args()
    timing = Timing(3, 0.05, 0.01) if args.quick else Timing(7, 0.2, 0.05)
    print(f"torch {torch.__version__}, CPU only")
    default_threads = torch.get_num_threads()
    for threads in sorted({default_threads, 1}, reverse=True):
        torch.set_num_threads(threads)
        print(f"sample {SAMPLE} x {FRAME} uint8 from 4096 stored frames, torch threads={threads} (MB/s)")
        for name, rate in bench_sample(64, 64, timing):
            print(f"  {name:50s} {rate:10.0f} MB/s")
    torch.set_num_threads(default_threads)
    print("single-step insert (steps/s, higher is better)")
    for name, rate in bench_insert(timing):
        print(f"  {name:50s} {rate:10.0f} /s")


if __name__ == "__main__":
    main()
