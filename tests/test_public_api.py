"""The public names, and that importing replaybuf imports no framework."""

from __future__ import annotations

import subprocess
import sys

import replaybuf

CORE_NAMES = {
    "ArgumentError",
    "ArraySpec",
    "BoundedArraySpec",
    "BufferInfo",
    "EmptyBufferError",
    "PriorityError",
    "PyUniformReplayBuffer",
    "ReplayBuffer",
    "ReplayBufferError",
    "SpecError",
    "SpecMismatchError",
    "TensorSpec",
    "UniformReplayBuffer",
    "as_data_spec",
    "PrioritizedReplayBuffer",
    "Trajectory",
    "StepType",
    "StepDriver",
    "EpisodeDriver",
    "CheckpointError",
    "collect_data_spec",
    "FrameStackReplayBuffer",
    "PrioritizedFrameStackReplayBuffer",
    "MinSize",
    "SampleToInsertRatio",
    "RateLimiterTimeout",
    "BufferClosedError",
    "SharedReplayBuffer",
    "DatasetError",
    "WritersGoneError",
    "HindsightRelabel",
    "MixedReplayBuffer",
    "linear_schedule",
}


def test_backend_modules_export_their_classes():
    import replaybuf.mindspore_rl
    import replaybuf.tf
    import replaybuf.torch

    assert hasattr(replaybuf.tf, "TFUniformReplayBuffer")
    assert hasattr(replaybuf.torch, "TorchUniformReplayBuffer")
    assert hasattr(replaybuf.mindspore_rl, "ReplayBuffer")


def test_minari_module_exports_load_and_export():
    import replaybuf.minari

    assert replaybuf.minari.__all__ == ["export", "load"]


def test_all_names_the_public_api():
    assert CORE_NAMES <= set(replaybuf.__all__)
    for name in replaybuf.__all__:
        assert hasattr(replaybuf, name), name


def test_import_pulls_in_no_framework():
    frameworks = ("tensorflow", "torch", "gymnasium", "jax", "ray", "minari", "h5py", "stable_baselines3")
    code = f"import sys, replaybuf; print(sorted(m for m in {frameworks!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
