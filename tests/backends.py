"""Every buffer class the conformance suite runs against, behind one factory signature.

A backend is ``Backend(name, make, to_numpy)``: ``make(data_spec, batch_size, max_length,
seed)`` builds a buffer with the common API; ``to_numpy`` turns one returned leaf (a NumPy
array, tf.Tensor or torch.Tensor) into a NumPy array. Backends whose framework is missing
are skipped by their own ``pytest.importorskip`` inside ``make`` (CI installs every extra,
so a skip there is a failure to investigate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import replaybuf


@dataclass(frozen=True)
class Backend:
    name: str
    make: Callable[..., Any]
    to_numpy: Callable[[Any], np.ndarray] = np.asarray
    # PyUniform-like buffers hold one stream whatever batch_size the test wanted.
    single_stream: bool = False


def _numpy_uniform(data_spec, batch_size, max_length, seed):
    return replaybuf.UniformReplayBuffer(data_spec, batch_size=batch_size, max_length=max_length, seed=seed)


def _numpy_py_uniform(data_spec, batch_size, max_length, seed):
    assert batch_size == 1, "single_stream backends are only built with batch_size=1"
    return replaybuf.PyUniformReplayBuffer(data_spec, capacity=max_length, seed=seed)


BACKENDS: list[Backend] = [
    Backend("numpy", _numpy_uniform),
    Backend("numpy-py", _numpy_py_uniform, single_stream=True),
]
