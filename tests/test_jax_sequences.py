"""Sequences (``burn_in``, ``period``) on the JAX backend against the brute-force model of
tests/sequence_model.py: the class's samples, start frequencies, the pure core under jit and
vmap, checkpoints shared with the NumPy buffers, deterministic passes and refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule
from scipy import stats

import replaybuf
from replaybuf import SampleInfo
from replaybuf.errors import ArgumentError, EmptyBufferError

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from replaybuf.jax import JaxReplayBuffer, checked, make_buffer  # noqa: E402
from sequence_model import SPEC, Model, check_sample, numpy_of  # noqa: E402

EPISODES = {"respect_episodes": True, "episode_end_field": "done"}


def filled(prioritized, batch, length, adds, pad, seed, end_probability=0.2):
    sampler = {"sampler": "prioritized", "alpha": 0.7} if prioritized else {}
    buffer = JaxReplayBuffer(
        SPEC, batch_size=batch, max_length=length, seed=seed, pad_episode_ends=pad, **EPISODES, **sampler
    )
    model = Model(batch, length, np.random.default_rng(seed))
    for _ in range(adds):
        buffer.add_batch(model.add(end_probability))
    return buffer, model


def episode_step(t, length):
    """Step t of one stream whose episodes are ``length`` steps long."""
    return {
        "t": [t],
        "episode": [t // length],
        "observation": np.zeros((1, 2, 1), np.uint8),
        "done": [t % length == length - 1],
    }


def uneven_priorities(buffer, model):
    """New priorities on a few stored items, mirrored in the model."""
    ids = np.arange((model.steps - 10) * model.batch, model.steps * model.batch, 4)
    new = np.linspace(0.5, 4.0, ids.size)
    buffer.update_priorities(ids, new)
    for uid, p in zip(ids.tolist(), new.tolist(), strict=True):
        model.priority[uid] = p
    model.max_priority = max(model.max_priority, float(new.max()))


def first_rows(items, info, n):
    """The first ``n`` rows of a sample of sequences: its items and info."""
    cut = lambda array: numpy_of(array)[:n]  # noqa: E731
    info = SampleInfo(cut(info.ids), cut(info.probabilities), mask=cut(info.mask), learn=cut(info.learn))
    return {key: cut(leaf) for key, leaf in items.items()}, info


def assert_start_frequencies(info, burn_in, eligible):
    """Chi-square of the drawn learning starts against the probabilities the sample reports."""
    starts, counts = np.unique(numpy_of(info.ids)[:, burn_in], return_counts=True)
    assert set(starts.tolist()) <= set(eligible)
    reported = dict(zip(numpy_of(info.ids)[:, burn_in].tolist(), numpy_of(info.probabilities).tolist(), strict=True))
    for uid, p in reported.items():
        assert p == pytest.approx(eligible[uid], rel=1e-4)
    observed = np.array([dict(zip(starts.tolist(), counts.tolist(), strict=True)).get(uid, 0) for uid in eligible])
    expected = np.array(list(eligible.values())) * observed.sum()
    assert stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize(
    ("burn_in", "steps", "period", "pad"),
    [(2, 3, 1, False), (2, 3, 1, True), (3, 2, 2, False), (1, 4, 3, True), (0, 1, 1, False), (4, 12, 12, True)],
)
def test_sequences_equal_the_reference_model(prioritized, burn_in, steps, period, pad):
    buffer, model = filled(prioritized, batch=3, length=16, adds=40, pad=pad, seed=burn_in * 10 + steps)
    alpha = 0.7 if prioritized else None
    if prioritized:
        uneven_priorities(buffer, model)
    items, info = buffer.get_next(4000, num_steps=steps, burn_in=burn_in, period=period)  # one compile per case
    eligible = check_sample(model, *first_rows(items, info, 64), burn_in, steps, period, pad, alpha)
    assert (info.weights is not None) == prioritized
    assert_start_frequencies(info, burn_in, eligible)


def test_prioritized_weights_are_relative_to_the_smallest_stored_mass():
    buffer, model = filled(True, batch=2, length=20, adds=30, pad=False, seed=2)
    uneven_priorities(buffer, model)
    _, info = buffer.get_next(64, num_steps=3, burn_in=2, period=2)
    masses = {uid: (p + 1e-6) ** 0.7 for uid, p in model.priority.items() if model.stored(uid)}
    drawn = np.array([masses[uid] for uid in numpy_of(info.ids)[:, 2].tolist()])
    np.testing.assert_allclose(numpy_of(info.weights), (drawn / min(masses.values())) ** -0.4, rtol=1e-4)


def test_an_unbatched_sequence_and_time_unstacked():
    buffer, model = filled(False, batch=2, length=20, adds=25, pad=True, seed=3)
    items, info = buffer.get_next(num_steps=3, burn_in=2, period=2)
    assert numpy_of(info.ids).shape == numpy_of(info.mask).shape == numpy_of(info.learn).shape == (5,)
    expected_ids, expected_mask = model.sequence(int(numpy_of(info.ids)[2]), 2, 3)
    np.testing.assert_array_equal(numpy_of(info.ids), expected_ids)
    np.testing.assert_array_equal(numpy_of(info.mask), expected_mask)
    np.testing.assert_array_equal(numpy_of(items["t"]), [model.items[u]["t"] for u in expected_ids])
    unstacked, _ = buffer.get_next(4, num_steps=3, burn_in=2, time_stacked=False)
    assert len(unstacked) == 5 and numpy_of(unstacked[0]["t"]).shape == (4,)


def _core_and_models(prioritized, pad, seeds):
    """A core and one model per seed, the models' adds stacked on a leading buffer axis."""
    sampler = {"sampler": "prioritized", "alpha": 0.7} if prioritized else {}
    core = make_buffer(SPEC, 3, 16, pad_episode_ends=pad, **EPISODES, **sampler)
    models = [Model(3, 16, np.random.default_rng(seed)) for seed in seeds]
    adds = [[model.add(0.25) for _ in range(30)] for model in models]
    return (
        core,
        models,
        [jax.tree_util.tree_map(lambda *leaves: np.stack(leaves), *step) for step in zip(*adds, strict=True)],
    )


