"""numba's tree kernels for the tests that run them beside NumPy's: with numba installed
they must load, as the library's fallback turns any ImportError of theirs into NumPy's."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from replaybuf.samplers.sumtree import kernels


def compiled_tree_kernels() -> ModuleType | None:
    """``replaybuf.samplers._tree_kernels`` (imported plainly: its errors fail the test), as
    ``kernels(None)`` must choose it; None without numba."""
    if importlib.util.find_spec("numba") is None:
        return None
    import replaybuf.samplers._tree_kernels as tree_kernels

    assert kernels(None) is tree_kernels, "numba is installed but the compiled tree kernels were not chosen"
    return tree_kernels
