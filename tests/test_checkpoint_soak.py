"""Checkpoint soaks (issue 34): adds, samples, saves and loads at once, and SIGKILLs during
saves (of shared-buffer savers and of Ray shard actors), for REPLAYBUF_SOAK_SECONDS per buffer
family (default 2 s, so ``make test`` runs them briefly; docs/persistence.md, "Soaks", has the
long mode and its figures).

Every sample's items match its ids (no torn read), every folder a load finds loads whole and
matches its ids (no torn checkpoint), and the last save, loaded into a twin, holds exactly the
buffer's items (none lost). Each test prints its counts (``pytest -s`` shows them).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time
from collections import Counter

import numpy as np
import pytest

import replaybuf
from conformance_data import SPEC, assert_items_match_ids, step_batch
from replaybuf.errors import CheckpointError, EmptyBufferError

SECONDS = float(os.environ.get("REPLAYBUF_SOAK_SECONDS", "2"))
pytestmark = pytest.mark.timeout(int(SECONDS * 3) + 120)


def _stored(rb) -> np.ndarray:
    """The buffer's stored ids, checking every item against its id."""
    items = rb.gather_all()
    ids = np.asarray(items["id"].cpu() if hasattr(items["id"], "cpu") else items["id"])
    assert_items_match_ids({k: v for k, v in _numpy(items).items()}, ids)
    return ids


def _numpy(items):
    return {
        k: _numpy(v) if isinstance(v, dict) else np.asarray(v.cpu() if hasattr(v, "cpu") else v)
        for k, v in items.items()
    }


