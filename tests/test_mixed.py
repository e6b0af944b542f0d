"""MixedReplayBuffer: exact scheduled row counts, rows and info that are the sources' own,
mixture probabilities, priority routing, errors, checkpoints and frameworks (docs/offline.md)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import replaybuf
from replaybuf import ArraySpec, MixedReplayBuffer, linear_schedule
from replaybuf.samplers.mixture import RowAllocator

SPEC = {"x": ArraySpec((2,), np.float32), "done": ArraySpec((), np.bool_)}


def filled(buffer, values, done_every=0):
    """``buffer`` with one item per value (x = [v, -v]; done every ``done_every`` items)."""
    for i, v in enumerate(values):
        done = done_every > 0 and (i + 1) % done_every == 0
        buffer.add_batch({"x": np.array([[v, -v]], np.float32), "done": np.array([done])})
    return buffer


def uniform(values, seed=1, **kw):
    return filled(replaybuf.UniformReplayBuffer(SPEC, 1, 64, seed=seed, **kw), values)


def prioritized(values, seed=2, **kw):
    return filled(replaybuf.PrioritizedReplayBuffer(SPEC, 1, 64, seed=seed, **kw), values)


# -- row counts ---------------------------------------------------------------------------------
shares_st = st.lists(st.integers(0, 10), min_size=1, max_size=5).filter(any)


@settings(max_examples=200, deadline=None)
@given(shares_st, st.lists(st.integers(1, 300), min_size=1, max_size=60))
def test_fixed_weights_give_exact_counts_within_one_row_of_the_share(weights, sizes):
    names = [f"s{i}" for i in range(len(weights))]
    allocator = RowAllocator(names, dict(zip(names, weights, strict=True)))
    share = np.array(weights, np.float64) / sum(weights)
    drawn = 0
    for n in sizes:
        counts = allocator.counts(allocator.shares(), n)
        assert counts.sum() == n and (counts >= 0).all()
        assert counts[share == 0].sum() == 0  # a weight-0 source is never asked
        allocator.commit(allocator.shares(), counts)
        drawn += n
        assert np.abs(allocator.given - drawn * share).max() < 1 + 1e-9


def schedules(k):
    """A schedule's steps for ``k`` sources: (weights of that call, rows of that call)."""
    weights = st.lists(st.integers(0, 4), min_size=k, max_size=k).filter(any)
    return st.lists(st.tuples(weights, st.integers(1, 60)), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 5).flatmap(schedules))
def test_a_schedule_never_takes_rows_back_and_two_sources_stay_within_one_row(steps):
    names = [f"s{i}" for i in range(len(steps[0][0]))]
    allocator = RowAllocator(names, dict.fromkeys(names, 1))
    bound = 1 if len(names) == 2 else 2  # three sources or more: a fallen share can owe one a little more
    exact = np.zeros(len(names))
    for weights, n in steps:
        allocator.weights = dict(zip(names, weights, strict=True))  # the schedule's weights for this call
        shares = allocator.shares()
        counts = allocator.counts(shares, n)
        assert counts.sum() == n and (counts >= 0).all()
        allocator.commit(shares, counts)
        exact += n * shares
        assert np.abs(allocator.given - exact).max() < bound + 1e-9


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=2, max_size=3).filter(any),
    st.lists(st.integers(1, 40), min_size=1, max_size=15),
    st.booleans(),
)
def test_the_mixer_draws_the_allocated_rows(weights, sizes, annealed):
    names = [f"s{i}" for i in range(len(weights))]
    start = dict(zip(names, weights, strict=True))
    end = dict(zip(names, reversed(weights), strict=True))
    schedule = linear_schedule(start, end, rows=100) if annealed else start
    sources = {name: uniform(range(5), seed=i) for i, name in enumerate(names)}
    mixer = MixedReplayBuffer(sources, schedule, shuffle=True, seed=0)
    exact = np.zeros(len(names))
    given = np.zeros(len(names), np.int64)
    for n in sizes:
        shares = np.array(list(mixer.shares().values()))
        _, info = mixer.get_next(n)
        counts = np.bincount(info.source, minlength=len(names))
        assert counts.sum() == n and info.ids.shape == (n,)
        exact += n * shares
        given += counts
        assert np.abs(given - exact).max() < (1 if len(names) == 2 or not annealed else 2) + 1e-9
    assert mixer.rows_drawn == sum(sizes)


