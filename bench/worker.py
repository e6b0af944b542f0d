"""Run one adapter module's rows in this process and print one JSON line per figure.

Usage: ``python bench/worker.py ADAPTER SIZES [ROW ...]``. ADAPTER names a module in
bench/libs/; it maps library labels to ``{row key: factory}``. A factory takes the Sizes
and returns either ``run(n)`` (performs n operations, timed here) or a number (a measured
figure such as RSS per item), or raises ``Missing`` to say why the row cannot run. Any
other exception becomes a missing row with the error, and the other rows go on.
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROW_BY_KEY, SIZES, measure  # noqa: E402
from libs import NOTES, Missing  # noqa: E402


def emit(**record) -> None:
    print("BENCH " + json.dumps(record), flush=True)


def main(adapter: str, size_name: str, only: list[str]) -> int:
    sizes = SIZES[size_name]
    module = importlib.import_module(f"libs.{adapter}")
    for lib, factories in module.LIBS.items():
        emit(lib=lib, version=module.version(lib))
        for key, factory in factories.items():
            if only and key not in only:
                continue
            row = ROW_BY_KEY[key]
            try:
                made = factory(sizes)
                if callable(made):
                    value = row.per_call / measure(made, sizes)
                else:
                    value = float(made)
                emit(lib=lib, row=key, value=value, note="; ".join(NOTES))
            except Missing as exc:
                emit(lib=lib, row=key, missing=str(exc))
            except Exception as exc:  # one failing row must not stop the others
                traceback.print_exc()
                emit(lib=lib, row=key, missing=f"{type(exc).__name__}: {exc}"[:300])
            made = None
            NOTES.clear()
            gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
