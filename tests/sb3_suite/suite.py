"""What the SB3 suite runs: the sdist, which of SB3's classes are swapped for ours, and
which of its test files and tests run (conftest.py applies all three; fetch.py unpacks).

To add a class: one SWAPS entry. To add tests: one SELECTED entry (None: the whole file).
"""

SDIST = "stable-baselines3==2.9.2"

# "SB3 module.name": "our module.name"; every SB3 module that bound SB3's class gets ours
SWAPS = {
    "stable_baselines3.common.buffers.ReplayBuffer": "replaybuf.sb3.buffers.ReplayBuffer",
    "stable_baselines3.common.buffers.DictReplayBuffer": "replaybuf.sb3.buffers.DictReplayBuffer",
    "stable_baselines3.common.buffers.NStepReplayBuffer": "replaybuf.sb3.nstep.NStepReplayBuffer",
    "stable_baselines3.her.her_replay_buffer.HerReplayBuffer": "replaybuf.sb3.her.HerReplayBuffer",
}

# SB3's test file -> the test functions run from it (every parametrization), None: all of them
SELECTED = {
    "test_buffers.py": ["test_replay_buffer_normalization", "test_device_buffer", "test_buffer_dtypes"],
    "test_n_step_replay.py": None,
    "test_save_load.py": ["test_save_load_replay_buffer", "test_warn_buffer"],
    "test_her.py": None,
}
