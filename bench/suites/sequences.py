"""Sequences for recurrent learners (issue 48): replaybuf's get_next(burn_in=, period=) beside
TorchRL's SliceSampler, flashbax's trajectory buffer and a bare NumPy gather of the same rows.

Every call returns 256 sequences of 40 burn-in + 40 learning steps (80 rows each) at full
size; ``--quick``: 200k small steps, 20k frame steps, 64 sequences of frames (``SIZES``):

- ``seq_*``: 1M stored CartPole-sized transitions (obs float32[4], action int64, reward
  float32, done bool, next_obs float32[4]: 45 bytes) in episodes of 50 to 500 steps, one
  stream, capacity 1M (full). replaybuf: UniformReplayBuffer(respect_episodes=True,
  episode_end_field="done"), unpadded (``seq_uniform``: learning starts whose 40 learning
  steps lie in one episode), padded (``seq_padded``: pad_episode_ends=True, every step a
  start) and ``period=40`` (``seq_period40``: starts at episode positions 0, 40, 80, ...).
- ``seqf_*``: the same sequences of 84x84x4 uint8 frame stacks (observation and
  next_observation, 56461 bytes a transition) from 100k stored steps of
  FrameStackReplayBuffer (each frame stored once).
- ``seq_add``: add_batch of one small transition to the full 1M buffer on which the three
  kinds of sequence were sampled (its eligible-start list and window count kept up to date
  by every add) beside the same buffer never sampled with sequences.

MB/s of the returned transitions' bytes (info, masks and ids not counted) per CPU second of
the process (``CLOCK``: all its threads; the shared machine makes wall time useless). Peers, each in
its own environment (bench/requirements/): ``torchrl``: TensorDictReplayBuffer on
LazyTensorStorage with SliceSampler(slice_len=80, end_key="done") and defaults otherwise
(strict_length: trajectories shorter than 80 are never drawn; cache_values=False: the
trajectories are found again on every sample, as for a storage being extended);
``torchrl traj_key``: the same with traj_key="episode" (an episode id stored per step, as
TorchRL's collectors write); the frames' TorchRL storage holds both full stacks per step.
``flashbax``: make_trajectory_buffer(sample_sequence_length=80, period=1), which ignores
episodes. Reference, in replaybuf's process: ``numpy-gather``, one np.take of a
packed record array of the same fields by the same [256, 80] pattern of rows (random
starts, 80 consecutive rows; index arrays made outside the timed loop): the copy floor.
Its small rows cycle through ``FLOOR_PATTERNS`` patterns (1.3M rows touched a cycle at full
size, more than the 32 MB L3 holds), so that like replaybuf's draws they come from memory:
until 2026-11-29 it cycled through 8 (7.4 MB of rows, which stay in the L3 of a quiet
machine: that floor ran ~1.4-1.8x faster there, and equally fast at load 17+ where other
processes evict them; bench/analysis/88-sequences.md).
The gather is ``records.take(rows)``: ``records[rows]`` gathers the same rows of the packed
45-byte record ~9x slower (1.6 ms against 0.18 ms for 256 x 80 rows), a floor too low.
The frames' record array holds 20k rows at full size (1.1 GB; every row is far out of
cache either way).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, when run as a script

import harness  # noqa: E402
from harness import Workload  # noqa: E402
from suites import Job  # noqa: E402

BURN_IN, STEPS = 40, 40
LENGTH = BURN_IN + STEPS
SMALL_BYTES = 4 * 4 + 8 + 4 + 1 + 4 * 4  # 45
FRAME, K = (84, 84), 4
FRAME_BYTES = 2 * 84 * 84 * K + 8 + 4 + 1  # 56461
MB = 1e6
#: every figure is timed in CPU seconds of the whole process (all its threads: jax's pool, a
#: split read's), not wall time: on the shared 2-core machine at load 20-40, wall-clock
#: repetitions of one label swung up to 57x (the run of 2026-11-28 22:30 UTC)
CLOCK = time.process_time
TORCHRL, TORCHRL_TRAJ, FLASHBAX, FLOOR, NEVER = (
    "torchrl",
    "torchrl traj_key",
    "flashbax",
    "numpy-gather",
    "never sampled",
)


@dataclasses.dataclass(frozen=True)
class Size:
    """Stored small steps, stored frame steps, sequences per call (small, frames), the frames' floor rows."""

    stored: int
    frames: int
    batch: int
    frames_batch: int
    floor_rows: int


