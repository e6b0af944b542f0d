"""Point RLlib's stock buffer names at replaybuf's classes.

RLlib builds ``replay_buffer_config["type"]`` through ``from_config``, which looks a plain
name up in ``ray.rllib.utils.replay_buffers``; SAC, TQC and CQL refuse any name but the
stock ones, so the way in for them is to make those names resolve to ours.
"""

from __future__ import annotations

import importlib

__all__ = ["install", "uninstall"]

_PACKAGE = "ray.rllib.utils.replay_buffers"
_saved: dict[str, type] = {}  # the stock classes while installed


def _ours() -> dict[str, type]:
    rllib = importlib.import_module("replaybuf.rllib")
    names = ("EpisodeReplayBuffer", "PrioritizedEpisodeReplayBuffer")
    return {name: getattr(rllib, name) for name in (*names, *(f"MultiAgent{name}" for name in names))}


def install() -> None:
    """Make the stock names (``"EpisodeReplayBuffer"``, ``"PrioritizedEpisodeReplayBuffer"`` and
    their ``"MultiAgent..."`` versions)
    in an algorithm's ``replay_buffer_config`` build replaybuf's classes, in this process
    (the driver, where RLlib's algorithms keep their buffer). Calling it twice is harmless."""
    package = importlib.import_module(_PACKAGE)
    for name, cls in _ours().items():
        _saved.setdefault(name, getattr(package, name))
        setattr(package, name, cls)


def uninstall() -> None:
    """Undo :func:`install`: the stock names build RLlib's own classes again."""
    package = importlib.import_module(_PACKAGE)
    for name, cls in _saved.items():
        setattr(package, name, cls)
    _saved.clear()
