"""Study: where replaybuf.rllib's bytes per stored CartPole step go.
Answer: bench/analysis/90-rllib.md, "Bytes per step to 2x raw".

The `rllib` suite's `rllib_bytes` fill (real CartPole-v1 under random actions, ~22-step
episodes, chunks of up to 500 steps) of a prioritized buffer after a warm-up fill (imports and
compiled kernels outside the window); tracemalloc of what the buffer keeps alive over its
stored steps, then each store array's bytes a step and the rest (per-episode objects), and the
largest allocation sites.

    PYTHONPATH=src .venv-rllib/bin/python bench/studies/rllib_bytes.py [steps]
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from replaybuf.rllib import PrioritizedEpisodeReplayBuffer  # noqa: E402
from suites.rllib import CartPoleStream, fill  # noqa: E402


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    warm = PrioritizedEpisodeReplayBuffer(capacity=2000, alpha=0.6)
    fill(warm, CartPoleStream(seed=9), 2000, 500)
    warm.sample(num_items=32, n_step=(2, 5), gamma=0.99, beta=0.4)
    del warm
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    stream = CartPoleStream(seed=3)
    buffer = PrioritizedEpisodeReplayBuffer(capacity=steps, alpha=0.6)
    fill(buffer, stream, steps, 500)
    del stream
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    n = buffer.get_num_timesteps()
    store = buffer._store
    print(f"{n} steps, {len(store.episodes)} episodes, {store.size} rows: {used / n:.1f} bytes a step")
    parts = {name: value.nbytes for name, value in vars(store).items() if isinstance(value, np.ndarray)}
    parts["columns"] = sum(f.nbytes for f in store.columns.fields)
    parts["sum tree"], parts["min tree"] = store.sums.tree.nbytes, store.mins.tree.nbytes
    for name, size in parts.items():
        print(f"  {name}: {size / n:.1f}")
    print(f"  the rest (per-episode objects): {(used - sum(parts.values())) / n:.1f}")
    for stat in snapshot.statistics("lineno")[:10]:
        print(" ", stat)


if __name__ == "__main__":
    main()
