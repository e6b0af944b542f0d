"""A K-ary sum tree (and its min twin) as pure JAX functions: one array per level.

Level 0 is the root (one node), the last level holds one leaf per slot, padded with zeros
up to a multiple of ``K ** (depth - 1)``: every node below the root has K children, the root
as many as the size needs (at most K), so 1M slots take 1M leaves, not ``8 ** 7`` = 2M.
An update writes the leaves, then *recomputes* parents from their children, level by
level: no delta is ever propagated, so sums cannot drift however many updates a tree sees.
On the CPU an update recomputes only the touched parents (the top levels whole) and a
descent reads the K children of the current node for every draw at once (a ``[n, K]``
gather per level). Other platforms, where each of those steps would be a small kernel
waiting for the one before, recompute every level whole (reductions XLA fuses) and descend
in two wide steps (``wide_descend``). ``forced_tree_path`` picks one path on any platform (tests).

The min tree has no leaf level of its own: its lowest level is the minimum of the sum
tree's leaves that are above 0 (an empty or padded slot holds 0, a stored item a positive
mass), computed from the same row the sum tree gathers; +inf where there is none.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = [
    "Trees",
    "forced_tree_path",
    "masked_descend",
    "per_platform",
    "tree_depth",
    "tree_descend",
    "tree_init",
    "tree_update",
]


class Trees(NamedTuple):
    """``sums[d]`` and ``mins[d]``: level ``d`` of the sum and min trees (``K ** d`` nodes;
    ``mins`` stops one level above the leaves); ``mins`` is ``()`` for a sum tree alone."""

    sums: tuple
    mins: tuple


def tree_depth(size: int, branching: int) -> int:
    depth = 1
    while branching**depth < size:
        depth += 1
    return depth


def level_sizes(size: int, branching: int) -> list[int]:
    """Nodes per level, root first: the root's fan-out is what ``size`` needs, the others K."""
    depth = tree_depth(size, branching)
    below_root = branching ** (depth - 1)
    top = -(-size // below_root)
    return [1] + [top * branching ** (d - 1) for d in range(1, depth + 1)]


def tree_init(size: int, branching: int, with_mins: bool = True) -> Trees:
    levels = level_sizes(size, branching)
    sums = tuple(jnp.zeros((n,), jnp.float32) for n in levels)
    mins = tuple(jnp.full((n,), jnp.inf, jnp.float32) for n in levels[:-1]) if with_mins else ()
    return Trees(sums, mins)


def _fan_out(sums: tuple, level: int) -> int:
    """Children per node of ``level`` (the root's may be fewer than K)."""
    return sums[level + 1].shape[0] // sums[level].shape[0]


# Levels whose children number at most this are recomputed whole on an update (a dense
# reduction of a few hundred floats costs less than a gather and a scatter of the updated
# nodes: docs/design.md, "Measured choices").
DENSE_CHILDREN = 512


def tree_update(trees: Trees, slots: jax.Array, masses: jax.Array, after: jax.Array | None = None) -> Trees:
    """Set the leaves ``slots`` to ``masses`` and recompute their ancestors.

    A slot at or past the leaf level's size is dropped (the caller marks entries to skip that
    way). Duplicate slots: one of their masses is kept (which one is unspecified). ``after``:
    a value computed from other reads of these levels, which the writes must wait for.
    On the CPU only the touched parents are recomputed (levels of at most ``DENSE_CHILDREN``
    children whole); on other platforms every level whole (see the module).
    """
    return per_platform((trees, slots, masses, after), cpu=_touched_update, default=_whole_update)


def _update(trees: Trees, slots: jax.Array, masses: jax.Array, after: jax.Array | None, dense_children: float) -> Trees:
    """``tree_update``, recomputing whole every level of at most ``dense_children`` children."""
    sums, mins = list(trees.sums), list(trees.mins)
    leaves = len(sums) - 1
    # The writes wait for the roots: every read of these levels by the update that made them
    # (the rows gathered to recompute parents) comes before its roots, so XLA can write in
    # place. Without that data dependency, an update right after another (an add, then
    # update_priorities) made XLA copy the big levels every step (docs/jax.md); XLA on CPU
    # drops optimization barriers before it decides copies, so the dependency is a value:
    # a NaN root (which valid masses never make) would drop the writes.
    roots = sums[0][0] if not mins else sums[0][0] + jnp.minimum(mins[0][0], 0.0)
    if after is not None:
        roots = roots + jnp.minimum(after, 0.0)
    index = jnp.where(jnp.isnan(roots), sums[-1].shape[0], slots.astype(jnp.int32))
    sums[-1] = sums[-1].at[index].set(masses, mode="drop")
    for level in range(leaves - 1, -1, -1):
        fan_out = _fan_out(sums, level)
        index = index // fan_out  # an out-of-range slot stays out of range one level up
        dense = sums[level + 1].shape[0] <= dense_children  # a level recomputed whole
        safe = jnp.minimum(index, sums[level].shape[0] - 1)
        # a level seen as [parents, K]: one row gather per parent (cheaper than K indices)
        children = sums[level + 1].reshape(-1, fan_out)
        children = children if dense else children[safe]
        sums[level] = children.sum(-1) if dense else sums[level].at[index].set(children.sum(-1), mode="drop")
        if mins:
            if level == leaves - 1:  # the leaves' minimum: the sum tree's row, empty slots left out
                children = jnp.where(children > 0, children, jnp.inf)
            else:
                children = mins[level + 1].reshape(-1, fan_out)
                children = children if dense else children[safe]
            mins[level] = children.min(-1) if dense else mins[level].at[index].set(children.min(-1), mode="drop")
    return Trees(tuple(sums), tuple(mins))


_touched_update = functools.partial(_update, dense_children=DENSE_CHILDREN)
_whole_update = functools.partial(_update, dense_children=float("inf"))


def tree_descend(sums: tuple, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The leaf under each target mass in ``[0, root)`` (the first leaf whose prefix sum
    exceeds it) and that leaf's mass. Rounding can never land on a zero-mass child: a child
    is passed only while mass lies after it, so a target at or past the sum of the children
    (float rounding) picks the last child with mass.

    On the CPU the descent goes level by level (``level_descend``); on other platforms, where
    each level would be a small kernel of its own waiting for the one above, it takes two
    wide steps (``wide_descend``). ``forced_tree_path`` picks one path on any platform (tests)."""
    return per_platform((sums, targets), cpu=level_descend, default=wide_descend)


def masked_descend(sums: tuple, drawable: jax.Array, fractions: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Draw leaves of the tree ``sums`` among the ``drawable`` ones (bool per leaf) at
    ``fractions`` (in [0, 1)) of their mass: ``(leaves, their masses, the drawable mass)``.

    With no loop and no rejection: the masked leaves are summed afresh into the nodes of the
    middle level (one pass over the leaves, which XLA fuses with the mask) and descended in
    ``wide_descend``'s two steps, whose rule never picks a zero-mass entry, so a draw never
    lands outside the mask. A drawable mass of 0 gives leaves of mass 0 (nothing to draw)."""
    leaves = jnp.where(drawable, sums[-1], 0.0)
    nodes = leaves.reshape(sums[_middle(sums)].shape[0], -1).sum(axis=-1)
    total = jnp.sum(nodes)
    chosen, masses = _two_steps(nodes, leaves, fractions * total)
    return chosen, masses, total


def per_platform(operands: tuple, *, cpu: Callable[..., Any], default: Callable[..., Any]) -> Any:
    """``cpu(*operands)`` on the CPU, ``default(*operands)`` on every other platform
    (``lax.platform_dependent``); inside ``forced_tree_path`` the forced one on any platform."""
    if _FORCED is not None:
        return (cpu if _FORCED == "levels" else default)(*operands)
    return lax.platform_dependent(*operands, cpu=cpu, default=default)


_FORCED: str | None = None  # the path forced by ``forced_tree_path``, else None (chosen by platform)


@contextlib.contextmanager
def forced_tree_path(path: str) -> Iterator[None]:
    """Within the block, every descent, update and draw traced takes ``path`` on any platform:
    'levels' (the CPU's: level by level, touched parents, rejected starts drawn again) or
    'wide' (every other platform's: two wide descent steps, every level recomputed whole,
    starts masked instead of rejected).

    JAX's caches are cleared on the way in and out, so no program traced under one choice
    is reused under the other."""
    global _FORCED
    before = _FORCED
    if path not in ("levels", "wide"):
        raise ValueError(f"path: expected 'levels' or 'wide', got {path!r}")
    _FORCED = path
    jax.clear_caches()
    try:
        yield
    finally:
        _FORCED = before
        jax.clear_caches()


def _choose(prefix: jax.Array, targets: jax.Array) -> jax.Array:
    """Per row, how many entries are passed: those whose inclusive ``prefix`` is at most the
    target while mass lies after them (so a zero-mass entry is never chosen)."""
    passed = (prefix <= targets[:, None]) & (prefix < prefix[:, -1:])
    return jnp.sum(passed, axis=-1, dtype=jnp.int32)


def wide_descend(sums: tuple, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``tree_descend`` in two steps whatever the depth: the node of a middle level whose
    prefix holds the target (one prefix sum over that whole level, compared with every
    target at once), then the leaf under it (a row gather of its leaves and their prefix
    sums). The middle level is the one nearest the square root of the leaf count, so both
    steps are about as wide. The same rule as ``level_descend``, at the same float32
    precision (prefix sums over a level's nodes, which are exact recomputed sums)."""
    return _two_steps(sums[_middle(sums)], sums[-1], targets)


def _middle(sums: tuple) -> int:
    """The level whose node count is nearest the square root of the leaf count."""
    leaves = sums[-1].shape[0]
    return min(range(len(sums) - 1), key=lambda level: max(sums[level].shape[0], leaves // sums[level].shape[0]))


def _two_steps(nodes: jax.Array, leaves: jax.Array, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The leaf under each target: the node of ``nodes`` (sums of equal runs of ``leaves``)
    whose prefix holds it, then the leaf of that node's run."""
    width = leaves.shape[0] // nodes.shape[0]
    prefix = jnp.cumsum(nodes)[None, :]
    node = _choose(prefix, targets)
    before = jnp.where(node > 0, prefix[0, jnp.maximum(node - 1, 0)], 0.0)
    rest = jnp.maximum(targets - before, 0.0)
    children = leaves.reshape(-1, width)[node]  # [n, width]: one row gather
    choice = _choose(jnp.cumsum(children, axis=-1), rest)
    mass = jnp.take_along_axis(children, choice[:, None], axis=-1)[:, 0]
    return node * width + choice, mass


def level_descend(sums: tuple, targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``tree_descend`` level by level: the K children of the current node of every draw at
    once (a ``[n, K]`` row gather per level)."""
    node = jnp.zeros(targets.shape, jnp.int32)
    mass = jnp.zeros(targets.shape, jnp.float32)
    for level in range(1, len(sums)):
        fan_out = _fan_out(sums, level - 1)
        if level == 1:  # every draw starts at the root: its children need no gather
            children = jnp.broadcast_to(sums[1], (*targets.shape, fan_out))
        else:
            children = sums[level].reshape(-1, fan_out)[node]  # [n, K]: one row gather
        # prefix sums of the children as one product with an upper-triangular matrix of ones (on
        # CPU a third cheaper than cumsum's reduce-window; HIGHEST keeps full float32 on TF32 GPUs)
        upper = jnp.triu(jnp.ones((fan_out, fan_out), jnp.float32))
        prefix = jnp.dot(children, upper, precision=lax.Precision.HIGHEST)
        passed = (prefix <= targets[:, None]) & (prefix < prefix[:, -1:])
        choice = jnp.sum(passed, axis=-1, dtype=jnp.int32)
        targets = jnp.maximum(targets - jnp.sum(jnp.where(passed, children, 0.0), axis=-1), 0.0)
        node = node * fan_out + choice
        if level == len(sums) - 1:
            picked = jnp.arange(fan_out, dtype=jnp.int32) == choice[:, None]
            mass = jnp.sum(jnp.where(picked, children, 0.0), axis=-1)
    return node, mass
