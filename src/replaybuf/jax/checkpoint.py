"""Checkpoints of the JAX core in the backend-neutral format (docs/persistence.md, docs/jax.md).

``state_dict(core, state, data_spec)`` turns a ``BufferState`` into the state every backend
reads (items in id order, in the spec's dtypes; ``priorities``; with episodes, the NumPy
index's ``episodes``), and ``load_state_dict(core, saved, data_spec)`` checks any backend's
state whole and returns a new ``BufferState``: a jitted training loop's buffer moves to and
from the other backends through ``replaybuf.persistence.write_state`` / ``read_state``. The
core keeps no generator (the caller holds its keys): its states carry none (``rng``
``"none"``). ``JaxReplayBuffer`` adds its host generator on top.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from replaybuf.errors import CheckpointError
from replaybuf.jax.core import Buffer, BufferState, EpisodeState
from replaybuf.jax.rows import pack
from replaybuf.jax.sumtree import tree_init, tree_update
from replaybuf.nest import FlatSpec
from replaybuf.persistence.header import Holds, check_header, header
from replaybuf.persistence.state import check_items, first_stored_step, spec_state
from replaybuf.ring import StreamRing
from replaybuf.samplers.episodes import check_episode_state
from replaybuf.samplers.prioritized import check_priority_state
from replaybuf.samplers.sumtree import priority_mass

__all__ = ["core_state", "holds", "load_core_state", "load_state_dict", "state_dict"]


def holds(core: Buffer, rng: str) -> Holds:
    """What a checkpoint of ``core`` holds beside the items."""
    return Holds(priorities=core.priorities is not None, episodes=core.episodes is not None, rng=rng)


def state_dict(core: Buffer, state: BufferState, data_spec: Any) -> dict:
    """The backend-neutral state of ``state`` (a ``BufferState`` of ``core``, items of ``data_spec``)."""
    return core_state(core, FlatSpec(data_spec), state, int(state.steps), "Buffer", None)


def load_state_dict(core: Buffer, saved: Any, data_spec: Any) -> BufferState:
    """A ``BufferState`` of ``core`` holding ``saved`` (any backend's state of ``data_spec``
    and this geometry that the core can hold).

    Raises:
        CheckpointError: another spec or geometry, what the core cannot hold, or malformed.
    """
    return load_core_state(core, FlatSpec(data_spec), saved, None)[0]


def core_state(core: Buffer, flat: FlatSpec, state: BufferState, steps: int, saved_by: str, rng: Any) -> dict:
    """The state of ``steps`` adds held in ``state``; ``rng``: a PCG64 state, or None (none kept)."""
    ring = _ring(core, steps)
    ids = ring.stream_ids().T.ravel()  # id order: step by step, streams within a step
    slots = jnp.asarray((ids % ring.capacity).astype(np.int32))  # small: no wrap with x64 off
    read = zip(core.treedef.flatten_up_to(core.read(state, slots)), flat.leaves, strict=True)
    out = {
        "checkpoint": header(holds(core, "none" if rng is None else "PCG64"), saved_by),
        "spec": spec_state(flat),
        "batch_size": ring.batch_size,
        "max_length": ring.max_length,
        "steps": steps,
        "items": {str(i): np.asarray(leaf).astype(spec.dtype) for i, (leaf, spec) in enumerate(read)},
        "rng": rng,
    }
    if state.priorities is not None:
        masses = np.asarray(state.priorities.trees.sums[-1])[ids % ring.capacity].astype(np.float64)
        out["priorities"] = {"mass": masses, "max_priority": float(state.priorities.max_priority)}
    if state.episodes is not None:
        position = np.asarray(state.episodes.position).reshape(-1).astype(np.int64)
        last = np.full(ring.batch_size, -1, np.int64)
        if steps:
            last = position[ring.slot(steps - 1) + np.arange(ring.batch_size)]
        ended = np.asarray(state.episodes.next_position) == 0
        out["episodes"] = {"position": position, "last": last, "ended": ended}
    return out


def load_core_state(core: Buffer, flat: FlatSpec, saved: Any, rng: str | None) -> tuple[BufferState, int, bool]:
    """Check ``saved`` whole for ``core`` (``rng``: the receiver's generator kind, None for
    none) and build its ``BufferState``; CheckpointError before anything is built otherwise."""
    geometry = {"batch_size": core.batch_size, "max_length": core.max_length}
    steps, same_rng, new_priorities = check_header(saved, holds(core, rng or "none"), flat, geometry)
    leaves = check_items(flat, saved, range(len(flat.leaves)), (np.ndarray,))
    count = leaves[0].shape[0] if leaves else 0
    ring = _ring(core, steps)
    first = first_stored_step(steps, count, ring.batch_size, ring.max_length, crash_safe=False)
    masses = _masses(core, saved, count, new_priorities)
    episodes = None
    if core.episodes is not None:
        checked = check_episode_state(ring, saved.get("episodes"), steps, count)
        episodes = _episodes(ring, checked, first, steps)
    rows = np.arange(first, steps) % ring.max_length
    storage = []
    for leaf, dtype in zip(leaves, core.dtypes, strict=True):
        stored = np.zeros((ring.max_length, ring.batch_size, *leaf.shape[1:]), dtype)
        stored[rows] = leaf.reshape(len(rows), ring.batch_size, *leaf.shape[1:])
        storage.append(stored)
    fresh = core.init()
    new = fresh._replace(
        rows=pack(core.layout, storage), steps=jnp.asarray(steps, fresh.steps.dtype), episodes=episodes
    )
    if masses is not None:
        mass, largest = masses
        slots = (np.arange(first * ring.batch_size, steps * ring.batch_size) % ring.capacity).astype(np.int32)
        trees = tree_update(tree_init(ring.capacity, core.priorities.branching), jnp.asarray(slots), jnp.asarray(mass))
        new = new._replace(priorities=new.priorities._replace(trees=trees, max_priority=jnp.float32(largest)))
    return jax.block_until_ready(core.rebuild(new)), steps, same_rng  # the valid starts, from the loaded state


def _ring(core: Buffer, steps: int) -> StreamRing:
    ring = StreamRing(core.batch_size, core.max_length, "JAX buffer")
    ring.reset(steps)
    return ring


def _episodes(ring: StreamRing, checked: dict, first: int, steps: int) -> EpisodeState:
    """The core's episode state from checked ``episodes`` arrays: positions of the stored
    steps (others 0) and the next position of each stream; the count of valid starts is
    left to ``Buffer.rebuild``."""
    saved = checked["position"].reshape(ring.max_length, ring.batch_size)
    rows = np.arange(first, steps) % ring.max_length
    position = np.zeros((ring.max_length, ring.batch_size), np.int32)
    position[rows] = saved[rows]  # at most the step: fits the steps counter's dtype
    following = np.where(checked["ended"], 0, checked["last"] + 1).astype(np.int32)
    return EpisodeState(jnp.asarray(position), jnp.asarray(following), jnp.zeros((), jnp.int32))


def _masses(core: Buffer, saved: dict, count: int, new: bool) -> tuple[np.ndarray, float] | None:
    """The saved masses as float32 (what the core's trees hold): the NumPy buffers' checks,
    and masses beyond float32's range refused by name (never rounded to 0 or inf). ``new``:
    the state has none; every item gets a new item's mass (priority 1.0)."""
    if core.priorities is None:
        return None
    if new:
        return np.full(count, priority_mass(1.0, core.priorities.alpha, core.priorities.epsilon), np.float32), 1.0
    mass, largest = check_priority_state(saved.get("priorities"), count)
    info = np.finfo(np.float32)
    outside = ~((mass >= info.tiny) & (mass <= info.max))
    if outside.any():
        raise CheckpointError(
            f"state['priorities']['mass']: expected masses a float32 tree can hold ([{info.tiny}, {info.max}]), "
            f"got {mass[outside][:3].tolist()} at rows {np.flatnonzero(outside)[:3].tolist()}"
        )
    return mass.astype(np.float32), largest
