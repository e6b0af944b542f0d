"""Study: how close can a CPU torch buffer's ``get_next(256)`` of 5 small leaves come to the
bare ``randint`` + one ``index_select`` loop (issue 33's CPU target: 1.5x)? Answer: docs/gpu.md,
"CPU figures".

Three calls over the same stored bytes (the gpu suite's small section: 100,352 transitions of
obs f32[4], action i64, reward f32, done bool, next_obs f32[4]), interleaved by the harness,
timed by the thread's CPU clock (``time.thread_time``: other jobs on a shared machine do not
count, their cache traffic still does), torch on one thread:

- ``replaybuf``: ``TorchUniformReplayBuffer.get_next(256)``, the whole API;
- ``replaybuf captured``: the same with ``capture=True`` (static outputs: the draw, then NumPy
  into arrays the returned tensors share; no tensor made per call);
- ``floor``: the least a call returning what the API returns can make: a ``randint`` of ids,
  the slots of the ids and one NumPy ``take`` of whole rows, one ``torch.from_numpy`` per leaf (no
  argument checks, no lock, no nest, no info);
- ``bare loop``: ``torch.randint`` + ``torch.index_select`` (one tensor back).

    PYTHONPATH=src python bench/studies/torch_host_floor.py [--reps 21]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from common import small_pool, small_spec  # noqa: E402
from replaybuf.torch import TorchUniformReplayBuffer  # noqa: E402
from suites.gpu import BATCH, bare_loop  # noqa: E402

CAPACITY = 100_352


def floor_call(buffer: TorchUniformReplayBuffer) -> Callable[[], object]:
    """The API's result made with the fewest calls: ids, one row ``take``, a tensor per leaf."""
    rows = buffer.storage.rows.numpy().view(f"V{buffer.storage.layout.row_bytes}")[:, 0]
    fields = buffer.storage.layout.host_dtype
    names, keys = fields.names, list(small_spec())
    generator = torch.Generator().manual_seed(1)

    def call() -> object:
        ids = torch.randint(0, CAPACITY, (BATCH,), generator=generator)
        gathered = rows.take(ids.numpy() % CAPACITY).view(fields)
        return dict(zip(keys, [torch.from_numpy(gathered[name]) for name in names], strict=True)), ids

    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=21)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    buffer, captured = (
        TorchUniformReplayBuffer(small_spec(), BATCH, CAPACITY // BATCH, seed=0, capture=capture)
        for capture in (False, True)
    )
    batch = small_pool(BATCH)
    for _ in range(CAPACITY // BATCH):
        buffer.add_batch(batch)
        captured.add_batch(batch)
    calls = {
        "replaybuf": lambda: buffer.get_next(BATCH),
        "replaybuf captured": lambda: captured.get_next(BATCH),
        "floor": floor_call(buffer),
        "bare loop": bare_loop(buffer.storage.rows, BATCH, torch.Generator().manual_seed(0)),
    }
    runs = {name: harness.repeat(call) for name, call in calls.items()}
    seconds = harness.medians(runs, harness.Timing(args.reps, 0.05, 0.2), clock=time.thread_time)
    print(f"torch {torch.__version__}, numpy {np.__version__}, load {harness.load()[0]:.1f}")
    print("| call | us (thread CPU time) | / bare loop |\n| --- | ---: | ---: |")
    for name, value in seconds.items():
        print(f"| {name} | {value * 1e6:.1f} | {value / seconds['bare loop']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
