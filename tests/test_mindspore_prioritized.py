"""``replaybuf.mindspore_rl.ReplayBuffer(prioritized=True)``: rows drawn by priority with the
prioritized buffers' rule, ``(ids, weights, *columns)`` samples, priorities at insert."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import replaybuf
from replaybuf import ArgumentError, PriorityError

torch = pytest.importorskip("torch")
from replaybuf.mindspore_rl import ReplayBuffer  # noqa: E402

SHAPES, TYPES = [(2,), ()], [np.float32, np.int64]


def make(**options):
    return ReplayBuffer(4, 6, SHAPES, TYPES, device="cpu", prioritized=True, alpha=1.0, epsilon=0.0, **options)


def rows(ids):
    ids = np.asarray(ids, np.int64)
    return [np.stack([ids, -ids], -1).astype(np.float32), ids]


def test_samples_are_ids_weights_and_columns_drawn_by_priority():
    rb = ReplayBuffer(20_000, 6, SHAPES, TYPES, device="cpu", prioritized=True, alpha=1.0, epsilon=0.0, seed=0)
    rb.insert(rows(range(3)), priorities=[1.0, 2.0, 7.0])
    rb.insert(rows([3]))  # the largest so far: 7
    ids, weights, x, id_column = rb.sample()
    assert ids.dtype == torch.int64 and weights.dtype == torch.float32
    np.testing.assert_array_equal(id_column.numpy(), ids.numpy())
    np.testing.assert_array_equal(x[:, 0].numpy(), ids.numpy().astype(np.float32))
    observed = np.bincount(ids.numpy(), minlength=4)
    assert stats.chisquare(observed, np.array([1, 2, 7, 7]) / 17 * ids.numel()).pvalue > 1e-4
    np.testing.assert_allclose(weights.numpy()[ids.numpy() == 0], 1.0)  # the rarest: the largest weight


def test_update_priorities_takes_tensors_and_ignores_overwritten_rows():
    rb = make(seed=1)
    rb.insert(rows(range(6)))
    rb.update_priorities(torch.tensor([0, 5]), torch.tensor([3.0, 9.0]))
    rb.insert(rows([6]))  # overwrites id 0: its update is stale from now on
    rb.update_priorities(np.array([0]), np.array([100.0]))
    mass = rb.state_dict()["priorities"]["mass"].numpy()
    np.testing.assert_allclose(mass, [1, 1, 1, 1, 9, 9])  # ids 1..6 in id order
    with pytest.raises(PriorityError, match="ids: expected ids of added items"):
        rb.update_priorities(np.array([50]), np.array([1.0]))


def test_checkpoints_move_to_and_from_a_numpy_prioritized_buffer(tmp_path):
    rb = make(seed=2)
    rb.insert(rows(range(8)), priorities=np.arange(1.0, 9.0))
    rb.save(tmp_path / "ckpt")
    numpy_rb = replaybuf.PrioritizedReplayBuffer(
        {"0": replaybuf.ArraySpec((2,), np.float32), "1": replaybuf.ArraySpec((), np.int64)}, 1, 6, alpha=1.0
    )
    with pytest.raises(replaybuf.CheckpointError, match=r"state\['spec'\]"):
        numpy_rb.load(tmp_path / "ckpt")  # a dict spec is not the columns' tuple
    numpy_rb = replaybuf.PrioritizedReplayBuffer(
        (replaybuf.ArraySpec((2,), np.float32), replaybuf.ArraySpec((), np.int64)), 1, 6, alpha=1.0, epsilon=0.0
    )
    numpy_rb.load(tmp_path / "ckpt")
    np.testing.assert_allclose(numpy_rb.state_dict()["priorities"]["mass"], np.arange(3.0, 9.0))
    twin = make(seed=3)
    twin.load_state_dict(rb.state_dict())
    np.testing.assert_array_equal(twin.sample()[0].numpy(), rb.sample()[0].numpy())


def test_prioritized_options_and_priorities_are_refused_on_a_uniform_buffer():
    with pytest.raises(ArgumentError, match="alpha: only used with prioritized=True, got alpha=0.5"):
        ReplayBuffer(4, 6, SHAPES, TYPES, alpha=0.5)
    with pytest.raises(ArgumentError, match="prioritized: expected True or False, got 1"):
        ReplayBuffer(4, 6, SHAPES, TYPES, prioritized=1)
    rb = ReplayBuffer(4, 6, SHAPES, TYPES, device="cpu")
    with pytest.raises(ArgumentError, match="priorities: expected None without prioritized=True"):
        rb.insert(rows([0]), priorities=[1.0])
    with pytest.raises(ArgumentError, match="update_priorities: this ReplayBuffer was made without prioritized"):
        rb.update_priorities(np.array([0]), np.array([1.0]))
    assert rb.size() == 0


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [([1.0], ArgumentError, r"priorities: expected shape \(2,\)"), ([1.0, np.nan], PriorityError, "priorities")],
)
def test_bad_priorities_at_insert_write_nothing(bad, error, message):
    rb = make(seed=0)
    rb.insert(rows([0]))
    with pytest.raises(error, match=message):
        rb.insert(rows([1, 2]), priorities=bad)
    assert rb.size() == 1 and rb.state_dict()["priorities"]["max_priority"] == 1.0
