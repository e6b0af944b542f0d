"""docs/design.md's "Constructor options by backend" table agrees with the classes' signatures:
a class takes exactly the options its column says `yes` to, and every other cell names a
reason from the table's key."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

DESIGN = Path(__file__).parent.parent / "docs" / "design.md"
MODULES = {  # class -> (module, the framework it needs)
    "UniformReplayBuffer": ("replaybuf", None),
    "PrioritizedReplayBuffer": ("replaybuf", None),
    "FrameStackReplayBuffer": ("replaybuf", None),
    "TorchUniformReplayBuffer": ("replaybuf.torch", "torch"),
    "TorchPrioritizedReplayBuffer": ("replaybuf.torch", "torch"),
    "JaxReplayBuffer": ("replaybuf.jax", "jax"),
    "TFUniformReplayBuffer": ("replaybuf.tf", "tensorflow"),
    "SharedReplayBuffer": ("replaybuf", None),
    "ShardedReplayBuffer": ("replaybuf.ray", "ray"),
}


def read_table() -> tuple[list[str], dict[str, list[str]], set[str]]:
    """``(classes, {option: cells}, reasons)`` of the section."""
    text = DESIGN.read_text()
    section = text.split("## Constructor options by backend", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    classes = re.findall(r"`(\w+)`", lines[0])
    rows = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1:]
    reasons = set(re.findall(r"^- \*\*(\w+)\*\*:", section, re.MULTILINE))
    return classes, rows, reasons


def test_the_table_names_every_class_once_and_every_reason_is_explained():
    classes, rows, reasons = read_table()
    assert classes == list(MODULES)
    for option, cells in rows.items():
        assert len(cells) == len(classes), option
        unexplained = {cell for cell in cells if cell != "yes"} - reasons
        assert not unexplained, (option, unexplained)


@pytest.mark.parametrize("name", list(MODULES))
def test_each_class_takes_exactly_the_options_of_its_column(name):
    module, framework = MODULES[name]
    if framework is not None:
        pytest.importorskip(framework)
    cls = getattr(importlib.import_module(module), name)
    classes, rows, _ = read_table()
    column = classes.index(name)
    documented = {option for option, cells in rows.items() if cells[column] == "yes"}
    taken = {p for p in inspect.signature(cls).parameters if not p.startswith("_")}
    assert taken == documented, (
        f"{name}: not in the table {sorted(taken - documented)}, not taken {sorted(documented - taken)}"
    )
