"""J1-J5: the JAX core beside flashbax, interleaved in one process, inside lax.scan, donated.

Both libraries hold the same 1M small transitions (obs f32[4], action i32, reward f32,
done bool, next_obs f32[4]; episodes end with probability 1/100) as 256 streams x 4096
steps. Each case is one jitted ``lax.scan`` of ``--steps`` iterations with the state donated;
a sample's items feed a checksum in the carry so XLA cannot drop them. Every repetition
times every case once, in turn (so load on the machine hits both libraries alike); the
figure is the median time per iteration in us, and each ratio is flashbax / replaybuf.

    python bench/jax_bench.py [--steps 200] [--reps 7] [--capacity 1048576]

Needs jax, flashbax and replaybuf importable in one interpreter (bench/requirements/jax.txt;
``python bench/venvs.py jax`` builds bench/.venvs/jax, then run with its python and
PYTHONPATH=src).
"""

from __future__ import annotations

import argparse
import statistics
import time
from importlib.metadata import version

import jax
import jax.numpy as jnp
import numpy as np

from replaybuf import ArraySpec
from replaybuf.jax import make_buffer

STREAMS, SAMPLE, WINDOW = 256, 256, 8
SPEC = {
    "obs": ArraySpec((4,), np.float32),
    "action": ArraySpec((), np.int32),
    "reward": ArraySpec((), np.float32),
    "done": ArraySpec((), np.bool_),
    "next_obs": ArraySpec((4,), np.float32),
}


def pool(batches: int) -> dict:
    """``batches`` adds of 256 transitions each, on the device: leaves ``[batches, 256, ...]``."""
    rng = np.random.default_rng(0)
    n = batches * STREAMS
    obs = rng.standard_normal((n + 1, 4), dtype=np.float32)
    flat = {
        "obs": obs[:n],
        "action": rng.integers(0, 2, n).astype(np.int32),
        "reward": rng.standard_normal(n, dtype=np.float32),
        "done": rng.random(n) < 0.01,
        "next_obs": obs[1:],
    }
    return {k: jnp.asarray(v.reshape(batches, STREAMS, *v.shape[1:])) for k, v in flat.items()}


def checksum(items) -> jax.Array:
    return sum(jnp.sum(leaf.astype(jnp.float32)) for leaf in jax.tree_util.tree_leaves(items))


def scanned(step, steps: int):
    """A jitted function ``(state, key) -> (state, checksum)`` running ``step`` ``steps`` times."""

    def run(state, data, key):
        def body(carry, i):
            state, total = carry
            state, value = step(
                state, jax.tree_util.tree_map(lambda x: x[i % x.shape[0]], data), jax.random.fold_in(key, i)
            )
            return (state, total + value), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.zeros(())), jnp.arange(steps))
        return state, total

    return jax.jit(run, donate_argnums=0)


class Case:
    """A state and a scanned step; ``time()`` runs it once and returns us per iteration."""

    def __init__(self, state, step, data, steps: int):
        # each case owns a copy: a donated state is gone after the call
        self.state = jax.tree_util.tree_map(jnp.copy, state)
        self.data, self.steps = data, steps
        self.run = scanned(step, steps)
        self.key = jax.random.key(1)
        self.time()  # compile and warm up

    def time(self) -> float:
        self.key, key = jax.random.split(self.key)
        start = time.perf_counter()
        self.state, total = self.run(self.state, self.data, key)
        jax.block_until_ready((self.state, total))
        return (time.perf_counter() - start) / self.steps * 1e6


def fill(state, add, data, adds: int):
    add = jax.jit(add, donate_argnums=0)
    for i in range(adds):
        state = add(state, jax.tree_util.tree_map(lambda x, i=i: x[i % x.shape[0]], data))
    return jax.block_until_ready(state)


