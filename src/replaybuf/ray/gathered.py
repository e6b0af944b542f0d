"""One-folder checkpoints of a ``ShardedReplayBuffer``: gather the shards into one ring, or
split one ring over the shards (docs/persistence.md, "Ray shards").

Stream ``s`` of the buffer is local stream ``s // shards`` of shard ``s % shards``, so the
shards' states (each a ring of its own streams, the same steps) interleave into the state of
one buffer of ``batch_size`` streams that any backend loads, and split back the same way.
The shards' generators are their own: the gathered state carries the driver's generator
(which splits batches over the shards), and a split state gives each shard none to restore.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replaybuf.errors import CheckpointError

__all__ = ["gather_states", "split_state"]


def gather_states(states: list[dict], shards: int, batch_size: int, rng: dict, limiter: dict | None) -> dict:
    """The shards' ``state_dict()`` as one buffer's state; CheckpointError naming the shards
    when they hold different steps (no single ring holds them)."""
    spans = {(s["steps"], _rows(s)) for s in states}
    if len(spans) > 1:
        raise CheckpointError(
            f"shards: a gathered checkpoint is one ring, so every shard must hold the same steps; got (steps, "
            f"stored steps) {sorted(spans)}: add through add_batch, or save the shards' folders (save(path))"
        )
    first = states[0]
    saved = dict(first["checkpoint"], saved_by="ShardedReplayBuffer", rate_limiter=limiter is not None)
    state = {
        "checkpoint": saved,
        "spec": first["spec"],
        "batch_size": batch_size,
        "max_length": first["max_length"],
        "steps": first["steps"],
        "items": {key: _join([s["items"][key] for s in states], shards, batch_size) for key in first["items"]},
        "rng": rng,
    }
    if "priorities" in first:
        mass = _join([s["priorities"]["mass"] for s in states], shards, batch_size)
        state["priorities"] = {"mass": mass, "max_priority": max(s["priorities"]["max_priority"] for s in states)}
    if "episodes" in first:
        parts = [s["episodes"] for s in states]
        state["episodes"] = {
            "position": _join([p["position"] for p in parts], shards, batch_size),
            "last": _join([p["last"] for p in parts], shards, batch_size),
            "ended": _join([p["ended"] for p in parts], shards, batch_size),
        }
    if limiter is not None:
        state["rate_limiter"] = limiter
    return state


def split_state(state: dict, shards: int, batch_size: int) -> list[dict]:
    """A checked one-ring state of ``batch_size`` streams as each shard's state (its own
    streams; no rate limiter, which lives in its own actor; no generator to restore)."""
    out = []
    for k in range(shards):
        part = {
            "checkpoint": dict(state["checkpoint"], rng="none", rate_limiter=False),
            "spec": state["spec"],
            "batch_size": len(range(k, batch_size, shards)),
            "max_length": state["max_length"],
            "steps": state["steps"],
            "items": {key: _take(leaf, k, shards, batch_size) for key, leaf in state["items"].items()},
            "rng": None,
        }
        if "priorities" in state:
            priorities = state["priorities"]
            part["priorities"] = {
                "mass": _take(priorities["mass"], k, shards, batch_size),
                "max_priority": priorities["max_priority"],
            }
        if "episodes" in state:
            part["episodes"] = {key: _take(v, k, shards, batch_size) for key, v in state["episodes"].items()}
        out.append(part)
    return out


def _rows(state: dict) -> int:
    """How many steps a shard's state stores (its items over its streams)."""
    leaves = list(state["items"].values())
    return len(leaves[0]) // state["batch_size"] if leaves else 0


def _join(parts: list[np.ndarray], shards: int, batch_size: int) -> np.ndarray:
    """Per-shard arrays, each ``[rows x its streams, ...]`` step-major, as ``[rows x batch_size, ...]``."""
    first = parts[0]
    rows = sum(len(p) for p in parts) // batch_size
    out = np.empty((rows, batch_size, *first.shape[1:]), first.dtype)
    for k, part in enumerate(parts):
        out[:, k::shards] = np.asarray(part).reshape(rows, -1, *first.shape[1:])
    return out.reshape(rows * batch_size, *first.shape[1:])


def _take(leaf: Any, k: int, shards: int, batch_size: int) -> np.ndarray:
    """Shard ``k``'s streams of a ``[rows x batch_size, ...]`` array, step-major."""
    leaf = np.asarray(leaf)
    rows = leaf.reshape(-1, batch_size, *leaf.shape[1:])[:, k::shards]
    return np.ascontiguousarray(rows.reshape(-1, *leaf.shape[1:]))
