"""SharedReplayBuffer(sampler="prioritized", respect_episodes=True): windows inside one episode
drawn by priority, against brute force (the valid starts, each probability and weight), as
writers add, wrap and start over, as priorities change, and across clear and load."""
# ruff: noqa: F811  (pytest fixtures imported from shared_workers are parameters here)

from __future__ import annotations

import numpy as np
import pytest

from replaybuf import ArraySpec
from replaybuf.errors import EmptyBufferError
from shared_workers import Episodes, buffers  # noqa: F401

pytestmark = pytest.mark.timeout(120)

SPEC = {"id": ArraySpec((), np.int64), "done": ArraySpec((), np.bool_)}
BETA = 0.5


class Model(Episodes):
    """``Episodes`` with priorities (alpha 1, epsilon 0: mass = priority) as the learner keeps them."""

    def __init__(self, buffer, seed=0):
        super().__init__(buffer, seed)
        self.priority: dict[int, float] = {}
        self.pending: list[int] = []  # added since the learner last took steps in
        self.largest = 1.0

    def add(self, w, steps, p_end=0.3):
        before = len(self.dones[w])
        super().add(w, steps, p_end)
        streams, batch = self.buffer.writers * self.buffer.batch_size, self.buffer.batch_size
        for t in range(before, len(self.dones[w])):
            self.pending.extend(t * streams + w * batch + s for s in range(batch))

    def take_in(self):
        """What a draw or an update does first: new steps get the largest priority so far."""
        for i in self.pending:
            self.priority[i] = self.largest
        self.pending = []

    def update(self, ids, values):
        self.take_in()
        self.buffer.update_priorities(ids, values)
        stored = self.stored()
        for i, value in zip(ids.tolist(), values.tolist(), strict=True):
            if i in stored:
                self.priority[i] = value
        self.largest = max(self.largest, float(values.max()))

    def stored(self):
        streams, batch = self.buffer.writers * self.buffer.batch_size, self.buffer.batch_size
        ids = set()
        for w, rows in self.dones.items():
            for t in range(max(0, len(rows) - self.buffer.max_length), len(rows)):
                ids.update(t * streams + w * batch + s for s in range(batch))
        return ids


def assert_draws_match(buffer, model, size, draws=60):
    model.take_in()
    valid = model.valid(size)
    total = sum(model.priority[i] for i in valid)
    smallest = min(model.priority[i] for i in model.stored())
    seen = set()
    for _ in range(draws):
        items, info = buffer.get_next(32, size)
        ids = np.asarray(info.ids)
        np.testing.assert_array_equal(items["id"], ids)  # the records read are the windows drawn
        starts = ids[:, 0].tolist()
        assert set(starts) <= valid
        mass = np.array([model.priority[i] for i in starts])
        np.testing.assert_allclose(info.probabilities, mass / total, rtol=1e-5)
        np.testing.assert_allclose(info.weights, (mass / smallest) ** -BETA, rtol=1e-5)
        seen.update(starts)
    assert seen == valid  # every valid start is reachable (none has mass 0 here)


def make(buffers, **kwargs):
    return buffers(
        SPEC,
        sampler="prioritized",
        alpha=1.0,
        beta=BETA,
        epsilon=0.0,
        respect_episodes=True,
        episode_end_field="done",
        **kwargs,
    )


@pytest.mark.parametrize("size", [1, 2, 3])
def test_windows_by_priority_match_brute_force_as_writers_add_wrap_and_priorities_change(buffers, size):
    buffer = make(buffers, writers=2, batch_size=2, max_length=6, seed=1)
    model = Model(buffer, seed=size)
    model.add(0, 4)
    model.add(1, 2)
    assert_draws_match(buffer, model, size)
    ids = np.array(sorted(model.stored()))
    model.update(ids, model.rng.uniform(0.5, 3.0, ids.size))
    assert_draws_match(buffer, model, size)
    model.add(0, 3)  # writer 0 wraps (7 steps in a ring of 6): new steps come in at the largest priority
    model.add(1, 1)
    assert_draws_match(buffer, model, size)
    items, info = buffer.get_next(16, size)
    model.update(np.asarray(info.ids)[:, 0], model.rng.uniform(0.1, 5.0, 16))  # a learner's update
    assert_draws_match(buffer, model, size)
    model.add(1, 20)  # writer 1 wraps twice between two draws: its windows start over
    assert_draws_match(buffer, model, size)
    model.close()


def test_a_window_tree_kept_for_one_length_follows_what_happened_while_another_was_drawn(buffers):
    buffer = make(buffers, writers=1, batch_size=3, max_length=8, seed=2)
    model = Model(buffer, seed=7)
    model.add(0, 5)
    assert_draws_match(buffer, model, 3)
    for _ in range(3):  # adds and updates seen only through windows of 2 ...
        model.add(0, 2)
        assert_draws_match(buffer, model, 2)
        ids = np.array(sorted(model.stored()))[::2]
        model.update(ids, model.rng.uniform(0.5, 2.0, ids.size))
    assert_draws_match(buffer, model, 3)  # ... are in the tree of windows of 3 when it is drawn again
    model.close()


def test_no_window_inside_an_episode_raises_and_clear_and_load_keep_priorities(buffers, tmp_path):
    buffer = make(buffers, writers=2, batch_size=1, max_length=8, seed=3)
    model = Model(buffer, seed=5)
    model.add(0, 5, p_end=1.0)  # episodes of one step: no window of 2
    with pytest.raises(EmptyBufferError, match="num_steps=2: no stored episode holds 2 steps; .* shorter windows$"):
        buffer.get_next(4, 2)
    model.add(1, 6, p_end=0.3)
    ids = np.array(sorted(model.stored()))
    model.update(ids, model.rng.uniform(0.5, 4.0, ids.size))
    assert_draws_match(buffer, model, 2)
    buffer.save(tmp_path / "ckpt")
    buffer.clear()
    with pytest.raises(EmptyBufferError, match="is empty"):
        buffer.get_next(1, 2)
    buffer.load(tmp_path / "ckpt")  # priorities from the checkpoint, positions read again from the records
    assert_draws_match(buffer, model, 2)
    model.close()


@pytest.mark.parametrize("size", [1, 2])
def test_windows_of_steps_being_overwritten_leave_the_draw(buffers, size):
    buffer = make(buffers, batch_size=2, max_length=4, seed=6)
    writer = buffer.writer(0, flush_every=2)
    for t in range(4):  # one episode: no end
        writer.add_batch({"id": writer.ids(t), "done": np.zeros(2, bool)})
    buffer.get_next(1, size)  # the learner takes steps 0-3 in
    seen = []

    def sample_mid_write(handle) -> None:  # steps 4-5 are copied over steps 0-1, not committed
        items, info = buffer.get_next(200, size)
        ids = np.asarray(info.ids)
        np.testing.assert_array_equal(items["id"], ids)
        seen.extend((ids[:, 0] // 2).tolist())
        starts = 3 - size  # steps 2.. whose window ends by step 3, two streams each
        np.testing.assert_allclose(info.probabilities, 1 / (2 * starts))

    writer._after_write = sample_mid_write
    for t in (4, 5):
        writer.add_batch({"id": writer.ids(t), "done": np.zeros(2, bool)})
    assert set(seen) == set(range(2, 4 - size + 1))
    writer.close()