SIZES = {
    "full": Size(1_000_000, 100_000, 256, 256, 20_000),
    "quick": Size(200_000, 20_000, 256, 64, 10_000),
    "tiny": Size(4096, 700, 16, 4, 700),
}

#: variant -> get_next's keywords and whether the buffer pads
VARIANTS = {"uniform": ({}, False), "padded": ({}, True), "period40": ({"period": 40}, False)}


def _seq(key: str, frames: bool, variant: str, goal_vs: str, goal_ratio: float, readme: str) -> Workload:
    size = SIZES["full"]
    per_call = (size.frames_batch * FRAME_BYTES if frames else size.batch * SMALL_BYTES) * LENGTH / MB
    what = "84x84x4 frame stacks" if frames else "small transitions"
    how = {"uniform": "", "padded": ", padded", "period40": ", period=40"}[variant]
    return Workload(
        key,
        f"sequences of 40 burn-in + 40 steps, {what}{how}",
        "MB/s",
        per_call,
        references=(FLOOR,),
        peers=(TORCHRL, TORCHRL_TRAJ) if frames else (TORCHRL, TORCHRL_TRAJ, FLASHBAX),
        goal_vs=goal_vs,
        goal_ratio=goal_ratio,
        readme=readme,
    )


WORKLOADS = [
    _seq("seq_uniform", False, "uniform", TORCHRL, 8.0, "sequences of 40+40 small transitions"),
    _seq("seq_padded", False, "padded", FLASHBAX, 1.0, "padded sequences of 40+40 small transitions"),
    _seq("seq_period40", False, "period40", FLOOR, 0.7, "sequences of 40+40 small transitions, period 40"),
    _seq("seqf_uniform", True, "uniform", TORCHRL, 8.0, "sequences of 40+40 frame stacks"),
    _seq("seqf_padded", True, "padded", FLOOR, 0.7, "padded sequences of 40+40 frame stacks"),
    _seq("seqf_period40", True, "period40", FLOOR, 0.7, "sequences of 40+40 frame stacks, period 40"),
    Workload(
        "seq_add",
        "add_batch of one transition after sequence samples",
        "items/s",
        references=(NEVER,),
        goal_vs=NEVER,
        goal_ratio=0.95,
        readme="adds after sequence samples, vs never sampled",
    ),
]
#: the adds row's timing at full size: three times the repetitions of the others, since a
#: 10-20 us add swings 1.6-2x between repetitions on the shared machine (a 5% goal)
ADD_TIMINGS = {"full": harness.Timing(reps=21)}
SMALL = ("seq_uniform", "seq_padded", "seq_period40")
FRAMES = ("seqf_uniform", "seqf_padded", "seqf_period40")
JOBS = [
    Job("replaybuf", None, ("replaybuf", FLOOR, NEVER)),
    Job("torchrl", "torchrl", (TORCHRL, TORCHRL_TRAJ), workloads=SMALL + FRAMES, timeout=2400),
    Job("flashbax", "flashbax", (FLASHBAX,), workloads=SMALL),
]
VARIANT_OF = {w.key: w.key.split("_", 1)[1] for w in WORKLOADS if w.key != "seq_add"}


# -- data (NumPy only: every environment makes the same) ----------------------------------------
def episode_lengths(total: int, seed: int = 0) -> np.ndarray:
    """Episode lengths of 50 to 500 steps (uniform) adding up to ``total`` (the last one cut)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 501, total // 50 + 1)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), total)) + 1]
    lengths[-1] -= int(lengths.sum()) - total
    return lengths


def small_steps(total: int) -> dict[str, np.ndarray]:
    """``total`` small transitions in episodes of 50 to 500 steps, and each step's episode id."""
    rng = np.random.default_rng(1)
    lengths = episode_lengths(total)
    ends = np.cumsum(lengths) - 1
    done = np.zeros(total, bool)
    done[ends] = True
    obs = rng.standard_normal((total + 1, 4), dtype=np.float32)
    return {
        "obs": obs[:total],
        "action": rng.integers(0, 2, total, dtype=np.int64),
        "reward": rng.standard_normal(total, dtype=np.float32),
        "done": done,
        "next_obs": obs[1:],
        "episode": np.repeat(np.arange(lengths.size, dtype=np.int64), lengths),
    }


