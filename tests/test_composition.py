"""The house: every NumPy buffer is ring + storage + sampler, and what that change fixed."""

from __future__ import annotations

import abc
import gc
import json
import shutil
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

import replaybuf
from conformance_data import SPEC, assert_items_match_ids, fields_for_ids
from replaybuf.buffers.stream import StreamBuffer
from replaybuf.persistence.front import Checkpoints
from replaybuf.storages.records import RecordStorage

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints-v1"
NUMPY_CLASSES = [
    replaybuf.UniformReplayBuffer,
    replaybuf.PyUniformReplayBuffer,
    replaybuf.PrioritizedReplayBuffer,
    replaybuf.FrameStackReplayBuffer,
    replaybuf.PrioritizedFrameStackReplayBuffer,
]


@pytest.mark.parametrize("cls", NUMPY_CLASSES, ids=lambda c: c.__name__)
def test_numpy_buffers_are_presets_of_one_composition(cls):
    below = [c for c in cls.__mro__ if c not in (object, abc.ABC, Checkpoints)]  # save/load: every buffer's
    assert len(below) <= 3, below
    assert issubclass(cls, StreamBuffer)
    assert "get_next" not in vars(cls) and "add_batch" not in vars(cls)


@pytest.mark.parametrize("cls", [replaybuf.UniformReplayBuffer, replaybuf.PrioritizedReplayBuffer])
@pytest.mark.parametrize(
    "options, named",
    [
        ({"pad_episode_ends": True}, "pad_episode_ends"),
        ({"episode_end_field": "flag"}, "episode_end_field"),
        ({"path": "somewhere"}, "path"),
    ],
)
def test_options_without_effect_are_rejected_when_built(cls, options, named):
    with pytest.raises(replaybuf.ArgumentError, match=named):
        cls(SPEC, 2, 8, **options)


def test_prioritized_windows_padded_without_episodes_were_an_attribute_error():
    with pytest.raises(replaybuf.ArgumentError, match="respect_episodes"):
        replaybuf.PrioritizedReplayBuffer(SPEC, 2, 8, pad_episode_ends=True)


def test_prioritized_takes_the_deterministic_pass_options():
    rb = replaybuf.PrioritizedReplayBuffer(SPEC, 2, 8, dataset_drop_remainder=True, dataset_window_shift=1)
    for t in range(5):
        rb.add_batch(fields_for_ids(np.arange(2 * t, 2 * t + 2)))
    windows = [info.ids for _, info in rb.as_dataset(2, num_steps=3, single_deterministic_pass=True)]
    assert len(windows) == 3  # starts 0, 1, 2 (shift 1); the shorter ones are dropped
    np.testing.assert_array_equal(windows[1], [[2, 4, 6], [3, 5, 7]])


def _prefetch_threads() -> int:
    return sum(t.name == "replaybuf-prefetch" for t in threading.enumerate())


def test_a_prefetching_iterator_never_advanced_starts_no_thread_and_frees_the_buffer():
    rb = replaybuf.UniformReplayBuffer(SPEC, 2, 8)
    rb.add_batch(fields_for_ids(np.arange(2)))
    before = _prefetch_threads()
    iterator = iter(rb.as_dataset(2, num_parallel_calls=2))
    assert _prefetch_threads() == before
    alive = weakref.ref(rb)
    del rb, iterator
    gc.collect()
    assert alive() is None


def test_a_crash_inside_a_wrapping_memmap_append_reopens_to_whole_items(tmp_path, monkeypatch):
    rb = replaybuf.PyUniformReplayBuffer(SPEC, 8, storage="memmap", path=tmp_path / "rb")
    rb.add_batch(fields_for_ids(np.arange(6)))
    original = RecordStorage._write_run
    calls = []

    def dies_in_the_second_half(self, start, arrays):
        calls.append(start)
        if len(calls) == 2:  # the wrapped half: one field written, then the process "dies"
            self.fields[0][start : start + len(arrays[0])] = arrays[0]
            raise KeyboardInterrupt
        original(self, start, arrays)

    monkeypatch.setattr(RecordStorage, "_write_run", dies_in_the_second_half)
    with pytest.raises(KeyboardInterrupt):
        rb.add_batch(fields_for_ids(np.arange(6, 10)))  # slots 6, 7, then 0, 1
    monkeypatch.setattr(RecordStorage, "_write_run", original)
    del rb
    reopened = replaybuf.PyUniformReplayBuffer(SPEC, 8, storage="memmap", path=tmp_path / "rb")
    assert reopened.num_frames() == 4  # 0 and 1 were being overwritten: dropped
    assert_items_match_ids(reopened.gather_all(), np.arange(2, 6)[None])


def _fixture_buffer(name: str):
    frame_spec = {
        "observation": replaybuf.ArraySpec((3, 4, 4), np.uint8),
        "action": replaybuf.ArraySpec((), np.int64),
        "done": replaybuf.ArraySpec((), np.bool_),
    }
    return {
        "uniform-episodes": lambda: replaybuf.UniformReplayBuffer(
            SPEC, 2, 5, respect_episodes=True, episode_end_field="flag"
        ),
        "prioritized": lambda: replaybuf.PrioritizedReplayBuffer(SPEC, 2, 6, alpha=0.7),
        "frames": lambda: replaybuf.FrameStackReplayBuffer(frame_spec, 2, 6),
        "py-uniform": lambda: replaybuf.PyUniformReplayBuffer(SPEC, 7),
    }[name]()


@pytest.mark.parametrize(
    "name, sample",
    [("uniform-episodes", (3, 2)), ("prioritized", (5, None)), ("frames", (3, 2)), ("py-uniform", (4, 3))],
)
def test_folders_saved_before_the_house_load_and_draw_the_same(tmp_path, name, sample):
    expected = json.loads((FIXTURES / "expected.json").read_text())[name]
    shutil.copytree(FIXTURES / name, tmp_path / name)
    rb = _fixture_buffer(name)
    rb.load(tmp_path / name)
    assert rb.num_frames() == expected["num_frames"]
    _, info = rb.get_next(*sample)
    np.testing.assert_array_equal(info.ids, expected["ids"])
    np.testing.assert_allclose(info.probabilities, expected["probabilities"], rtol=1e-6)
    if name != "frames":
        assert_items_match_ids(rb.gather_all(), rb._ring.stream_ids())