def _thread_soak(make, tmp_path) -> Counter:
    """An adder, a sampler, a saver and a loader thread on one buffer for SECONDS, each
    going on past SECONDS (up to a minute) until it has done its work at least once."""
    rb, twin = make(), make()
    folder = tmp_path / "ckpt"
    counts: Counter = Counter()
    errors: list = []
    end = time.monotonic() + SECONDS
    overtime = end + 60  # a loaded machine may give a thread no turn within SECONDS

    def run(body, count):
        def loop():
            try:
                while time.monotonic() < end or (not counts[count] and time.monotonic() < overtime):
                    body()
            except BaseException as err:  # reported by the test, not lost in the thread
                errors.append(err)

        return threading.Thread(target=loop)

    def add():
        rb.add_batch(step_batch(counts["adds"], 2))
        counts["adds"] += 1

    def sample():
        if rb.num_frames():
            items, info = rb.get_next(8)
            assert_items_match_ids(_numpy(items), np.asarray(info.ids.cpu() if hasattr(info.ids, "cpu") else info.ids))
            counts["reads"] += 1

    def save():
        rb.save(folder)
        counts["saves"] += 1

    def load():
        if (folder / "CURRENT").exists():
            twin.load(folder)
            _stored(twin)
            counts["loads"] += 1

    threads = [run(add, "adds"), run(sample, "reads"), run(save, "saves"), run(load, "loads")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    rb.save(folder)
    twin.load(folder)
    counts["lost"] = int(np.setxor1d(_stored(rb), _stored(twin)).size)
    assert counts["lost"] == 0 and counts["saves"] and counts["loads"] and counts["reads"]
    return counts


FAMILIES = {
    "numpy": lambda: replaybuf.UniformReplayBuffer(SPEC, 2, 64, seed=0),
    "prioritized": lambda: replaybuf.PrioritizedReplayBuffer(SPEC, 2, 64, seed=0),
    "torch": lambda: __import__("replaybuf.torch", fromlist=["x"]).TorchUniformReplayBuffer(SPEC, 2, 64, seed=0),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_threads_adding_sampling_saving_and_loading_at_once(family, tmp_path):
    if family == "torch":
        pytest.importorskip("torch")
    counts = _thread_soak(FAMILIES[family], tmp_path)
    print(f"soak {family} {SECONDS:.0f} s: {dict(counts)}")


def _save_forever(rb, folder) -> None:  # pragma: no cover - a forked child, killed by the test
    while True:
        rb.save(folder)


def test_shared_buffer_writer_processes_and_sigkilled_saves(tmp_path):
    """Two writer processes add while a forked child saves in a loop and is SIGKILLed at
    random times; after every kill the folder loads whole (the old version or the new)."""
    from shared_workers import write_until_closed

    spawn = multiprocessing.get_context("spawn")
    fork = multiprocessing.get_context("fork")
    rb = replaybuf.SharedReplayBuffer(SPEC, 2, 2, 64, seed=0)
    twin = replaybuf.SharedReplayBuffer(SPEC, 2, 2, 64, seed=0)
    writers = [spawn.Process(target=write_until_closed, args=(rb.writer(w), 0)) for w in range(2)]
    for process in writers:
        process.start()
    folder, counts, rng = tmp_path / "ckpt", Counter(), random.Random(0)
    try:
        started = time.monotonic()
        while not rb.num_frames() and time.monotonic() < started + 120:  # spawned writers start slowly
            time.sleep(0.05)
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            saver = fork.Process(target=_save_forever, args=(rb, folder))
            saver.start()
            time.sleep(rng.uniform(0.0, 0.6))  # some kills land mid-save, some after a save completed
            os.kill(saver.pid, signal.SIGKILL)
            saver.join()
            counts["kills"] += 1
            if rb.num_frames():
                items, info = rb.get_next(8)
                assert_items_match_ids(items, info.ids)
                counts["reads"] += 1
            try:
                twin.load(folder)
            except CheckpointError as err:  # only before the first save completed
                assert not (folder / "CURRENT").exists(), err
                continue
            _stored_shared(twin)
            counts["loads"] += 1
        rb.save(folder)  # the writers still adding
        twin.load(folder)
        _stored_shared(twin)
    finally:
        rb.close()
        for process in writers:
            process.join(60)
    assert counts["kills"] and counts["reads"] and all(p.exitcode == 0 for p in writers)
    print(f"soak shared {SECONDS:.0f} s: {dict(counts)}")


def _wait_until_up(ray, actor) -> None:
    for _ in range(600):
        try:
            ray.get(actor.ping.remote(), timeout=30)
            return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            time.sleep(0.1)
    raise AssertionError("a shard actor did not come back")


def _stored_shared(rb) -> None:
    items = rb.gather_all()
    ids = np.asarray(items["id"])
    assert_items_match_ids(items, ids)
    assert ids.size <= rb.num_frames()  # gather_all: the steps every writer holds


def test_a_load_reads_the_files_it_opened_though_a_save_replaced_them(tmp_path):
    """The race the soak found: a save deletes the previous version while a load still reads it."""
    rb = replaybuf.UniformReplayBuffer(SPEC, 2, 8, seed=0)
    for t in range(3):
        rb.add_batch(step_batch(t, 2))
    rb.save(tmp_path / "ckpt")
    opened = replaybuf.persistence.read_state(tmp_path / "ckpt", lazy=("items",))
    rb.add_batch(step_batch(3, 2))
    rb.save(tmp_path / "ckpt")  # deletes the version ``opened`` came from
    assert not (tmp_path / "ckpt" / "v000001").exists()
    twin = replaybuf.UniformReplayBuffer(SPEC, 2, 8)
    twin.load_state_dict(opened)
    np.testing.assert_array_equal(_stored(twin), [[0, 2, 4], [1, 3, 5]])


def test_a_load_retries_when_a_save_replaced_the_version_before_it_opened_it(tmp_path, monkeypatch):
    from replaybuf.persistence import folder

    rb = replaybuf.UniformReplayBuffer(SPEC, 2, 8, seed=0)
    rb.add_batch(step_batch(0, 2))
    rb.save(tmp_path / "ckpt")
    opening = folder._open_npy
    calls = Counter()

    def save_first(where, entry, current=False):  # the first open finds a newer save in between
        calls["opens"] += 1
        if calls["opens"] == 1:
            rb.add_batch(step_batch(1, 2))
            rb.save(tmp_path / "ckpt")
        return opening(where, entry, current)

    monkeypatch.setattr(folder, "_open_npy", save_first)
    twin = replaybuf.UniformReplayBuffer(SPEC, 2, 8)
    twin.load(tmp_path / "ckpt")
    np.testing.assert_array_equal(_stored(twin), [[0, 2], [1, 3]])  # the newer version, whole


def test_ray_shards_sigkilled_while_checkpointing_every_add(tmp_path):
    """Two shard actors checkpoint after every add while two writers add and the driver
    samples, and are killed (``ray.kill``, a SIGKILL of the actor's process) at random times,
    so kills land inside saves; each restarts from its last checkpoint and the writers resend
    what it had not acknowledged. Every sample matches its ids; at the end every tag is stored
    once and matches its items, none is lost, and the buffer saved as one folder loads into a
    twin whole."""
    ray = pytest.importorskip("ray")
    import sys

    import replaybuf.ray as rb_ray
    from conformance_data import fields_for_ids

    if ray.is_initialized():  # another module's session
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules["conformance_data"])
    geometry = {"shards": 2, "batch_size": 2, "max_length": 100_000, "seed": 0}
    try:
        buffer = rb_ray.ShardedReplayBuffer(
            SPEC, **geometry, checkpoint_dir=tmp_path / "shards", checkpoint_every=1, retry_timeout=300
        )
        writers = [buffer.writer(shard) for shard in range(2)]
        rng, counts, sent = random.Random(0), Counter(), [[], []]
        end = time.monotonic() + SECONDS
        kill_at = time.monotonic() + rng.uniform(0.1, 1.0)
        while time.monotonic() < end or not counts["kills"]:
            for shard, writer in enumerate(writers):
                tags = 1_000_000 * (shard + 1) + len(sent[shard]) + np.arange(writer.batch_size)
                writer.add_batch(fields_for_ids(tags))
                sent[shard].extend(tags.tolist())
                counts["adds"] += 1
            if counts["adds"] % 16 == 0:  # a shard being killed or restarted is left out of the draw
                try:
                    items, info = buffer.get_next(8)
                except (EmptyBufferError, rb_ray.ShardUnavailableError):  # no live shard held items then
                    counts["refused"] += 1
                else:  # every field its tag's (none torn), under the id of the tag's add
                    tags = items["id"]
                    assert_items_match_ids(items, tags)
                    np.testing.assert_array_equal(info.ids, 2 * (tags % 1_000_000) + tags // 1_000_000 - 1)
                    counts["samples"] += 1
            if time.monotonic() >= kill_at:
                ray.kill(buffer.actors[rng.randrange(2)], no_restart=False)
                counts["kills"] += 1
                kill_at = time.monotonic() + rng.uniform(0.1, 1.0)
        for writer in writers:
            writer.flush()
        time.sleep(1.0)  # the last kill has taken effect (ray.kill returns before the process is gone)
        for actor in buffer.actors:  # and the shard it killed answers again
            _wait_until_up(ray, actor)
        counts["resent"] = sum(writer.retried for writer in writers)
        counts["applied"] = sum(info["inserts"] for info in buffer.shard_info())  # one save each
        stored = buffer.gather_shards()
        for shard in range(2):
            tags = stored[shard]["id"].ravel()
            assert np.unique(tags).size == tags.size, "an add was inserted twice"
            assert_items_match_ids(stored[shard], stored[shard]["id"])  # every field is its tag's: none torn
            counts["lost"] += len(set(sent[shard]) - set(tags.tolist()))
        assert counts["lost"] == 0 and counts["samples"]
        for _ in range(600):  # the driver takes back a shard it saw down once that shard answers a ping
            try:
                items, _ = buffer.get_next(64)
                break
            except rb_ray.ShardUnavailableError:
                time.sleep(0.1)
        assert_items_match_ids(items, items["id"])
        buffer.save(tmp_path / "one", gather=True)
        twin = rb_ray.ShardedReplayBuffer(SPEC, **geometry)
        twin.load(tmp_path / "one")
        for mine, theirs in zip(stored, twin.gather_shards(), strict=True):
            np.testing.assert_array_equal(np.sort(mine["id"].ravel()), np.sort(theirs["id"].ravel()))
        twin.shutdown()
        buffer.shutdown()
    finally:
        ray.shutdown()
    print(f"soak ray {SECONDS:.0f} s: {dict(counts)}")
