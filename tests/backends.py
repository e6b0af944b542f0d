"""Every buffer class the conformance suite runs against, behind one factory signature.

A backend is ``Backend(name, make, to_numpy)``: ``make(data_spec, batch_size, max_length,
seed)`` builds a buffer with the common API; ``to_numpy`` turns one returned leaf (a NumPy
array, tf.Tensor or torch.Tensor) into a NumPy array. Backends whose framework is missing
are skipped by their own ``pytest.importorskip`` inside ``make`` (CI installs every extra,
so a skip there is a failure to investigate).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import replaybuf
import replaybuf.shared


@dataclass(frozen=True)
class Backend:
    name: str
    make: Callable[..., Any]
    to_numpy: Callable[[Any], np.ndarray] = np.asarray
    # PyUniform-like buffers hold one stream whatever batch_size the test wanted.
    single_stream: bool = False
    # a random dataset that keeps draws in flight (the Ray shards) may hand out
    # ``dataset_draw_ahead - 1`` elements drawn before an add; every other one is exact
    dataset_may_lag: bool = False
    # pytest marks of every test case run on this backend (``cuda`` for the GPU entries)
    marks: tuple = ()


def _numpy_uniform(data_spec, batch_size, max_length, seed):
    return replaybuf.UniformReplayBuffer(data_spec, batch_size=batch_size, max_length=max_length, seed=seed)


def _numpy_py_uniform(data_spec, batch_size, max_length, seed):
    assert batch_size == 1, "single_stream backends are only built with batch_size=1"
    return replaybuf.PyUniformReplayBuffer(data_spec, capacity=max_length, seed=seed)


def _torch_backend(device: str):
    """``replaybuf.torch``, skipping the test where torch or (for ``cuda``) a CUDA device is missing."""
    torch = pytest.importorskip("torch")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import replaybuf.torch

    return replaybuf.torch


def _torch_uniform(device: str):
    def make(data_spec, batch_size, max_length, seed):
        return _torch_backend(device).TorchUniformReplayBuffer(
            data_spec, batch_size=batch_size, max_length=max_length, device=device, seed=seed
        )

    return make


def _torch_py_uniform(device: str):
    def make(data_spec, batch_size, max_length, seed):
        assert batch_size == 1, "single_stream backends are only built with batch_size=1"
        return _torch_backend(device).TorchPyUniformReplayBuffer(
            data_spec, capacity=max_length, device=device, seed=seed
        )

    return make


def _torch_prioritized(device: str, **options):
    def make(data_spec, batch_size, max_length, seed):
        # as numpy-prioritized: no priority updates here, so sampling must be exactly uniform
        return _torch_backend(device).TorchPrioritizedReplayBuffer(
            data_spec, batch_size=batch_size, max_length=max_length, device=device, seed=seed, **options
        )

    return make


def _torch_to_numpy(value):
    """A torch tensor (on any device) as NumPy; anything else through np.asarray."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _tf_uniform(data_spec, batch_size, max_length, seed):
    pytest.importorskip("tensorflow")
    import replaybuf.tf as tf_backend

    return tf_backend.TFUniformReplayBuffer(data_spec, batch_size=batch_size, max_length=max_length, seed=seed)


def _tf_to_numpy(value):
    """A tf.Tensor as NumPy (through .numpy()); anything else through np.asarray."""
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


# memmap storages live in folders under one temporary root, removed when the tests exit
# (a factory cannot take pytest's tmp_path).
_MEMMAP_ROOT = tempfile.mkdtemp(prefix="replaybuf-memmap-")
atexit.register(shutil.rmtree, _MEMMAP_ROOT, ignore_errors=True)


def _numpy_memmap(data_spec, batch_size, max_length, seed):
    path = os.path.join(tempfile.mkdtemp(dir=_MEMMAP_ROOT), "buffer")
    return replaybuf.UniformReplayBuffer(
        data_spec, batch_size=batch_size, max_length=max_length, seed=seed, storage="memmap", path=path
    )


def _numpy_py_memmap(data_spec, batch_size, max_length, seed):
    assert batch_size == 1, "single_stream backends are only built with batch_size=1"
    path = os.path.join(tempfile.mkdtemp(dir=_MEMMAP_ROOT), "buffer")
    return replaybuf.PyUniformReplayBuffer(data_spec, capacity=max_length, seed=seed, storage="memmap", path=path)


def _numpy_columns(data_spec, batch_size, max_length, seed):
    return replaybuf.UniformReplayBuffer(
        data_spec, batch_size=batch_size, max_length=max_length, seed=seed, storage="columns"
    )


def _numpy_py_columns(data_spec, batch_size, max_length, seed):
    assert batch_size == 1, "single_stream backends are only built with batch_size=1"
    return replaybuf.PyUniformReplayBuffer(data_spec, capacity=max_length, seed=seed, storage="columns")


def _numpy_prioritized(data_spec, batch_size, max_length, seed):
    # No test here updates priorities, so every item keeps the initial priority and PER
    # must draw exactly uniformly: the suite checks its probabilities like the others'.
    return replaybuf.PrioritizedReplayBuffer(data_spec, batch_size=batch_size, max_length=max_length, seed=seed)


