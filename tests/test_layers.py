"""The rooms of docs/design.md import only what their row allows (read from the source's imports)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "replaybuf"

# room -> the replaybuf rooms it must never import
FORBIDDEN = {
    "errors": {"*"},
    "refusals": {"specs", "nest", "mismatch", "ring", "buffer", "dataset", "buffers", "samplers", "storages", "shared"},
    "specs": {"buffers", "samplers", "storages", "persistence", "shared", "ray", "jax", "tf", "torch"},
    "nest": {"buffers", "samplers", "storages", "persistence", "shared", "ray", "jax", "tf", "torch"},
    "ring": {"buffers", "samplers", "storages", "persistence", "shared", "ray", "jax", "tf", "torch"},
    "persistence": {"buffers", "samplers", "storages", "shared", "ray", "jax", "tf", "torch"},
    "samplers": {"buffers", "storages", "shared", "ray", "jax", "tf", "torch"},
    "storages": {"buffers", "samplers", "shared", "ray", "jax", "tf", "torch"},
    "frameworks": {"buffers", "samplers", "storages", "persistence", "shared", "ray", "jax", "tf", "torch"},
    "mixed": {"buffers", "storages", "shared", "ray", "jax", "tf", "torch", "agents", "cli"},
    "hindsight": {"buffers", "shared", "ray", "jax", "tf", "torch"},  # records reads a record storage in one call
    "buffers": {"shared", "ray", "jax", "tf", "torch", "mindspore_rl", "agents", "cli"},
    "tf": {"torch", "jax", "ray"},
    "torch": {"tf", "jax", "ray"},
    "jax": {"tf", "torch", "ray"},
    "minari": {"tf", "torch", "jax", "ray", "shared"},
    "sb3": {"tf", "torch", "jax", "ray", "shared", "agents", "cli"},
}


def _room(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def _imported_rooms(path: Path) -> set[str]:
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "replaybuf" and len(parts) > 1:
                rooms.add(parts[1])
    return rooms


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_room_imports_only_what_its_layer_allows(room):
    files = [p for p in PACKAGE.rglob("*.py") if _room(p) == room]
    assert files, f"no module for room {room}"
    for path in files:
        imported = _imported_rooms(path) - {room}
        forbidden = FORBIDDEN[room]
        bad = imported if "*" in forbidden else imported & forbidden
        assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}"
