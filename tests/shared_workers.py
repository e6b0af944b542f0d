"""Functions run in child processes by the shared-buffer and rate-limiter tests.

They live in a module of their own so that spawn and forkserver children can import them;
``Episodes`` (a brute-force model of writers' episodes) is shared by the episode tests.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest


def limiter_inserts(limiter, count: int, done) -> None:
    """Insert ``count`` items one at a time through a shared rate limiter."""
    for _ in range(count):
        limiter.await_insert(1, timeout=90)
        with done.get_lock():
            done.value += 1


def write_steps(writer, start: int, count: int, pause: float = 0.0) -> None:
    """Add steps ``start .. start + count - 1`` through ``writer``; every field derives from the id."""
    from conformance_data import fields_for_ids

    with writer:
        for step in range(start, start + count):
            writer.add_batch(fields_for_ids(writer.ids(step)))
            if pause:
                time.sleep(pause)


def write_prioritized_steps(writer, count: int) -> None:
    """Add steps ``0 .. count - 1``, each item with the priority ``id + 1`` (odd steps: none given)."""
    from conformance_data import fields_for_ids

    with writer:
        for step in range(count):
            ids = writer.ids(step)
            writer.add_batch(fields_for_ids(ids), priorities=None if step % 2 else ids + 1.0)


def write_until_closed(writer, start: int) -> str:
    """Add steps until the buffer is closed; returns how it ended."""
    import replaybuf.errors
    from conformance_data import fields_for_ids

    step = start
    try:
        while True:
            writer.add_batch(fields_for_ids(writer.ids(step)))
            step += 1
    except replaybuf.errors.BufferClosedError:
        return "closed"


def episode_done(ids):
    """Whether the items ``ids`` end their episode: a fixed pattern of the id, so a learner can
    check any window it draws (episodes of 1 to 7 steps)."""
    import numpy as np

    ids = np.asarray(ids)
    return (ids * 2654435761 % 2**32) % 7 == 0


def write_episodes_until_closed(writer) -> str:
    """Add steps of ``{"id", "done": episode_done(id)}`` until the buffer is closed."""
    import replaybuf.errors

    step = 0
    try:
        while True:
            ids = writer.ids(step)
            writer.add_batch({"id": ids, "done": episode_done(ids)})
            step += 1
    except replaybuf.errors.BufferClosedError:
        return "closed"


def write_then_hold(writer, count: int) -> None:
    """Add ``count`` steps, then keep the writer (as a stalled actor would) until killed."""
    from conformance_data import fields_for_ids

    for step in range(count):
        writer.add_batch(fields_for_ids(writer.ids(step)))
    time.sleep(600)


def write_in_a_with_block(writer) -> None:
    """An actor's loop as docs/many_writers.md writes it: add until the learner closes the buffer."""
    from conformance_data import fields_for_ids

    with writer:
        step = 0
        while True:
            writer.add_batch(fields_for_ids(writer.ids(step)))
            step += 1


def take_over_and_write(writer, count: int, result) -> None:
    """Take a writer whose process died, continue from its last whole step."""
    from conformance_data import fields_for_ids

    with writer:
        start = writer.steps
        result.value = start
        for step in range(start, start + count):
            writer.add_batch(fields_for_ids(writer.ids(step)))


def pause_mid_write(marker: str, at_step: int, writer) -> None:
    """``_after_write`` hook: once the block reaching ``at_step`` is copied but not committed,
    say so through ``marker`` and wait to be killed."""
    if writer._cursor[1] > at_step:  # WRITING
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)


def own_a_buffer_and_exit(names) -> None:
    """Create a shared buffer, report its name and return without closing it."""
    from conformance_data import SPEC
    from replaybuf.shared import SharedReplayBuffer

    buffer = SharedReplayBuffer(SPEC, writers=2, batch_size=2, max_length=8)
    names.put(buffer.name)


def shm_blocks() -> set[str]:
    """The shared buffers' blocks in /dev/shm that this process made or whose maker is gone.

    (Blocks of another live process, e.g. a test session running beside this one, are left
    out: they are not this session's to judge.)
    """
    if not os.path.isdir("/dev/shm"):
        return set()
    from replaybuf.shared.layout import pid_alive

    mine = set()
    for name in os.listdir("/dev/shm"):
        parts = name.split("-")
        if name.startswith("replaybuf-") and len(parts) == 3 and parts[1].isdigit():
            pid = int(parts[1])
            if pid == os.getpid() or not pid_alive(pid):
                mine.add(name)
    return mine


# -- fixtures and helpers of the shared-buffer tests (imported by them) -------------------------
@pytest.fixture(autouse=True)
def no_leaked_segments():
    """Fails a test that leaves a shared-memory block behind."""
    before = shm_blocks()
    yield
    assert shm_blocks() - before == set(), "a shared-memory block was left behind"


@pytest.fixture
def buffers():
    """A factory of SharedReplayBuffers that are all closed after the test."""
    from replaybuf.shared import SharedReplayBuffer

    made: list = []

    def make(*args, **kwargs):
        made.append(SharedReplayBuffer(*args, **kwargs))
        return made[-1]

    yield make
    for buffer in made:
        buffer.close()


def write(writer, steps) -> None:
    """Add ``steps`` through ``writer``, every field derived from the item's id."""
    from conformance_data import fields_for_ids

    for step in steps:
        writer.add_batch(fields_for_ids(writer.ids(step)))


class Episodes:
    """Writers' steps with random episode ends, and the brute-force set of valid windows."""

    def __init__(self, buffer, seed=0):
        self.buffer, self.rng = buffer, np.random.default_rng(seed)
        self.dones = {w: [] for w in range(buffer.writers)}  # per writer, one [batch_size] row per step
        self.handles = {}

    def add(self, w, steps, p_end=0.3):
        handle = self.handles.setdefault(w, self.buffer.writer(w))
        for _ in range(steps):
            done = self.rng.random(self.buffer.batch_size) < p_end
            handle.add_batch({"id": handle.ids(len(self.dones[w])), "done": done})
            self.dones[w].append(done)

    def valid(self, size):
        """Ids of the first steps of stored windows of ``size`` with no end before their last step."""
        streams, batch = self.buffer.writers * self.buffer.batch_size, self.buffer.batch_size
        starts = set()
        for w, rows in self.dones.items():
            done = np.array(rows, bool).reshape(-1, batch)
            for t in range(max(0, len(rows) - self.buffer.max_length), len(rows) - size + 1):
                for s in range(batch):
                    if not done[t : t + size - 1, s].any():
                        starts.add(t * streams + w * batch + s)
        return starts

    def close(self):
        for handle in self.handles.values():
            handle.close()


def write_versioned(writer, start: int, count: int, per_version: int) -> None:
    """Add steps ``start .. start + count - 1`` of ``{"id", "policy_version": step // per_version}``:
    an actor whose policy moves to a new version every ``per_version`` steps tags its adds."""
    with writer:
        for step in range(start, start + count):
            ids = writer.ids(step)
            writer.add_batch({"id": ids, "policy_version": np.full(ids.shape, step // per_version)})
