"""Study: What do lz4 and zstd frame storage save and cost on real Atari frames?
Answer: docs/images.md; docs/benchmarks.md, "Compressed frame storage on real Atari frames".

Compressed frame storage on real Atari frames: codecs compared, then the buffers.

Frames: Gymnasium's ALE environments (ale-py, its bundled ROMs), a uniformly random policy,
``frameskip=4``, grayscale 210x160 resized to 84x84 by area averaging (what the DQN
preprocessing's ``cv2.resize(..., INTER_AREA)`` computes; opencv is not installed here, so
the same weights are applied as two small matrix products), stacked 4 deep like
``FrameStackObservation`` (``[4, 84, 84]``, the first frame repeated at an episode start).
``--steps`` env steps (default 6100: generating 100k here takes longer than a session
can wait on this shared 2-core machine) are recorded once per game and cached in
bench/.cache/ (``.npz``), then replayed episode by episode until ``--stored`` transitions
are added (a replayed frame costs the buffer what it cost the first time: each frame is
compressed on its own, and frames are matched only against the previous add). They are
loaded before the first RSS reading, so only the buffers' own memory is counted.

Part 1 (``--codecs``): every codec on the same frames: mean compressed size, compress
microseconds per frame, and decode microseconds per frame for a batch of 1280 random
frames (what a 256-sample draw of 84x84x4 obs + next obs needs) in one thread, median
of --reps. blosc2 rows appear when blosc2 is installed (not a replaybuf dependency).

Part 2 (the buffers): FrameStackReplayBuffer with compression None, "lz4" and "zstd",
``--stored`` transitions of ``--game`` (default 100k into capacity 100k):
  RSS KB/transition  growth of the process's anonymous RSS (RssAnon: every byte the
                     buffer allocated, allocator overhead included) while one buffer
                     alone is filled, in its own fresh process, / stored transitions
  add us             microseconds per add_batch of one transition
  sample B MB/s      returned bytes (every leaf) per second of get_next(B), median of --reps
Adds and samples run in one process holding the three buffers, which take turns (each
transition added to all, sampling rounds alternating), so load changes hit them alike;
the last lines give each compressed buffer's ratios to the uncompressed frame buffer.
Run:
    .venv/bin/python bench/studies/frames_compressed.py [--game MsPacman] [--stored 100000]
        [--capacity 100000] [--reps 7] [--codecs-only] [--no-codecs]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/

from replaybuf import FrameStackReplayBuffer  # noqa: E402
from suites.frames import FRAME, K, spec  # noqa: E402

CHW = 0  # the stack axis of Gymnasium's [4, 84, 84]

CACHE = Path(__file__).resolve().parents[1] / ".cache"
KINDS = {"uncompressed": None, "lz4": "lz4", "zstd": "zstd"}


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
    recorded episodes replayed from the first again when they run out (each frame is
    compressed on its own, and the frame buffer matches only against the previous add,
    so a replayed episode costs what it cost the first time)."""
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


# -- part 1: the codecs ---------------------------------------------------------------------
def codec_table(frames: np.ndarray, reps: int) -> list[tuple[str, float, float, float]]:
    import lz4.block
    import zstandard

    codecs: dict = {
        "lz4 fast (0)": (
            lambda b: lz4.block.compress(b, store_size=False),
            lambda b: lz4.block.decompress(b, uncompressed_size=FRAME[0] * FRAME[1]),
        ),
    }
    for level in (3, 9):  # 3: replaybuf's default for "lz4"
        codecs[f"lz4-hc {level}"] = (
            lambda b, level=level: lz4.block.compress(b, mode="high_compression", compression=level, store_size=False),
            lambda b: lz4.block.decompress(b, uncompressed_size=FRAME[0] * FRAME[1]),
        )
    decompressor = zstandard.ZstdDecompressor()
    for level in (1, 3, 9):
        codecs[f"zstd {level}"] = (zstandard.ZstdCompressor(level=level).compress, decompressor.decompress)
    try:
        import blosc2

        for name, codec in (("lz4", blosc2.Codec.LZ4), ("zstd", blosc2.Codec.ZSTD)):
            codecs[f"blosc2 {name} 5"] = (
                lambda b, c=codec: blosc2.compress2(b, codec=c, clevel=5, typesize=1, nthreads=1),
                blosc2.decompress2,
            )
    except ImportError:
        pass
    rng = np.random.default_rng(0)
    sample = frames[rng.choice(len(frames), min(len(frames), 5000), replace=False)]
    rows = []
    for name, (compress, decompress) in codecs.items():
        start = time.perf_counter()
        blobs = [compress(frame) for frame in sample]
        compress_us = (time.perf_counter() - start) / len(sample) * 1e6
        size = sum(map(len, blobs)) / len(blobs)
        times = []
        for _ in range(reps):
            batch = rng.integers(0, len(blobs), 1280).tolist()
            start = time.perf_counter()
            out = np.frombuffer(b"".join([decompress(blobs[i]) for i in batch]), np.uint8)
            times.append(time.perf_counter() - start)
        assert out.size == 1280 * FRAME[0] * FRAME[1]
        rows.append((name, size, compress_us, float(np.median(times)) / 1280 * 1e6))
    return rows