@pytest.mark.parametrize(("prioritized", "pad"), [(False, False), (True, True)])
def test_the_pure_core_under_jit_and_vmap_one_buffer_per_seed(prioritized, pad):
    core, models, batches = _core_and_models(prioritized, pad, seeds=[0, 1, 2])
    states = jax.vmap(lambda _: core.init())(jnp.arange(3))
    add = jax.jit(jax.vmap(core.add))
    for batch in batches:
        states = add(states, batch)
    sample = jax.jit(jax.vmap(lambda state, key: core.sample_sequences(state, key, 24, 4, 2, 2)))
    items, info = sample(states, jax.random.split(jax.random.key(7), 3))
    assert info.ids.shape == info.mask.shape == info.learn.shape == (3, 24, 6) and bool(info.valid.all())
    for index, model in enumerate(models):
        one = jax.tree_util.tree_map(lambda leaf, i=index: leaf[i], (items, info))
        check_sample(model, *one, 2, 4, 2, pad, 0.7 if prioritized else None)


def test_the_pure_core_marks_a_sample_without_eligible_starts_invalid_and_checked_raises():
    core = make_buffer(SPEC, 1, 8, **EPISODES)
    strict = make_buffer(SPEC, 1, 8, checked=True, **EPISODES)
    state = core.init()
    for t in range(4):  # episodes of 2 steps: no 3 real learning steps
        state = core.add(state, {key: np.asarray(value) for key, value in episode_step(t, 2).items()})
    _, info = jax.jit(core.sample_sequences, static_argnums=(2, 3, 4))(state, jax.random.key(0), 4, 3, 1)
    assert not bool(info.valid.any()) and float(info.probabilities.max()) == 0.0
    with pytest.raises(EmptyBufferError, match="num_steps=3"):
        checked(strict.sample_sequences, static_argnums=(2, 3, 4))(state, jax.random.key(0), 4, 3, 1)


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_a_numpy_checkpoint_loaded_into_the_jax_buffer_samples_the_models_sequences(prioritized):
    options = {"batch_size": 2, "max_length": 12, "seed": 4, "pad_episode_ends": False, **EPISODES}
    if prioritized:
        source = replaybuf.PrioritizedReplayBuffer(SPEC, alpha=0.7, **options)
        target = JaxReplayBuffer(SPEC, sampler="prioritized", alpha=0.7, **options)
    else:
        source, target = replaybuf.UniformReplayBuffer(SPEC, **options), JaxReplayBuffer(SPEC, **options)
    model = Model(2, 12, np.random.default_rng(4))
    for _ in range(30):  # wrapped: the oldest episodes are cut
        source.add_batch(model.add(0.3))
    if prioritized:
        uneven_priorities(source, model)
    target.load_state_dict(source.state_dict())
    items, info = target.get_next(64, num_steps=3, burn_in=3, period=2)
    check_sample(model, items, info, 3, 3, 2, False, 0.7 if prioritized else None)


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_a_deterministic_pass_yields_every_eligible_sequence_once_in_order(prioritized):
    buffer, model = filled(prioritized, batch=3, length=16, adds=30, pad=False, seed=9)
    rows = [
        (numpy_of(info.ids), numpy_of(info.mask), numpy_of(info.learn), items)
        for items, info in buffer.as_dataset(5, num_steps=3, burn_in=2, period=2, single_deterministic_pass=True)
    ]
    starts = np.concatenate([ids[:, 2] for ids, _, _, _ in rows])
    expected = sorted(model.eligible(2, 3, 2, False), key=lambda uid: (uid % 3, uid))
    np.testing.assert_array_equal(starts, expected)
    for ids, mask, learn, items in rows:
        for row in range(ids.shape[0]):
            expected_ids, expected_mask = model.sequence(int(ids[row, 2]), 2, 3)
            np.testing.assert_array_equal(ids[row], expected_ids)
            np.testing.assert_array_equal(mask[row], expected_mask)
            np.testing.assert_array_equal(learn[row], np.array(expected_mask) & (np.arange(-2, 3) >= 0))
            np.testing.assert_array_equal(numpy_of(items["t"])[row], [model.items[u]["t"] for u in expected_ids])