def build(capacity: int, steps: int) -> dict[str, tuple[Case, Case]]:
    import flashbax as fbx  # here, so bench/jax_gpu.py can share this module's data without flashbax

    max_length = capacity // STREAMS
    data = pool(64)
    single = jax.tree_util.tree_map(lambda x: x[0, 0], data)
    ours = make_buffer(SPEC, STREAMS, max_length)
    ours_per = make_buffer(SPEC, STREAMS, max_length, prioritized=True, alpha=0.6)
    ours_ep = make_buffer(
        SPEC, STREAMS, max_length, respect_episodes=True, episode_end_field="done", episode_num_steps=WINDOW
    )
    flat = fbx.make_flat_buffer(capacity, 2, SAMPLE, add_batch_size=STREAMS)
    items = fbx.make_item_buffer(capacity, 1, SAMPLE, add_batches=True)
    per = fbx.make_prioritised_flat_buffer(capacity, 2, SAMPLE, add_batch_size=STREAMS, priority_exponent=0.6)
    traj = fbx.make_trajectory_buffer(
        add_batch_size=STREAMS,
        sample_batch_size=SAMPLE,
        sample_sequence_length=WINDOW,
        period=1,
        min_length_time_axis=WINDOW,
        max_length_time_axis=max_length,
    )
    full = max_length  # adds of 256 that fill every slot
    ours_state = fill(ours.init(), ours.add, data, full)
    ours_per_state = fill(ours_per.init(), ours_per.add, data, full)
    ours_ep_state = fill(ours_ep.init(), ours_ep.add, data, full)
    flat_state = fill(flat.init(single), flat.add, data, full)
    items_state = fill(items.init(single), items.add, data, full)
    per_state = fill(per.init(single), per.add, data, full)
    traj_state = fill(
        traj.init(single), lambda s, b: traj.add(s, jax.tree_util.tree_map(lambda x: x[:, None], b)), data, full
    )

    def ours_per_step(state, batch, key):
        sampled, info = ours_per.sample(state, key, SAMPLE, 2)
        return ours_per.update_priorities(state, info.ids[:, 0], batch["reward"] ** 2 + 0.01), checksum(sampled)

    def fbx_per_step(state, batch, key):
        sampled = per.sample(state, key)
        return per.set_priorities(state, sampled.indices, batch["reward"] ** 2 + 0.01), checksum(sampled.experience)

    def ours_per_train(state, batch, key):  # a prioritized training step: add, sample, update
        state, sampled, info = ours_per.add_and_sample(state, batch, key, SAMPLE, 2)
        return ours_per.update_priorities(state, info.ids[:, 0], batch["reward"] ** 2 + 0.01), checksum(sampled)

    def fbx_per_train(state, batch, key):  # the same written first, as replaybuf's (no storage copy)
        state = per.add(state, batch)
        sampled = per.sample(state, key)
        return per.set_priorities(state, sampled.indices, batch["reward"] ** 2 + 0.01), checksum(sampled.experience)

    def ours_train(state, batch, key):  # the documented order: write, then read (one fused call)
        state, sampled, _ = ours.add_and_sample(state, batch, key, SAMPLE, 2)
        return state, checksum(sampled)

    def fbx_train(state, batch, key):  # flashbax's usual loop: sample, learn, then add
        sampled = flat.sample(state, key)
        return flat.add(state, batch), checksum(sampled.experience)

    zero = jnp.zeros(())
    cases = {
        "J1 add 256": (
            Case(ours_state, lambda s, b, k: (ours.add(s, b), zero), data, steps),
            Case(flat_state, lambda s, b, k: (flat.add(s, b), zero), data, steps),
        ),
        "J2 sample 256 items": (
            Case(ours_state, lambda s, b, k: (s, checksum(ours.sample(s, k, SAMPLE)[0])), data, steps),
            Case(items_state, lambda s, b, k: (s, checksum(items.sample(s, k).experience)), data, steps),
        ),
        "J2b sample 256 transitions (pairs)": (
            Case(ours_state, lambda s, b, k: (s, checksum(ours.sample(s, k, SAMPLE, 2)[0])), data, steps),
            Case(flat_state, lambda s, b, k: (s, checksum(flat.sample(s, k).experience)), data, steps),
        ),
        "J3 prioritized sample 256 + update": (
            Case(ours_per_state, ours_per_step, data, steps),
            Case(per_state, fbx_per_step, data, steps),
        ),
        "J3b prioritized add 256": (
            Case(ours_per_state, lambda s, b, k: (ours_per.add(s, b), zero), data, steps),
            Case(per_state, lambda s, b, k: (per.add(s, b), zero), data, steps),
        ),
        "J3c prioritized train step: add 256 + sample 256 + update": (
            Case(ours_per_state, ours_per_train, data, steps),
            Case(per_state, fbx_per_train, data, steps),
        ),
        "J4 256 windows of 8 (ours episode-exact, flashbax unaware)": (
            Case(ours_ep_state, lambda s, b, k: (s, checksum(ours_ep.sample(s, k, SAMPLE, WINDOW)[0])), data, steps),
            Case(traj_state, lambda s, b, k: (s, checksum(traj.sample(s, k).experience)), data, steps),
        ),
        "J5 train step: add 256 + sample 256 pairs": (
            Case(ours_state, ours_train, data, steps),
            Case(flat_state, fbx_train, data, steps),
        ),
    }
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--capacity", type=int, default=2**20)
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args()
    print(
        f"replaybuf.jax vs flashbax {version('flashbax')}, jax {jax.__version__}, {jax.devices()[0].platform}, "
        f"capacity {args.capacity}, {args.steps} iterations per scan, {args.reps} repetitions (median)"
    )
    cases = {k: v for k, v in build(args.capacity, args.steps).items() if args.only in k}
    times: dict[str, tuple[list, list]] = {name: ([], []) for name in cases}
    for _ in range(args.reps):
        for name, (ours, theirs) in cases.items():
            times[name][0].append(ours.time())
            times[name][1].append(theirs.time())
    print("| case | replaybuf (us) | flashbax (us) | flashbax / replaybuf |\n| --- | ---: | ---: | ---: |")
    for name, (ours, theirs) in times.items():
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.2f}x |")


if __name__ == "__main__":
    main()