def test_linear_schedule_anneals_and_the_mixer_follows_it():
    schedule = linear_schedule({"offline": 1, "online": 0}, {"offline": 0, "online": 1}, rows=100)
    assert schedule(0) == {"offline": 1.0, "online": 0.0}
    assert schedule(50) == {"offline": 0.5, "online": 0.5}
    assert schedule(10**6) == {"offline": 0.0, "online": 1.0}
    unnormalised = linear_schedule({"a": 3, "b": 1}, {"a": 0, "b": 8}, rows=10)
    assert unnormalised(5) == {"a": 0.375, "b": 0.625}  # halfway between the shares 3/4 and 0
    mixer = MixedReplayBuffer({"offline": uniform(range(10)), "online": uniform(range(5))}, schedule)
    per_call = [np.bincount(mixer.get_next(10)[1].source, minlength=2) for _ in range(12)]
    assert [c[0] for c in per_call] == [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0]  # share at the start of each call
    assert mixer.rows_drawn == 120


# -- rows and info are the sources' own ------------------------------------------------------------
@pytest.mark.parametrize("num_steps", [None, 3])
def test_rows_ids_and_probabilities_are_the_sources_draws(num_steps):
    def sources():
        return {
            "offline": uniform(range(20), seed=5),
            "online": prioritized(range(100, 112), seed=6),
            "demos": filled(
                replaybuf.UniformReplayBuffer(SPEC, 1, 64, seed=7, respect_episodes=True, episode_end_field="done"),
                range(200, 230),
                done_every=5,
            ),
        }

    mixer = MixedReplayBuffer(sources(), {"offline": 2, "online": 5, "demos": 3})
    twins = sources()  # the same buffers, seeds and items: each draws what its twin drew in the mixer
    for n in (10, 7, 1, 16):
        items, info = mixer.get_next(n, num_steps)
        counts = np.bincount(info.source, minlength=3)
        assert counts.sum() == n and info.source.dtype == np.int64
        assert (np.diff(info.source) >= 0).all()  # source order
        at = 0
        for k, name in enumerate(mixer.source_names):
            if counts[k] == 0:
                continue
            rows = slice(at, at + counts[k])
            twin_items, twin_info = twins[name].get_next(int(counts[k]), num_steps)
            np.testing.assert_array_equal(info.ids[rows], twin_info.ids)
            np.testing.assert_allclose(info.probabilities[rows], twin_info.probabilities * counts[k] / n, rtol=1e-6)
            np.testing.assert_array_equal(items["x"][rows], twin_items["x"])
            stored, _ = mixer.sources[name].read_ids(info.ids[rows])
            np.testing.assert_array_equal(items["x"][rows], stored["x"])
            at += counts[k]
        assert items["x"].shape == (n, 2) if num_steps is None else (n, num_steps, 2)