def frame_steps(total: int, chunk: int = 1024):
    """``total`` frame-stack transitions (observation and next_observation uint8 [84, 84, 4],
    the first frame repeated before an episode's first step) in chunks of ``chunk`` steps."""
    pool = np.random.default_rng(2).integers(0, 256, (4096, *FRAME), dtype=np.uint8)
    lengths = episode_lengths(total, seed=3)
    episode = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    first = np.r_[0, np.cumsum(lengths)[:-1]]
    position = np.arange(total) - np.repeat(first, lengths)
    done = np.zeros(total, bool)
    done[np.cumsum(lengths) - 1] = True
    frame = (np.arange(total) + episode) % 4096  # frame index of each step's newest frame
    for start in range(0, total, chunk):
        stop = min(total, start + chunk)
        steps = np.arange(start, stop)
        # stack [k] of step s: its frame k - 3 steps back, clamped at the episode's first step
        here = position[steps, None]
        back = np.clip(np.arange(-K + 1, 1) + here, 0, None) - here
        ahead = np.clip(np.arange(-K + 2, 2) + here, 0, None) - here
        observation = pool[(frame[steps, None] + back) % 4096].transpose(0, 2, 3, 1)
        following = pool[(frame[steps, None] + ahead) % 4096].transpose(0, 2, 3, 1)
        yield {
            "observation": np.ascontiguousarray(observation),
            "action": np.zeros(stop - start, np.int64),
            "reward": np.ones(stop - start, np.float32),
            "next_observation": np.ascontiguousarray(following),
            "done": done[start:stop],
            "episode": episode[start:stop],
        }


def windows(stored: int, batch: int, count: int = 8) -> list[np.ndarray]:
    """``count`` [batch, 80] row patterns: a random start, then 80 consecutive rows."""
    rng = np.random.default_rng(4)
    return [rng.integers(0, stored - LENGTH + 1, (batch, 1)) + np.arange(LENGTH) for _ in range(count)]


def cycle(call, args: list):
    """A ``run(n)`` calling ``call(args[j % len(args)])``."""

    def run(n: int) -> None:
        for j in range(n):
            call(args[j % len(args)])

    return run


def per_call(workload: Workload, size: Size) -> Workload:
    """``workload`` with what one call moves at ``size``."""
    if workload.key == "seq_add":
        return workload
    if workload.key.startswith("seqf"):
        return dataclasses.replace(workload, per_call=size.frames_batch * FRAME_BYTES * LENGTH / MB)
    return dataclasses.replace(workload, per_call=size.batch * SMALL_BYTES * LENGTH / MB)


# -- replaybuf and the references ---------------------------------------------------------------
def _small_spec() -> dict:
    from replaybuf import ArraySpec

    return {
        "obs": ArraySpec((4,), np.float32),
        "action": ArraySpec((), np.int64),
        "reward": ArraySpec((), np.float32),
        "done": ArraySpec((), np.bool_),
        "next_obs": ArraySpec((4,), np.float32),
    }


FIELDS = ("obs", "action", "reward", "done", "next_obs")
FRAME_FIELDS = ("observation", "action", "reward", "next_observation", "done")


def _fill_steps(buffers: list, data: dict[str, np.ndarray], fields: tuple[str, ...]) -> None:
    """Add every step of ``data`` to each buffer, one add_batch of one transition at a time."""
    total = data["done"].shape[0]
    columns = [data[name][:, None] for name in fields]
    for i in range(total):
        item = {name: column[i] for name, column in zip(fields, columns, strict=True)}
        for buffer in buffers:
            buffer.add_batch(item)


def _sampler(buffer, batch: int, variant: str):
    keywords, _ = VARIANTS[variant]
    return harness.repeat(lambda: buffer.get_next(batch, STEPS, burn_in=BURN_IN, **keywords))


FLOOR_PATTERNS = 64  # row patterns the small floor cycles through (see the module docstring)


def _floor(records: np.ndarray, stored: int, batch: int, count: int = 8):
    return cycle(records.take, windows(min(stored, records.shape[0]), batch, count))


def _records(data: dict[str, np.ndarray], fields: tuple[str, ...], rows: int) -> np.ndarray:
    dtype = np.dtype([(name, data[name].dtype, data[name].shape[1:]) for name in fields])  # packed
    records = np.empty(rows, dtype)
    for name in fields:
        records[name] = data[name][:rows]
    return records


def small_buffer(stored: int, pad: bool):
    """An empty UniformReplayBuffer of ``stored`` small steps that respects episodes (padded: ``pad``)."""
    from replaybuf import UniformReplayBuffer

    return UniformReplayBuffer(
        _small_spec(), 1, stored, seed=0, respect_episodes=True, pad_episode_ends=pad, episode_end_field="done"
    )