def test_an_unbatched_deterministic_pass_equals_the_numpy_one():
    numpy_buffer = replaybuf.UniformReplayBuffer(SPEC, batch_size=2, max_length=16, pad_episode_ends=True, **EPISODES)
    jax_buffer, model = filled(False, batch=2, length=16, adds=20, pad=True, seed=8)
    for uid in range(0, model.steps * 2, 2):  # the model's items again, step by step
        numpy_buffer.add_batch({key: np.stack([model.items[uid][key], model.items[uid + 1][key]]) for key in SPEC})
    numpy_pass = list(numpy_buffer.as_dataset(num_steps=4, burn_in=1, period=3, single_deterministic_pass=True))
    jax_pass = list(jax_buffer.as_dataset(num_steps=4, burn_in=1, period=3, single_deterministic_pass=True))
    assert len(jax_pass) == len(numpy_pass) > 0
    for (a, a_info), (b, b_info) in zip(numpy_pass, jax_pass, strict=True):
        assert numpy_of(b_info.ids).shape == (5,)
        np.testing.assert_array_equal(a_info.ids, numpy_of(b_info.ids))
        np.testing.assert_array_equal(a_info.mask, numpy_of(b_info.mask))
        np.testing.assert_array_equal(a_info.learn, numpy_of(b_info.learn))
        np.testing.assert_array_equal(a["observation"], numpy_of(b["observation"]))


def test_random_dataset_takes_the_sequence_keywords():
    buffer, model = filled(False, batch=2, length=20, adds=25, pad=True, seed=4)
    items, info = next(iter(buffer.as_dataset(8, num_steps=3, burn_in=2, period=3)))
    check_sample(model, items, info, 2, 3, 3, True, None)


