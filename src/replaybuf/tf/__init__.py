"""TensorFlow storage: ``TFUniformReplayBuffer``, TF-Agents' buffer on tf.Variables.

Importing this package imports TensorFlow; ``import replaybuf`` alone never does.
"""

from replaybuf.tf.buffer import TFUniformReplayBuffer

__all__ = ["TFUniformReplayBuffer"]
