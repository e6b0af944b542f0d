"""TF-Agents 0.19.0's tf_uniform_replay_buffer_test.py, unmodified, against
replaybuf.tf_agents.tf_uniform_replay_buffer.TFUniformReplayBuffer (see conftest.py)."""

from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.replay_buffers.tf_uniform_replay_buffer_test import TFUniformReplayBufferTest  # noqa: F401

from replaybuf.tf_agents import tf_uniform_replay_buffer as ours


def test_the_class_under_test_is_replaybufs():
    assert tf_uniform_replay_buffer.TFUniformReplayBuffer is ours.TFUniformReplayBuffer