def test_mixture_probabilities_pass_a_chi_square_test():
    share = {"a": 3, "b": 7}
    mixer = MixedReplayBuffer({"a": uniform(range(4), seed=11), "b": prioritized(range(3), seed=12)}, share, seed=0)
    mixer.sources["b"].update_priorities(np.array([0, 1, 2]), np.array([1.0, 2.0, 5.0]))
    calls, n = 3000, 10
    seen = {}
    for _ in range(calls):
        _, info = mixer.get_next(n)
        for s, i, p in zip(info.source.tolist(), info.ids.tolist(), info.probabilities.tolist(), strict=True):
            seen.setdefault((s, i), [0, p])[0] += 1
    alpha = mixer.sources["b"].alpha
    masses = np.array([1.0, 2.0, 5.0]) ** alpha
    expected = {(0, i): 0.3 / 4 for i in range(4)} | {(1, i): 0.7 * masses[i] / masses.sum() for i in range(3)}
    assert seen.keys() == expected.keys()
    for key, (_, reported) in seen.items():
        assert reported == pytest.approx(expected[key], rel=1e-5)  # info.probabilities: share x P within
    observed = np.array([seen[k][0] for k in expected])
    predicted = np.array([expected[k] for k in expected]) * calls * n
    chi2 = ((observed - predicted) ** 2 / predicted).sum()
    assert chi2 < 27.86  # df = 6, p = 1e-4


def test_shuffle_reorders_the_same_rows():
    def mixer(shuffle):
        sources = {"a": uniform(range(10), seed=3), "b": uniform(range(50, 60), seed=4)}
        return MixedReplayBuffer(sources, {"a": 1, "b": 1}, shuffle=shuffle, seed=9)

    plain, shuffled = mixer(False), mixer(True)
    orders = []
    for _ in range(5):
        items, info = plain.get_next(16)
        s_items, s_info = shuffled.get_next(16)
        key = sorted(zip(info.source.tolist(), info.ids.tolist(), items["x"][:, 0].tolist(), strict=True))
        s_key = sorted(zip(s_info.source.tolist(), s_info.ids.tolist(), s_items["x"][:, 0].tolist(), strict=True))
        assert key == s_key
        orders.append(s_info.source.tolist())
    assert any(order != sorted(order) for order in orders)


def test_unbatched_and_time_unstacked_samples():
    mixer = MixedReplayBuffer({"a": uniform(range(10)), "b": uniform(range(10))}, {"a": 1, "b": 1})
    item, info = mixer.get_next()
    assert item["x"].shape == (2,) and info.ids.shape == () and info.source.shape == ()
    steps, info = mixer.get_next(4, num_steps=3, time_stacked=False)
    assert len(steps) == 3 and steps[0]["x"].shape == (4, 2) and info.ids.shape == (4, 3)


def test_extras_are_joined_when_every_source_drawn_returns_them():
    both = MixedReplayBuffer({"a": prioritized(range(8)), "b": prioritized(range(8), seed=3)}, {"a": 1, "b": 1})
    _, info = both.get_next(6)
    assert info.weights.shape == (6,) and (info.weights > 0).all()
    one = MixedReplayBuffer({"a": prioritized(range(8)), "b": uniform(range(8))}, {"a": 1, "b": 1})
    assert one.get_next(6)[1].weights is None
    assert one.get_next(1)[1].weights is not None  # only the prioritized source was drawn from


def test_padded_windows_keep_their_masks():
    def padded(seed):
        buffer = replaybuf.UniformReplayBuffer(
            SPEC, 1, 64, seed=seed, respect_episodes=True, pad_episode_ends=True, episode_end_field="done"
        )
        return filled(buffer, range(12), done_every=3)

    mixer = MixedReplayBuffer({"a": padded(1), "b": padded(2)}, {"a": 1, "b": 1})
    _, info = mixer.get_next(8, num_steps=3)
    twin_a, twin_b = padded(1), padded(2)
    expected = np.concatenate([twin_a.get_next(4, 3)[1].mask, twin_b.get_next(4, 3)[1].mask])
    np.testing.assert_array_equal(info.mask, expected)
    assert not info.mask.all()  # some windows pad past their episode's end


