"""TF-Agents 0.19.0's dynamic_step_driver_test.py and dynamic_episode_driver_test.py,
unmodified, with replaybuf's TFUniformReplayBuffer as the buffer they fill (conftest.py)."""

from tf_agents.drivers.dynamic_episode_driver_test import DynamicEpisodeDriverTest  # noqa: F401
from tf_agents.drivers.dynamic_step_driver_test import DynamicStepDriverTest  # noqa: F401
