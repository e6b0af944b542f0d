"""J1-J5: the JAX core beside flashbax, interleaved in one process, inside lax.scan, donated.

Both libraries hold the same 1M small transitions (obs f32[4], action i32, reward f32,
done bool, next_obs f32[4]; episodes end with probability 1/100) as 256 streams x 4096
steps. Each case is one jitted ``lax.scan`` of 100 iterations with the state donated; a
sample's items feed a checksum in the carry so XLA cannot drop them. The two libraries'
scans of a case are timed in turn by the harness (so load on the machine hits both alike);
figures are iterations per second (1e6 / the us per iteration the older tables gave).
Runs in bench/.venvs/jax (bench/requirements/jax.txt); without flashbax (the main
environment) replaybuf's side runs alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib.metadata import version

import jax
import jax.numpy as jnp
import numpy as np

import harness
import replaybuf
from harness import Workload
from replaybuf import ArraySpec
from replaybuf.jax import make_buffer
from suites import Job

STREAMS, SAMPLE, WINDOW, STEPS = 256, 256, 8, 100
CAPACITY = {"full": 2**20, "quick": 2**18, "tiny": 2**12}
FLASHBAX = "flashbax"
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
    """A state and a scanned step; ``run(n)`` runs the scan n times (the harness times it)."""

    def __init__(self, state, step, data, steps: int):
        # each case owns a copy: a donated state is gone after the call
        self.state = jax.tree_util.tree_map(jnp.copy, state)
        self.data = data
        self.scan = scanned(step, steps)
        self.key = jax.random.key(1)

    def run(self, n: int) -> None:
        for _ in range(n):
            self.key, key = jax.random.split(self.key)
            self.state, total = self.scan(self.state, self.data, key)
        jax.block_until_ready((self.state, total))


def fill(state, add, data, adds: int):
    add = jax.jit(add, donate_argnums=0)
    for i in range(adds):
        state = add(state, jax.tree_util.tree_map(lambda x, i=i: x[i % x.shape[0]], data))
    return jax.block_until_ready(state)


#: case key -> (title, goal: flashbax's time over replaybuf's at least)
CASES = {
    "j1": ("J1 add 256", 1.5),
    "j2": ("J2 sample 256 items", 1.5),
    "j2b": ("J2b sample 256 transitions (pairs)", 0),
    "j3": ("J3 prioritized sample 256 + update", 2),
    "j3b": ("J3b prioritized add 256", 4),
    "j3c": ("J3c prioritized train step: add 256 + sample 256 + update", 0),
    "j4": ("J4 256 windows of 8 (ours episode-exact, flashbax unaware)", 0.8),
    "j5": ("J5 train step: add 256 + sample 256 pairs", 0),
}
WORKLOADS = [
    Workload(key, title, "steps/s", STEPS, peers=(FLASHBAX,), goal_vs=FLASHBAX if goal else "", goal_ratio=goal)
    for key, (title, goal) in CASES.items()
]
JOBS = [Job("jax", "jax", ("replaybuf", FLASHBAX))]


def ours_cases(capacity: int, steps: int, data) -> dict[str, Callable[[], Case]]:
    """replaybuf's case makers: a buffer is filled when its first case is made, so a run of some
    workloads fills only the buffers they read (a GPU fills each in 1,000+ dispatched adds)."""
    max_length = capacity // STREAMS
    ours = make_buffer(SPEC, STREAMS, max_length)
    ours_per = make_buffer(SPEC, STREAMS, max_length, sampler="prioritized", alpha=0.6)
    ours_ep = make_buffer(
        SPEC, STREAMS, max_length, respect_episodes=True, episode_end_field="done", episode_num_steps=WINDOW
    )
    state, per_state, ep_state = (  # adds of 256 that fill every slot
        functools.cache(lambda buffer=buffer: fill(buffer.init(), buffer.add, data, max_length))
        for buffer in (ours, ours_per, ours_ep)
    )

    def per_step(state, batch, key):
        sampled, info = ours_per.sample(state, key, SAMPLE, 2)
        return ours_per.update_priorities(state, info.ids[:, 0], batch["reward"] ** 2 + 0.01), checksum(sampled)

    def per_train(state, batch, key):  # a prioritized training step: add, sample, update
        state, sampled, info = ours_per.add_and_sample(state, batch, key, SAMPLE, 2)
        return ours_per.update_priorities(state, info.ids[:, 0], batch["reward"] ** 2 + 0.01), checksum(sampled)

    def train(state, batch, key):  # the documented order: write, then read (one fused call)
        state, sampled, _ = ours.add_and_sample(state, batch, key, SAMPLE, 2)
        return state, checksum(sampled)

    zero = jnp.zeros(())
    steps_of = {
        "j1": (state, lambda s, b, k: (ours.add(s, b), zero)),
        "j2": (state, lambda s, b, k: (s, checksum(ours.sample(s, k, SAMPLE)[0]))),
        "j2b": (state, lambda s, b, k: (s, checksum(ours.sample(s, k, SAMPLE, 2)[0]))),
        "j3": (per_state, per_step),
        "j3b": (per_state, lambda s, b, k: (ours_per.add(s, b), zero)),
        "j3c": (per_state, per_train),
        "j4": (ep_state, lambda s, b, k: (s, checksum(ours_ep.sample(s, k, SAMPLE, WINDOW)[0]))),
        "j5": (state, train),
    }
    return _makers(steps_of, data, steps)


def flashbax_cases(capacity: int, steps: int, data) -> dict[str, Case]:
    import flashbax as fbx

    max_length = capacity // STREAMS
    single = jax.tree_util.tree_map(lambda x: x[0, 0], data)
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
    flat_state, items_state, per_state, traj_state = (
        functools.cache(lambda buffer=buffer, add=add: fill(buffer.init(single), add, data, max_length))
        for buffer, add in (
            (flat, flat.add),
            (items, items.add),
            (per, per.add),
            (traj, lambda s, b: traj.add(s, jax.tree_util.tree_map(lambda x: x[:, None], b))),
        )
    )

    def per_step(state, batch, key):
        sampled = per.sample(state, key)
        return per.set_priorities(state, sampled.indices, batch["reward"] ** 2 + 0.01), checksum(sampled.experience)

    def per_train(state, batch, key):  # written first, as replaybuf's (no storage copy)
        state = per.add(state, batch)
        sampled = per.sample(state, key)
        return per.set_priorities(state, sampled.indices, batch["reward"] ** 2 + 0.01), checksum(sampled.experience)

    def train(state, batch, key):  # flashbax's usual loop: sample, learn, then add
        sampled = flat.sample(state, key)
        return flat.add(state, batch), checksum(sampled.experience)

    zero = jnp.zeros(())
    steps_of = {
        "j1": (flat_state, lambda s, b, k: (flat.add(s, b), zero)),
        "j2": (items_state, lambda s, b, k: (s, checksum(items.sample(s, k).experience))),
        "j2b": (flat_state, lambda s, b, k: (s, checksum(flat.sample(s, k).experience))),
        "j3": (per_state, per_step),
        "j3b": (per_state, lambda s, b, k: (per.add(s, b), zero)),
        "j3c": (per_state, per_train),
        "j4": (traj_state, lambda s, b, k: (s, checksum(traj.sample(s, k).experience))),
        "j5": (flat_state, train),
    }
    return _makers(steps_of, data, steps)


def _makers(steps_of: dict, data, steps: int) -> dict[str, Callable[[], Case]]:
    """Case key -> a maker of its ``Case`` from ``(filled state maker, step)``."""
    return {
        key: functools.partial(lambda made, step: Case(made(), step, data, steps), *pair)
        for key, pair in steps_of.items()
    }


def measure(job: Job, size: str, keys: list[str]) -> None:
    """Every case (``keys`` only) of both libraries, interleaved; flashbax missing: replaybuf alone."""
    data = pool(64)
    harness.emit(lib="replaybuf", version=f"replaybuf {replaybuf.__version__}, jax {jax.__version__}")
    sides = {"replaybuf": ours_cases(CAPACITY[size], STEPS, data)}
    try:
        sides[FLASHBAX] = flashbax_cases(CAPACITY[size], STEPS, data)
        harness.emit(lib=FLASHBAX, version=f"flashbax {version('flashbax')}, jax {jax.__version__}")
    except ImportError as exc:
        harness.missing([w.key for w in WORKLOADS], FLASHBAX, f"not installed here ({exc})")
    for workload in WORKLOADS:
        if not keys or workload.key in keys:
            runs = {label: cases[workload.key]().run for label, cases in sides.items()}
            harness.measure(workload, runs, harness.TIMINGS[size])
