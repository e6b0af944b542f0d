"""The backend-neutral checkpoint header: what a state holds, not which class wrote it.

Every buffer writes ``state["checkpoint"]`` (:func:`header`): the header version and flags
for the parts beside the items (priorities, episode index, frame-stacked storage, rate
limiter counters) and the kind of random generator state. A load decides with one function,
:func:`check_header`, whether the receiving buffer can hold the state: the same spec and
geometry (``batch_size`` streams of ``max_length``), and a part the receiver lacks is either
converted by a documented rule or refused by name (docs/persistence.md, "Across backends").
States written before the header (``state["class"]``, version 1) are described from the keys
they hold and load by the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from replaybuf.errors import CheckpointError
from replaybuf.nest import FlatSpec
from replaybuf.persistence.state import check_spec_state, max_steps, require

__all__ = ["VERSION", "Header", "Holds", "check_header", "describe", "header"]

VERSION = 2  # 1: the class-name header (``class``); 2: this one
RNG_KINDS = ("PCG64", "torch", "tf", "none")  # "none": no generator state to restore (a split Ray checkpoint)
_PARTS = ("priorities", "episodes", "frames", "rate_limiter")
_KEYS = {"version", "saved_by", "rng", *_PARTS}
_PRIORITIZED = "a prioritized buffer (priorities are never dropped)"
_PLAIN = "a buffer with respect_episodes=False"
_LIMITED, _UNLIMITED = "a buffer with a rate limiter", "a buffer without one"
_TORCH_CLASSES = {"TorchUniformReplayBuffer", "TorchPyUniformReplayBuffer", "ReplayBuffer"}  # version 1's names


@dataclass(frozen=True)
class Holds:
    """What a buffer holds beside its items, as its checkpoints describe it.

    ``priorities``: a priority tree; ``episodes``: an episode index; ``frames``: items stored as
    stacks of shared frames; ``rate_limiter``: limiter counters; ``rng``: its generator's kind.
    """

    priorities: bool = False
    episodes: bool = False
    frames: bool = False
    rate_limiter: bool = False
    rng: str = "PCG64"


class Header(NamedTuple):
    """What ``check_header`` decided: the state's ``steps``, whether its generator state is of
    the receiver's kind (restored; otherwise the receiver keeps its own generator), and whether
    the receiver must give every item a new item's priority (a state without priorities)."""

    steps: int
    same_rng: bool
    new_priorities: bool


def header(holds: Holds, saved_by: str) -> dict:
    """The ``checkpoint`` entry of a state written by ``saved_by`` (a class name, for people)."""
    return {"version": VERSION, "saved_by": saved_by, "rng": holds.rng, **{p: getattr(holds, p) for p in _PARTS}}


def check_header(state: Any, holds: Holds, flat: FlatSpec, geometry: dict[str, int]) -> Header:
    """Whether a buffer holding ``holds``, of ``flat``'s spec and ``geometry`` (``batch_size``
    and ``max_length``), can load ``state``: CheckpointError naming what differs otherwise."""
    saved = describe(state)
    if "segments" in state:
        raise CheckpointError(
            f"state['segments']: the checkpoint holds a SharedReplayBuffer's writers at different steps "
            f"(writers={state.get('writers')!r:.20}), which no single ring holds; load it into a "
            "SharedReplayBuffer of those writers"
        )
    check_spec_state(flat, require(state, "spec", dict))
    for key, mine in geometry.items():
        value = _geometry(state, key)
        if value != mine:
            raise CheckpointError(f"state[{key!r}]: saved {value}, this buffer has {mine}")
    refusals = [  # (refused, key, what the checkpoint holds, where it loads)
        (saved.priorities > holds.priorities, "priorities", "priorities and this buffer has none", _PRIORITIZED),
        (
            saved.frames > holds.frames,
            "frames",
            "frame stacks and this buffer stores whole items",
            "a frame-stack buffer",
        ),
        (
            holds.frames > saved.frames,
            "frames",
            "no frame stacks and this buffer stores frame stacks",
            "a plain buffer",
        ),
        (holds.episodes > saved.episodes, "episodes", "no episode index and this buffer respects episodes", _PLAIN),
        (
            saved.rate_limiter > holds.rate_limiter,
            "rate_limiter",
            "rate limiter counters and this buffer has none",
            _LIMITED,
        ),
        (
            holds.rate_limiter > saved.rate_limiter,
            "rate_limiter",
            "no rate limiter counters and this buffer has a limiter",
            _UNLIMITED,
        ),
    ]
    for refused, key, what, where in refusals:
        if refused:
            raise CheckpointError(f"state[{key!r}]: the checkpoint holds {what}; load it into {where}")
    steps = require(state, "steps", int)
    largest = max_steps(geometry.get("batch_size", 1))
    if not 0 <= steps <= largest:
        raise CheckpointError(
            f"state['steps']: expected an int in [0, {largest}] (ids are int64: steps x batch_size "
            f"stays below 2**62), got {steps}"
        )
    return Header(steps, saved.rng == holds.rng, holds.priorities and not saved.priorities)


def describe(state: Any) -> Holds:
    """What ``state`` holds, from its header (version 2) or, for a version 1 state (``class``),
    from the keys present; CheckpointError for a header that is malformed or disagrees with them."""
    if isinstance(state, dict) and "checkpoint" not in state and "class" in state:
        saved_by = require(state, "class", str)
        rng = "torch" if saved_by in _TORCH_CLASSES else "PCG64"
        return Holds(**{p: p in state for p in _PARTS}, rng=rng)
    entry = require(state, "checkpoint", dict)
    version = entry.get("version")
    if type(version) is int and version > VERSION:
        raise CheckpointError(
            f"state['checkpoint']['version']: written by a newer replaybuf (version {version}); "
            f"this replaybuf reads versions 1 and {VERSION}"
        )
    if set(entry) != _KEYS or version != VERSION or type(entry["saved_by"]) is not str:
        raise CheckpointError(
            f"state['checkpoint']: expected exactly {sorted(_KEYS)} with version {VERSION}, got {entry!r:.200}"
        )
    if entry["rng"] not in RNG_KINDS or type(entry["rng"]) is not str:
        raise CheckpointError(
            f"state['checkpoint']['rng']: expected one of {list(RNG_KINDS)}, got {entry['rng']!r:.60}"
        )
    for part in _PARTS:
        if type(entry[part]) is not bool:
            raise CheckpointError(f"state['checkpoint'][{part!r}]: expected a bool, got {entry[part]!r:.60}")
        if entry[part] != (part in state):
            raise CheckpointError(
                f"state['checkpoint'][{part!r}]: says {entry[part]}, but the state "
                f"{'has no' if entry[part] else 'holds a'} {part!r} entry"
            )
    return Holds(**{p: entry[p] for p in _PARTS}, rng=entry["rng"])


def _geometry(state: dict, key: str) -> int:
    """``state[key]``; a version 1 MindSpore-style state has ``capacity`` instead (one stream)."""
    if key not in state and "capacity" in state and "class" in state:
        return 1 if key == "batch_size" else require(state, "capacity", int)
    return require(state, key, int)
