"""A K-ary sum tree (and its min twin) as pure JAX functions: one array per level.

Level 0 is the root (one node), the last level holds one leaf per slot (padded with zeros
up to ``K ** depth``). An update writes the leaves, then *recomputes* every touched parent
from its K children, level by level (the top levels whole): no delta is ever propagated,
so sums cannot drift however many updates a tree sees. A descent reads the K children of
the current node for every draw at once (a ``[n, K]`` gather per level).

The min tree has no leaf level of its own: its lowest level is the minimum of the sum
tree's leaves that are above 0 (an empty or padded slot holds 0, a stored item a positive
mass), computed from the same row the sum tree gathers; +inf where there is none.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["Trees", "tree_depth", "tree_init", "tree_update", "tree_descend"]


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


def tree_init(size: int, branching: int, with_mins: bool = True) -> Trees:
    depth = tree_depth(size, branching)
    sums = tuple(jnp.zeros((branching**d,), jnp.float32) for d in range(depth + 1))
    mins = tuple(jnp.full((branching**d,), jnp.inf, jnp.float32) for d in range(depth)) if with_mins else ()
    return Trees(sums, mins)


# Levels whose children number at most this are recomputed whole on an update (a dense
# reduction of a few hundred floats costs less than a gather and a scatter of the updated
# nodes; measured on CPU at 1M leaves, K = 8: an update of 256 leaves 28 -> 23 us).
DENSE_CHILDREN = 512


def tree_update(trees: Trees, slots: jax.Array, masses: jax.Array, branching: int) -> Trees:
    """Set the leaves ``slots`` to ``masses`` and recompute their ancestors.

    A slot at or past the leaf level's size is dropped (the caller marks entries to skip that
    way). Duplicate slots: one of their masses is kept (which one is unspecified).
    """
    sums, mins = list(trees.sums), list(trees.mins)
    leaves = len(sums) - 1
    index = slots.astype(jnp.int32)
    sums[-1] = sums[-1].at[index].set(masses, mode="drop")
    for level in range(leaves - 1, -1, -1):
        index = index // branching  # an out-of-range slot stays out of range one level up
        dense = sums[level + 1].shape[0] <= DENSE_CHILDREN  # a small level: recomputed whole
        safe = jnp.minimum(index, sums[level].shape[0] - 1)
        # a level seen as [parents, K]: one row gather per parent (cheaper than K indices)
        children = sums[level + 1].reshape(-1, branching)
        children = children if dense else children[safe]
        sums[level] = children.sum(-1) if dense else sums[level].at[index].set(children.sum(-1), mode="drop")
        if mins:
            if level == leaves - 1:  # the leaves' minimum: the sum tree's row, empty slots left out
                children = jnp.where(children > 0, children, jnp.inf)
            else:
                children = mins[level + 1].reshape(-1, branching)
                children = children if dense else children[safe]
            mins[level] = children.min(-1) if dense else mins[level].at[index].set(children.min(-1), mode="drop")
    return Trees(tuple(sums), tuple(mins))


def tree_descend(sums: tuple, targets: jax.Array, branching: int) -> tuple[jax.Array, jax.Array]:
    """The leaf under each target mass in ``[0, root)`` (the first leaf whose prefix sum
    exceeds it) and that leaf's mass. Rounding can never land on a zero-mass child: a child
    is passed only while mass lies after it, so a target at or past the sum of the children
    (float rounding) picks the last child with mass."""
    node = jnp.zeros(targets.shape, jnp.int32)
    mass = jnp.zeros(targets.shape, jnp.float32)
    # prefix sums of K children as one product with an upper-triangular matrix of ones (on CPU
    # a third cheaper than cumsum's reduce-window; HIGHEST keeps full float32 on GPUs' TF32)
    upper = jnp.triu(jnp.ones((branching, branching), jnp.float32))
    for level in range(1, len(sums)):
        if level == 1:  # every draw starts at the root: its children need no gather
            children = jnp.broadcast_to(sums[1], (*targets.shape, branching))
        else:
            children = sums[level].reshape(-1, branching)[node]  # [n, K]: one row gather
        prefix = jnp.dot(children, upper, precision=lax.Precision.HIGHEST)
        passed = (prefix <= targets[:, None]) & (prefix < prefix[:, -1:])
        choice = jnp.sum(passed, axis=-1, dtype=jnp.int32)
        targets = jnp.maximum(targets - jnp.sum(jnp.where(passed, children, 0.0), axis=-1), 0.0)
        node = node * branching + choice
        if level == len(sums) - 1:
            picked = jnp.arange(branching, dtype=jnp.int32) == choice[:, None]
            mass = jnp.sum(jnp.where(picked, children, 0.0), axis=-1)
    return node, mass