# -- part 2: the buffers --------------------------------------------------------------------
def fill_alone(kind: str, args: argparse.Namespace) -> None:
    """(child process) Fill one buffer; print its RssAnon growth in bytes as JSON."""
    frames, starts = game_frames(args.game, args.steps)
    items = transitions(frames, starts, args.stored)
    first = next(items)
    buffer = FrameStackReplayBuffer(spec(CHW), 1, args.capacity, seed=0, compression=KINDS[kind])
    before = rss_anon()
    buffer.add_batch(first)
    for item in items:
        buffer.add_batch(item)
    print(json.dumps({"grown": rss_anon() - before, "stored": buffer.num_frames()}))


def rss_per_transition(kind: str, args: argparse.Namespace) -> float:
    command = [
        sys.executable,
        __file__,
        "--fill-alone",
        kind,
        "--game",
        args.game,
        "--stored",
        str(args.stored),
        "--capacity",
        str(args.capacity),
        "--steps",
        str(args.steps),
    ]
    result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    return result["grown"] / result["stored"] / 1000


def fill(buffers: dict, items) -> dict:
    elapsed = dict.fromkeys(buffers, 0.0)
    count = 0
    for item in items:
        for name, buffer in buffers.items():
            start = time.perf_counter()
            buffer.add_batch(item)
            elapsed[name] += time.perf_counter() - start
        count += 1
    return {name: elapsed[name] / count * 1e6 for name in buffers}


def sample_rates(buffers: dict, size: int, reps: int) -> dict:
    """{name: median MB/s of returned bytes}: rounds of about 60 MB per buffer, taking turns."""
    rates: dict = {name: [] for name in buffers}
    items, _ = next(iter(buffers.values())).get_next(size)
    nbytes = sum(leaf.nbytes for leaf in items.values())
    calls = max(4, int(60e6 // nbytes))
    for _ in range(reps):
        for name, buffer in buffers.items():
            start = time.perf_counter()
            for _ in range(calls):
                buffer.get_next(size)
            rates[name].append(calls * nbytes / (time.perf_counter() - start) / 1e6)
    return {name: float(np.median(values)) for name, values in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="MsPacman")
    parser.add_argument("--stored", type=int, default=100_000)
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=6100, help="env steps recorded (then replayed to --stored)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--codecs-only", action="store_true")
    parser.add_argument("--no-codecs", action="store_true")
    parser.add_argument("--fill-alone", choices=sorted(KINDS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill_alone:
        fill_alone(args.fill_alone, args)
        return
    frames, starts = game_frames(args.game, args.steps)
    print(
        f"{args.game}: {len(frames)} frames 84x84 uint8 ({int(starts.sum())} episodes, replayed to fill "
        f"{args.stored} transitions), "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    if not args.no_codecs:
        print(f"\ncodec       bytes/frame  ratio  compress us/frame  decode us/frame (1280 a batch, {args.reps} reps)")
        for name, size, compress_us, decode_us in codec_table(frames, args.reps):
            print(f"{name:14} {size:9.0f} {FRAME[0] * FRAME[1] / size:6.1f} {compress_us:18.1f} {decode_us:16.2f}")
    if args.codecs_only:
        return
    rss = {kind: rss_per_transition(kind, args) for kind in KINDS}
    buffers = {
        kind: FrameStackReplayBuffer(spec(CHW), 1, args.capacity, seed=0, compression=c) for kind, c in KINDS.items()
    }
    add = fill(buffers, transitions(frames, starts, args.stored))
    rates = {size: sample_rates(buffers, size, args.reps) for size in (32, 256)}
    print(
        f"\n{args.game} [4, 84, 84] obs + next_obs, capacity {args.capacity}, "
        f"{buffers['lz4'].num_frames()} stored, decode threads {buffers['lz4']._storage.decode_threads}"
    )
    print(f"{'buffer':13} {'RSS KB/transition':>18} {'add us':>8} {'sample 32 MB/s':>15} {'sample 256 MB/s':>16}")
    for kind in KINDS:
        print(f"{kind:13} {rss[kind]:18.2f} {add[kind]:8.1f} {rates[32][kind]:15.0f} {rates[256][kind]:16.0f}")
    for kind in ("lz4", "zstd"):
        print(
            f"{kind}/uncompressed: sample 32 {rates[32][kind] / rates[32]['uncompressed']:.0%}, sample 256 "
            f"{rates[256][kind] / rates[256]['uncompressed']:.0%}, add speed {add['uncompressed'] / add[kind]:.0%}"
        )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
