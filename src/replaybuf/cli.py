"""The ``replaybuf`` command line. ``replaybuf demo`` trains DQN on CartPole from a buffer.

The demo collects with a StepDriver into a replay buffer (NumPy by default; ``--backend
tf`` or ``torch`` picks another), trains a PyTorch DQN from ``as_dataset(B, num_steps=2)``,
shows the running return in a progress bar, evaluates the greedy policy over 20 fresh
episodes, prints the mean, and writes a learning-curve PNG whose path it prints.
``--backend jax`` runs ``replaybuf.agents.jax_dqn`` instead: the whole collect-add-sample-
train loop in JAX on gymnax's CartPole-v1, ``--seeds`` agents at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "run_demo"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="replaybuf", description="Experience replay for RL.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train DQN on CartPole-v1 from a replay buffer")
    demo.add_argument(
        "--steps",
        type=int,
        default=None,
        help="most env steps to train (default 100000, stops early once solved or after 240 s; jax: 500000 per agent)",
    )
    demo.add_argument("--seed", type=int, default=1, help="seed of envs, networks and sampling")
    demo.add_argument(
        "--backend",
        choices=["numpy", "tf", "torch", "jax"],
        default="numpy",
        help="replay buffer backend (jax: the whole loop in JAX on gymnax's CartPole, several seeds at once)",
    )
    demo.add_argument("--seeds", type=int, default=4, help="jax backend: agents trained at once under jax.vmap")
    demo.add_argument("--out", type=Path, default=Path("replaybuf-demo"), help="folder for the learning-curve PNG")
    demo.add_argument("--eval-episodes", type=int, default=20, help="greedy episodes per evaluation")
    demo.add_argument(
        "--min-return",
        type=float,
        default=None,
        help="exit with status 1 if the final mean greedy return is below this (acceptance runs)",
    )
    return parser


def run_demo(args: argparse.Namespace) -> dict[str, Any]:
    """Train, evaluate and plot; returns the figures it printed (for tests and scripts)."""
    from replaybuf.buffer import check_positive

    check_positive("steps", args.steps)
    check_positive("eval_episodes", args.eval_episodes, allow_none=False)
    if args.backend == "jax":
        return run_jax_demo(args)
    import torch
    from tqdm import tqdm

    from replaybuf.agents import DqnConfig, evaluate, train_dqn

    torch.set_num_threads(1)  # small networks: one thread is fastest and shares the CPU
    config = DqnConfig(seed=args.seed, backend=args.backend, eval_episodes=args.eval_episodes)
    if args.steps is not None:
        config.total_steps = args.steps
        config.eval_every = min(config.eval_every, max(1, args.steps))
        config.learning_starts = min(config.learning_starts, max(1, args.steps // 2))
    bar = tqdm(total=config.total_steps, unit="step", desc=f"DQN {config.env_id} [{config.backend}]")

    def progress(run: Any) -> None:
        bar.update(run.steps - bar.n)
        recent = run.episode_returns[-10:]
        bar.set_postfix(
            ret=f"{sum(recent) / len(recent):.0f}" if recent else "-",
            best_eval=f"{run.best_return:.0f}" if run.evaluations else "-",
            loss=f"{run.losses[-1]:.3f}" if run.losses else "-",
        )

    try:
        run = train_dqn(config, progress)
    finally:
        bar.close()
    scores = evaluate(config.env_id, run.agent.greedy_policy, args.eval_episodes, seed=1_000_000 + args.seed)
    mean_return = sum(scores) / len(scores)
    loss = run.losses[-1] if run.losses else math.nan
    plot = _plot(run, mean_return, args.out / f"dqn_{config.env_id}_{config.backend}_seed{args.seed}.png")
    print(f"env steps: {run.steps}, train steps: {run.agent.train_steps}, wall time: {run.wall_time:.1f} s")
    print(f"final loss: {loss:.4f}")
    print(f"mean greedy return over {len(scores)} episodes: {mean_return:.1f}")
    print(f"learning curve: {plot}")
    return {
        "mean_return": mean_return,
        "loss": loss,
        "steps": run.steps,
        "wall_time": run.wall_time,
        "plot": plot,
    }


def run_jax_demo(args: argparse.Namespace) -> dict[str, Any]:
    """The JAX demo: ``args.seeds`` agents trained at once inside jitted ``lax.scan`` chunks."""
    from replaybuf.agents.jax_dqn import JaxDqnConfig, train_jax_dqn
    from replaybuf.buffer import check_positive

    check_positive("seeds", args.seeds, allow_none=False)
    config = JaxDqnConfig(seed=args.seed, seeds=args.seeds, eval_episodes=args.eval_episodes)
    if args.steps is not None:  # equal chunks of whole vectorised steps, at least args.steps in all
        chunks = -(-args.steps // config.chunk_steps)
        chunk = -(-args.steps // (chunks * config.num_envs)) * config.num_envs
        config = dataclasses.replace(
            config,
            total_steps=chunks * chunk,
            chunk_steps=chunk,
            learning_starts=min(config.learning_starts, max(config.num_envs, chunks * chunk // 2)),
        )

    def progress(steps: int, figures: dict) -> None:
        print(
            f"DQN {config.env_id} [jax, {config.seeds} seeds] {steps} steps: training return "
            f"{figures['train_return'].mean():.0f}, greedy {' '.join(f'{r:.0f}' for r in figures['eval_return'])}",
            flush=True,
        )

    run = train_jax_dqn(config, progress)
    final = run.final_returns
    mean_return = float(final.mean())
    loss = float(run.losses[-1].mean())
    plot = _plot_seeds(run, mean_return, args.out / f"dqn_{config.env_id}_jax_seed{args.seed}x{config.seeds}.png")
    print(f"env steps: {run.steps[-1]} per agent x {config.seeds} agents, wall time: {run.wall_time:.1f} s")
    print(f"final loss: {loss:.4f}")
    print(
        f"greedy return per agent, best network kept ({config.eval_episodes} fresh episodes each): "
        f"{' '.join(f'{r:.1f}' for r in final)}"
    )
    print(f"mean greedy return over {config.seeds} agents: {mean_return:.1f}")
    print(f"learning curve: {plot}")
    return {
        "mean_return": mean_return,
        "loss": loss,
        "steps": run.steps[-1],
        "wall_time": run.wall_time,
        "plot": plot,
        "returns": final,
    }


def _plot_seeds(run: Any, mean_return: float, path: Path) -> Path:
    plt, fig, ax = _figure(path)
    for seed in range(run.eval_returns.shape[1]):
        ax.plot(run.steps, run.eval_returns[:, seed], "o-", ms=3, alpha=0.7, label=f"agent {seed}: greedy evaluation")
    ax.plot(run.steps, run.train_returns.mean(axis=1), "k--", label="training episodes (mean over agents)")
    ax.axhline(mean_return, color="k", ls=":", lw=1, label=f"final greedy mean, best networks {mean_return:.0f}")
    title = "DQN in JAX on CartPole-v1: one jitted lax.scan, vmapped agents"
    return _save(plt, fig, ax, path, "environment steps per agent", title, legend="lower right")


def _plot(run: Any, mean_return: float, path: Path) -> Path:
    import numpy as np

    plt, fig, ax = _figure(path)
    if run.episode_returns:
        ax.plot(run.episode_steps, run.episode_returns, ".", alpha=0.3, label="training episode return")
        window = min(20, len(run.episode_returns))
        smooth = np.convolve(run.episode_returns, np.ones(window) / window, mode="valid")
        ax.plot(run.episode_steps[window - 1 :], smooth, label=f"moving mean ({window} episodes)")
    if run.evaluations:
        steps, scores = zip(*run.evaluations, strict=True)
        ax.plot(steps, scores, "o-", label="greedy evaluation")
    ax.axhline(mean_return, color="k", ls="--", lw=1, label=f"final greedy mean {mean_return:.0f}")
    return _save(plt, fig, ax, path, "environment steps", "DQN on CartPole-v1 from a replaybuf buffer")


def _figure(path: Path) -> tuple[Any, Any, Any]:
    """``(pyplot, figure, axes)`` of a learning curve to be written to ``path`` (headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    return plt, fig, ax


def _save(plt: Any, fig: Any, ax: Any, path: Path, xlabel: str, title: str, legend: str = "upper left") -> Path:
    ax.set_xlabel(xlabel)
    ax.set_ylabel("return")
    ax.set_title(title)
    ax.legend(loc=legend, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``replaybuf`` console script."""
    from replaybuf.errors import ReplayBufferError

    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            result = run_demo(args)
            if args.min_return is not None and not result["mean_return"] >= args.min_return:
                print(
                    f"replaybuf: mean greedy return {result['mean_return']:.1f} is below "
                    f"--min-return {args.min_return}",
                    file=sys.stderr,
                )
                return 1
    except ReplayBufferError as err:
        print(f"replaybuf: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