def test_sampling_keywords_are_passed_to_every_source_as_given():
    calls = []

    class Recording:
        data_spec = SPEC

        def num_frames(self):
            return 1

        def get_next(self, sample_batch_size, num_steps=None, **sampling):
            calls.append((sample_batch_size, num_steps, sampling))
            return uniform(range(3)).get_next(sample_batch_size, num_steps)

    mixer = MixedReplayBuffer({"a": Recording(), "b": Recording()}, {"a": 1, "b": 3})
    mixer.get_next(8, num_steps=2, burn_in=1, period=2)
    assert calls == [(2, 2, {"burn_in": 1, "period": 2}), (6, 2, {"burn_in": 1, "period": 2})]


def test_as_dataset_and_num_frames():
    mixer = MixedReplayBuffer({"a": uniform(range(10)), "b": uniform(range(4))}, {"a": 1, "b": 1})
    assert mixer.num_frames() == 14
    for dataset in (mixer.as_dataset(4, num_steps=2), mixer.as_dataset(4, num_steps=2, num_parallel_calls=2)):
        iterator = iter(dataset)
        for _ in range(3):
            items, info = next(iterator)
            assert items["x"].shape == (4, 2, 2) and np.bincount(info.source).tolist() == [2, 2]


# -- priorities ---------------------------------------------------------------------------------
def test_update_priorities_routes_rows_to_their_source():
    mixer = MixedReplayBuffer(
        {"offline": uniform(range(10)), "online": prioritized(range(10))}, {"offline": 1, "online": 1}
    )
    online = mixer.sources["online"]
    before = online.state_dict()["priorities"]["mass"].copy()
    _, info = mixer.get_next(8)
    with pytest.raises(replaybuf.ArgumentError, match=r"source: rows \[0, 1, 2, 3\] come from sources\['offline'\]"):
        mixer.update_priorities(info.ids, np.full(8, 3.0), source=info.source)
    np.testing.assert_array_equal(online.state_dict()["priorities"]["mass"], before)  # nothing changed
    rows = info.source == 1
    mixer.update_priorities(info.ids[rows], np.full(rows.sum(), 3.0), source=info.source[rows])
    after = online.state_dict()["priorities"]["mass"]
    changed = np.flatnonzero(after != before)
    np.testing.assert_array_equal(changed, np.unique(info.ids[rows]))
    twin = prioritized(range(10))
    twin.update_priorities(info.ids[rows], np.full(rows.sum(), 3.0))
    np.testing.assert_array_equal(after, twin.state_dict()["priorities"]["mass"])


def test_update_priorities_refusals():
    mixer = MixedReplayBuffer({"a": prioritized(range(10)), "b": prioritized(range(10))}, {"a": 1, "b": 1})
    _, info = mixer.get_next(4)
    with pytest.raises(replaybuf.ArgumentError, match="source: expected indices into"):
        mixer.update_priorities(info.ids, np.ones(4), source=info.source + 5)
    with pytest.raises(replaybuf.ArgumentError, match="update_priorities: expected priorities"):
        mixer.update_priorities(info.ids, np.ones(3), source=info.source)
    with pytest.raises(replaybuf.PriorityError, match="priorities: expected finite values > 0"):
        mixer.update_priorities(info.ids, np.array([1, 1, 0, 1.0]), source=info.source)
    with pytest.raises(replaybuf.PriorityError, match=r"ids: expected ids of added items .*got \[999\]"):
        mixer.update_priorities(np.array([999, 0]), np.ones(2), source=np.array([0, 1]))  # a source's own refusal


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"a": -1, "b": 1}, r"weights\['a'\]: expected a finite number >= 0, got -1"),
        ({"a": float("nan"), "b": 1}, r"weights\['a'\]: expected a finite number >= 0, got nan"),
        ({"a": True, "b": 1}, r"weights\['a'\]: expected a finite number >= 0, got True"),
        ({"a": 0, "b": 0}, "weights: expected at least one share > 0"),
        ({"a": 1, "b": 1, "c": 1}, r"weights: expected shares of the sources \['a', 'b'\], got unknown names \['c'\]"),
        ({"a": 1}, r"weights: expected a share for every source \['a', 'b'\], missing \['b'\]"),
        ([0.5, 0.5], "weights: expected a dict of source name -> share"),
        (lambda drawn: {"a": -1, "b": 1}, r"weights\(drawn\)\['a'\]: expected a finite number >= 0"),
    ],
)
def test_bad_weights_are_refused_naming_the_source(weights, message):
    with pytest.raises(replaybuf.ArgumentError, match=message):
        MixedReplayBuffer({"a": uniform(range(3)), "b": uniform(range(3))}, weights)


