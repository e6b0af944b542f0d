"""TF-Agents 0.19.0's py_replay_buffers_test.py, unmodified, against
replaybuf.tf_agents.py_uniform_replay_buffer.PyUniformReplayBuffer (see conftest.py). Its
``WithHashing`` cases test TF-Agents' own PyHashedReplayBuffer, which stays TF-Agents'."""

from tf_agents.replay_buffers import py_uniform_replay_buffer
from tf_agents.replay_buffers.py_replay_buffers_test import FrameBufferTest, PyUniformReplayBufferTest  # noqa: F401

from replaybuf.tf_agents import py_uniform_replay_buffer as ours


def test_the_class_under_test_is_replaybufs():
    # the parameters of TF-Agents' cases are bound when its module is imported, which
    # conftest.py makes sure happens after the swap
    assert py_uniform_replay_buffer.PyUniformReplayBuffer is ours.PyUniformReplayBuffer
