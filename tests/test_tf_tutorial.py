"""The seed tutorial's TFUniformReplayBuffer code, end to end, asserting what it prints."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from replaybuf.tf import TFUniformReplayBuffer  # noqa: E402


def shapes(nest):
    return tf.nest.map_structure(lambda t: tuple(t.shape), nest)


def test_tutorial_tf_uniform_replay_buffer():
    data_spec = (
        tf.TensorSpec([3], tf.float32, "action"),
        (tf.TensorSpec([5], tf.float32, "lidar"), tf.TensorSpec([3, 2], tf.float32, "camera")),
    )
    batch_size = 32
    max_length = 1000
    replay_buffer = TFUniformReplayBuffer(data_spec, batch_size=batch_size, max_length=max_length)

    action = tf.constant(1 * np.ones(data_spec[0].shape.as_list(), dtype=np.float32))
    lidar = tf.constant(2 * np.ones(data_spec[1][0].shape.as_list(), dtype=np.float32))
    camera = tf.constant(3 * np.ones(data_spec[1][1].shape.as_list(), dtype=np.float32))
    values = (action, (lidar, camera))
    values_batched = tf.nest.map_structure(lambda t: tf.stack([t] * batch_size), values)
    replay_buffer.add_batch(values_batched)

    for _ in range(5):
        replay_buffer.add_batch(values_batched)
    sample = replay_buffer.get_next(sample_batch_size=10, num_steps=1)
    assert len(sample) == 2  # print(len(sample)) -> 2
    assert shapes(sample[0]) == ((10, 1, 3), ((10, 1, 5), (10, 1, 3, 2)))

    dataset = replay_buffer.as_dataset(sample_batch_size=4, num_steps=2)
    iterator = iter(dataset)
    trajectories = []
    for _ in range(3):
        t, _ = next(iterator)
        trajectories.append(t)
    assert shapes(trajectories) == [((4, 2, 3), ((4, 2, 5), (4, 2, 3, 2)))] * 3
    np.testing.assert_array_equal(trajectories[2][0].numpy(), 1)
    np.testing.assert_array_equal(trajectories[2][1][1].numpy(), 3)

    trajectories = replay_buffer.gather_all()
    # The tutorial prints 46 where its cells ran several times; six adds hold 6 steps.
    assert shapes(trajectories) == ((32, 6, 3), ((32, 6, 5), (32, 6, 3, 2)))
    np.testing.assert_array_equal(trajectories[1][0].numpy(), 2)
    assert replay_buffer.capacity == 32_000
    assert int(replay_buffer.num_frames()) == 6 * 32