def test_a_schedule_turning_bad_later_fails_that_sample_and_counts_nothing():
    mixer = MixedReplayBuffer({"a": uniform(range(3)), "b": uniform(range(3))}, lambda d: {"a": 1, "b": 1 - d})
    mixer.get_next(2)
    with pytest.raises(
        replaybuf.ArgumentError, match=r"weights\(drawn\)\['b'\]: expected a finite number >= 0, got -1"
    ):
        mixer.get_next(2)
    assert mixer.rows_drawn == 2


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (
            {"x": ArraySpec((3,), np.float32), "done": ArraySpec((), np.bool_)},
            r"sources\['b'\].data_spec: x: expected \(2,\) float32 \(as sources\['a'\]\), got \(3,\) float32",
        ),
        ({"x": ArraySpec((2,), np.float64), "done": ArraySpec((), np.bool_)}, r"x: expected \(2,\) float32.*float64"),
        ({"x": ArraySpec((2,), np.float32)}, r"sources\['b'\].data_spec: expected the structure of sources\['a'\]"),
    ],
)
def test_sources_of_other_specs_are_refused(other, message):
    with pytest.raises(replaybuf.SpecMismatchError, match=message):
        MixedReplayBuffer({"a": uniform(range(3)), "b": replaybuf.UniformReplayBuffer(other)}, {"a": 1, "b": 1})


@pytest.mark.parametrize(
    ("sources", "message"),
    [({}, "sources: expected a non-empty dict"), ({"a": 3}, r"sources\['a'\]: expected a replay buffer")],
)
def test_bad_sources_are_refused(sources, message):
    with pytest.raises(replaybuf.ArgumentError, match=message):
        MixedReplayBuffer(sources, {"a": 1})


def test_bad_options_are_refused():
    sources = {"a": uniform(range(3))}
    with pytest.raises(replaybuf.ArgumentError, match="shuffle: expected True or False, got 1"):
        MixedReplayBuffer(sources, {"a": 1}, shuffle=1)
    mixer = MixedReplayBuffer(sources, {"a": 1})
    with pytest.raises(replaybuf.ArgumentError, match="sample_batch_size: expected a positive int or None, got 0"):
        mixer.get_next(0)
    with pytest.raises(replaybuf.ArgumentError, match="num_parallel_calls: expected a positive int or None, got 0"):
        mixer.as_dataset(2, num_parallel_calls=0)
    with pytest.raises(replaybuf.ArgumentError, match="single_deterministic_pass: expected False"):
        mixer.as_dataset(2, single_deterministic_pass=True)
    with pytest.raises(replaybuf.ArgumentError, match=r"add_batch: a MixedReplayBuffer only samples .*add to one"):
        mixer.add_batch({"x": np.zeros((1, 2), np.float32), "done": np.zeros(1, bool)})
    for bad in ({"a": 1, "b": 0}, {"a": -1}):
        with pytest.raises(replaybuf.ArgumentError):
            linear_schedule({"a": 1}, bad, rows=10)
    with pytest.raises(replaybuf.ArgumentError, match="rows: expected a positive int, got 0"):
        linear_schedule({"a": 1}, {"a": 1}, rows=0)


