"""The JAX K-ary sum and min trees (replaybuf.jax.sumtree) against NumPy on their leaves."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from replaybuf.jax.sumtree import (
    DENSE_CHILDREN,
    forced_tree_path,
    level_descend,
    tree_descend,
    tree_init,
    tree_update,
    wide_descend,
)

SIZE = 5000  # 2 * 8 ** 4 leaves at K = 8: levels 0-2 are recomputed whole, levels 3-4 node by node


def reference_levels(leaves: np.ndarray, branching: int, reduce) -> list[np.ndarray]:
    levels = [leaves]
    while levels[0].size > 1:  # K children per node; the root takes what is left (at most K)
        levels.insert(0, reduce(levels[0].reshape(-1, min(branching, levels[0].size)), axis=-1))
    return levels


@pytest.mark.parametrize(
    ("size", "branching", "levels"),
    [
        (2**20, 8, [1, 4, 32, 256, 2048, 16384, 131072, 2**20]),  # 1M leaves, not 8 ** 7 = 2M
        (SIZE, 8, [1, 2, 16, 128, 1024, 8192]),
        (SIZE, 4, [1, 2, 8, 32, 128, 512, 2048, 8192]),
        (8, 8, [1, 8]),
        (1, 8, [1, 1]),
    ],
)
def test_levels_pad_the_leaves_only_to_a_multiple_of_the_subtrees_below_the_root(size, branching, levels):
    assert [level.shape[0] for level in tree_init(size, branching).sums] == levels


@pytest.fixture(params=["levels", "wide"])
def tree_path(request):
    """Each platform's path, forced on the CPU: touched parents (the CPU's) or every level
    recomputed whole (every other platform's)."""
    with forced_tree_path(request.param):
        yield request.param


@pytest.mark.parametrize("branching", [4, 8])
def test_every_level_is_its_childrens_sum_and_min_after_many_updates(branching, tree_path):
    trees = tree_init(SIZE, branching)
    leaf_count = trees.sums[-1].shape[0]
    assert any(level.shape[0] * branching <= DENSE_CHILDREN for level in trees.sums[:-1])
    assert any(level.shape[0] * branching > DENSE_CHILDREN for level in trees.sums[:-1])
    update = jax.jit(tree_update)
    rng = np.random.default_rng(0)
    sums = np.zeros(leaf_count, np.float32)
    mins = np.full(leaf_count, np.inf, np.float32)
    for _ in range(30):
        slots = rng.integers(0, SIZE, 64)
        slots[:8] = leaf_count + rng.integers(0, 10, 8)  # out of range: dropped
        masses = rng.random(64).astype(np.float32) + 0.01
        slots[8:12] = slots[12]  # duplicates: one of their masses is kept, the same in every level
        trees = update(trees, jnp.asarray(slots), jnp.asarray(masses))
        kept = np.asarray(trees.sums[-1])
        for slot in np.unique(slots[slots < leaf_count]):
            assert kept[slot] in masses[slots == slot]
        live = slots < leaf_count
        sums[slots[live]] = kept[slots[live]]
        mins[slots[live]] = kept[slots[live]]
    np.testing.assert_array_equal(np.asarray(trees.sums[-1]), sums)
    for got, want in zip(trees.sums, reference_levels(sums, branching, np.sum), strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
    # the min tree stops above the leaves: its lowest level is the minimum of the stored
    # (positive) leaves, the empty ones (0 in the sum tree) left out
    for got, want in zip(trees.mins, reference_levels(mins, branching, np.min)[:-1], strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("descend", [level_descend, wide_descend], ids=["levels", "wide"])
@pytest.mark.parametrize("branching", [4, 8])
def test_a_descent_finds_the_leaf_whose_prefix_holds_each_target(descend, branching):
    rng = np.random.default_rng(1)
    masses = np.where(rng.random(SIZE) < 0.3, 0.0, rng.random(SIZE)).astype(np.float32)
    trees = tree_update(tree_init(SIZE, branching, with_mins=False), jnp.arange(SIZE), jnp.asarray(masses))
    total = float(trees.sums[0][0])
    edges = np.cumsum(masses.astype(np.float64))
    targets = np.concatenate([rng.random(500) * total, edges[rng.integers(0, SIZE, 50)] * (1 - 1e-6)])
    targets = np.minimum(targets, total * (1 - 1e-6)).astype(np.float32)
    leaves, drawn = jax.jit(descend)(trees.sums, jnp.asarray(targets))
    leaves, drawn = np.asarray(leaves), np.asarray(drawn)
    assert (masses[leaves] > 0).all()  # never a zero-mass leaf
    np.testing.assert_array_equal(drawn, masses[leaves])
    want = np.searchsorted(edges, targets.astype(np.float64), side="right")
    assert np.mean(leaves == want) > 0.99  # float32 sums may move a target across an edge
    assert (np.abs(leaves - want) <= 64).all()


def test_both_descents_pick_the_same_leaves_and_the_platform_picks_one():
    rng = np.random.default_rng(2)
    masses = np.where(rng.random(SIZE) < 0.5, 0.0, rng.random(SIZE) ** 4).astype(np.float32)
    trees = tree_update(tree_init(SIZE, 8, with_mins=False), jnp.arange(SIZE), jnp.asarray(masses))
    targets = jnp.asarray(rng.random(4096).astype(np.float32)) * trees.sums[0][0]
    levels, wide = (jax.jit(f)(trees.sums, targets) for f in (level_descend, wide_descend))
    assert np.mean(np.asarray(levels[0]) == np.asarray(wide[0])) > 0.99  # float32 edges may differ
    assert (masses[np.asarray(wide[0])] > 0).all()
    chosen = jax.jit(tree_descend)(trees.sums, targets)  # not forced: the platform's own path
    own = levels if jax.default_backend() == "cpu" else wide
    np.testing.assert_array_equal(np.asarray(chosen[0]), np.asarray(own[0]))
    with forced_tree_path("wide"):
        np.testing.assert_array_equal(np.asarray(jax.jit(tree_descend)(trees.sums, targets)[0]), np.asarray(wide[0]))
    np.testing.assert_array_equal(np.asarray(jax.jit(tree_descend)(trees.sums, targets)[0]), np.asarray(own[0]))
