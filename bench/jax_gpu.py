"""The JAX rows of bench/gpu.py: the functional core inside one jitted, donated ``lax.scan``
per case, beside flashbax where it is importable (as in the ``jax_core`` suite,
bench/suites/jax_core.py, whose cases these are, at the GPU table's capacity). Figures are
us per scanned iteration (median of the repetitions); the prioritized rows also give their
ratio to our uniform sample of pairs, the quantity issue 33 bounds (prioritized sample +
update at most 2x a uniform sample, on a GPU).
"""

from __future__ import annotations

import statistics
import time
from importlib.util import find_spec

import jax
import jax.numpy as jnp

from replaybuf.jax import make_buffer
from suites.jax_core import SAMPLE, SPEC, STREAMS, checksum, pool


class _Case:
    """``step(state, batch, key) -> (state, value)`` scanned ``steps`` times, state donated."""

    def __init__(self, state, step, data, steps: int):
        def run(state, key):
            def body(carry, i):
                state, total = carry
                batch = jax.tree_util.tree_map(lambda x: x[i % x.shape[0]], data)
                state, value = step(state, batch, jax.random.fold_in(key, i))
                return (state, total + value), None

            (state, total), _ = jax.lax.scan(body, (state, jnp.zeros(())), jnp.arange(steps))
            return state, total

        self.run, self.steps, self.key = jax.jit(run, donate_argnums=0), steps, jax.random.key(0)
        self.state = jax.tree_util.tree_map(jnp.copy, state)  # its own: each run donates it
        self.time()  # compile

    def time(self) -> float:
        """us per scanned iteration of one run."""
        start = time.perf_counter()
        self.state, total = self.run(self.state, self.key)
        total.block_until_ready()
        return (time.perf_counter() - start) / self.steps * 1e6


def _fill(state, add, data, adds: int):
    """``state`` after ``adds`` adds of 256 from ``data`` (every slot written)."""
    add = jax.jit(add, donate_argnums=0)
    for i in range(adds):
        state = add(state, jax.tree_util.tree_map(lambda x, i=i: x[i % x.shape[0]], data))
    return state


def _flashbax_cases(capacity: int, data, steps: int) -> dict:
    if find_spec("flashbax") is None:
        return {}
    import flashbax as fbx

    single = jax.tree_util.tree_map(lambda x: x[0, 0], data)
    flat = fbx.make_flat_buffer(capacity, 2, SAMPLE, add_batch_size=STREAMS)
    items = fbx.make_item_buffer(capacity, 1, SAMPLE, add_batches=True)
    flat_state = _fill(flat.init(single), flat.add, data, capacity // STREAMS)
    items_state = _fill(items.init(single), items.add, data, capacity // STREAMS)
    zero = jnp.zeros(())
    return {
        "J1 add 256": _Case(flat_state, lambda s, b, k: (flat.add(s, b), zero), data, steps),
        "J2 sample 256": _Case(items_state, lambda s, b, k: (s, checksum(items.sample(s, k).experience)), data, steps),
        "J2b sample 256 pairs": _Case(
            flat_state, lambda s, b, k: (s, checksum(flat.sample(s, k).experience)), data, steps
        ),
        "J5 add 256 + sample 256 pairs": _Case(
            flat_state, lambda s, b, k: (flat.add(s, b), checksum(flat.sample(s, k).experience)), data, steps
        ),
    }


def jax_section(tiny: bool, quick: bool, reps: int) -> list[str]:
    capacity = 4096 if tiny else 65536 if quick else 262144
    steps = 5 if tiny else 50
    data = pool(4 if tiny else 64)
    ours = make_buffer(SPEC, STREAMS, capacity // STREAMS)
    per = make_buffer(SPEC, STREAMS, capacity // STREAMS, prioritized=True, alpha=0.6)
    state = _fill(ours.init(), ours.add, data, capacity // STREAMS)
    per_state = _fill(per.init(), per.add, data, capacity // STREAMS)
    zero = jnp.zeros(())

    def train(state, batch, key):  # the documented order: write, then read (one fused call)
        state, sampled, _ = ours.add_and_sample(state, batch, key, SAMPLE, 2)
        return state, checksum(sampled)

    def per_step(state, batch, key):
        sampled, info = per.sample(state, key, SAMPLE, 2)
        return per.update_priorities(state, info.ids[:, 0], batch["reward"] ** 2 + 0.01), checksum(sampled)

    def per_train(state, batch, key):
        state, sampled, info = per.add_and_sample(state, batch, key, SAMPLE, 2)
        return per.update_priorities(state, info.ids[:, 0], batch["reward"] ** 2 + 0.01), checksum(sampled)

    cases = {
        "J1 add 256": _Case(state, lambda s, b, k: (ours.add(s, b), zero), data, steps),
        "J2 sample 256": _Case(state, lambda s, b, k: (s, checksum(ours.sample(s, k, SAMPLE)[0])), data, steps),
        "J2b sample 256 pairs": _Case(
            state, lambda s, b, k: (s, checksum(ours.sample(s, k, SAMPLE, 2)[0])), data, steps
        ),
        "J5 add 256 + sample 256 pairs": _Case(state, train, data, steps),
        "J3 prioritized sample 256 + update": _Case(per_state, per_step, data, steps),
        "J3c prioritized train step (add + sample + update)": _Case(per_state, per_train, data, steps),
    }
    theirs = _flashbax_cases(capacity, data, steps)
    times: dict[str, list[float]] = {name: [] for name in [*cases, *(f"fbx {n}" for n in theirs)]}
    for _ in range(reps):
        for name, case in cases.items():
            times[name].append(case.time())
        for name, case in theirs.items():
            times[f"fbx {name}"].append(case.time())
    figures = {name: statistics.median(values) for name, values in times.items()}
    uniform = figures["J2b sample 256 pairs"]
    lines = [
        f"\nJAX {jax.__version__} on {jax.devices()[0].platform}, capacity {capacity}, {steps} iterations per scan",
        "| case | replaybuf (us) | flashbax (us) | flashbax / replaybuf | / our uniform sample of pairs |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name in cases:
        mine, other = figures[name], figures.get(f"fbx {name}")
        peer = "" if other is None else f"{other:.1f} | {other / mine:.2f}x"
        per_ratio = f"{mine / uniform:.2f}x" if name.startswith("J3") else ""
        lines.append(f"| {name} | {mine:.1f} | {peer or ' | '} | {per_ratio} |")
    return lines
