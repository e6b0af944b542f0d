"""``SharedReplayBuffer`` checkpoints in the backend-neutral format (docs/persistence.md).

The buffer's ``writers x batch_size`` streams are the streams of one ring (stream
``w * batch_size + b``, the id a sample returns): while every writer holds the same steps, the
state is an ordinary one (``batch_size`` = all the streams) that any buffer of that geometry
loads, and that this buffer loads from any of them. Writers at different steps cannot form one
ring: the state then keeps one ``segments`` entry per writer, which only a
``SharedReplayBuffer`` of the same writers takes (refused by name elsewhere). States written
before the header (``class``, always segments) still load.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from replaybuf.errors import CheckpointError
from replaybuf.persistence.header import Holds, check_header, describe, header
from replaybuf.persistence.state import check_items, check_rng_state, check_spec_state, first_stored_step, spec_state
from replaybuf.ring import WriterCursors
from replaybuf.samplers.prioritized import check_priority_state

__all__ = ["LoadPlan", "SharedParts", "check_state", "load_state", "state_of"]


class SharedParts(NamedTuple):
    """What a checkpoint reads and restores of a ``SharedReplayBuffer`` (its ``checkpoint_parts()``):
    the spec, the geometry, the shared records with their writer cursors and commit log, the
    samplers' shared state, the rate limiter and the generator. ``bounds()`` gives each writer's
    committed ``(low, high)`` steps; ``slots(writer, steps, streams)`` the records' rows."""

    saved_by: str
    flat: Any
    writers: int
    batch_size: int
    streams: int
    max_length: int
    names: list[str]
    records: np.ndarray
    cursors: list[Any]
    commits: Any
    priorities: Any
    episodes: Any
    windows: Any
    rules: Any
    limiter: Any
    rng: np.random.Generator
    bounds: Any
    slots: Any


class LoadPlan(NamedTuple):
    """A checked state: per writer ``(steps, count, leaves [count, batch_size, ...])``, the
    masses per writer and the max priority (None: every item gets a new item's priority),
    the generator state (None: keep this buffer's), the limiter's counters and each writer's
    checked sample-count rules (None without rules)."""

    segments: list[tuple[int, int, list[np.ndarray]]]
    masses: tuple[list[np.ndarray], float] | None
    rng: dict | None
    limiter: Any
    rules: list | None


def holds(parts: SharedParts) -> Holds:
    """What the buffer's checkpoints hold: its episode index is re-read from the items, never saved."""
    return Holds(priorities=parts.priorities is not None, rate_limiter=parts.limiter is not None)


def state_of(parts: SharedParts) -> dict:
    """The state (copies) of the buffer; the caller holds its lock. Each writer's segment is cut
    at one committed step, items a writer overwrote during the copy cut off its old end."""
    low, high = parts.bounds()
    segments = []
    for w in range(parts.writers):
        start, stop = int(low[w]), int(high[w])
        steps = np.arange(start, stop)
        rows = parts.records.take(parts.slots(w, steps[:, None], np.arange(parts.batch_size)))
        first = max(start, parts.commits.overwritten_below()[w], 0)  # read after the copy
        segments.append((stop, [rows[name][first - start :] for name in parts.names]))
    masses = None
    if parts.priorities is not None:
        parts.priorities.take_in(low.tolist(), high.tolist())  # steps committed since the last draw: max priority
        masses = [parts.priorities.masses(w, stop - len(rows[0]), stop) for w, (stop, rows) in enumerate(segments)]
    state = {
        "checkpoint": header(holds(parts), parts.saved_by),
        "spec": spec_state(parts.flat),
        "writers": parts.writers,
        "max_length": parts.max_length,
        "rng": parts.rng.bit_generator.state,
    }
    if len({(stop, len(rows[0])) for stop, rows in segments}) <= 1:  # one ring: the neutral layout
        state.update(batch_size=parts.streams, steps=segments[0][0], items=_interleave(parts, [r for _, r in segments]))
    else:
        state["batch_size"] = parts.batch_size
        state["segments"] = {
            str(w): {"steps": stop, "items": {str(i): leaf for i, leaf in enumerate(rows)}}
            for w, (stop, rows) in enumerate(segments)
        }
    if parts.limiter is not None:
        state["rate_limiter"] = parts.limiter.state()
    if masses is not None:
        mass = np.concatenate(masses) if "segments" in state else _interleave(parts, [[m] for m in masses])["0"]
        state["priorities"] = {"mass": mass, "max_priority": float(parts.priorities.max_priority)}
    if parts.rules is not None:  # the rules of the items saved (steps not taken in yet: unsampled)
        rules = [parts.rules.writer_state(w, stop - len(rows[0]), stop) for w, (stop, rows) in enumerate(segments)]
        if "segments" in state:
            for w, writer_rules in enumerate(rules):
                state["segments"][str(w)]["sample_rules"] = writer_rules
        else:
            state["sample_rules"] = parts.rules.joined(rules)
    return state


