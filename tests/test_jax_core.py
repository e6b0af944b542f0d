"""The functional JAX core: ids and contents, jit/vmap/scan, no storage copy in a compiled
step, episode-exact windows against brute force, the recomputed sum tree, defined results
for bad values inside jit, and errors that name the field."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import replaybuf  # noqa: E402
from conformance_data import SPEC, assert_items_match_ids, step_batch  # noqa: E402
from draw_counts import assert_counts_follow  # noqa: E402
from replaybuf import ArraySpec  # noqa: E402
from replaybuf.jax import make_buffer  # noqa: E402
from replaybuf.jax.sumtree import forced_tree_path  # noqa: E402

SMALL = {"obs": ArraySpec((4,), np.float32), "action": ArraySpec((), np.int32), "done": ArraySpec((), np.bool_)}


def filled(buffer, steps, batch_fn=None):
    state = buffer.init()
    add = jax.jit(buffer.add, donate_argnums=0)
    for t in range(steps):
        state = add(state, (batch_fn or (lambda t: step_batch(t, buffer.batch_size)))(t))
    return state


def as_np(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def test_description_is_frozen_and_hashable():
    a, b = make_buffer(SPEC, 3, 5), make_buffer(SPEC, 3, 5)
    assert a == b and hash(a) == hash(b)
    assert make_buffer(SPEC, 3, 6) != a
    with pytest.raises(AttributeError):
        a.batch_size = 4


def test_ids_and_contents_after_wraparound_under_jit():
    buffer = make_buffer(SPEC, 3, 5)
    state = filled(buffer, 12)
    assert int(state.steps) == 12
    sample = jax.jit(buffer.sample, static_argnums=(2, 3))
    items, info = sample(state, jax.random.key(1), 64, 3)
    ids = np.asarray(info.ids)
    assert ids.shape == (64, 3)
    np.testing.assert_array_equal(np.diff(ids, axis=1), 3)
    assert ids.min() >= (12 - 5) * 3 and ids.max() < 12 * 3
    assert_items_match_ids(as_np(items), ids)
    np.testing.assert_allclose(np.asarray(info.probabilities), 1 / ((5 - 3 + 1) * 3), rtol=1e-6)
    assert np.asarray(info.valid).all() and info.weights is None
    # time-major: row t % max_length holds step t of every stream
    np.testing.assert_array_equal(np.asarray(buffer.stored(state)[buffer.paths.index("id")][11 % 5]), [33, 34, 35])


def test_sampling_reaches_every_valid_start_and_only_those():
    buffer = make_buffer(SPEC, 2, 6)
    state = filled(buffer, 9)
    seen = set()
    for i in range(30):
        _, info = buffer.sample(state, jax.random.key(i), 32, 2)
        seen.update(np.asarray(info.ids)[:, 0].tolist())
    assert seen == {t * 2 + s for t in range(3, 8) for s in range(2)}


def test_empty_and_too_short_samples_are_marked_invalid_inside_jit():
    buffer = make_buffer(SPEC, 2, 4)
    sample = jax.jit(buffer.sample, static_argnums=(2, 3))
    _, info = sample(buffer.init(), jax.random.key(0), 4, None)
    assert not np.asarray(info.valid).any()
    np.testing.assert_array_equal(np.asarray(info.probabilities), 0)
    state = filled(buffer, 2)
    assert not bool(buffer.can_sample(state, 3)) and bool(buffer.can_sample(state, 2))
    _, info = sample(state, jax.random.key(0), 4, 3)
    assert not np.asarray(info.valid).any()


def test_vmap_holds_one_buffer_per_seed():
    buffer = make_buffer(SMALL, 2, 4)
    seeds = 3
    states = jax.vmap(lambda _: buffer.init())(jnp.arange(seeds))

    def batch(t):  # seed k writes obs = 100 k + t
        obs = (100 * jnp.arange(seeds)[:, None, None] + t) * jnp.ones((seeds, 2, 4))
        return {"obs": obs, "action": jnp.zeros((seeds, 2), jnp.int32), "done": jnp.zeros((seeds, 2), bool)}

    add = jax.jit(jax.vmap(buffer.add))
    for t in range(6):
        states = add(states, batch(t))
    keys = jax.random.split(jax.random.key(0), seeds)
    items, info = jax.vmap(lambda s, k: buffer.sample(s, k, 8, 2))(states, keys)
    obs = np.asarray(items["obs"])[..., 0]  # [seeds, 8, 2]
    steps = np.asarray(info.ids) // 2
    np.testing.assert_array_equal(obs, 100 * np.arange(seeds)[:, None, None] + steps)
    assert steps.min() >= 2


def test_lax_scan_collect_add_sample_loop():
    buffer = make_buffer(SMALL, 2, 8)

    def body(carry, t):
        state, key = carry
        key, draw = jax.random.split(key)
        obs = jnp.full((2, 4), t, jnp.float32) + jnp.arange(2, dtype=jnp.float32)[:, None] * 1000
        batch = {"obs": obs, "action": jnp.full((2,), t, jnp.int32), "done": jnp.zeros((2,), bool)}
        state, items, info = buffer.add_and_sample(state, batch, draw, 4, None)
        return (state, key), (items["action"], info.ids)

    (state, _), (actions, ids) = jax.jit(lambda s: jax.lax.scan(body, (s, jax.random.key(0)), jnp.arange(20)))(
        buffer.init()
    )
    assert int(state.steps) == 20
    actions, ids = np.asarray(actions), np.asarray(ids)
    np.testing.assert_array_equal(actions, ids // 2)  # each sampled item is the step stored under its id
    for t in range(20):  # each step samples only what was added by then, and not yet overwritten
        assert ids[t].max() < (t + 1) * 2 and ids[t].min() >= max(0, t + 1 - 8) * 2


def _storage_copies(compiled_text: str, buffer) -> list[str]:
    """HLO lines that copy an array shaped like the storage ``[max_length, batch_size, words]``."""
    lead = f"{buffer.max_length},{buffer.batch_size}"
    return [line for line in compiled_text.splitlines() if re.search(rf"\[{lead}(,\d+)*\]\S* copy\(", line)]


def test_compiled_training_step_copies_no_storage():
    buffer = make_buffer(SMALL, 8, 1000)
    state = buffer.init()
    batch = {"obs": jnp.zeros((8, 4)), "action": jnp.zeros((8,), jnp.int32), "done": jnp.zeros((8,), bool)}

    def train_step(state, batch, key):  # the documented order: write, then read
        state, items, info = buffer.add_and_sample(state, batch, key, 32, 2)
        return state, items["obs"].mean() + info.probabilities.sum()

    def read_then_write(state, batch, key):
        items, info = buffer.sample(state, key, 32, 2)
        return buffer.add(state, batch), items["obs"].mean()

    def lowered(step, donate):
        return jax.jit(step, donate_argnums=donate).lower(state, batch, jax.random.key(0)).compile().as_text()

    assert _storage_copies(lowered(train_step, (0,)), buffer) == []  # on every platform
    # the check sees copies where XLA makes them: without donation, and (on the CPU; XLA's GPU
    # backend orders the read before the write in place) when a read comes first
    assert _storage_copies(lowered(train_step, ()), buffer)
    if jax.default_backend() == "cpu":
        assert _storage_copies(lowered(read_then_write, (0,)), buffer)

    def scanned(state, key):
        def body(state, key):
            state, items, _ = buffer.add_and_sample(state, batch, key, 32, 2)
            return state, items["obs"].mean()

        return jax.lax.scan(body, state, jax.random.split(key, 4))

    text = jax.jit(scanned, donate_argnums=0).lower(state, jax.random.key(0)).compile().as_text()
    assert _storage_copies(text, buffer) == []


def _large_copies(compiled_text: str, elements: int) -> list[str]:
    """HLO lines that copy an array of at least ``elements`` elements."""
    copies = re.findall(r"= \w+\[([\d,]+)\]\S* copy\(", compiled_text)
    return [shape for shape in copies if np.prod([int(d) for d in shape.split(",")]) >= elements]


EPISODES = {"respect_episodes": True, "episode_end_field": "done", "episode_num_steps": 3}


@pytest.mark.parametrize(
    "options",
    [EPISODES, {"sampler": "prioritized"}, {**EPISODES, "sampler": "prioritized"}],
    ids=["episodes", "prioritized", "both"],
)
def test_a_scanned_add_sample_update_step_copies_no_positions_or_tree_level(options):
    """Episode positions ([max_length, batch_size]) and the sum trees' big levels are updated
    in place by every add and priority update. A read of an old version beside a write, two
    tree updates in a row, or an update right after another's reads made XLA copy them whole
    each step (at 1M, 256 per step: an episode add 101 us instead of 3, a prioritized one
    with episodes 269 instead of 31, add + sample + update 206 instead of 97)."""
    prioritized = options.get("sampler") == "prioritized"
    buffer = make_buffer(SMALL, 8, 1000, **options)
    batch = {"obs": jnp.zeros((8, 4)), "action": jnp.zeros((8,), jnp.int32), "done": jnp.zeros((8,), bool)}

    def scanned(state, key):
        def body(state, key):
            state, items, info = buffer.add_and_sample(state, batch, key, 32, 3)
            if prioritized:
                state = buffer.update_priorities(state, info.ids[:, 0], jnp.full((32,), 2.0))
            return state, items["obs"].mean()

        return jax.lax.scan(body, state, jax.random.split(key, 4))

    text = jax.jit(scanned, donate_argnums=0).lower(buffer.init(), jax.random.key(0)).compile().as_text()
    assert _large_copies(text, buffer.capacity // 8) == []
    # the check sees such copies where XLA makes them: without donation
    undonated = jax.jit(scanned).lower(buffer.init(), jax.random.key(0)).compile().as_text()
    assert _large_copies(undonated, buffer.capacity // 8)


# -- episodes -------------------------------------------------------------------------------
def _episode_batches(batch_size, steps, seed):
    rng = np.random.default_rng(seed)
    done = rng.random((steps, batch_size)) < 0.3
    return done, lambda t: {
        "obs": np.full((batch_size, 4), t, np.float32),
        "action": (t * batch_size + np.arange(batch_size)).astype(np.int32),
        "done": done[t],
    }


def _brute_force_starts(done, batch_size, max_length, steps, num_steps):
    """Start ids of windows inside one episode (no done before the last step), stored, before the head."""
    low = max(0, steps - max_length)
    starts = set()
    for s in range(batch_size):
        for t in range(low, steps - num_steps + 1):
            if not done[t : t + num_steps - 1, s].any():
                starts.add(t * batch_size + s)
    return starts


@pytest.mark.parametrize("num_steps", [1, 2, 3])  # 3: the count kept on add; 1, 2: one pass
@pytest.mark.parametrize("steps", [4, 11, 23])
def test_episode_windows_match_brute_force(num_steps, steps, descent):
    """The valid starts, each drawn with probability 1 / their number, through both draws
    (the CPU's rejection rounds and every other platform's masked search)."""
    batch_size, max_length = 3, 7
    buffer = make_buffer(
        SMALL, batch_size, max_length, respect_episodes=True, episode_end_field="done", episode_num_steps=3
    )
    done, batch = _episode_batches(batch_size, steps, seed=steps)
    state = filled(buffer, steps, batch)
    expected = _brute_force_starts(done, batch_size, max_length, steps, num_steps)
    if num_steps == 3:  # the running count kept on add
        assert int(state.episodes.valid_starts) == len(expected)
    assert bool(buffer.can_sample(state, num_steps)) == bool(expected)
    counts = dict.fromkeys(expected, 0)
    sample = jax.jit(buffer.sample, static_argnums=(2, 3))
    for i in range(40):
        items, info = sample(state, jax.random.key(i), 16, num_steps)
        ids = np.asarray(info.ids)
        if not expected:
            assert not np.asarray(info.valid).any()
            return
        assert np.asarray(info.valid).all()
        np.testing.assert_array_equal(np.asarray(items["action"]), ids)
        np.testing.assert_allclose(np.asarray(info.probabilities), 1 / len(expected), rtol=1e-6)
        for start in ids[:, 0].tolist():
            counts[start] += 1  # a start outside the valid set raises KeyError
    mean = 40 * 16 / len(expected)
    assert min(counts.values()) > 0 and max(abs(c - mean) for c in counts.values()) < 5 * np.sqrt(mean)


@pytest.mark.parametrize("prioritized", [False, True])
def test_padded_windows_are_uniform_over_all_starts_and_pad_past_the_end(prioritized):
    batch_size, max_length, steps, size = 3, 7, 12, 3
    buffer = make_buffer(
        SMALL,
        batch_size,
        max_length,
        respect_episodes=True,
        episode_end_field="done",
        pad_episode_ends=True,
        sampler="prioritized" if prioritized else "uniform",
    )
    done, batch = _episode_batches(batch_size, steps, seed=9)
    state = filled(buffer, steps, batch)
    low = steps - max_length
    starts = {t * batch_size + s for t in range(low, steps - size + 1) for s in range(batch_size)}
    sample = jax.jit(buffer.sample, static_argnums=(2, 3))
    seen = set()
    for i in range(30):
        items, info = sample(state, jax.random.key(i), 16, size)
        ids, mask = np.asarray(info.ids), np.asarray(info.mask)
        first = ids[:, 0]
        seen.update(first.tolist())
        np.testing.assert_allclose(np.asarray(info.probabilities), 1 / len(starts), rtol=1e-6)
        for row, start in enumerate(first.tolist()):
            t, s = divmod(start, batch_size)
            real = 1  # brute force: steps up to and including the first end are real
            while real < size and not done[t + real - 1, s]:
                real += 1
            np.testing.assert_array_equal(mask[row], np.arange(size) < real)
            want = [start + min(k, real - 1) * batch_size for k in range(size)]
            np.testing.assert_array_equal(ids[row], want)  # padding repeats the last real id
        np.testing.assert_array_equal(np.asarray(items["action"]), ids)
    assert seen == starts
    _, info = sample(state, jax.random.key(0), 4, None)
    assert info.mask is None  # single items are never padded


def test_episode_markers_from_step_type():
    spec = {"step_type": ArraySpec((), np.int32), "x": ArraySpec((), np.int32)}
    buffer = make_buffer(spec, 1, 8, respect_episodes=True, episode_num_steps=2)
    kinds = [0, 1, 2, 0, 1, 1, 2, 0]  # FIRST MID LAST FIRST MID MID LAST FIRST
    state = filled(buffer, 8, lambda t: {"step_type": np.array([kinds[t]], np.int32), "x": np.array([t], np.int32)})
    np.testing.assert_array_equal(np.asarray(state.episodes.position)[:, 0], [0, 1, 2, 0, 1, 2, 3, 0])
    assert int(state.episodes.valid_starts) == 5  # windows (0,1) (1,2) (3,4) (4,5) (5,6)


# -- prioritized ----------------------------------------------------------------------------
def test_sum_tree_is_recomputed_and_cannot_drift():
    buffer = make_buffer(SMALL, 4, 50, sampler="prioritized", alpha=1.0, epsilon=0.0)
    state = filled(
        buffer,
        60,
        lambda t: {"obs": np.zeros((4, 4), np.float32), "action": np.zeros(4, np.int32), "done": np.zeros(4, bool)},
    )
    update = jax.jit(buffer.update_priorities, donate_argnums=0)
    rng = np.random.default_rng(0)
    model = dict.fromkeys(range(40, 240), 1.0)  # the stored ids, added at the max so far: 1.0
    for _ in range(300):
        ids = rng.choice(np.arange(40, 240), 32, replace=False)  # no duplicates: their order is XLA's
        priorities = rng.choice([1e-3, 1.0, 1e4], 32).astype(np.float32)
        state = update(state, ids.astype(np.int32), priorities)
        model.update(zip(ids.tolist(), priorities.astype(np.float64).tolist(), strict=True))
    leaves = np.asarray(state.priorities.trees.sums[-1], np.float64)
    masses = np.array(list(model.values()))  # alpha 1, epsilon 0: the priorities
    np.testing.assert_array_equal(leaves[np.array(list(model)) % buffer.capacity], masses.astype(np.float32))
    sums = state.priorities.trees.sums
    # every parent is the sum of its children (to float32 rounding in one sum of 8, whatever
    # the order XLA adds them in): nothing accumulated over the 300 updates
    for level in range(len(sums) - 1):
        children = np.asarray(sums[level + 1], np.float64).reshape(sums[level].shape[0], -1).sum(-1)
        np.testing.assert_allclose(np.asarray(sums[level]), children, rtol=1e-6)
    np.testing.assert_allclose(float(sums[0][0]), masses.sum(), rtol=1e-6)
    assert float(state.priorities.trees.mins[0][0]) == pytest.approx(masses.min())


@pytest.fixture(params=["levels", "wide"])
def descent(request):
    """The prioritized draws below, through each descent of the sum tree: level by level (the
    CPU's) and in two wide steps (every other platform's), both forced here on the CPU."""
    with forced_tree_path(request.param):
        yield request.param


def test_prioritized_draws_follow_priorities_with_probabilities_and_weights(descent):
    buffer = make_buffer(SMALL, 2, 8, sampler="prioritized", alpha=1.0, beta=0.5, epsilon=0.0)
    state = filled(
        buffer,
        8,
        lambda t: {
            "obs": np.zeros((2, 4), np.float32),
            "action": np.arange(2, dtype=np.int32),
            "done": np.zeros(2, bool),
        },
    )
    priorities = np.arange(1, 17, dtype=np.float32)  # id i gets priority i + 1
    state = buffer.update_priorities(state, jnp.arange(16), priorities)
    counts = np.zeros(16)
    sample = jax.jit(buffer.sample, static_argnums=(2, 3))
    for i in range(100):
        _, info = sample(state, jax.random.key(i), 64, None)
        ids = np.asarray(info.ids)
        np.add.at(counts, ids, 1)
        np.testing.assert_allclose(np.asarray(info.probabilities), priorities[ids] / priorities.sum(), rtol=1e-5)
        np.testing.assert_allclose(np.asarray(info.weights), (priorities[ids] / priorities.min()) ** -0.5, rtol=1e-5)
    assert_counts_follow(counts, priorities / priorities.sum())
    # windows of 3: the last two steps cannot start one; the rest share the mass
    _, info = sample(state, jax.random.key(0), 256, 3)
    ids = np.asarray(info.ids)[:, 0]
    assert ids.max() < 12
    np.testing.assert_allclose(np.asarray(info.probabilities), priorities[ids] / priorities[:12].sum(), rtol=1e-5)


@pytest.mark.parametrize(
    ("steps", "num_steps"), [(6, 2), (6, 5), (8, 3), (8, 7), (11, 2), (11, 5), (11, 7), (13, 3), (13, 7), (16, 8)]
)
def test_prioritized_windows_share_the_mass_of_the_starts_they_fit_after(steps, num_steps, descent):
    """Starts in the last num_steps - 1 steps are left out of the mass, wherever the ring wrapped."""
    batch, length = 2, 8
    buffer = make_buffer(SMALL, batch, length, sampler="prioritized", alpha=1.0, epsilon=0.0)
    state = filled(
        buffer,
        steps,
        lambda t: {
            "obs": np.zeros((batch, 4), np.float32),
            "action": np.zeros(batch, np.int32),
            "done": np.zeros(batch, bool),
        },
    )
    ids = np.arange(max(steps - length, 0) * batch, steps * batch)
    priorities = np.random.default_rng(steps * 10 + num_steps).random(ids.size).astype(np.float32) + 0.1
    state = buffer.update_priorities(state, jnp.asarray(ids, jnp.int32), jnp.asarray(priorities))
    fits = ids // batch <= steps - num_steps
    _, info = jax.jit(buffer.sample, static_argnums=(2, 3))(state, jax.random.key(steps), 256, num_steps)
    drawn = np.asarray(info.ids)[:, 0] - ids[0]
    assert np.asarray(info.valid).all() and fits[drawn].all()
    np.testing.assert_allclose(np.asarray(info.probabilities), priorities[drawn] / priorities[fits].sum(), rtol=1e-5)


EPISODES = {"respect_episodes": True, "episode_end_field": "done", "episode_num_steps": 3}


@pytest.mark.parametrize("sampler", ["uniform", "prioritized"])
@pytest.mark.parametrize(
    ("options", "num_steps"),
    [
        ({}, None),
        ({}, 2),  # windows that would pass the head cannot be drawn
        (EPISODES, None),
        (EPISODES, 3),  # the count (uniform) or window tree (prioritized) kept on add
        (EPISODES, 2),  # the one-pass mask
    ],
)
def test_a_sample_lowered_for_a_gpu_has_no_loop(sampler, options, num_steps):
    """Off the CPU a draw masks the starts it cannot draw instead of drawing again: the program
    jit lowers for CUDA (here, on any machine) has no while loop for the GPU runtime to read a
    condition of back on the host each call; the CPU's keeps its rejection rounds. (JAX 0.11's
    ``export`` for one platform keeps every branch of ``lax.platform_dependent``, so it is not
    what a GPU runs.)"""
    buffer = make_buffer(SMALL, 2, 8, sampler=sampler, **options)
    sample = jax.jit(lambda state, key: buffer.sample(state, key, 16, num_steps))
    traced = sample.trace(buffer.init(), jax.random.key(0))
    programs = {platform: traced.lower(lowering_platforms=(platform,)).as_text() for platform in ("cuda", "cpu")}
    assert "stablehlo.while" not in programs["cuda"]
    if sampler == "prioritized" or options:  # the draws that can meet a start they cannot draw
        assert "stablehlo.while" in programs["cpu"]


def test_bad_priority_updates_are_dropped_and_counted_inside_jit():
    buffer = make_buffer(SMALL, 2, 4, sampler="prioritized")
    state = filled(
        buffer,
        6,
        lambda t: {"obs": np.zeros((2, 4), np.float32), "action": np.zeros(2, np.int32), "done": np.zeros(2, bool)},
    )
    before = np.asarray(state.priorities.trees.sums[-1])
    ids = jnp.array([0, 5, 12, -1, 6, 7, 8])  # 0: stale; 12, -1: never added; 6/7/8 priorities bad
    values = jnp.array([9.0, 4.0, 1.0, 1.0, jnp.nan, 0.0, -2.0])
    state = jax.jit(buffer.update_priorities)(state, ids, values)
    assert int(state.priorities.dropped) == 5
    after = np.asarray(state.priorities.trees.sums[-1])
    changed = np.flatnonzero(after != before)
    np.testing.assert_array_equal(changed, [5])  # only id 5 (slot 5) changed
    assert float(state.priorities.max_priority) == 4.0
    assert np.isfinite(float(state.priorities.trees.sums[0][0]))


# -- episodes and priorities together ---------------------------------------------------------
def _episodes_with_priorities(steps, seed):
    """A buffer of 3 streams x 7 steps with random episode ends, filled, then given random
    priorities in two rounds (one before and one after more adds, stale ids included), and
    the id -> priority (= mass: alpha 1, epsilon 0) of every id added, by the rule: new items
    at the largest priority applied so far (1.0 at first), stale ids ignored."""
    batch_size, max_length = 3, 7
    buffer = make_buffer(
        SMALL,
        batch_size,
        max_length,
        respect_episodes=True,
        episode_end_field="done",
        episode_num_steps=3,
        sampler="prioritized",
        alpha=1.0,
        beta=0.5,
        epsilon=0.0,
    )
    done, batch = _episode_batches(batch_size, steps, seed=seed)
    rng = np.random.default_rng(seed)
    add = jax.jit(buffer.add, donate_argnums=0)
    update = jax.jit(buffer.update_priorities, donate_argnums=0)
    state, model, largest = buffer.init(), {}, 1.0
    for t in range(steps):
        state = add(state, batch(t))
        model.update(dict.fromkeys(range(t * batch_size, (t + 1) * batch_size), largest))
        if t in (steps // 2, steps - 2):
            added = (t + 1) * batch_size  # no duplicates: their order is XLA's
            ids = rng.choice(added, min(12, added), replace=False)
            priorities = rng.uniform(0.1, 5.0, ids.size).astype(np.float32)
            state = update(state, ids.astype(np.int32), priorities)
            live = ids >= max(0, t + 1 - max_length) * batch_size
            model.update(zip(ids[live].tolist(), priorities[live].astype(np.float64).tolist(), strict=True))
            largest = max(largest, *priorities[live].astype(np.float64).tolist())
    stored = range(max(0, steps - max_length) * batch_size, steps * batch_size)
    return buffer, state, done, {i: model[i] for i in stored}


@pytest.mark.parametrize("num_steps", [3, 2, 1])  # 3: the window tree; 2: one pass, then rejection
@pytest.mark.parametrize("steps", [5, 12, 23])
def test_prioritized_episode_windows_match_brute_force(num_steps, steps, descent):
    buffer, state, done, model = _episodes_with_priorities(steps, seed=steps)
    expected = sorted(_brute_force_starts(done, 3, 7, steps, num_steps))
    mass = {i: model[i] for i in expected}
    total, smallest = sum(mass.values()), min(model.values())
    sample = jax.jit(buffer.sample, static_argnums=(2, 3))
    counts = dict.fromkeys(expected, 0)
    for i in range(60):
        _, info = sample(state, jax.random.key(i), 32, num_steps)
        if not expected:
            assert not np.asarray(info.valid).any()
            return
        assert np.asarray(info.valid).all()
        ids = np.asarray(info.ids)[:, 0]
        assert set(ids.tolist()) <= set(expected)  # no window crosses an end or passes the head
        want = np.array([mass[i] for i in ids])
        np.testing.assert_allclose(np.asarray(info.probabilities), want / total, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(info.weights), (want / smallest) ** -0.5, rtol=1e-5)
        for i in ids.tolist():
            counts[i] += 1
    assert_counts_follow([counts[i] for i in expected], np.array([mass[i] for i in expected]) / total)


def test_window_tree_holds_exactly_the_valid_starts_masses():
    buffer, state, done, model = _episodes_with_priorities(23, seed=5)
    want = np.zeros(buffer.capacity, np.float32)
    for i in _brute_force_starts(done, 3, 7, 23, 3):
        want[i % buffer.capacity] = model[i]
    windows = state.priorities.windows.sums
    np.testing.assert_allclose(np.asarray(windows[-1])[: buffer.capacity], want, rtol=1e-6)
    np.testing.assert_allclose(float(windows[0][0]), want.sum(), rtol=1e-5)
    rebuilt = buffer.rebuild(state._replace(priorities=state.priorities._replace(windows=None)))
    np.testing.assert_allclose(np.asarray(rebuilt.priorities.windows.sums[-1]), np.asarray(windows[-1]), rtol=1e-6)


# -- errors ---------------------------------------------------------------------------------
def test_add_errors_name_the_field():
    buffer = make_buffer(SPEC, 2, 4)
    state = buffer.init()
    bad = step_batch(0, 2)
    bad["observation"]["camera"] = np.zeros((2, 2, 3), np.uint8)
    with pytest.raises(replaybuf.SpecMismatchError, match=r"observation/camera: expected shape \(2, 2, 2\) uint8"):
        jax.jit(buffer.add)(state, bad)
    bad = step_batch(0, 2)
    bad["observation"]["position"] = bad["observation"]["position"].astype(np.int32)
    with pytest.raises(replaybuf.SpecMismatchError, match="position: expected dtype float32, got int32"):
        buffer.add(state, bad)
    bad = step_batch(0, 2)
    del bad["flag"]
    with pytest.raises(replaybuf.SpecMismatchError, match="structure"):
        buffer.add(state, bad)


def test_option_errors():
    with pytest.raises(replaybuf.ArgumentError, match="batch_size"):
        make_buffer(SPEC, 0, 4)
    with pytest.raises(replaybuf.ArgumentError, match="episode_end_field"):
        make_buffer(SPEC, 1, 4, episode_end_field="flag")
    with pytest.raises(replaybuf.ArgumentError, match="pad_episode_ends: only used with respect_episodes=True"):
        make_buffer(SPEC, 1, 4, pad_episode_ends=True)
    with pytest.raises(replaybuf.ArgumentError, match="episode_end_field.*nope"):
        make_buffer(SPEC, 1, 4, respect_episodes=True, episode_end_field="nope")
    with pytest.raises(replaybuf.ArgumentError, match="step_type"):
        make_buffer(SPEC, 1, 4, respect_episodes=True)
    with pytest.raises(replaybuf.ArgumentError, match="beta"):
        make_buffer(SPEC, 1, 4, sampler="prioritized", beta=2.0)
    buffer = make_buffer(SPEC, 1, 4)
    with pytest.raises(replaybuf.ArgumentError, match="num_steps: expected at most max_length=4, got 5"):
        buffer.sample(buffer.init(), jax.random.key(0), 2, 5)
    with pytest.raises(replaybuf.ArgumentError, match="sample_batch_size"):
        buffer.sample(buffer.init(), jax.random.key(0), 0)
    with pytest.raises(replaybuf.ArgumentError, match="prioritized"):
        buffer.update_priorities(buffer.init(), jnp.zeros(1, jnp.int32), jnp.ones(1))
