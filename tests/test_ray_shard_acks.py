"""A shard's acknowledgments are durable (issue 34, the add the Ray soak lost).

With ``checkpoint_every=1`` the reply to an add, first attempt or resend, comes only after a
checkpoint holding that add is on disk, so a SIGKILL at any moment never loses an
acknowledged add. The ``Shard`` class runs here in this process (no Ray actor): a save is
held at a chosen point, and a "kill" is a new ``Shard`` restored from the folder, which is
what Ray's restart of the actor does.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from conformance_data import SPEC, fields_for_ids

pytest.importorskip("ray")
import replaybuf.ray.shard as shard_module  # noqa: E402
from replaybuf import UniformReplayBuffer  # noqa: E402
from replaybuf.nest import FlatSpec  # noqa: E402
from replaybuf.persistence.folder import read_state  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def make_shard(tmp_path, monkeypatch):
    """``make_shard(restarted=False)``: a shard checkpointing after every add into tmp_path
    (a restarted one reloads its latest checkpoint, as the actor does)."""

    def make(restarted: bool = False):
        monkeypatch.setattr(shard_module, "reconstructed", lambda: restarted)
        return shard_module.Shard(0, UniformReplayBuffer, SPEC, 1, 64, 0, {}, str(tmp_path), 1)

    return make


def _leaves(tag: int) -> list:
    return FlatSpec(SPEC).flatten_batch(fields_for_ids(np.array([tag])), 1)


def _on_disk(shard, key: str) -> int:
    """The last add of writer ``key`` in the checkpoint on disk (what a restart reloads)."""
    return read_state(shard.folder)["shard"]["applied"].get(key, 0)


def _hold_saves(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Make the shard's next save wait, before writing, until ``release`` is set; ``entered``
    is set when it starts waiting."""
    entered, release = threading.Event(), threading.Event()
    writing = shard_module.write_state

    def held(folder, state):
        entered.set()
        assert release.wait(60), "the held save was never released"
        return writing(folder, state)

    monkeypatch.setattr(shard_module, "write_state", held)
    return entered, release


def test_a_resend_is_answered_only_after_the_first_attempts_checkpoint_is_on_disk(make_shard, monkeypatch):
    """The lost add: the first attempt was applied and its save was still being written when
    the writer's resend came; the resend was answered "already applied" at once, the shard
    was killed before the save finished, and the restart came back without the add."""
    shard = make_shard()
    assert shard.add(_leaves(1), "w", 1)
    entered, release = _hold_saves(monkeypatch)
    first = threading.Thread(target=shard.add, args=(_leaves(2), "w", 2))
    first.start()
    assert entered.wait(60)  # add 2 is applied in memory; its checkpoint is not written yet
    replies: list = []

    def resend():  # the writer's resend of add 2 (a new epoch, from its first unacknowledged add)
        inserted = shard.add(_leaves(2), "w", 2, 1, 2)
        replies.append((inserted, _on_disk(shard, "w")))  # what a kill at the reply would keep

    second = threading.Thread(target=resend)
    second.start()
    second.join(1.0)  # a resend answered from memory replies now, while the save is held
    release.set()
    first.join(60)
    second.join(60)
    assert replies == [(False, 2)]  # acknowledged as applied, and add 2 was on disk by then
    restarted = make_shard(restarted=True)
    assert restarted.writers["w"]["applied"] == 2
    np.testing.assert_array_equal(restarted.buffer.gather_all()["id"], [[1, 2]])


def test_a_resend_of_an_add_whose_checkpoint_failed_writes_one(make_shard, monkeypatch):
    """The first attempt was applied but its save raised (its caller saw the error); the
    resend is not acknowledged from memory: it writes the checkpoint first."""
    shard = make_shard()
    writing = shard_module.write_state
    calls: list = []

    def failing_once(folder, state):
        calls.append(state["shard"]["applied"].get("w"))
        if len(calls) == 1:
            raise OSError("disk full")
        return writing(folder, state)

    monkeypatch.setattr(shard_module, "write_state", failing_once)
    with pytest.raises(OSError, match="disk full"):
        shard.add(_leaves(1), "w", 1)
    assert not shard.add(_leaves(1), "w", 1, 1, 1)  # already applied: not inserted twice
    assert calls == [1, 1] and _on_disk(shard, "w") == 1
    restarted = make_shard(restarted=True)
    np.testing.assert_array_equal(restarted.buffer.gather_all()["id"], [[1]])


def test_a_resend_of_a_checkpointed_add_writes_nothing(make_shard, monkeypatch):
    shard = make_shard()
    assert shard.add(_leaves(1), "w", 1)
    writing = shard_module.write_state
    calls: list = []
    monkeypatch.setattr(shard_module, "write_state", lambda folder, state: calls.append(1) or writing(folder, state))
    assert not shard.add(_leaves(1), "w", 1, 1, 1)
    assert calls == []  # the checkpoint on disk already holds it
