"""Study: where RLlib's DQN CartPole loop spends its CPU, and whether timing
``training_step()`` instead of ``train()`` changes the picture. Answer: bench/analysis/90-rllib.md.

Both algorithms get the ``rllib`` suite's DQN config (examples/rllib_dqn_cartpole.py, the tuned
example's settings) and the same 20k prefilled random CartPole steps; the buffer's ``add``,
``sample`` and ``update_priorities`` are wrapped with CPU timers. After 10 warm-up steps, ``N``
calls of ``training_step()`` then ``N`` of ``train()`` (one training step each:
``min_sample_timesteps_per_iteration=1``, no time minimum) are timed, CPU time of the process.
``rev`` runs RLlib's buffer first (the order moves the figures by ~15% on a shared machine).

    PYTHONPATH=src .venv-rllib/bin/python bench/studies/rllib_dqn_split.py [N] [rev]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "bench"), str(ROOT / "bench" / "suites")]

import torch  # noqa: E402
from rllib_dqn_cartpole import OURS, STOCK, dqn_config  # noqa: E402

from suites.rllib import CartPoleStream  # noqa: E402


def timed_buffer(buffer, spent: dict) -> None:
    """Wrap the buffer calls the DQN loop makes with CPU timers summing into ``spent``."""
    for name in ("add", "sample", "update_priorities"):
        call = getattr(buffer, name)

        def timed(*args, _call=call, _name=name, **kwargs):
            start = time.process_time()
            out = _call(*args, **kwargs)
            spent[_name] = spent.get(_name, 0.0) + time.process_time() - start
            return out

        setattr(buffer, name, timed)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 60
    torch.set_num_threads(1)
    episodes = CartPoleStream(seed=4).chunks(20000 // 22, 500)
    kinds = (("replaybuf", OURS), ("rllib", STOCK))
    for lib, kind in reversed(kinds) if "rev" in sys.argv else kinds:
        config = dqn_config(kind, seed=0, num_steps_sampled_before_learning_starts=0).reporting(
            min_sample_timesteps_per_iteration=1, min_time_s_per_iteration=0, min_train_timesteps_per_iteration=0
        )
        algo = config.build_algo()
        algo.local_replay_buffer.add(episodes)
        spent: dict = {}
        timed_buffer(algo.local_replay_buffer, spent)
        for _ in range(10):
            algo.training_step()
        for mode, call in (("training_step", algo.training_step), ("train", algo.train)):
            spent.clear()
            start = time.process_time()
            for _ in range(n):
                call()
            per = (time.process_time() - start) / n
            parts = ", ".join(f"{k} {v / n * 1e3:.2f} ms" for k, v in spent.items())
            print(f"{lib} {mode}: {per * 1e3:.1f} ms a call; buffer: {parts}", flush=True)
        algo.stop()


if __name__ == "__main__":
    main()
