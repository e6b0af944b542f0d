"""No module reaches into another object's private members (read from the source with ast).

A sampler, storage or buffer is used through its public members (the protocols of
``samplers/base.py`` and ``storages/base.py``, ``StreamBuffer.ring`` / ``lock`` / ``read_ids`` /
``mass``); ``x._name`` is allowed only on ``self``, ``cls`` and ``super()``, on another
instance of the class whose method it is (a copy being built), for namedtuple's own
``_replace`` / ``_fields`` / ``_asdict`` / ``_make``, and for the other libraries' internals listed
below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "replaybuf"

NAMEDTUPLE_API = {"_replace", "_fields", "_asdict", "_make"}

# module -> expressions reaching into another library (not a replaybuf part), each documented there
OTHER_LIBRARIES = {
    # RLlib's SingleAgentEpisode and InfiniteLookbackBuffer built without their constructors
    # (75% of a sample's time): the slots their constructors set, held to a constructed
    # episode slot by slot in tests/test_rllib_buffers.py
    "rllib/_episodes.py": {
        "buffer._space",
        "buffer._space_struct",
        "episode._observation_space",
        "episode._action_space",
        "episode._custom_data",
        "episode._start_time",
        "episode._last_step_time",
        "episode._last_added_observation",
        "episode._last_added_infos",
    },
    "sb3/spaces.py": {"_SB3ReplayBuffer._maybe_cast_dtype"},
    "storages/codecs.py": {"lz4.block._block"},
    "tf/iteration.py": {"dataset._variant_tensor"},
}


def _own_privates(cls: ast.ClassDef) -> set[str]:
    """Private names a class defines: its methods and the ``self._x`` it assigns."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("_"):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def _is_own(value: ast.expr) -> bool:
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_accesses(source: str) -> list[str]:
    """Every ``x._name`` (or ``getattr(x, "_name", ...)``) on an object that is not the caller's own."""
    found = []

    def visit(node: ast.AST, own: set[str]) -> None:
        if isinstance(node, ast.ClassDef):
            own = own | _own_privates(node)
        target = None
        if isinstance(node, ast.Attribute) and _private(node.attr):
            target, name = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            target, name = node.args[0], node.args[1].value
        if target is not None and not _is_own(target) and name not in NAMEDTUPLE_API and name not in own:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, own)

    visit(ast.parse(source), set())
    return found


MODULES = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("module", MODULES)
def test_no_module_touches_another_objects_private_members(module):
    allowed = OTHER_LIBRARIES.get(module, set())
    found = [hit for hit in private_accesses((PACKAGE / module).read_text()) if hit.split(": ", 1)[1] not in allowed]
    assert not found, f"{module} touches private members: {found}"


def test_the_check_sees_reaching_in_and_allows_what_is_ones_own():
    source = """
class Shard:
    def __init__(self, buffer):
        self._mine = 1
        self.buffer = buffer
        buffer._lock
        self.buffer._ring.steps
        getattr(buffer, "_single_stream", False)
        self._mine
        super()._state()

    def copy(self):
        other = object.__new__(Shard)
        other._mine = self._mine
        return other._replace()
"""
    found = private_accesses(source)
    assert [hit.split(": ", 1)[1] for hit in found] == [
        "buffer._lock",
        "self.buffer._ring",
        "getattr(buffer, '_single_stream', False)",
    ]
