"""The seed tutorial's buffer section, with the NumPy buffers, asserting what it prints."""

from __future__ import annotations

import numpy as np
import optree

import replaybuf

DATA_SPEC = (
    replaybuf.TensorSpec([3], np.float32, "action"),
    (replaybuf.TensorSpec([5], np.float32, "lidar"), replaybuf.TensorSpec([3, 2], np.float32, "camera")),
)


def shapes(nest):
    return optree.tree_map(lambda t: tuple(t.shape), nest)


def test_tutorial_buffer_section():
    batch_size, max_length = 32, 1000
    replay_buffer = replaybuf.UniformReplayBuffer(DATA_SPEC, batch_size=batch_size, max_length=max_length)

    action = 1 * np.ones(DATA_SPEC[0].shape, dtype=np.float32)
    lidar = 2 * np.ones(DATA_SPEC[1][0].shape, dtype=np.float32)
    camera = 3 * np.ones(DATA_SPEC[1][1].shape, dtype=np.float32)
    values = (action, (lidar, camera))
    values_batched = optree.tree_map(lambda t: np.stack([t] * batch_size), values)
    replay_buffer.add_batch(values_batched)
    for _ in range(5):
        replay_buffer.add_batch(values_batched)

    sample = replay_buffer.get_next(sample_batch_size=10, num_steps=1)
    assert len(sample) == 2
    assert shapes(sample[0]) == ((10, 1, 3), ((10, 1, 5), (10, 1, 3, 2)))

    iterator = iter(replay_buffer.as_dataset(sample_batch_size=4, num_steps=2))
    trajectories = []
    for _ in range(3):
        t, _ = next(iterator)
        trajectories.append(t)
    assert shapes(trajectories) == [((4, 2, 3), ((4, 2, 5), (4, 2, 3, 2)))] * 3
    np.testing.assert_array_equal(trajectories[0][1][1], 3)

    trajectories = replay_buffer.gather_all()
    assert shapes(trajectories) == ((32, 6, 3), ((32, 6, 5), (32, 6, 3, 2)))
    assert replay_buffer.capacity == 32_000


def test_tutorial_py_uniform_buffer():
    replay_buffer_capacity = 1000 * 32
    py_replay_buffer = replaybuf.PyUniformReplayBuffer(capacity=replay_buffer_capacity, data_spec=DATA_SPEC)
    batch = optree.tree_map(lambda s: np.ones((7,) + s.shape, s.dtype), DATA_SPEC)
    py_replay_buffer.add_batch(batch)
    assert py_replay_buffer.num_frames() == 7
    assert shapes(py_replay_buffer.gather_all()) == ((1, 7, 3), ((1, 7, 5), (1, 7, 3, 2)))
    items, info = py_replay_buffer.get_next(sample_batch_size=4, num_steps=2)
    assert shapes(items) == ((4, 2, 3), ((4, 2, 5), (4, 2, 3, 2)))
    assert info.ids.shape == (4, 2)