def test_an_empty_source_is_fine_at_weight_zero_and_named_when_owed_rows():
    empty = replaybuf.UniformReplayBuffer(SPEC, 1, 8)
    mixer = MixedReplayBuffer({"offline": uniform(range(5)), "online": empty}, {"offline": 1, "online": 0})
    assert np.all(mixer.get_next(4)[1].source == 0)
    mixer = MixedReplayBuffer({"offline": uniform(range(5)), "online": empty}, {"offline": 1, "online": 1})
    with pytest.raises(replaybuf.EmptyBufferError, match=r"sources\['online'\]: owed 1 of 2 rows .* but empty"):
        mixer.get_next(2)
    assert mixer.rows_drawn == 0
    filled(empty, range(8))
    with pytest.raises(replaybuf.EmptyBufferError, match=r"sources\['offline'\]: num_steps=9"):
        mixer.get_next(2, num_steps=9)
    assert mixer.rows_drawn == 0


# -- checkpoints ------------------------------------------------------------------------------------
def test_state_dict_save_and_load_continue_the_schedule_and_generator(tmp_path):
    schedule = linear_schedule({"a": 0.9, "b": 0.1}, {"a": 0.2, "b": 0.8}, rows=60)

    def build():
        return MixedReplayBuffer({"a": uniform(range(30)), "b": prioritized(range(20))}, schedule, shuffle=True)

    mixer = build()
    for n in (7, 5, 9):
        mixer.get_next(n)
    mixer.save(tmp_path / "mixer")
    mixer_state = mixer.state_dict()
    sources = {name: buffer.state_dict() for name, buffer in mixer.sources.items()}
    expected = [mixer.get_next(n) for n in (6, 11, 3, 8)]

    for restore in (lambda m: m.load(tmp_path / "mixer"), lambda m: m.load_state_dict(mixer_state)):
        again = build()
        for name, buffer in again.sources.items():
            buffer.load_state_dict(sources[name])
        restore(again)
        assert again.rows_drawn == 21
        for n, (items, info) in zip((6, 11, 3, 8), expected, strict=True):
            got_items, got = again.get_next(n)
            np.testing.assert_array_equal(got_items["x"], items["x"])
            for key in ("ids", "probabilities", "source"):
                np.testing.assert_array_equal(getattr(got, key), getattr(info, key))


def test_load_state_dict_refusals_change_nothing():
    mixer = MixedReplayBuffer({"a": uniform(range(5)), "b": uniform(range(5))}, {"a": 1, "b": 1})
    mixer.get_next(3)
    state = mixer.state_dict()
    for key, value, message in [
        ("sources", ["a", "c"], r"state\['sources'\]: expected the sources \['a', 'b'\]"),
        ("drawn", "3", r"state\['drawn'\]: expected int, got str"),
        (
            "given",
            np.array([3, 1]),
            r"state\['given'\]: expected 2 int64 counts >= 0 summing to state\['drawn'\] \(3\)",
        ),
        ("exact", np.array([np.inf, 1.0]), r"state\['exact'\]: expected 2 finite float64 values >= 0"),
        ("mixer", "Other", r"state\['mixer'\]: expected 'MixedReplayBuffer'"),
        ("rng", {"bit_generator": "PCG64", "state": {}}, r"state\['rng'\]"),
    ]:
        with pytest.raises(replaybuf.CheckpointError, match=message):
            mixer.load_state_dict({**state, key: value})
    assert mixer.state_dict()["drawn"] == 3


