"""The common API, checked the same way on every backend in tests/backends.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import replaybuf
from backends import BACKENDS, Backend
from conformance_data import SPEC, as_numpy, assert_items_match_ids, fields_for_ids, step_batch

BATCH_SIZES = (1, 3)


def _cases():
    for backend in BACKENDS:
        for batch_size in BATCH_SIZES:
            if backend.single_stream and batch_size != 1:
                continue
            yield pytest.param((backend, batch_size), id=f"{backend.name}-B{batch_size}", marks=backend.marks)


@pytest.fixture(params=list(_cases()))
def case(request) -> tuple[Backend, int]:
    return request.param


def build(backend: Backend, batch_size: int, max_length: int = 8, seed: int = 0):
    return backend.make(SPEC, batch_size, max_length, seed)


def fill(buffer, batch_size: int, steps: int, start: int = 0) -> None:
    for t in range(start, start + steps):
        buffer.add_batch(step_batch(t, batch_size))


def test_properties(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=8)
    assert (buffer.capacity, buffer.batch_size, buffer.max_length) == (batch_size * 8, batch_size, 8)
    assert replaybuf.as_data_spec(buffer.data_spec) == replaybuf.as_data_spec(SPEC)
    assert buffer.num_frames() == 0
    fill(buffer, batch_size, 3)
    assert buffer.num_frames() == 3 * batch_size
    fill(buffer, batch_size, 10, start=3)
    assert buffer.num_frames() == 8 * batch_size


@pytest.mark.parametrize(
    "sample_batch_size, num_steps, lead",
    [(None, None, ()), (5, None, (5,)), (5, 3, (5, 3)), (None, 3, (3,))],
    ids=["single", "batch", "batch-windows", "one-window"],
)
def test_get_next_shapes_and_contents(case, sample_batch_size, num_steps, lead):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=8)
    fill(buffer, batch_size, 20)  # wrapped twice and more
    items, info = buffer.get_next(sample_batch_size, num_steps)
    items = as_numpy(items, backend.to_numpy)
    ids = np.asarray(backend.to_numpy(info.ids))
    assert ids.shape == lead
    assert items["observation"]["camera"].shape == lead + (2, 2)
    assert items["observation"]["position"].dtype == np.float32
    assert_items_match_ids(items, ids)
    probabilities = np.asarray(backend.to_numpy(info.probabilities))
    assert probabilities.shape == (() if sample_batch_size is None else (sample_batch_size,))


def test_windows_are_consecutive_steps_of_one_stream_and_stay_valid(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=8)
    fill(buffer, batch_size, 13)
    total = 13 * batch_size
    oldest = (13 - 8) * batch_size
    for _ in range(20):
        _, info = buffer.get_next(16, 4)
        ids = np.asarray(backend.to_numpy(info.ids))
        np.testing.assert_array_equal(np.diff(ids, axis=1), batch_size)  # same stream, next step
        assert ids.min() >= oldest, "a window reached an overwritten item"
        assert ids.max() < total, "a window passed the write head"


def test_uniform_probabilities(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=8)
    fill(buffer, batch_size, 5)
    _, info = buffer.get_next(4, 2)
    probabilities = np.asarray(backend.to_numpy(info.probabilities))
    np.testing.assert_allclose(probabilities, 1.0 / ((5 - 2 + 1) * batch_size), rtol=1e-6)


def test_sampling_reaches_every_valid_start(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=6)
    fill(buffer, batch_size, 9)
    seen = set()
    for _ in range(40):
        _, info = buffer.get_next(32, 2)
        seen.update(np.asarray(backend.to_numpy(info.ids))[:, 0].tolist())
    expected = {t * batch_size + s for t in range(3, 8) for s in range(batch_size)}
    assert seen == expected


def test_time_stacked_false_gives_a_tuple_of_steps(case):
    backend, batch_size = case
    buffer = build(backend, batch_size)
    fill(buffer, batch_size, 6)
    steps, info = buffer.get_next(4, 3, time_stacked=False)
    assert isinstance(steps, tuple) and len(steps) == 3
    ids = np.asarray(backend.to_numpy(info.ids))
    for t, item in enumerate(steps):
        assert_items_match_ids(as_numpy(item, backend.to_numpy), ids[:, t])


def test_gather_all_is_oldest_first_per_stream(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=5)
    fill(buffer, batch_size, 7)
    items = as_numpy(buffer.gather_all(), backend.to_numpy)
    expected_ids = np.arange(2, 7)[None, :] * batch_size + np.arange(batch_size)[:, None]
    assert items["observation"]["camera"].shape == (batch_size, 5, 2, 2)
    assert_items_match_ids(items, expected_ids)


def test_random_dataset_sees_later_adds(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=4)
    fill(buffer, batch_size, 2)
    iterator = iter(buffer.as_dataset(sample_batch_size=8, num_steps=2))
    items, info = next(iterator)
    assert as_numpy(items, backend.to_numpy)["id"].shape == (8, 2)
    fill(buffer, batch_size, 10, start=2)  # everything old is overwritten
    newest_allowed = (12 - 4) * batch_size
    for _ in range(buffer.dataset_draw_ahead - 1 if backend.dataset_may_lag else 0):
        items, info = next(iterator)
        assert_items_match_ids(as_numpy(items, backend.to_numpy), np.asarray(backend.to_numpy(info.ids)))
    for _ in range(3):
        items, info = next(iterator)
        ids = np.asarray(backend.to_numpy(info.ids))
        assert ids.min() >= newest_allowed
        assert_items_match_ids(as_numpy(items, backend.to_numpy), ids)


def test_deterministic_pass_yields_every_item_once_in_order(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=5)
    fill(buffer, batch_size, 12)  # wrapped: streams must stay apart
    seen = []
    for items, info in buffer.as_dataset(single_deterministic_pass=True):
        ids = np.asarray(backend.to_numpy(info.ids))
        assert_items_match_ids(as_numpy(items, backend.to_numpy), ids)
        seen.append(int(ids))
    expected = [t * batch_size + s for s in range(batch_size) for t in range(7, 12)]
    assert seen == expected


def test_deterministic_pass_windows_and_stream_groups(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=5)
    fill(buffer, batch_size, 12)
    dataset = buffer.as_dataset(sample_batch_size=batch_size, num_steps=2, single_deterministic_pass=True)
    windows = [np.asarray(backend.to_numpy(info.ids)) for _, info in dataset]
    steps = [list(w[0] // batch_size) for w in windows]
    assert steps == [[7, 8], [9, 10], [11]]  # the short remainder is kept by default
    for w in windows:
        np.testing.assert_array_equal(w % batch_size, np.arange(batch_size)[:, None] * np.ones_like(w[:1]))


def test_clear_forgets_everything(case):
    backend, batch_size = case
    buffer = build(backend, batch_size)
    fill(buffer, batch_size, 3)
    buffer.clear()
    assert buffer.num_frames() == 0
    with pytest.raises(replaybuf.EmptyBufferError):
        buffer.get_next(2)
    fill(buffer, batch_size, 1)
    items, info = buffer.get_next(4)
    assert_items_match_ids(as_numpy(items, backend.to_numpy), np.asarray(backend.to_numpy(info.ids)))


def test_empty_buffer_and_too_long_windows_are_errors(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=4)
    with pytest.raises(replaybuf.EmptyBufferError, match="empty"):
        buffer.get_next(2)
    fill(buffer, batch_size, 2)
    with pytest.raises(replaybuf.EmptyBufferError, match="num_steps"):
        buffer.get_next(2, num_steps=3)


def test_rejected_add_changes_nothing(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=4)
    fill(buffer, batch_size, 2)
    before = as_numpy(buffer.gather_all(), backend.to_numpy)
    bad = step_batch(2, batch_size)
    bad["observation"]["camera"] = np.zeros((batch_size, 2, 3), np.uint8)  # a later leaf is wrong
    with pytest.raises(replaybuf.SpecMismatchError, match="observation/camera"):
        buffer.add_batch(bad)
    assert buffer.num_frames() == 2 * batch_size
    after = as_numpy(buffer.gather_all(), backend.to_numpy)
    assert_items_match_ids(after, before["id"])
    assert_items_match_ids(before, np.arange(2)[None, :] * batch_size + np.arange(batch_size)[:, None])


def test_unsafe_dtype_is_rejected_and_python_numbers_accepted(case):
    backend, batch_size = case
    buffer = build(backend, batch_size)
    bad = step_batch(0, batch_size)
    bad["observation"]["position"] = bad["observation"]["position"].astype(np.float64)
    with pytest.raises(replaybuf.SpecMismatchError, match="position.*float32.*float64"):
        buffer.add_batch(bad)
    good = step_batch(0, batch_size)
    good["id"] = good["id"].tolist()  # Python ints
    good["observation"]["position"] = good["observation"]["position"].tolist()  # Python floats
    buffer.add_batch(good)
    items, info = buffer.get_next(2)
    assert_items_match_ids(as_numpy(items, backend.to_numpy), np.asarray(backend.to_numpy(info.ids)))


def test_wrong_structure_is_rejected(case):
    backend, batch_size = case
    buffer = build(backend, batch_size)
    bad = step_batch(0, batch_size)
    del bad["flag"]
    with pytest.raises(replaybuf.SpecMismatchError, match="structure"):
        buffer.add_batch(bad)
    assert buffer.num_frames() == 0


def test_unbatched_item_error_says_what_to_do():
    backend = BACKENDS[0]
    buffer = build(backend, 1)
    single = fields_for_ids(np.int64(0))
    with pytest.raises(replaybuf.SpecMismatchError, match="leading dimension"):
        buffer.add_batch(single)


def test_concurrent_adds_and_samples_never_tear(case):
    backend, batch_size = case
    buffer = build(backend, batch_size, max_length=16)
    fill(buffer, batch_size, 2)  # readers ask for 2-step windows from the start
    errors: list[BaseException] = []
    next_step = iter(range(2, 10_000))
    step_lock = threading.Lock()

    def writer() -> None:
        try:
            for _ in range(60):
                with step_lock:  # steps must reach the buffer in order for ids to match
                    buffer.add_batch(step_batch(next(next_step), batch_size))
        except BaseException as err:  # surfaced below
            errors.append(err)

    def reader() -> None:
        try:
            for _ in range(60):
                items, info = buffer.get_next(8, 2)
                assert_items_match_ids(as_numpy(items, backend.to_numpy), np.asarray(backend.to_numpy(info.ids)))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=f) for f in (writer, writer, reader, reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]
    assert buffer.num_frames() == 16 * batch_size
