"""The published suites: one module each, declaring its workloads and the processes that time them.

A suite module (``bench/suites/NAME.py``, listed in ``SUITES``) has:

- ``WORKLOADS``: a list of ``harness.Workload`` (what is timed, what a call moves, the
  references and peers beside it, the goal);
- ``JOBS``: a list of ``Job``: the processes the runner starts, each in its environment;
- ``measure(job, size, keys)``: called inside that process by bench/worker.py; it times
  the job's implementations of the workloads (``keys`` only, when given) at ``size``
  ("full", "quick" or "tiny") and emits their records through the harness.

The runner reads the declarations in the main environment: a suite module imports at the
top only what that environment has, and a peer's framework inside ``measure``.
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType

SUITES = (
    "peers",
    "tf",
    "jax_core",
    "frames",
    "frames_compressed",
    "writers",
    "ray_shards",
    "minari_load",
    "sb3",
    "her",
    "sequences",
    "sample_rules",
    "gpu",
    "jax_gpu",
    "rllib",
)


@dataclasses.dataclass(frozen=True)
class Job:
    """One process of a suite: its name (``--libs``), environment (bench/.venvs/ENV; None: the
    runner's own interpreter), the labels of what it measures, and the adapters it loads.
    ``workloads``: the keys it measures (empty: every workload of the suite); ``device``: the
    process may see the accelerators (the runner hides them from the others); ``timeout``:
    seconds at full size, where the runner's default is too short."""

    name: str
    env: str | None
    labels: tuple[str, ...]
    adapters: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    device: bool = False
    timeout: float = 0.0


def load(name: str) -> ModuleType:
    """The suite module ``name``."""
    return importlib.import_module(f"suites.{name}")