def _interleave(parts: SharedParts, per_writer: list[list[np.ndarray]]) -> dict:
    """Per-writer leaves ``[count, batch_size, ...]`` (or ``[count * batch_size]``) as one ring's
    ``items``: ``[count * writers * batch_size, ...]``, step-major, stream ``w * batch_size + b``."""
    out = {}
    for i in range(len(per_writer[0])):
        leaves = [rows[i].reshape(-1, parts.batch_size, *rows[i].shape[2:]) for rows in per_writer]
        stacked = np.stack(leaves, axis=1)  # [count, writers, batch_size, ...]
        out[str(i)] = stacked.reshape(-1, *stacked.shape[3:])
    return out


def check_state(parts: SharedParts, state: Any) -> LoadPlan:
    """Every check of ``state`` against the buffer, before anything changes (CheckpointError)."""
    if isinstance(state, dict) and "segments" in state:
        segments, same_rng, new = _check_segments(parts, state)
    else:
        geometry = {"batch_size": parts.streams, "max_length": parts.max_length}
        steps, same_rng, new = check_header(state, holds(parts), parts.flat, geometry)
        segments = _split(parts, state, steps)
    masses = None
    if parts.priorities is not None and not new:
        total = sum(count for _, count, _ in segments) * parts.batch_size
        mass, largest = check_priority_state(state.get("priorities"), total)
        if "segments" in state:
            cuts = np.cumsum([count * parts.batch_size for _, count, _ in segments])[:-1]
            masses = (np.split(mass, cuts), largest)
        else:
            per = mass.reshape(-1, parts.writers, parts.batch_size)
            masses = ([per[:, w].ravel() for w in range(parts.writers)], largest)
    limiter = parts.limiter.check_state(state.get("rate_limiter")) if parts.limiter is not None else None
    rng = check_rng_state(parts.rng, state.get("rng")) if same_rng else None
    return LoadPlan(segments, masses, rng, limiter, _check_rules(parts, state, segments))


def _check_rules(parts: SharedParts, state: dict, segments: list) -> list | None:
    """Each writer's checked sample-count rules (replaybuf.shared.rules); a state saved without
    them loads with every item uncounted, and rules in a state are ignored by a buffer without."""
    if parts.rules is None:
        return None
    if "segments" in state:
        per_writer = [state["segments"][str(w)].get("sample_rules") for w in range(parts.writers)]
    elif state.get("sample_rules") is not None:
        rules = state["sample_rules"]
        keys = {"times", "policy_version", "epoch", "order", "cursor"}
        if not isinstance(rules, dict) or not keys <= set(rules) or not isinstance(rules["order"], np.ndarray):
            raise CheckpointError(f"state['sample_rules']: expected the keys {sorted(keys)} with arrays")
        total = sum(count for _, count, _ in segments) * parts.batch_size
        if not isinstance(rules["times"], np.ndarray) or rules["times"].shape != (total,):
            raise CheckpointError(f"state['sample_rules']['times']: expected {total} counts")
        per_writer = parts.rules.split(rules)
    else:
        per_writer = [None] * parts.writers
    return parts.rules.check_state(per_writer, [(steps, count) for steps, count, _ in segments])


def _split(parts: SharedParts, state: dict, steps: int) -> list[tuple[int, int, list[np.ndarray]]]:
    """A one-ring state's items as per-writer segments (``[count, batch_size, ...]`` each)."""
    leaves = check_items(parts.flat, state, range(len(parts.flat.leaves)), (np.ndarray,))
    count = leaves[0].shape[0] if leaves else 0
    first_stored_step(steps, count, parts.streams, parts.max_length, crash_safe=True)
    rows = count // parts.streams
    per = [leaf.reshape(rows, parts.writers, parts.batch_size, *leaf.shape[1:]) for leaf in leaves]
    return [(steps, rows, [leaf[:, w] for leaf in per]) for w in range(parts.writers)]


