"""TF-Agents' replay-buffer modules, for a one-line switch from TF-Agents.

``from replaybuf.tf_agents import tf_uniform_replay_buffer, py_uniform_replay_buffer``
gives modules named as TF-Agents' whose classes, ``TFUniformReplayBuffer`` and
``PyUniformReplayBuffer``, take TF-Agents' constructor arguments and behave as TF-Agents'
do where replaybuf's own classes deliberately differ (``variables()`` is a method,
``data_spec`` is the spec as given; the Python buffer's ``get_next`` returns items alone
and its dataset is a ``tf.data.Dataset`` of items), while keeping replaybuf's fixes of
TF-Agents' bugs (docs/tf_agents.md). Importing either module imports TensorFlow.
"""
