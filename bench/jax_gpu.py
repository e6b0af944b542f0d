"""The JAX rows of bench/gpu.py: the functional core inside one jitted, donated ``lax.scan``
per case, beside flashbax where it is importable: the ``jax_core`` suite's cases
(bench/suites/jax_core.py) at the GPU table's capacity. Figures are us per scanned
iteration, the median of the repetitions (one scan each, the cases in turn, timed by
bench/harness.py; a case's ``run`` blocks until its scan is done); the prioritized rows also give their
ratio to our uniform sample of pairs, the quantity issue 33 bounds (prioritized sample +
update at most 2x a uniform sample, on a GPU).
"""

from __future__ import annotations

from importlib.util import find_spec

import jax

import harness
from suites.jax_core import ours_cases, pool

#: the table's rows: its wording of each jax_core case
ROWS = {
    "j1": "J1 add 256",
    "j2": "J2 sample 256",
    "j2b": "J2b sample 256 pairs",
    "j5": "J5 add 256 + sample 256 pairs",
    "j3": "J3 prioritized sample 256 + update",
    "j3c": "J3c prioritized train step (add + sample + update)",
}
FLASHBAX_ROWS = ("j1", "j2", "j2b", "j5")  # flashbax's prioritized buffer is not in this table


def jax_section(tiny: bool, quick: bool, reps: int) -> list[str]:
    capacity = 4096 if tiny else 65536 if quick else 262144
    steps = 5 if tiny else 50
    data = pool(4 if tiny else 64)
    ours = ours_cases(capacity, steps, data)
    runs = {ROWS[key]: ours[key].run for key in ROWS}
    if find_spec("flashbax") is not None:
        from suites.jax_core import flashbax_cases

        theirs = flashbax_cases(capacity, steps, data)
        runs.update({f"fbx {ROWS[key]}": theirs[key].run for key in FLASHBAX_ROWS})
    seconds = harness.medians(runs, harness.Timing(reps, 0.0, 0.0))  # one scan a repetition, after one compiling
    figures = {name: value / steps * 1e6 for name, value in seconds.items()}
    uniform = figures[ROWS["j2b"]]
    lines = [
        f"\nJAX {jax.__version__} on {jax.devices()[0].platform}, capacity {capacity}, {steps} iterations per scan",
        "| case | replaybuf (us) | flashbax (us) | flashbax / replaybuf | / our uniform sample of pairs |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name in ROWS.values():
        mine, other = figures[name], figures.get(f"fbx {name}")
        peer = "" if other is None else f"{other:.1f} | {other / mine:.2f}x"
        per_ratio = f"{mine / uniform:.2f}x" if name.startswith("J3") else ""
        lines.append(f"| {name} | {mine:.1f} | {peer or ' | '} | {per_ratio} |")
    return lines