def _check_segments(parts: SharedParts, state: dict) -> tuple[list, bool, bool]:
    """The per-writer segments of a state of writers at different steps (or of a class-name
    header); ``(segments, same_rng, new_priorities)``."""
    saved = describe(state)
    if "class" in state and state["class"] != "SharedReplayBuffer":
        raise CheckpointError(f"state['class']: saved from a {state['class']!s:.80}, not a SharedReplayBuffer")
    check_spec_state(parts.flat, state.get("spec"))
    for key, mine in (("writers", parts.writers), ("batch_size", parts.batch_size), ("max_length", parts.max_length)):
        if state.get(key) != mine:
            raise CheckpointError(f"state[{key!r}]: saved {state.get(key)!r}, this buffer has {mine!r}")
    if saved.priorities and parts.priorities is None:
        raise CheckpointError("state['priorities']: the checkpoint holds priorities; load it into a prioritized buffer")
    segments = state["segments"]
    if not isinstance(segments, dict) or sorted(segments) != sorted(map(str, range(parts.writers))):
        raise CheckpointError(f"state['segments']: expected one entry per writer, got {segments!r:.80}")
    checked = []
    for w in range(parts.writers):
        segment = segments[str(w)]
        steps = segment.get("steps") if isinstance(segment, dict) else None
        items = segment.get("items") if isinstance(segment, dict) else None
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0 or not isinstance(items, dict):
            raise CheckpointError(f"state['segments'][{w!r}]: expected steps (int >= 0) and items")
        leaves = [items.get(str(i)) for i in range(len(parts.flat.leaves))]
        count = leaves[0].shape[0] if isinstance(leaves[0], np.ndarray) else -1
        if not 0 <= count <= min(steps, parts.max_length):
            raise CheckpointError(f"state['segments'][{w!r}]: {count} steps do not fit steps={steps}")
        for leaf, spec, path in zip(leaves, parts.flat.leaves, parts.flat.paths, strict=True):
            want = (count, parts.batch_size, *spec.shape)
            if not isinstance(leaf, np.ndarray) or leaf.shape != want or leaf.dtype != spec.dtype:
                got = f"{leaf.shape} {leaf.dtype}" if isinstance(leaf, np.ndarray) else type(leaf).__name__
                raise CheckpointError(f"state['segments'][{w!r}] {path}: expected {want} {spec.dtype}, got {got}")
        checked.append((steps, count, leaves))
    if saved.rate_limiter != (parts.limiter is not None):
        mine = "one" if parts.limiter is not None else "none"
        raise CheckpointError(
            f"state['rate_limiter']: saved {'one' if saved.rate_limiter else 'none'}, this buffer has {mine}"
        )
    return checked, saved.rng == "PCG64", parts.priorities is not None and not saved.priorities


def load_state(parts: SharedParts, plan: LoadPlan) -> None:
    """Apply a checked plan; the caller holds the buffer's lock."""
    for w, (steps, count, leaves) in enumerate(plan.segments):
        cursor = WriterCursors(parts.cursors[w], parts.max_length)
        cursor.reset()
        step_ids = np.arange(steps - count, steps)
        slots = parts.slots(w, step_ids[:, None], np.arange(parts.batch_size))
        for name, leaf in zip(parts.names, leaves, strict=True):
            parts.records[name][slots] = leaf
        cursor.reset(steps, steps - count)
    if plan.rng is not None:  # another backend's generator state: this buffer keeps its own
        parts.rng.bit_generator.state = plan.rng
    if parts.limiter is not None:
        parts.limiter.load_state(plan.limiter)
    if plan.masses is not None:
        bounds = [(steps - count, steps) for steps, count, _ in plan.segments]
        parts.priorities.load(bounds, *plan.masses)
    elif parts.priorities is not None:  # a state without priorities: every item at a new item's priority
        parts.priorities.cleared()
    if parts.episodes is not None:  # positions are read again from the loaded records
        parts.episodes.cleared()
    if parts.windows is not None:
        parts.windows.cleared()
    if parts.rules is not None:
        parts.rules.load_state(plan.rules, [(steps, count) for steps, count, _ in plan.segments], parts.records)