# -- frameworks ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_numpy_and_torch_sources_return_the_first_sources_framework(device):
    torch = pytest.importorskip("torch")
    from replaybuf.torch import TorchUniformReplayBuffer

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    on_torch = filled(TorchUniformReplayBuffer(SPEC, 1, 32, seed=0, device=device), range(100, 110))
    on_numpy = uniform(range(10))
    numpy_first = MixedReplayBuffer({"np": on_numpy, "torch": on_torch}, {"np": 1, "torch": 1}, shuffle=True)
    items, info = numpy_first.get_next(6)
    for value in (items["x"], items["done"], info.ids, info.probabilities, info.source):
        assert isinstance(value, np.ndarray)
    assert sorted(items["x"][:, 0] >= 100) == [False] * 3 + [True] * 3
    torch_first = MixedReplayBuffer({"torch": on_torch, "np": on_numpy}, {"torch": 1, "np": 1})
    items, info = torch_first.get_next(6, num_steps=2)
    for value in (items["x"], items["done"], info.ids, info.probabilities, info.source):
        assert isinstance(value, torch.Tensor) and value.device == on_torch.device
    assert items["x"].dtype == torch.float32 and items["x"].shape == (6, 2, 2)
    np.testing.assert_array_equal(info.source.cpu().numpy(), [0, 0, 0, 1, 1, 1])
    torch_only = MixedReplayBuffer({"torch": on_torch}, {"torch": 1})
    assert isinstance(torch_only.get_next(2)[0]["x"], torch.Tensor)
    dataset = torch_first.as_dataset(4, num_steps=2)
    assert isinstance(dataset, torch.utils.data.IterableDataset)  # as the torch buffers' datasets
    items, info = next(iter(dataset))
    assert items["x"].shape == (4, 2, 2) and info.source.tolist() == [0, 0, 1, 1]


def test_jax_and_shared_memory_sources_mix_with_numpy():
    jax = pytest.importorskip("jax")
    from replaybuf.jax import JaxReplayBuffer

    on_jax = filled(JaxReplayBuffer(SPEC, 1, 32, seed=0), range(100, 110))
    shared = filled(replaybuf.SharedReplayBuffer(SPEC, writers=1, batch_size=1, max_length=32, seed=0), range(50, 60))
    try:
        numpy_first = MixedReplayBuffer(
            {"np": uniform(range(10)), "jax": on_jax, "shared": shared}, {"np": 1, "jax": 1, "shared": 1}
        )
        items, info = numpy_first.get_next(6, num_steps=2)
        for value in (items["x"], info.ids, info.probabilities, info.source):
            assert isinstance(value, np.ndarray)
        np.testing.assert_array_equal(np.sort(items["x"][:, 0, 0] // 50), [0, 0, 1, 1, 2, 2])
        jax_first = MixedReplayBuffer({"jax": on_jax, "np": uniform(range(10))}, {"jax": 1, "np": 1})
        items, info = jax_first.get_next(4)
        for value in (items["x"], info.ids, info.probabilities, info.source):
            assert isinstance(value, jax.Array)
        np.testing.assert_array_equal(np.asarray(info.source), [0, 0, 1, 1])
        np.testing.assert_array_equal(np.asarray(items["x"][2:, 0]) < 100, [True, True])
    finally:
        shared.close()


def test_tensorflow_sources_mix_with_numpy():
    tf = pytest.importorskip("tensorflow")
    from replaybuf.tf import TFUniformReplayBuffer

    on_tf = TFUniformReplayBuffer(SPEC, batch_size=1, max_length=32)
    for v in range(100, 110):
        on_tf.add_batch({"x": tf.constant([[v, -v]], tf.float32), "done": tf.constant([False])})
    numpy_first = MixedReplayBuffer({"np": uniform(range(10)), "tf": on_tf}, {"np": 1, "tf": 1})
    items, info = numpy_first.get_next(4)
    assert isinstance(items["x"], np.ndarray) and isinstance(info.ids, np.ndarray)
    np.testing.assert_array_equal(items["x"][:, 0] >= 100, [False, False, True, True])
    tf_first = MixedReplayBuffer({"tf": on_tf, "np": uniform(range(10))}, {"tf": 1, "np": 1}, shuffle=True)
    items, info = tf_first.get_next(4)
    for value in (items["x"], info.ids, info.probabilities, info.source):
        assert isinstance(value, tf.Tensor)
    np.testing.assert_array_equal(np.sort(info.source.numpy()), [0, 0, 1, 1])
    np.testing.assert_array_equal(items["x"].numpy()[:, 0] >= 100, info.source.numpy() == 0)
