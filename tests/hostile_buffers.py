"""Buffers for the hostile-input tests (tests/test_hostile_*.py), and the twin comparison.

Every kind is built twice the same way (``twins(kind)``): one buffer takes the hostile input,
its twin does not, and ``assert_twins`` then checks that the two are still equal: the full
state (items, counters, generator, priorities, episode index, frames, rate limiter) and the
next samples drawn from each with the same calls. ``source(kind)`` is a third buffer of the
same kind with other content, whose state the hostile inputs are made from.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import optree

import replaybuf
from conformance_data import SPEC, step_batch

FRAME_SPEC = {
    "observation": replaybuf.ArraySpec((2, 3, 2), np.uint8),  # 2 frames of (3, 2)
    "action": replaybuf.ArraySpec((), np.int64),
    "step_type": replaybuf.ArraySpec((), np.int32),
}
MINDSPORE_SHAPES, MINDSPORE_TYPES = [(3,), (1,), ()], [np.float32, np.int64, np.bool_]


@dataclass(frozen=True)
class Kind:
    name: str
    make: Callable[[Any], Any]  # (tmp_path or None) -> empty buffer
    fill: Callable[[Any, int], None]  # (buffer, variant) -> adds and draws
    streams: bool = True  # StreamBuffer-like (get_next), else MindSpore-style (sample)
    torch: bool = False


def _fill_stream(buffer: Any, variant: int, steps: int = 4) -> None:
    batch = getattr(buffer, "batch_size", 1)
    for t in range(steps + variant):
        buffer.add_batch(step_batch(t + 10 * variant, batch))
    buffer.get_next(3)  # the generator moves away from its seed


def _fill_prioritized(buffer: Any, variant: int) -> None:
    _fill_stream(buffer, variant, steps=5)
    _, info = buffer.get_next(4)
    buffer.update_priorities(info.ids, np.arange(1.0, 5.0) * (variant + 1))


def _fill_frames(buffer: Any, variant: int) -> None:
    rng = np.random.default_rng(variant)
    for t in range(5 + variant):
        buffer.add_batch(
            {
                "observation": rng.integers(0, 3, (2, 2, 3, 2), dtype=np.uint8),
                "action": np.full(2, t, np.int64),
                "step_type": np.full(2, 0 if t % 3 == 0 else 1, np.int32),
            }
        )
    buffer.get_next(3)


def _fill_mindspore(buffer: Any, variant: int) -> None:
    for row in range(5 + 3 * variant):
        buffer.insert([np.full(3, row, np.float32), np.array([row]), np.array(row % 2 == 0)])
    buffer.sample()


def _memmap(tmp_path: Any) -> Any:
    folder = tmp_path / f"memmap-{next(_FOLDERS)}"
    return replaybuf.UniformReplayBuffer(SPEC, 2, 5, seed=5, storage="memmap", path=folder)


_FOLDERS = itertools.count()


def _torch(name: str) -> Callable[[Any], Any]:
    def make(tmp_path: Any) -> Any:
        from replaybuf import torch as torch_buffers

        if name == "py":
            return torch_buffers.TorchPyUniformReplayBuffer(SPEC, capacity=7, seed=5)
        return torch_buffers.TorchUniformReplayBuffer(SPEC, 2, 5, seed=5)

    return make


def _mindspore(tmp_path: Any) -> Any:
    from replaybuf.mindspore_rl import ReplayBuffer

    return ReplayBuffer(3, 7, MINDSPORE_SHAPES, MINDSPORE_TYPES, device="cpu", seed=5)


KINDS = {
    kind.name: kind
    for kind in [
        Kind("uniform", lambda _: replaybuf.UniformReplayBuffer(SPEC, 2, 5, seed=5), _fill_stream),
        Kind("columns", lambda _: replaybuf.UniformReplayBuffer(SPEC, 2, 5, seed=5, storage="columns"), _fill_stream),
        Kind("py-uniform", lambda _: replaybuf.PyUniformReplayBuffer(SPEC, 7, seed=5), _fill_stream),
        Kind("prioritized", lambda _: replaybuf.PrioritizedReplayBuffer(SPEC, 2, 5, seed=5), _fill_prioritized),
        Kind(
            "episodes",  # prioritized and episode-aware: masses and the episode index
            lambda _: replaybuf.PrioritizedReplayBuffer(
                SPEC, 2, 6, seed=5, respect_episodes=True, episode_end_field="flag"
            ),
            _fill_prioritized,
        ),
        Kind(
            "uniform-episodes",
            lambda _: replaybuf.UniformReplayBuffer(
                SPEC, 2, 6, seed=5, respect_episodes=True, episode_end_field="flag"
            ),
            _fill_stream,
        ),
        Kind(
            "limited",  # a rate limiter: its counters are in the state
            lambda _: replaybuf.UniformReplayBuffer(SPEC, 2, 5, seed=5, rate_limiter=replaybuf.MinSize(1)),
            _fill_stream,
        ),
        Kind("frames", lambda _: replaybuf.FrameStackReplayBuffer(FRAME_SPEC, 2, 6, seed=5), _fill_frames),
        Kind("memmap", _memmap, _fill_stream),
        Kind("torch", _torch("uniform"), _fill_stream, torch=True),
        Kind("torch-py", _torch("py"), _fill_stream, torch=True),
        Kind("mindspore", _mindspore, _fill_mindspore, streams=False, torch=True),
    ]
}


def build(kind: str, tmp_path: Any = None, variant: int = 0) -> Any:
    buffer = KINDS[kind].make(tmp_path)
    KINDS[kind].fill(buffer, variant)
    return buffer


def twins(kind: str, tmp_path: Any = None) -> tuple[Any, Any]:
    """Two buffers of ``kind`` with the same content, counters and generator state."""
    return build(kind, tmp_path), build(kind, tmp_path)


def source_state(kind: str, tmp_path: Any = None) -> dict:
    """The ``state_dict()`` of a buffer of ``kind`` holding other content than ``twins``'."""
    return build(kind, tmp_path, variant=1).state_dict()


def plain(value: Any) -> Any:
    """A state or sample with every tensor as a NumPy array (for comparisons)."""

    def leaf(x: Any) -> Any:
        if hasattr(x, "detach") and hasattr(x, "cpu"):
            return x.detach().cpu().numpy()
        return x

    return optree.tree_map(leaf, value, none_is_leaf=True)


def snapshot(buffer: Any, samples: int = 2) -> list:
    """What the buffer holds and what it returns next: its state, then ``samples`` draws."""
    out: list = [plain(buffer.state_dict())]
    streams = hasattr(buffer, "get_next")
    for _ in range(samples):
        if not streams:
            out.append(plain(buffer.sample()) if buffer.size() else "empty")
            continue
        if buffer.num_frames() == 0:
            out.append("empty")
            continue
        items, info = buffer.get_next(3)
        extras = [getattr(info, name, None) for name in ("weights", "mask")]
        out.append(plain([items, tuple(info), extras]))
    return out


def assert_equal_trees(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_equal_trees(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equal_trees(x, y, f"{where}/{i}")
    elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=where)
        assert np.asarray(a).dtype == np.asarray(b).dtype, where
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def assert_twins(buffer: Any, twin: Any) -> None:
    """``buffer`` holds and returns exactly what its untouched ``twin`` does."""
    assert_equal_trees(snapshot(buffer), snapshot(twin))


def assert_empty(buffer: Any) -> None:
    """``buffer`` holds nothing (what a load leaves when an item file fails its checksum)."""
    if hasattr(buffer, "num_frames"):
        assert buffer.num_frames() == 0
    else:
        assert buffer.size() == 0
