"""The samplers' numba kernels (``replaybuf[fast]``), loaded on first use: a kernel module is
compiled (or loaded from numba's disk cache) by its ``warm_up()``; without numba the sampler
keeps its NumPy twin."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["load_kernel"]


def load_kernel(module: str, name: str) -> Any:
    """``replaybuf.samplers.<module>.<name>`` after the module's ``warm_up()``, or None without numba."""
    try:
        kernels = importlib.import_module(f"replaybuf.samplers.{module}")
        kernels.warm_up()
    except ImportError:
        return None
    return getattr(kernels, name)