def measure_small(size: str, keys: list[str]) -> None:
    sizes = SIZES[size]
    data = small_steps(sizes.stored)
    buffers = {name: small_buffer(sizes.stored, name == "padded") for name in ("uniform", "padded", "never")}
    start = time.perf_counter()
    needed = {"uniform": {"seq_uniform", "seq_period40", "seq_add"}, "padded": {"seq_padded"}, "never": {"seq_add"}}
    _fill_steps([buffer for name, buffer in buffers.items() if needed[name] & set(keys)], data, FIELDS)
    print(f"filled the small buffers in {time.perf_counter() - start:.0f} s", flush=True)
    records = _records(data, FIELDS, sizes.stored)
    floor = _floor(records, sizes.stored, sizes.batch, FLOOR_PATTERNS)
    for workload in WORKLOADS:
        if workload.key in SMALL and workload.key in keys:
            variant = VARIANT_OF[workload.key]
            buffer = buffers["padded" if variant == "padded" else "uniform"]
            runs = {"replaybuf": _sampler(buffer, sizes.batch, variant), FLOOR: floor}
            harness.measure(per_call(workload, sizes), runs, harness.TIMINGS[size], clock=CLOCK)
    if "seq_add" in keys:
        sampled, never = buffers["uniform"], buffers["never"]
        for variant in ("uniform", "period40"):  # each keeps per-add state: a window count, a start list
            _sampler(sampled, sizes.batch, variant)(1)
        columns = {name: data[name][:, None] for name in FIELDS}
        items = [{name: columns[name][i] for name in FIELDS} for i in range(min(sizes.stored, 1 << 16))]
        workload = next(w for w in WORKLOADS if w.key == "seq_add")
        notes = {"replaybuf": "after unpadded period=1 and period=40 sequence samples (window count, start list)"}
        harness.measure(
            workload,
            {"replaybuf": cycle(sampled.add_batch, items), NEVER: cycle(never.add_batch, items)},
            ADD_TIMINGS.get(size, harness.TIMINGS[size]),
            notes,
            clock=CLOCK,
        )


def frame_buffers(stored: int, floor_rows: int) -> tuple[dict, np.ndarray]:
    """FrameStackReplayBuffers, unpadded and padded (keyed by ``pad``), holding ``stored`` frame
    steps, and the floor's record array of the first ``floor_rows`` of them."""
    from replaybuf import ArraySpec, FrameStackReplayBuffer

    shape = (*FRAME, K)
    spec = {
        "observation": ArraySpec(shape, np.uint8),
        "action": ArraySpec((), np.int64),
        "reward": ArraySpec((), np.float32),
        "next_observation": ArraySpec(shape, np.uint8),
        "done": ArraySpec((), np.bool_),
    }
    buffers = {
        pad: FrameStackReplayBuffer(
            spec,
            1,
            stored,
            seed=0,
            stack_axis=-1,
            respect_episodes=True,
            pad_episode_ends=pad,
            episode_end_field="done",
        )
        for pad in (False, True)
    }
    floor_parts = []
    for chunk in frame_steps(stored):
        _fill_steps(list(buffers.values()), chunk, FRAME_FIELDS)
        have = sum(part.shape[0] for part in floor_parts)
        if have < floor_rows:
            floor_parts.append(_records(chunk, FRAME_FIELDS, min(chunk["done"].shape[0], floor_rows - have)))
    return buffers, np.concatenate(floor_parts)


def measure_frames(size: str, keys: list[str]) -> None:
    sizes = SIZES[size]
    start = time.perf_counter()
    buffers, records = frame_buffers(sizes.frames, sizes.floor_rows)
    print(f"filled the frame buffers in {time.perf_counter() - start:.0f} s", flush=True)
    floor = _floor(records, records.shape[0], sizes.frames_batch)
    note = f"numpy-gather: a record array of {records.shape[0]} rows"
    for workload in WORKLOADS:
        if workload.key in FRAMES and workload.key in keys:
            variant = VARIANT_OF[workload.key]
            runs = {"replaybuf": _sampler(buffers[variant == "padded"], sizes.frames_batch, variant), FLOOR: floor}
            harness.measure(per_call(workload, sizes), runs, harness.TIMINGS[size], {FLOOR: note}, clock=CLOCK)


# -- TorchRL ------------------------------------------------------------------------------------
def _torchrl_buffers(storage, batch: int) -> dict:
    from torchrl.data import TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import SliceSampler

    return {
        TORCHRL: TensorDictReplayBuffer(
            storage=storage, batch_size=batch * LENGTH, sampler=SliceSampler(slice_len=LENGTH, end_key="done")
        ),
        TORCHRL_TRAJ: TensorDictReplayBuffer(
            storage=storage, batch_size=batch * LENGTH, sampler=SliceSampler(slice_len=LENGTH, traj_key="episode")
        ),
    }


