"""Runs Stable-Baselines3's own tests with replaybuf.sb3's classes in place of SB3's.

Used only with this folder's pytest.ini (``make test``): before any of SB3's test modules
is imported, each class named in ``suite.SWAPS`` is replaced by ours wherever SB3 bound
it, so SB3's test files (unpacked by fetch.py, unmodified) and SB3's algorithms build and
check our buffers. Only ``suite.SELECTED`` runs. Under any other configuration (the main
suite) nothing here is collected.

The module that defines a swapped class is replaced, in ``sys.modules`` and on its
package, by a copy of its namespace holding ours (what ``from ... import X`` sees); the
original module's own globals stay SB3's, so SB3's classes that remain (e.g. its
HerReplayBuffer, built on its DictReplayBuffer) keep working.
"""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.append(str(Path(__file__).parents[1]))  # last: tests/skip_gate.py, shadowing nothing

from suite import SELECTED, SWAPS  # noqa: E402

import skip_gate  # noqa: E402
from sb3_logs import sb3_logs_in_one_folder  # noqa: E402,F401 (fixture: no /tmp/SB3-* left behind)

_INI = Path(__file__).with_name("pytest.ini")
_TESTS = Path(__file__).with_name("sdist") / "tests"


def _ours(config) -> bool:
    return config.inipath is not None and Path(config.inipath) == _INI


def pytest_ignore_collect(collection_path, config):
    if not _ours(config):
        return True
    path = Path(collection_path)
    if path.is_file() and path.parent == _TESTS and path.name not in SELECTED:
        return True
    return None


def _resolve(dotted: str):
    module, _, name = dotted.rpartition(".")
    return importlib.import_module(module), name


def swap() -> dict:
    """Put our classes where SB3 bound its own; returns {SB3 class: ours}."""
    import stable_baselines3  # noqa: F401  (imports the algorithms, which bind the classes)

    replaced = {}
    shadows: dict[str, types.ModuleType] = {}
    for theirs, ours in SWAPS.items():
        module, name = _resolve(theirs)
        our_module, our_name = _resolve(ours)
        original, new = getattr(module, name), getattr(our_module, our_name)
        replaced[original] = new
        if module.__name__ not in shadows:
            shadow = types.ModuleType(module.__name__)
            shadow.__dict__.update(module.__dict__)
            shadows[module.__name__] = shadow
        setattr(shadows[module.__name__], name, new)
    for loaded in [m for n, m in list(sys.modules.items()) if n.startswith("stable_baselines3") and m is not None]:
        if loaded.__name__ in shadows:
            continue
        for key, value in list(vars(loaded).items()):
            if isinstance(value, type) and value in replaced:
                setattr(loaded, key, replaced[value])
    for name, shadow in shadows.items():
        parent, _, child = name.rpartition(".")
        sys.modules[name] = shadow
        setattr(sys.modules[parent], child, shadow)
    return replaced


def pytest_configure(config):
    if not _ours(config):
        return
    skip_gate.pytest_configure(config)
    early = [name for name in sys.modules if name in {Path(f).stem for f in SELECTED}]
    if early:  # a test module imported before the swap would keep SB3's classes
        raise RuntimeError(f"SB3 test modules imported before the swap: {early}")
    swap()


def pytest_collection_modifyitems(session, config, items):
    if not _ours(config):
        return
    keep, seen = [], set()
    for item in items:
        wanted = SELECTED.get(item.path.name, ()) if item.path.parent == _TESTS else None
        name = getattr(item, "originalname", item.name)
        if wanted is None or name in wanted:
            keep.append(item)
            seen.add((item.path.name, name))
    files = {item.path.name for item in items}
    missing = [(f, t) for f, tests in SELECTED.items() if f in files for t in tests or () if (f, t) not in seen]
    if missing and not (config.option.keyword or config.option.markexpr):  # a renamed test of SB3's
        raise pytest.UsageError(f"tests named in suite.SELECTED were not collected: {missing}")
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep
