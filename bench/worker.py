"""Run adapter modules' rows in this process and print one JSON line per figure.

Usage: ``python bench/worker.py ADAPTER[,ADAPTER...] SIZES [ROW ...]``. Each ADAPTER names
a module in bench/libs/ mapping library labels to ``{row key: factory}``. A factory takes
the Sizes and returns either ``run(n)`` (performs n operations, timed here) or a number (a
measured figure such as RSS per item), or raises ``Missing`` to say why the row cannot
run. Any other exception becomes a missing row with the error, and the rest go on.

Rows are taken one at a time and, within a row, the repetitions of every library in this
process are interleaved (A B A B ...), so that load from other processes on this shared
machine falls on all of them alike; each figure is the median of its repetitions.
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROWS, SIZES, calibrate, median, time_rep, warm_up  # noqa: E402
from libs import NOTES, Missing, begin_row  # noqa: E402


def emit(**record) -> None:
    print("BENCH " + json.dumps(record), flush=True)


def _failed(lib: str, key: str, exc: Exception) -> None:
    if isinstance(exc, Missing):
        emit(lib=lib, row=key, missing=str(exc))
    else:  # one failing row must not stop the others
        traceback.print_exc()
        emit(lib=lib, row=key, missing=f"{type(exc).__name__}: {exc}"[:300])


def main(adapters: str, size_name: str, only: list[str]) -> int:
    sizes = SIZES[size_name]
    libs = []  # (label, factories)
    for adapter in adapters.split(","):
        module = importlib.import_module(f"libs.{adapter}")
        for lib, factories in module.LIBS.items():
            emit(lib=lib, version=module.version(lib))
            libs.append((lib, factories))
    for row in ROWS:
        if only and row.key not in only:
            continue
        begin_row(row.key)
        timed = []  # [lib, run, n, times, note]
        for lib, factories in libs:
            if row.key not in factories:
                continue
            NOTES.clear()
            try:
                made = factories[row.key](sizes)
                note = "; ".join(NOTES)
                if callable(made):
                    timed.append([lib, made, calibrate(made, sizes), [], note])
                else:
                    emit(lib=lib, row=row.key, value=float(made), note=note)
            except Exception as exc:
                _failed(lib, row.key, exc)
        for entry in timed:
            warm_up(entry[1], entry[2], sizes)
        for _ in range(sizes.reps):
            for entry in timed:
                if entry[3] is not None:
                    try:
                        entry[3].append(time_rep(entry[1], entry[2]))
                    except Exception as exc:
                        _failed(entry[0], row.key, exc)
                        entry[3] = None
        for lib, _, _, times, note in timed:
            if times:
                emit(lib=lib, row=row.key, value=row.per_call / median(times), note=note)
        timed = None
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
