"""The sample-count rules' draws: numba's kernels give NumPy's results, draw for draw."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from replaybuf.samplers.live_set import LiveSet
from replaybuf.samplers.rule_draws import CompiledDraws, NumpyDraws, rule_draws

CAPACITY = 64


def twins():
    """A NumPy and a compiled draws (the compiled one must load when numba is installed)."""
    if importlib.util.find_spec("numba") is None:
        return [NumpyDraws(CAPACITY)]
    compiled = rule_draws(CAPACITY, True)
    assert isinstance(compiled, CompiledDraws) and isinstance(rule_draws(CAPACITY), CompiledDraws)
    return [NumpyDraws(CAPACITY), compiled]


def live_of(ids):
    live = LiveSet(CAPACITY)
    live.add(np.asarray(ids, np.int64))
    return live


def state_of(live):
    return live.ids().tolist(), live.where.tolist(), live.alive.tolist()


@pytest.mark.parametrize("count", [5, 40, 64])
def test_distinct_picks_and_counts_agree(count):
    results = []
    for draws in twins():
        rng = np.random.default_rng(3)
        live = live_of(np.arange(100, 100 + count)[::-1])  # ids of the second pass (origin 64)
        times = np.zeros(CAPACITY, np.int64)
        drawn = []
        for size in (1, 3, 5, 2, 5):
            if live.size < size:
                break
            ids = draws.pick_counted(rng, live.ids(), live.size, size, (times, 2, live, 64))
            assert len(set(ids.tolist())) == size
            drawn.append(ids.tolist())
        plain = draws.pick(rng, np.arange(count, dtype=np.int64), count, 30, False)
        results.append((drawn, times.tolist(), state_of(live), plain.tolist(), rng.bit_generator.random_raw()))
    assert all(result == results[0] for result in results)


def test_epoch_takes_agree_and_make_a_permutation():
    results = []
    for draws in twins():
        rng = np.random.default_rng(7)
        order = np.arange(10, 50, dtype=np.int64)
        live = live_of(np.arange(10, 50)[order % 3 != 0])  # every third id is no longer live
        cursor, taken = 0, []
        while cursor < order.shape[0]:
            size = min(6, order.shape[0] - cursor)
            got = draws.take(rng, order, cursor, size, live, 10)
            assert set(got.tolist()) <= set(order[cursor : cursor + size].tolist())
            cursor += size
            taken += got.tolist()
        assert sorted(order.tolist()) == list(range(10, 50))  # the epoch's order holds each id once
        assert sorted(taken) == [i for i in range(10, 50) if i % 3]
        results.append((order.tolist(), taken, rng.bit_generator.random_raw()))
    assert all(result == results[0] for result in results)


def test_counting_removes_as_the_live_set_does():
    results = []
    for draws in twins():
        live = live_of(np.arange(70, 90))
        times = np.zeros(CAPACITY, np.int64)
        times[[71 % 64, 80 % 64]] = 2
        draws.count(np.array([80, 75, 71, 89], np.int64), times, 3, live, 64)
        model = live_of(np.arange(70, 90))
        model.remove(np.array([80, 71], np.int64))
        assert state_of(live) == state_of(model)
        results.append(state_of(live))
    assert all(result == results[0] for result in results)


def test_repeats_across_rounds_agree_at_random_sizes():
    """Pools and batches of random sizes (repeats, and repeats of redrawn picks, are common):
    the epoch's takes (checked or not), distinct picks from a pool and from a range of ids."""
    for seed in range(40):
        sizes = np.random.default_rng(seed)
        count = int(sizes.integers(2, CAPACITY + 1))
        size = int(sizes.integers(1, count + 1))
        results = []
        for draws in twins():
            rng = np.random.default_rng(seed + 100)
            order = np.random.default_rng(seed).permutation(count).astype(np.int64)
            live = live_of(np.arange(count))
            cursor, taken = 0, []
            while cursor < count:
                step = min(size, count - cursor)
                taken.append(draws.take(rng, order, cursor, step, live, 0, seed % 2 == 0).tolist())
                cursor += step
            assert sorted(sum(taken, [])) == list(range(count))  # every live id once, checked or not
            pool = draws.pick(rng, np.arange(count, dtype=np.int64) * 3, count, size, True)
            ranged = draws.pick(rng, 7, count, size, True)
            assert len(set(pool.tolist())) == len(set(ranged.tolist())) == size
            assert 7 <= ranged.min() and ranged.max() < 7 + count
            results.append((taken, order.tolist(), pool.tolist(), ranged.tolist(), rng.bit_generator.random_raw()))
        assert all(result == results[0] for result in results)


def test_removals_count_all_but_overwritten_ids():
    """``LiveSet.removals`` (what lets an epoch skip its liveness reads) counts every removal
    but those of overwritten ids, by the NumPy and the compiled counts alike."""
    live = live_of(np.arange(70, 90))
    live.remove(np.array([70, 71], np.int64), overwritten=True)
    assert live.removals == 0 and live.size == 18
    live.remove(np.array([72, 99], np.int64))  # 99 is not live
    assert live.removals == 1
    for draws in twins():
        counted = live_of(np.arange(70, 90))
        times = np.zeros(CAPACITY, np.int64)
        draws.count(np.array([75, 76], np.int64), times, 1, counted, 64)
        assert counted.removals == 2 and counted.size == 18