def measure_torchrl(size: str, keys: list[str]) -> None:
    from importlib.metadata import version as dist_version

    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage

    torch.set_num_threads(1)
    versions = f"torchrl {dist_version('torchrl')}, tensordict {dist_version('tensordict')}"
    harness.emit(lib=TORCHRL, version=f"{versions}, torch {torch.__version__}, numpy {np.__version__}")
    sizes = SIZES[size]

    def td(chunk: dict) -> TensorDict:
        n = chunk["done"].shape[0]
        return TensorDict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in chunk.items()}, batch_size=[n])

    def run(buffers: dict):
        return {label: harness.repeat(buffer.sample) for label, buffer in buffers.items()}

    notes = {TORCHRL: "SliceSampler(slice_len=80, end_key='done')", TORCHRL_TRAJ: "SliceSampler(traj_key='episode')"}
    small = [w for w in WORKLOADS if w.key in SMALL and w.key in keys]
    if small:
        storage = LazyTensorStorage(sizes.stored)
        data = small_steps(sizes.stored)
        # the first buffer's extend lays out the storage; the second shares it
        buffers = _torchrl_buffers(storage, sizes.batch)
        for start in range(0, sizes.stored, 65536):
            buffers[TORCHRL].extend(td({k: v[start : start + 65536] for k, v in data.items()}))
        del data
        measure_once(small, run(buffers), size, notes)
        del buffers, storage
    frames = [w for w in WORKLOADS if w.key in FRAMES and w.key in keys]
    if frames:
        storage = LazyTensorStorage(sizes.frames)
        buffers = _torchrl_buffers(storage, sizes.frames_batch)
        for chunk in frame_steps(sizes.frames):
            buffers[TORCHRL].extend(td(chunk))
        measure_once(frames, run(buffers), size, notes)


# -- flashbax -----------------------------------------------------------------------------------
def measure_flashbax(size: str, keys: list[str]) -> None:
    from importlib.metadata import version as dist_version

    import flashbax as fbx
    import jax

    harness.emit(lib=FLASHBAX, version=f"flashbax {dist_version('flashbax')}, jax {jax.__version__}")
    sizes = SIZES[size]
    data = small_steps(sizes.stored)
    del data["episode"]
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=1,
        sample_batch_size=sizes.batch,
        sample_sequence_length=LENGTH,
        period=1,
        min_length_time_axis=LENGTH,
        max_size=sizes.stored,
    )
    state = buffer.init({k: v[0] for k, v in data.items()})
    add = jax.jit(buffer.add, donate_argnums=0)
    chunk = min(4096, sizes.stored)
    for start in range(0, sizes.stored - chunk + 1, chunk):
        state = add(state, {k: v[None, start : start + chunk] for k, v in data.items()})
    state = jax.block_until_ready(state)
    sample = jax.jit(buffer.sample)
    rngs = list(jax.random.split(jax.random.PRNGKey(1), 64))
    run = cycle(lambda key: jax.block_until_ready(sample(state, key)), rngs)
    note = {FLASHBAX: "not episode-aware (sequences cross episode ends); jitted, waited for"}
    measure_once([w for w in WORKLOADS if w.key in SMALL and w.key in keys], {FLASHBAX: run}, size, note)


def measure_once(workloads: list[Workload], runs: dict, size: str, notes: dict) -> None:
    """Time ``runs`` once for workloads that are the same work for them (a peer has no
    variants) and emit the figures under every workload's key."""
    if not workloads:
        return
    first, *rest = workloads
    for record in harness.measure(per_call(first, SIZES[size]), runs, harness.TIMINGS[size], notes, clock=CLOCK):
        for workload in rest:
            harness.emit(**dict(record, workload=workload.key))


def measure(job: Job, size: str, keys: list[str]) -> None:
    """This job's figures of ``keys`` (every workload when empty) at ``size``."""
    keys = keys or [w.key for w in WORKLOADS]
    if job.name == TORCHRL:
        measure_torchrl(size, keys)
    elif job.name == FLASHBAX:
        measure_flashbax(size, keys)
    else:
        import replaybuf

        harness.emit(lib="replaybuf", version=f"replaybuf {replaybuf.__version__}, numpy {np.__version__}")
        if set(keys) & {*SMALL, "seq_add"}:
            measure_small(size, keys)
        if set(keys) & set(FRAMES):
            measure_frames(size, keys)
