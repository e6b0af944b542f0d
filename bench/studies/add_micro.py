"""Study: What bounds W1's adds (the layouts' write floors, SB3 beside in CPU time)?
Answer: docs/benchmarks.md, "What bounds the rows that fall short" (W1a / W1b).

W1's adds and samples in ONE process: replaybuf's two layouts, Stable-Baselines3, and floors.

The rows are the peers / tf suites (bench/suites/)'s W1 rows (obs f32[4], action i64, reward f32, done bool,
next_obs f32[4]; capacity 1M): a single add from per-row NumPy values (``add1``), an add
of 256 at once (``add256``) and a sample of 256 of 200k stored (``sample256``).
Implementations:

- ``records``: ``PyUniformReplayBuffer`` as shipped (``storage="memory"``, one record per item);
- ``columns``: the same with ``storage="columns"`` (one array per leaf);
- ``sb3``: Stable-Baselines3's ``ReplayBuffer`` configured as in bench/libs/sb3_lib.py
  (``handle_timeout_termination=False``, n_envs=256 for add256), when it imports: pass
  ``--sb3-site`` to borrow the bench environment's packages;
- ``records-floor`` / ``columns-floor`` (adds only): the storage's ``write`` of the same,
  already validated leaves at the same slots, nothing else (no validation, no lock, no
  ring): the fastest add each layout allows from Python, what bounds the add rows;
- ``numpy-fancy`` (sample only): run.py's W1c reference, random integers and five fancy indexes.

Every figure is CPU time of this thread per call (``time.thread_time``: the machine is
shared, and wall time there mostly measures the other processes), the median of
``--reps`` repetitions interleaved implementation by implementation; each buffer is first
filled once around its whole capacity, so adds overwrite touched pages (as in run.py's
steady state) instead of faulting fresh ones in.

    .venv/bin/python bench/studies/add_micro.py --sb3-site bench/.venvs/sb3/lib/python3.11/site-packages
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

import harness  # noqa: E402
from common import BATCH, single_rows, small_pool
from libs.replaybuf_lib import SMALL_SPEC
from replaybuf import PyUniformReplayBuffer

CAPACITY, STORED = 1_000_000, 200_000
KEYS = ("obs", "action", "reward", "done", "next_obs")


def replaybuf_rows(storage: str) -> dict:
    rows = single_rows(small_pool(4096))
    pool = small_pool(BATCH * 16)
    batches = [{k: v[b * BATCH : (b + 1) * BATCH] for k, v in pool.items()} for b in range(16)]
    one = PyUniformReplayBuffer(SMALL_SPEC, CAPACITY, storage=storage)
    many = PyUniformReplayBuffer(SMALL_SPEC, CAPACITY, storage=storage)
    add1, add256 = one.add_batch, many.add_batch

    def run1(n):
        for j in range(n):
            o, a, r, d, no = rows[j & 4095]
            add1({"obs": o[None], "action": a[None], "reward": r[None], "done": d[None], "next_obs": no[None]})

    def run256(n):
        for j in range(n):
            add256(batches[j & 15])

    filled = PyUniformReplayBuffer(SMALL_SPEC, CAPACITY, seed=1, storage=storage)
    stored = small_pool(STORED)
    for start in range(0, STORED, 4096):
        filled.add_batch({k: v[start : start + 4096] for k, v in stored.items()})
    get_next = filled.get_next

    def sample(n):
        for _ in range(n):
            get_next(BATCH)

    run1(CAPACITY)  # once around: every page touched
    run256(CAPACITY // BATCH + 1)
    return {"add1": run1, "add256": run256, "sample256": sample}


def floor_rows(storage: str) -> dict:
    """The storage's write alone, of leaves validated once up front, at the slots the buffer would use."""
    buffer = PyUniformReplayBuffer(SMALL_SPEC, CAPACITY, storage=storage)
    write = buffer._storage.write
    flatten = buffer._flat.flatten_batch
    rows = single_rows(small_pool(4096))
    singles = [flatten({k: v[None] for k, v in zip(KEYS, row, strict=True)}, None) for row in rows]
    pool = small_pool(BATCH * 16)
    batches = [flatten({k: v[b * BATCH : (b + 1) * BATCH] for k, v in pool.items()}, None) for b in range(16)]
    slot = [0, 0]

    def run1(n):
        s = slot[0]
        for j in range(n):
            write(s, singles[j & 4095])
            s = s + 1 if s + 1 < CAPACITY else 0
        slot[0] = s

    def run256(n):
        s = slot[1]
        for j in range(n):
            write(s, batches[j & 15], BATCH)
            s = s + BATCH if s + 2 * BATCH <= CAPACITY else 0
        slot[1] = s

    run1(CAPACITY)
    run256(CAPACITY // BATCH + 1)
    return {"add1": run1, "add256": run256}


def sb3_rows() -> dict:
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    torch.set_num_threads(1)
    space, actions = spaces.Box(-np.inf, np.inf, (4,), np.float32), spaces.Discrete(6)

    def make(n_envs):
        return ReplayBuffer(CAPACITY, space, actions, device="cpu", n_envs=n_envs, handle_timeout_termination=False)

    rows = single_rows(small_pool(4096))
    pool = small_pool(BATCH * 16)
    batches = [{k: v[b * BATCH : (b + 1) * BATCH] for k, v in pool.items()} for b in range(16)]
    one, many = make(1), make(BATCH)
    infos1, infos = [{}], [{}] * BATCH

    def run1(n):
        add = one.add
        for j in range(n):
            o, a, r, d, no = rows[j & 4095]
            add(o[None], no[None], np.asarray(a)[None], np.asarray(r)[None], np.asarray(d)[None], infos1)

    def run256(n):
        add = many.add
        for j in range(n):
            b = batches[j & 15]
            add(b["obs"], b["next_obs"], b["action"], b["reward"], b["done"], infos)

    run1(CAPACITY)
    run256(CAPACITY // BATCH + 1)
    return {"add1": run1, "add256": run256}


def numpy_fancy_rows() -> dict:
    stored = small_pool(STORED)
    columns = [np.zeros((CAPACITY, *stored[k].shape[1:]), stored[k].dtype) for k in KEYS]
    for column, k in zip(columns, KEYS, strict=True):
        column[:STORED] = stored[k]
    rng = np.random.default_rng(1)

    def sample(n):
        for _ in range(n):
            idx = rng.integers(0, STORED, BATCH)
            [column[idx] for column in columns]

    return {"sample256": sample}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sb3-site", default=None, help="site-packages with stable_baselines3 (appended to sys.path)")
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--seconds", type=float, default=0.1, help="wall seconds per repetition")
    args = parser.parse_args()
    if args.sb3_site:
        sys.path.append(args.sb3_site)
    impls = {"records": replaybuf_rows("memory"), "columns": replaybuf_rows("columns")}
    impls["records-floor"], impls["columns-floor"] = floor_rows("memory"), floor_rows("columns")
    try:
        impls["sb3"] = sb3_rows()
    except ImportError as exc:
        print(f"sb3: not imported ({exc}); pass --sb3-site")
    impls["numpy-fancy"] = numpy_fancy_rows()
    timing = harness.Timing(args.reps, args.seconds, 0.05)
    times: dict[tuple[str, str], list[float]] = {}
    for row in ("add1", "add256", "sample256"):
        runs = {impl: rows[row] for impl, rows in impls.items() if row in rows}
        got, _ = harness.interleave(runs, timing, clock=time.thread_time)
        for impl, values in got.items():
            if isinstance(values, list):
                times[(row, impl)] = [t * 1e6 for t in values]
    print(f"CPU us per call, median of {args.reps} interleaved repetitions (min-max in brackets)")
    for row in ("add1", "add256", "sample256"):
        base = "sb3" if row != "sample256" else "numpy-fancy"
        ref = statistics.median(times[(row, base)]) if (row, base) in times else None
        for impl in impls:
            if (row, impl) not in times:
                continue
            values = times[(row, impl)]
            mid = statistics.median(values)
            ratio = f"  {ref / mid:5.2f}x {base}" if ref else ""
            print(f"{row:10s} {impl:14s} {mid:8.2f} us [{min(values):.2f}-{max(values):.2f}]{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
