"""Compressed frame storage on real Atari frames: FrameStackReplayBuffer with lz4 and zstd beside uncompressed.

Frames: Gymnasium's ALE environments (ale-py, its bundled ROMs), a uniformly random policy,
``frameskip=4``, grayscale 210x160 resized to 84x84 by area averaging (what the DQN
preprocessing's ``cv2.resize(..., INTER_AREA)`` computes; opencv is not installed here, so
the same weights are applied as two small matrix products), stacked 4 deep like
``FrameStackObservation`` (``[4, 84, 84]``, the first frame repeated at an episode start).
The env steps of a size (6100 at full size: generating 100k takes longer than a session can
wait on a shared 2-core machine) are recorded once per game and cached in bench/.cache/
(``.npz``), then replayed episode by episode until the size's transitions are added (a
replayed frame costs the buffer what it cost the first time: each frame is compressed on its
own, and frames are matched only against the previous add).

Three FrameStackReplayBuffers: ``replaybuf`` (``compression="lz4"``, the default choice),
``zstd`` and ``uncompressed`` (the reference). Issue 21's targets: RSS <= 2 KB per
transition, adds and sampling at >= 50% of the uncompressed buffer's speed.

- RSS: growth of the anonymous RSS (RssAnon: every byte the buffer allocated, allocator
  overhead included) while one buffer alone is filled, in its own fresh process, per
  stored transition;
- add: one transition per ``add_batch``, the three buffers taking turns (each transition
  added to all);
- sample 32 / 256: MB/s of returned bytes (every leaf) of ``get_next(B)``, timed by the
  harness, interleaved.

    PYTHONPATH=src .venv/bin/python bench/suites/frames_compressed.py [--game Breakout] [--size quick]
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, when run as a script

from harness import Workload  # noqa: E402
from replaybuf import FrameStackReplayBuffer  # noqa: E402
from suites import Job  # noqa: E402
from suites.frames import FRAME, ITEM_BYTES, K, emit_version, figures, fill, spec  # noqa: E402

CHW = 0  # the stack axis of Gymnasium's [4, 84, 84]
CACHE = Path(__file__).resolve().parents[1] / ".cache"
#: label -> compression
KINDS = {"replaybuf": "lz4", "zstd": "zstd", "uncompressed": None}
#: per size: (env steps recorded, transitions stored, capacity)
SIZES = {"full": (6100, 100_000, 100_000), "quick": (6100, 20_000, 20_000), "tiny": (400, 300, 512)}
REFERENCES = ("uncompressed", "zstd")
WORKLOADS = [
    Workload("fc_rss", "RSS per stored transition", "bytes", references=REFERENCES, higher_is_better=False),
    Workload(
        "fc_add",
        "add_batch of one transition",
        "items/s",
        references=REFERENCES,
        goal_vs="uncompressed",
        goal_ratio=0.5,
    ),
    *(
        Workload(
            f"fc_sample{size}",
            f"get_next({size}) of [4, 84, 84] stacks",
            "MB/s",
            size * ITEM_BYTES / 1e6,
            references=REFERENCES,
            goal_vs="uncompressed",
            goal_ratio=0.5,
        )
        for size in (32, 256)
    ),
]
JOBS = [Job("replaybuf", None, tuple(KINDS))]


def _area(n: int, size: int) -> np.ndarray:
    """``[n, size]`` weights averaging ``size`` pixels into ``n`` (INTER_AREA's weights)."""
    weights = np.zeros((n, size))
    scale = size / n
    for i in range(n):
        low, high = i * scale, (i + 1) * scale
        for j in range(int(low), int(np.ceil(high))):
            weights[i, j] = min(high, j + 1) - max(low, j)
    return weights / scale


def game_frames(game: str, steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(frames [steps + episodes, 84, 84] uint8, starts)``: the frames of ``steps`` random-policy
    steps, each episode's reset frame first; ``starts[i]`` is True where a reset frame is.
    Cached in bench/.cache/."""
    path = CACHE / f"atari-{game}-{steps}-{seed}.npz"
    if path.exists():
        with np.load(path) as saved:
            return saved["frames"], saved["starts"]
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5", obs_type="grayscale", frameskip=4, repeat_action_probability=0.0)
    env.action_space.seed(seed)
    rows, cols = _area(FRAME[0], 210).astype(np.float32), _area(FRAME[1], 160).T.astype(np.float32)
    raw, starts, blocks = [env.reset(seed=seed)[0]], [True], []
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        raw.append(obs)
        starts.append(False)
        if terminated or truncated:
            raw.append(env.reset()[0])
            starts.append(True)
        if len(raw) >= 4096:  # resized in blocks: 210x160 frames are 4.8x the size
            blocks.append(np.rint(rows @ np.stack(raw).astype(np.float32) @ cols).astype(np.uint8))
            raw = []
    env.close()
    if raw:
        blocks.append(np.rint(rows @ np.stack(raw).astype(np.float32) @ cols).astype(np.uint8))
    frames = np.concatenate(blocks)
    CACHE.mkdir(exist_ok=True)
    np.savez(path, frames=frames, starts=np.asarray(starts))
    return frames, np.asarray(starts)


def transitions(frames: np.ndarray, starts: np.ndarray, count: int):
    """``count`` transitions (batches of one) stacked like FrameStackObservation, the
    recorded episodes replayed from the first again when they run out."""
    stack: list[np.ndarray] = []
    made = 0
    for i in itertools.cycle(range(len(frames) - 1)):
        if starts[i]:
            stack = [frames[i]] * K
        if starts[i + 1]:
            continue  # the last step of an episode: its next observation is the terminal frame
        following = stack[1:] + [frames[i + 1]]
        yield {
            "observation": np.stack(stack)[None],
            "action": np.zeros(1, np.int64),
            "reward": np.ones(1, np.float32),
            "next_observation": np.stack(following)[None],
            "done": np.asarray([bool(starts[i + 1])]),
        }
        stack = following
        made += 1
        if made == count:
            return


def rss_anon() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def fill_alone(label: str, game: str, size: str) -> None:
    """(child process) Fill one buffer; print its RssAnon growth in bytes and what it stores, as JSON."""
    steps, stored, capacity = SIZES[size]
    frames, starts = game_frames(game, steps)
    items = transitions(frames, starts, stored)
    first = next(items)
    buffer = FrameStackReplayBuffer(spec(CHW), 1, capacity, seed=0, compression=KINDS[label])
    before = rss_anon()
    buffer.add_batch(first)
    for item in items:
        buffer.add_batch(item)
    print(json.dumps({"grown": rss_anon() - before, "stored": buffer.num_frames()}))


def rss_per_transition(label: str, game: str, size: str) -> float:
    """Bytes of RssAnon per stored transition of buffer ``label``, filled alone in a fresh process."""
    command = [sys.executable, __file__, "--fill-alone", label, "--game", game, "--size", size]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1]
    result = json.loads(out)
    return result["grown"] / result["stored"]


def run(size: str, game: str = "MsPacman", keys: list[str] | None = None) -> None:
    """Emit the workloads' figures (``keys`` only, when given)."""
    steps, stored, capacity = SIZES[size]
    frames, starts = game_frames(game, steps)
    wanted = [w for w in WORKLOADS if not keys or w.key in keys]
    buffers = {
        label: FrameStackReplayBuffer(spec(CHW), 1, capacity, seed=0, compression=compression)
        for label, compression in KINDS.items()
    }
    note = f"{game}, {stored} stored, decode threads {buffers['replaybuf']._storage.decode_threads}"
    added = fill(buffers, transitions(frames, starts, stored))
    notes = dict.fromkeys(buffers, note)
    figures(wanted, buffers, added, size, notes, rss=lambda label: rss_per_transition(label, game, size))


def measure(job: Job, size: str, keys: list[str]) -> None:
    """The three buffers at ``size`` on MsPacman."""
    emit_version()
    run(size, keys=keys)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--game", default="MsPacman")
    parser.add_argument("--fill-alone", choices=sorted(KINDS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fill_alone:
        fill_alone(args.fill_alone, args.game, args.size)
    else:
        run(args.size, args.game)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
