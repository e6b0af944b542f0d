"""``host_sync_forbidden()``: a block in which any CUDA operation that waits for the GPU raises.

``torch.cuda.set_sync_debug_mode("error")`` is process-wide and, the first time in a process,
torch announces it with ``UserWarning: Synchronization debug mode is a prototype feature``,
which the suite's ``filterwarnings = error`` turns into an exception right after the mode is
set. So the mode is set inside the ``try`` whose ``finally`` restores the previous one, and
that one announcement is expected (recorded and checked), while any other warning still
surfaces as usual: a test that fails cannot leave every later CUDA call in its process failing.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch

PROTOTYPE_NOTICE = "Synchronization debug mode is a prototype feature"


@contextlib.contextmanager
def host_sync_forbidden() -> Iterator[None]:
    """Synchronising CUDA calls raise inside the block; the previous mode is restored after it."""
    torch.cuda.synchronize()  # work queued before the block may finish here
    before = torch.cuda.get_sync_debug_mode()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("error")
        for warning in caught:
            if PROTOTYPE_NOTICE not in str(warning.message):
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)
