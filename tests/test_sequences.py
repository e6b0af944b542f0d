"""Sequences (``burn_in``, ``period``) against a brute-force reference model, on every buffer
that keeps episodes: contents, ids, masks, learning starts and their probabilities."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from scipy import stats

import replaybuf
from replaybuf import ArraySpec
from replaybuf.errors import ArgumentError, EmptyBufferError
from replaybuf.ring import StreamRing
from replaybuf.samplers import sequences
from sequence_model import BAD_SEQUENCE_ARGUMENTS, SPEC, Model, assert_refused, check_sample, numpy_of


def _torch(device, prioritized=False):
    def make(**options):
        torch = pytest.importorskip("torch")
        if device == "cuda" and not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
        import replaybuf.torch

        if prioritized:
            return replaybuf.torch.TorchPrioritizedReplayBuffer(
                SPEC, device=device, alpha=0.7, tree_device="host", **options
            )
        return replaybuf.torch.TorchUniformReplayBuffer(SPEC, device=device, **options)

    return make


BUFFERS = {
    "numpy": lambda **o: replaybuf.UniformReplayBuffer(SPEC, **o),
    "prioritized": lambda **o: replaybuf.PrioritizedReplayBuffer(SPEC, alpha=0.7, **o),
    "frames": lambda **o: replaybuf.FrameStackReplayBuffer(SPEC, stacked_fields=["observation"], **o),
    "prioritized-frames": lambda **o: replaybuf.PrioritizedFrameStackReplayBuffer(
        SPEC, stacked_fields=["observation"], alpha=0.7, **o
    ),
    "torch-cpu": _torch("cpu"),
    "torch-cuda": _torch("cuda"),
    "torch-prioritized-cpu": _torch("cpu", prioritized=True),
    "torch-prioritized-cuda": _torch("cuda", prioritized=True),
}
PRIORITIZED = {"prioritized", "prioritized-frames", "torch-prioritized-cpu", "torch-prioritized-cuda"}


def filled(name, batch, length, adds, pad, seed, end_probability=0.2):
    buffer = BUFFERS[name](
        batch_size=batch,
        max_length=length,
        seed=seed,
        respect_episodes=True,
        episode_end_field="done",
        pad_episode_ends=pad,
    )
    model = Model(batch, length, np.random.default_rng(seed))
    for _ in range(adds):
        buffer.add_batch(model.add(end_probability))
    return buffer, model


@pytest.mark.parametrize("name", BUFFERS)
@pytest.mark.parametrize(
    ("burn_in", "steps", "period", "pad"),
    [(2, 3, 1, False), (2, 3, 1, True), (3, 2, 2, False), (1, 4, 3, True), (0, 1, 1, False), (4, 12, 12, True)],
)
def test_sequences_equal_the_reference_model(name, burn_in, steps, period, pad):
    buffer, model = filled(name, batch=3, length=16, adds=40, pad=pad, seed=burn_in * 10 + steps)
    alpha = 0.7 if name in PRIORITIZED else None
    if alpha is not None:  # uneven priorities on a few stored items, mirrored in the model
        ids = np.arange((model.steps - 10) * 3, model.steps * 3, 4)
        new = np.linspace(0.5, 4.0, ids.size)
        buffer.update_priorities(ids, new)
        for uid, p in zip(ids.tolist(), new.tolist(), strict=True):
            model.priority[uid] = p
        model.max_priority = max(model.max_priority, float(new.max()))
    for _ in range(3):
        items, info = buffer.get_next(32, num_steps=steps, burn_in=burn_in, period=period)
        eligible = check_sample(model, items, info, burn_in, steps, period, pad, alpha)
    _, info = buffer.get_next(6000, num_steps=steps, burn_in=burn_in, period=period)
    starts, counts = np.unique(numpy_of(info.ids)[:, burn_in], return_counts=True)
    assert set(starts.tolist()) <= set(eligible)
    observed = np.array([dict(zip(starts.tolist(), counts.tolist(), strict=True)).get(uid, 0) for uid in eligible])
    expected = np.array(list(eligible.values())) * observed.sum()
    assert stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.parametrize("name", ["numpy", "prioritized", "torch-cpu"])
def test_an_unbatched_sequence_and_time_unstacked(name):
    buffer, model = filled(name, batch=2, length=20, adds=25, pad=True, seed=3)
    items, info = buffer.get_next(num_steps=3, burn_in=2, period=2)
    assert numpy_of(info.ids).shape == numpy_of(info.mask).shape == (5,)
    expected_ids, expected_mask = model.sequence(int(numpy_of(info.ids)[2]), 2, 3)
    np.testing.assert_array_equal(numpy_of(info.ids), expected_ids)
    np.testing.assert_array_equal(numpy_of(items["t"]), [model.items[u]["t"] for u in expected_ids])
    unstacked, _ = buffer.get_next(4, num_steps=3, burn_in=2, time_stacked=False)
    assert len(unstacked) == 5 and numpy_of(unstacked[0]["t"]).shape == (4,)


def test_an_episode_shorter_than_the_burn_in_is_sampled_from_its_first_step():
    """Episodes of 3 steps, burn-in 8, 5 learning steps: every step of every episode is a start."""
    buffer = replaybuf.UniformReplayBuffer(
        SPEC,
        batch_size=1,
        max_length=30,
        seed=0,
        respect_episodes=True,
        episode_end_field="done",
        pad_episode_ends=True,
    )
    for t in range(30):
        buffer.add_batch(
            {"t": [t], "episode": [t // 3], "observation": np.zeros((1, 2, 1), np.uint8), "done": [t % 3 == 2]}
        )
    _, info = buffer.get_next(2000, num_steps=5, burn_in=8)
    starts = info.ids[:, 8]
    assert set(starts.tolist()) == set(range(30))
    first_steps = info.ids[starts % 3 == 0]
    assert not info.mask[starts % 3 == 0][:, :8].any() and (first_steps[:, :8] == first_steps[:, 8:9]).all()
    assert (info.learn.sum(axis=1) == 3 - starts % 3).all()


def test_whole_episodes_with_a_period_as_long_as_the_longest():
    buffer, model = filled("numpy", batch=2, length=60, adds=60, pad=True, seed=5, end_probability=0.15)
    _, info = buffer.get_next(500, num_steps=60, period=60)
    starts = info.ids[:, 0]
    assert all(model.position[uid] == 0 for uid in starts.tolist())
    for row, uid in enumerate(starts.tolist()):
        length = sum(1 for k in range(60) if model.real(uid, k))
        assert info.learn[row].sum() == length


@pytest.mark.parametrize("name", ["numpy", "prioritized", "torch-cpu"])
def test_a_deterministic_pass_yields_every_eligible_sequence_once_in_order(name):
    buffer, model = filled(name, batch=3, length=16, adds=30, pad=False, seed=9)
    rows = [
        (numpy_of(info.ids), numpy_of(info.mask), items)
        for items, info in buffer.as_dataset(5, num_steps=3, burn_in=2, period=2, single_deterministic_pass=True)
    ]
    starts = np.concatenate([ids[:, 2] for ids, _, _ in rows])
    expected = sorted(model.eligible(2, 3, 2, False), key=lambda uid: (uid % 3, uid))
    np.testing.assert_array_equal(starts, expected)
    for ids, mask, items in rows:
        for row in range(ids.shape[0]):
            expected_ids, expected_mask = model.sequence(int(ids[row, 2]), 2, 3)
            np.testing.assert_array_equal(ids[row], expected_ids)
            np.testing.assert_array_equal(mask[row], expected_mask)
            np.testing.assert_array_equal(numpy_of(items["t"])[row], [model.items[u]["t"] for u in expected_ids])


@pytest.mark.parametrize("name", ["numpy", "torch-cpu"])
def test_random_dataset_takes_the_sequence_keywords(name):
    buffer, model = filled(name, batch=2, length=20, adds=25, pad=True, seed=4)
    items, info = next(iter(buffer.as_dataset(8, num_steps=3, burn_in=2, period=3)))
    check_sample(model, items, info, 2, 3, 3, True, None)


def test_sequence_priorities_are_updated_through_the_learning_starts():
    buffer, model = filled("prioritized", batch=2, length=20, adds=25, pad=False, seed=6)
    _, info = buffer.get_next(16, num_steps=3, burn_in=2, period=2)
    starts = np.unique(info.ids[:, 2])
    buffer.update_priorities(starts, np.full(starts.size, 50.0))
    for uid in starts.tolist():
        model.priority[uid] = 50.0
    model.max_priority = 50.0
    items, info = buffer.get_next(64, num_steps=3, burn_in=2, period=2)
    check_sample(model, items, info, 2, 3, 2, False, 0.7)


@pytest.mark.parametrize(
    ("numpy_name", "torch_name"), [("numpy", "torch-cpu"), ("prioritized", "torch-prioritized-cpu")]
)
def test_torch_sequences_equal_numpy_ones_for_the_same_seed(numpy_name, torch_name):
    numpy_buffer, _ = filled(numpy_name, batch=2, length=20, adds=30, pad=True, seed=11)
    torch_buffer, _ = filled(torch_name, batch=2, length=20, adds=30, pad=True, seed=11)
    for _ in range(3):
        a, a_info = numpy_buffer.get_next(16, num_steps=4, burn_in=3, period=2)
        b, b_info = torch_buffer.get_next(16, num_steps=4, burn_in=3, period=2)
        np.testing.assert_array_equal(a_info.ids, numpy_of(b_info.ids))
        np.testing.assert_array_equal(a_info.learn, numpy_of(b_info.learn))
        np.testing.assert_array_equal(a_info.probabilities, numpy_of(b_info.probabilities))
        np.testing.assert_array_equal(a["observation"], numpy_of(b["observation"]))
        if numpy_name == "prioritized":
            np.testing.assert_array_equal(a_info.weights, numpy_of(b_info.weights))
            numpy_buffer.update_priorities(a_info.ids, np.arange(1.0, 17.0))
            torch_buffer.update_priorities(b_info.ids, np.arange(1.0, 17.0))


# (buffer options, get_next keywords beside num_steps=3, the message) on a buffer of max_length=20;
# the shared and Ray tests ask their buffers the same


@pytest.mark.parametrize(("options", "keywords", "message"), BAD_SEQUENCE_ARGUMENTS)
def test_bad_sequence_arguments_are_refused_and_change_nothing(options, keywords, message):
    buffer = replaybuf.UniformReplayBuffer(
        SPEC, batch_size=2, max_length=20, seed=0, **{"respect_episodes": True, "episode_end_field": "done", **options}
    )
    model = Model(2, 20, np.random.default_rng(0))
    for _ in range(10):
        buffer.add_batch(model.add(0.2))
    assert_refused(buffer, keywords, message)


def test_no_eligible_start_is_an_empty_buffer_error():
    buffer = replaybuf.UniformReplayBuffer(
        SPEC, batch_size=1, max_length=20, respect_episodes=True, episode_end_field="done"
    )
    with pytest.raises(EmptyBufferError, match="is empty"):
        buffer.get_next(2, num_steps=2, burn_in=1)
    for t in range(6):  # episodes of 2 steps: no start of 3 real learning steps, unpadded
        buffer.add_batch(
            {"t": [t], "episode": [t // 2], "observation": np.zeros((1, 2, 1), np.uint8), "done": [t % 2 == 1]}
        )
    with pytest.raises(EmptyBufferError, match="num_steps=3"):
        buffer.get_next(2, num_steps=3, burn_in=1, period=2)


def test_the_compiled_acceptance_draws_the_numpy_draws_starts(monkeypatch):
    """Unpadded starts (and plain windows) drawn with the compiled acceptance test equal, draw
    for draw, those of the NumPy rounds, so a seeded or restored buffer keeps its stream."""
    pytest.importorskip("numba")
    assert sequences.accept_kernel() is not None, "numba is installed but the compiled acceptance was not chosen"
    model = Model(2, 40, np.random.default_rng(3))
    adds = [model.add(0.15) for _ in range(100)]  # wrapped, episodes cut by the wrap
    made = []
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setitem(sequences._kernels, "accept", None)
        buffer = replaybuf.UniformReplayBuffer(
            SPEC, batch_size=2, max_length=40, seed=5, respect_episodes=True, episode_end_field="done"
        )
        for items in adds:
            buffer.add_batch(items)
        made.append(
            [buffer.get_next(7, num_steps=3, burn_in=2)[1].ids for _ in range(20)]
            + [buffer.get_next(5, num_steps=4)[1].ids for _ in range(20)]
        )
    for a, b in zip(*made, strict=True):
        np.testing.assert_array_equal(a, b)


def _random_ring(rng):
    """A ring of 1-3 streams after some adds (wrapped or not, sometimes a floor), and the
    positions an episode index keeps for it (episodes ending at random)."""
    batch, length = int(rng.integers(1, 4)), int(rng.integers(2, 24))
    ring = StreamRing(batch, length)
    steps = int(rng.integers(1, 3 * length))
    ring.reset(steps, int(rng.integers(0, steps)) if rng.random() < 0.3 else 0)
    position, last = np.zeros((length, batch), np.int64), np.full(batch, -1)
    for t in range(steps):
        last = np.where((rng.random(batch) < 0.2) | (last < 0), 0, last + 1)
        position[t % length] = last
    return ring, position.reshape(-1)


def test_the_compiled_windows_equal_the_numpy_ones():
    pytest.importorskip("numba")
    assert sequences._kernel() is not None, "numba is installed but the compiled sequence windows were not chosen"
    rng = np.random.default_rng(0)
    for _ in range(400):
        ring, position = _random_ring(rng)
        steps = int(rng.integers(1, ring.max_length + 1))
        burn_in = int(rng.integers(0, ring.max_length - steps + 1))
        shape = tuple(rng.integers(0, 4, rng.integers(0, 3)))  # a batch of any shape, or one start
        starts = rng.integers(ring.first_valid_step() * ring.batch_size, ring.steps * ring.batch_size, shape)
        got = sequences.sequence_windows(position, ring, starts, burn_in, steps)
        expected = sequences.numpy_windows(position, ring, starts, burn_in, steps)
        for a, b in zip(got, expected, strict=True):
            assert a.shape == b.shape == (*shape, burn_in + steps) and a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("burn_in", "steps", "period", "pad"), [(2, 3, 1, False), (1, 4, 3, True)])
def test_sequences_without_numba_equal_the_reference_model(monkeypatch, burn_in, steps, period, pad):
    monkeypatch.setattr(sequences, "_kernels", {"windows": None, "accept": None})  # NumPy passes, as without numba
    buffer, model = filled("numpy", batch=3, length=16, adds=40, pad=pad, seed=7)
    for _ in range(3):
        items, info = buffer.get_next(32, num_steps=steps, burn_in=burn_in, period=period)
        check_sample(model, items, info, burn_in, steps, period, pad, None)


class SequenceMachine(RuleBasedStateMachine):
    """Adds, wraps, clears, checkpoint round trips and sequence samples against the model."""

    def __init__(self):
        super().__init__()
        self.name = "prioritized"
        self.buffer = self._new(0)
        self.model = Model(2, 12, np.random.default_rng(0))

    def _new(self, seed):
        return replaybuf.PrioritizedReplayBuffer(
            SPEC,
            batch_size=2,
            max_length=12,
            seed=seed,
            alpha=0.7,
            respect_episodes=True,
            episode_end_field="done",
            pad_episode_ends=self.pad if hasattr(self, "pad") else False,
        )

    @rule(count=st.integers(1, 8), end=st.sampled_from([0.0, 0.3, 0.8]))
    def add(self, count, end):
        for _ in range(count):
            self.buffer.add_batch(self.model.add(end))

    @rule()
    def clear(self):
        self.buffer.clear()
        self.model.clear()

    @rule(seed=st.integers(0, 5))
    def reload(self, seed):
        again = self._new(seed)
        again.load_state_dict(self.buffer.state_dict())
        self.buffer = again

    @precondition(lambda self: self.model.steps > 0)
    @rule(burn_in=st.integers(0, 4), steps=st.integers(1, 6), period=st.integers(1, 5))
    def sample(self, burn_in, steps, period):
        if not self.model.eligible(burn_in, steps, period, False):
            with pytest.raises(EmptyBufferError):
                self.buffer.get_next(8, num_steps=steps, burn_in=burn_in, period=period)
            return
        items, info = self.buffer.get_next(8, num_steps=steps, burn_in=burn_in, period=period)
        check_sample(self.model, items, info, burn_in, steps, period, False, 0.7)

    @precondition(lambda self: self.model.steps > 0)
    @rule(data=st.data())
    def update(self, data):
        first = max(0, self.model.steps - 12) * 2
        uid = data.draw(st.integers(first, self.model.steps * 2 - 1))
        value = data.draw(st.floats(0.1, 10))
        self.buffer.update_priorities(np.array([uid]), np.array([value]))
        self.model.priority[uid] = value
        self.model.max_priority = max(self.model.max_priority, value)

    @invariant()
    def frames(self):
        assert self.buffer.num_frames() == min(self.model.steps, 12) * 2


TestSequenceMachine = SequenceMachine.TestCase
TestSequenceMachine.settings = settings(
    max_examples=25, stateful_step_count=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_sequences_with_hindsight_relabelling_are_refused():
    goal_spec = {
        "goal": ArraySpec((1,), np.float32),
        "achieved": ArraySpec((1,), np.float32),
        "reward": ArraySpec((), np.float32),
        "done": ArraySpec((), np.bool_),
    }
    her = replaybuf.HindsightRelabel(
        goal_field="goal", achieved_field="achieved", compute_reward=lambda a, d, _: (a == d).all(-1)
    )
    buffer = replaybuf.UniformReplayBuffer(
        goal_spec, max_length=10, respect_episodes=True, episode_end_field="done", her=her
    )
    for _ in range(4):
        buffer.add_batch({k: np.zeros((1, *v.shape), v.dtype) for k, v in goal_spec.items()})
    with pytest.raises(ArgumentError, match="burn_in/period: expected a buffer without her="):
        buffer.get_next(2, num_steps=2, burn_in=1)
