"""One host dataset iterator shared between threads (issue 18, class 9): TF's iterators allow
it, so the host ones do too. Each ``next`` hands one element to one caller; a deterministic
pass yields every element exactly once whichever thread takes it; an error reaches every
caller instead of leaving some waiting.
"""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import replaybuf
from conformance_data import SPEC, assert_items_match_ids, step_batch
from hostile_buffers import plain

THREADS, CALLS = 8, 40


def _buffers():
    yield "uniform", replaybuf.UniformReplayBuffer(SPEC, 2, 6, seed=0)
    yield "prioritized", replaybuf.PrioritizedReplayBuffer(SPEC, 2, 6, seed=0)
    pytest.importorskip("torch")
    import replaybuf.torch as torch_buffers

    yield "torch", torch_buffers.TorchUniformReplayBuffer(SPEC, 2, 6, seed=0)


def _filled():
    for name, buffer in _buffers():
        for t in range(6):
            buffer.add_batch(step_batch(t, 2))
        yield name, buffer


def _share(iterator, calls=CALLS, threads=THREADS):
    """``calls`` nexts on ``iterator`` from each of ``threads`` threads at once: (elements, errors)."""
    elements, errors = [], []
    lock, start = threading.Lock(), threading.Barrier(threads)

    def work():
        start.wait()
        for _ in range(calls):
            try:
                element = next(iterator)
            except StopIteration:
                return
            except Exception as err:  # collected: the test says which
                with lock:
                    errors.append(err)
                return
            with lock:
                elements.append(element)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not any(worker.is_alive() for worker in workers), "a thread is still waiting"
    return elements, errors


@pytest.mark.parametrize("prefetch", [None, 2], ids=["direct", "prefetched"])
def test_a_random_dataset_iterator_shared_by_threads(prefetch):
    for name, buffer in _filled():
        iterator = iter(buffer.as_dataset(4, 2, num_parallel_calls=prefetch))
        elements, errors = _share(iterator)
        assert errors == [], (name, errors)
        assert len(elements) == THREADS * CALLS
        for items, info in elements:
            items, ids = plain(items), plain(info.ids)
            assert_items_match_ids(items, ids)


def test_a_deterministic_pass_shared_by_threads_yields_each_element_once():
    for name, buffer in _filled():
        dataset = buffer.as_dataset(1, 2, single_deterministic_pass=True)
        expected = sorted(plain(info.ids).tolist() for _, info in dataset)
        elements, errors = _share(iter(dataset), calls=len(expected))
        assert errors == [], (name, errors)
        got = sorted(plain(info.ids).tolist() for _, info in elements)
        assert got == expected, name
        for items, info in elements:
            assert_items_match_ids(plain(items), plain(info.ids))


def test_an_error_of_a_shared_prefetching_iterator_reaches_every_thread():
    buffer = replaybuf.UniformReplayBuffer(SPEC, 2, 6, seed=0)  # empty: every sample fails
    iterator = iter(buffer.as_dataset(4, num_parallel_calls=2))
    elements, errors = _share(iterator, calls=3)
    assert elements == []
    assert len(errors) == THREADS
    assert all(isinstance(err, replaybuf.EmptyBufferError) for err in errors)
    with pytest.raises(replaybuf.EmptyBufferError):  # and every later call
        next(iterator)


def test_a_shared_prefetching_iterator_stops_its_thread_when_collected():
    buffer = replaybuf.UniformReplayBuffer(SPEC, 2, 6, seed=0)
    for t in range(3):
        buffer.add_batch(step_batch(t, 2))

    def prefetchers():
        return {t for t in threading.enumerate() if t.name == "replaybuf-prefetch" and t.is_alive()}

    gc.collect()  # iterators of earlier tests: their threads stop within their 0.05 s put timeout
    before = prefetchers()
    iterator = iter(buffer.as_dataset(4, num_parallel_calls=2))
    _share(iterator, calls=5, threads=4)
    (mine,) = prefetchers() - before
    alive = weakref.ref(iterator)
    del iterator
    gc.collect()
    assert alive() is None
    mine.join(timeout=10)
    assert not mine.is_alive()


def test_a_torch_dataloader_over_a_shared_iterator_source():
    """The torch IterableDataset hands out the same thread-safe iterators."""
    pytest.importorskip("torch")
    import replaybuf.torch as torch_buffers

    buffer = torch_buffers.TorchUniformReplayBuffer(SPEC, 2, 6, seed=0)
    for t in range(6):
        buffer.add_batch(step_batch(t, 2))
    iterator = iter(buffer.as_dataset(4, num_parallel_calls=2))
    elements, errors = _share(iterator, calls=10)
    assert errors == [] and len(elements) == THREADS * 10
    assert np.all([info.ids.shape == (4,) for _, info in elements])