def _numpy_frames(data_spec, batch_size, max_length, seed):
    # The camera leaf (2 x 2) read as a stack of 2 frames of 2 pixels: stored once per frame.
    return replaybuf.FrameStackReplayBuffer(
        data_spec, batch_size, max_length, seed=seed, stacked_fields=["observation/camera"]
    )


def _numpy_frames_compressed(codec):
    def make(data_spec, batch_size, max_length, seed):
        # as numpy-frames, each frame kept compressed with ``codec`` (the compress extra)
        return replaybuf.FrameStackReplayBuffer(
            data_spec, batch_size, max_length, seed=seed, stacked_fields=["observation/camera"], compression=codec
        )

    return make


def _shared(data_spec, batch_size, max_length, seed):
    # one writer, driven from this process (its add_batch writes through writer 0)
    return replaybuf.shared.SharedReplayBuffer(
        data_spec, writers=1, batch_size=batch_size, max_length=max_length, seed=seed
    )


def _jax_uniform(data_spec, batch_size, max_length, seed):
    pytest.importorskip("jax")
    import replaybuf.jax as jax_backend

    return jax_backend.JaxReplayBuffer(data_spec, batch_size=batch_size, max_length=max_length, seed=seed)


def _jax_prioritized(data_spec, batch_size, max_length, seed):
    # as numpy-prioritized: no priority updates here, so sampling must be exactly uniform
    pytest.importorskip("jax")
    import replaybuf.jax as jax_backend

    return jax_backend.JaxReplayBuffer(
        data_spec, batch_size=batch_size, max_length=max_length, seed=seed, sampler="prioritized"
    )


_RAY_BUFFERS: dict = {}  # (batch_size, max_length, seed) -> a ShardedReplayBuffer, the 4 latest


def local_ray():
    """Ray for the sharded backends and the tests/test_ray_*.py modules that need a plain local
    session: started once (2 CPUs, this host) at first use and shut down when the tests exit
    (a start costs seconds); a module that needs its own cluster shuts it down first."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        atexit.register(ray.shutdown)
        _RAY_BUFFERS.clear()  # buffers of an earlier session (shut down by another module) are gone
    return ray


def _ray_sharded(data_spec, batch_size, max_length, seed):
    # two shard actors when there are streams for both (B=3: shards of 2 and 1 streams).
    # Starting shard actors (a process each) costs seconds on 2 cores, so a buffer of the same
    # geometry is reused after clear() (part of the contract: a cleared buffer is a new one).
    local_ray()
    from replaybuf.ray import ShardedReplayBuffer

    key = (batch_size, max_length, seed)
    buffer = _RAY_BUFFERS.pop(key, None)
    if buffer is None or buffer.data_spec != replaybuf.as_data_spec(data_spec):
        buffer = ShardedReplayBuffer(
            data_spec, shards=min(2, batch_size), batch_size=batch_size, max_length=max_length, seed=seed
        )
    else:
        buffer.clear()
    _RAY_BUFFERS[key] = buffer
    if len(_RAY_BUFFERS) > 4:
        _RAY_BUFFERS.pop(next(iter(_RAY_BUFFERS))).shutdown()
    return buffer


BACKENDS: list[Backend] = [
    Backend("numpy", _numpy_uniform),
    Backend("numpy-py", _numpy_py_uniform, single_stream=True),
    Backend("numpy-memmap", _numpy_memmap),
    Backend("numpy-py-memmap", _numpy_py_memmap, single_stream=True),
    Backend("numpy-columns", _numpy_columns),
    Backend("numpy-py-columns", _numpy_py_columns, single_stream=True),
    Backend("torch-cpu", _torch_uniform("cpu"), _torch_to_numpy),
    Backend("torch-py-cpu", _torch_py_uniform("cpu"), _torch_to_numpy, single_stream=True),
    Backend("torch-cuda", _torch_uniform("cuda"), _torch_to_numpy, marks=(pytest.mark.cuda,)),
    Backend("torch-py-cuda", _torch_py_uniform("cuda"), _torch_to_numpy, single_stream=True, marks=(pytest.mark.cuda,)),
    Backend("torch-prioritized-cpu", _torch_prioritized("cpu"), _torch_to_numpy),
    Backend("torch-prioritized-cuda", _torch_prioritized("cuda"), _torch_to_numpy, marks=(pytest.mark.cuda,)),
    Backend("torch-prioritized-device-trees-cpu", _torch_prioritized("cpu", tree_device="device"), _torch_to_numpy),
    Backend(
        "torch-prioritized-device-trees-cuda",
        _torch_prioritized("cuda", tree_device="device"),
        _torch_to_numpy,
        marks=(pytest.mark.cuda,),
    ),
    Backend("tf", _tf_uniform, _tf_to_numpy),
    Backend("numpy-prioritized", _numpy_prioritized),
    Backend("numpy-frames", _numpy_frames),
    Backend("numpy-frames-zstd", _numpy_frames_compressed("zstd")),
    Backend("numpy-frames-lz4", _numpy_frames_compressed("lz4")),
    Backend("shared", _shared),
    Backend("ray-sharded", _ray_sharded, dataset_may_lag=True),
    Backend("jax", _jax_uniform),
    Backend("jax-prioritized", _jax_prioritized),
]
