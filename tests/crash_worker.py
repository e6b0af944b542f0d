"""Kills savers and writers with SIGKILL and checks what survives; run by test_crash.py.

``python crash_worker.py save FOLDER SEED RANDOM_KILLS`` or ``... memmap FOLDER SEED KILLS [KIND]``
(KIND: uniform, prioritized or episodes) prints one JSON summary. Runs in a fresh
single-threaded interpreter and forks a child per kill (cheap: replaybuf is imported once),
so the test can afford dozens of kills.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import replaybuf  # noqa: E402
from conformance_data import SPEC, fields_for_ids, step_batch  # noqa: E402
from replaybuf.storages import RecordStorage  # noqa: E402

CAPACITY, SPAN = 20_000, 1_000_000


def generation(g: int) -> replaybuf.PyUniformReplayBuffer:
    """Checkpoint number g: its own items, item count and RNG position."""
    buffer = replaybuf.PyUniformReplayBuffer(SPEC, capacity=CAPACITY, seed=1)
    count = 5_000 + (g * 7_919) % 15_000
    buffer.add_batch(fields_for_ids(g * SPAN + np.arange(count)))
    for _ in range(g % 4):
        buffer.get_next(3)
    return buffer


def loaded_generation(folder: str) -> int:
    """Load the checkpoint and check it is exactly one generation; return its number."""
    buffer = replaybuf.PyUniformReplayBuffer(SPEC, capacity=CAPACITY, seed=99)
    buffer.load(folder)
    ids = buffer.gather_all()["id"]
    g = int(ids[0, 0]) // SPAN
    expected = generation(g)
    for a, b in zip(_leaves(buffer.gather_all()), _leaves(expected.gather_all()), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(buffer.get_next(16)[1].ids, expected.get_next(16)[1].ids)
    return g


def _leaves(items):
    return [items["id"], items["flag"], items["observation"]["camera"], items["observation"]["position"]]


def _kill_self_at(event: int) -> None:
    """Make the ``event``-th filesystem step of this process (fsync, rename, mkdir, rmtree) fatal."""
    count = [0]

    def hook(original):
        def wrapped(*args, **kwargs):
            if count[0] == event:
                os.kill(os.getpid(), signal.SIGKILL)
            count[0] += 1
            return original(*args, **kwargs)

        return wrapped

    os.fsync, os.replace, os.mkdir, shutil.rmtree = (
        hook(os.fsync),
        hook(os.replace),
        hook(os.mkdir),
        hook(shutil.rmtree),
    )


def _wait(pid: int) -> str:
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed"
    return f"exit {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else f"status {status}"


def save_kills(folder: str, rng: random.Random, random_kills: int) -> dict:
    generation(0).save(folder)
    current, loaded, leftovers, event = 0, [], 0, 0
    while True:  # a kill at every filesystem step of one save, in turn
        pid = os.fork()
        if pid == 0:
            _kill_self_at(event)
            generation(current + 1).save(folder)
            os._exit(3)
        outcome = _wait(pid)
        leftovers += len(os.listdir(folder)) > 2
        g = loaded_generation(folder)
        assert g in (current, current + 1), (g, current)
        loaded.append(g)
        current = g
        if outcome != "killed":
            break
        event += 1
    for _ in range(random_kills):  # a saver looping over generations, killed at a random time
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            g = current + 1
            while True:
                generation(g).save(folder)
                os.write(write, f"{g}\n".encode())
                g += 1
        os.close(write)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        _wait(pid)
        with os.fdopen(read) as pipe:
            reported = [int(line) for line in pipe.read().split()]
        last = reported[-1] if reported else current
        leftovers += len(os.listdir(folder)) > 2
        g = loaded_generation(folder)
        assert g in (last, last + 1), (g, last)
        loaded.append(g)
        current = g
    return {"kill_points": event + 1, "loaded": loaded, "mid_save_leftovers": leftovers}


# -- memmap storage: writers killed while adding ---------------------------------------------------
BATCH, LENGTH = 2, 64


KIND = "uniform"  # or "prioritized", "episodes": set by the command line


def open_memmap(folder: str) -> replaybuf.UniformReplayBuffer:
    if KIND == "prioritized":
        return replaybuf.PrioritizedReplayBuffer(SPEC, BATCH, LENGTH, seed=0, storage="memmap", path=folder)
    # episodes: "flag" (id % 2 == 0) ends an episode at every item of stream 0, never in stream 1
    episodes = {"respect_episodes": True, "episode_end_field": "flag"} if KIND == "episodes" else {}
    return replaybuf.UniformReplayBuffer(SPEC, BATCH, LENGTH, seed=0, storage="memmap", path=folder, **episodes)


def check_samples(buffer: replaybuf.UniformReplayBuffer, count: int) -> None:
    """What a reopened buffer samples uses its rebuilt priorities or episode index."""
    if KIND == "prioritized" and count:
        _, info = buffer.get_next(8)
        np.testing.assert_allclose(info.probabilities, 1.0 / (count * BATCH), rtol=1e-5)  # new items' mass
    elif KIND == "episodes" and count >= 2:
        _, info = buffer.get_next(8, 2)
        assert np.all(info.ids % 2 == 1), info.ids  # only stream 1 holds 2-step episodes
        assert np.all(np.diff(info.ids, axis=1) == BATCH)


def recovered_steps(folder: str) -> tuple[int, int]:
    """Reopen; check every item is intact and streams are contiguous; (first, end) steps."""
    buffer = open_memmap(folder)
    items = buffer.gather_all()
    ids = items["id"]
    for a, b in zip(_leaves(items), _leaves(fields_for_ids(ids)), strict=True):
        np.testing.assert_array_equal(a, b)
    if ids.shape[1] == 0:
        return 0, 0
    steps = ids[0] // BATCH
    np.testing.assert_array_equal(ids, steps[None, :] * BATCH + np.arange(BATCH)[:, None])
    assert np.all(np.diff(steps) == 1)
    check_samples(buffer, len(steps))
    return int(steps[0]), int(steps[-1]) + 1


def memmap_kills(folder: str, rng: random.Random, kills: int) -> dict:
    open_memmap(folder)
    results = []
    for k in range(kills):
        first, end = recovered_steps(folder)
        torn = k % 2 == 1  # every other kill lands inside a record write, on purpose
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            buffer = open_memmap(folder)
            if torn:
                original = RecordStorage.write
                stop_after = rng.randrange(1, 2 * LENGTH)

                def write_then_die(self, start, arrays, calls=[0], stop_after=stop_after, original=original):  # noqa: B006
                    calls[0] += 1
                    if calls[0] > stop_after:  # write part of the record fields, then die
                        original(self, start, arrays[:1] + [a * 0 + 7 for a in arrays[1:2]] + arrays[2:3])
                        os.kill(os.getpid(), signal.SIGKILL)
                    original(self, start, arrays)

                RecordStorage.write = write_then_die
            step = end
            while True:
                buffer.add_batch(step_batch(step, BATCH))
                os.write(write, f"{step}\n".encode())
                step += 1
        os.close(write)
        with os.fdopen(read) as pipe:
            reported = []
            if not torn:  # killed once it has completed a random count of adds: mid-add at any machine load
                wanted = rng.randrange(1, 2 * LENGTH)
                while len(reported) < wanted and (line := pipe.readline()):
                    reported.append(int(line))
                os.kill(pid, signal.SIGKILL)
            _wait(pid)
            reported += [int(line) for line in pipe.read().split()]
        completed = reported[-1] + 1 if reported else end
        new_first, new_end = recovered_steps(folder)
        assert new_end in (completed, completed + 1), (new_end, completed)
        # every completed add is kept, except what the interrupted add was overwriting
        assert new_first <= max(0, completed - LENGTH) + 1, (new_first, completed)
        results.append([new_first, new_end])
    return {"kills": kills, "recovered": results}


if __name__ == "__main__":
    mode, path, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    KIND = sys.argv[5] if len(sys.argv) > 5 else KIND
    run = save_kills if mode == "save" else memmap_kills
    print(json.dumps(run(path, random.Random(seed), count)))