@pytest.mark.parametrize(
    ("options", "keywords"),
    [
        ({}, {"burn_in": -1}),
        ({}, {"burn_in": 1.5}),
        ({}, {"period": 0}),
        ({}, {"period": True}),
        ({}, {"num_steps": None, "burn_in": 2}),
        ({}, {"num_steps": 15, "burn_in": 6}),
        ({"respect_episodes": False, "episode_end_field": None}, {"burn_in": 2}),
    ],
)
def test_bad_sequence_arguments_are_refused_as_numpy_refuses_them(options, keywords):
    """The same message as the NumPy buffer's, and nothing drawn (the generator unchanged)."""
    options = {"batch_size": 2, "max_length": 20, "seed": 0, **EPISODES, **options}
    numpy_buffer, jax_buffer = replaybuf.UniformReplayBuffer(SPEC, **options), JaxReplayBuffer(SPEC, **options)
    model = Model(2, 20, np.random.default_rng(0))
    for _ in range(10):
        step = model.add(0.2)
        numpy_buffer.add_batch(step)
        jax_buffer.add_batch(step)
    arguments = {"num_steps": 3, **keywords}
    with pytest.raises(ArgumentError) as numpy_error:
        numpy_buffer.get_next(4, **arguments)
    before = jax_buffer.state_dict()["rng"]
    for call in (jax_buffer.get_next, jax_buffer.as_dataset):
        with pytest.raises(ArgumentError) as jax_error:
            call(4, **arguments)
        assert str(jax_error.value) == str(numpy_error.value)
    assert jax_buffer.state_dict()["rng"] == before


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_no_eligible_start_is_the_numpy_buffers_empty_buffer_error(prioritized):
    options = {"batch_size": 1, "max_length": 20, **EPISODES}
    jax_buffer = JaxReplayBuffer(SPEC, **options, **({"sampler": "prioritized"} if prioritized else {}))
    numpy_buffer = (replaybuf.PrioritizedReplayBuffer if prioritized else replaybuf.UniformReplayBuffer)(
        SPEC, **options
    )
    for buffer in (numpy_buffer, jax_buffer):
        with pytest.raises(EmptyBufferError, match="is empty"):
            buffer.get_next(2, num_steps=2, burn_in=1)
    for t in range(6):  # episodes of 2 steps: no start of 3 real learning steps, unpadded
        step = episode_step(t, 2)
        numpy_buffer.add_batch(step)
        jax_buffer.add_batch(step)
    for period in (1, 2):
        with pytest.raises(EmptyBufferError) as numpy_error:
            numpy_buffer.get_next(2, num_steps=3, burn_in=1, period=period)
        with pytest.raises(EmptyBufferError) as jax_error:
            jax_buffer.get_next(2, num_steps=3, burn_in=1, period=period)
        assert "num_steps=3" in str(jax_error.value)
        if period > 1:  # period 1: NumPy's uniform and prioritized samplers word it differently
            assert str(jax_error.value) == str(numpy_error.value)
    with pytest.raises(EmptyBufferError, match="num_steps=3"):
        jax_buffer.as_dataset(2, num_steps=3, burn_in=1, single_deterministic_pass=True).__iter__()


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_a_sequence_sample_lowered_for_a_gpu_has_no_loop(prioritized):
    """Starts are drawn from the mask of eligible slots, never drawn again: the program jit
    lowers for CUDA has no while loop (a GPU's runtime would read its condition back on the
    host every call)."""
    sampler = {"sampler": "prioritized"} if prioritized else {}
    core = make_buffer(SPEC, 2, 8, **EPISODES, **sampler)
    sample = jax.jit(lambda state, key: core.sample_sequences(state, key, 16, 3, 2, 2))
    traced = sample.trace(core.init(), jax.random.key(0))
    assert "stablehlo.while" not in traced.lower(lowering_platforms=("cuda",)).as_text()


class JaxSequenceMachine(RuleBasedStateMachine):
    """Adds, wraps, clears, checkpoint round trips, priority updates and samples of one fixed
    rule (so each sample shape compiles once) on the prioritized JAX buffer, against the model."""

    BURN_IN, STEPS, PERIOD, BATCH, LENGTH = 2, 3, 2, 2, 10

    def __init__(self):
        super().__init__()
        self.buffer = self._new(0)
        self.model = Model(self.BATCH, self.LENGTH, np.random.default_rng(0))

    def _new(self, seed):
        return JaxReplayBuffer(
            SPEC, batch_size=self.BATCH, max_length=self.LENGTH, seed=seed, sampler="prioritized", alpha=0.7, **EPISODES
        )

    @rule(count=st.integers(1, 8), end=st.sampled_from([0.0, 0.3, 0.8]))
    def add(self, count, end):
        for _ in range(count):
            self.buffer.add_batch(self.model.add(end))

    @rule()
    def clear(self):
        self.buffer.clear()
        self.model.clear()

    @rule(seed=st.integers(0, 3))
    def reload(self, seed):
        again = self._new(seed)
        again.load_state_dict(self.buffer.state_dict())
        self.buffer = again

    @precondition(lambda self: self.model.steps > 0)
    @rule(data=st.data())
    def update(self, data):
        first = max(0, self.model.steps - self.LENGTH) * self.BATCH
        uid = data.draw(st.integers(first, self.model.steps * self.BATCH - 1))
        value = data.draw(st.floats(0.1, 10))
        self.buffer.update_priorities(np.array([uid]), np.array([value]))
        self.model.priority[uid] = value
        self.model.max_priority = max(self.model.max_priority, value)

    @precondition(lambda self: self.model.steps > 0)
    @rule()
    def sample(self):
        keywords = {"num_steps": self.STEPS, "burn_in": self.BURN_IN, "period": self.PERIOD}
        if not self.model.eligible(self.BURN_IN, self.STEPS, self.PERIOD, False):
            with pytest.raises(EmptyBufferError):
                self.buffer.get_next(8, **keywords)
            return
        items, info = self.buffer.get_next(8, **keywords)
        check_sample(self.model, items, info, self.BURN_IN, self.STEPS, self.PERIOD, False, 0.7)


TestJaxSequenceMachine = JaxSequenceMachine.TestCase
TestJaxSequenceMachine.settings = settings(
    max_examples=6, stateful_step_count=15, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
