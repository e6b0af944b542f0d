"""One shard of a ``ShardedReplayBuffer``: an ordinary replaybuf buffer inside a Ray actor.

``Shard`` is a plain class; ``replaybuf.ray.buffer`` turns it into an actor with
``ray.remote`` and the restart options. It holds a ``StreamBuffer`` (uniform, prioritized,
episode-aware: the class and its arguments are the driver's options) and adds what a
shard needs on top of it:

- idempotent adds: every add carries ``(writer key, sequence number)``; a number at or
  below the last one applied for that key is a retry and is acknowledged without
  inserting anything. The last numbers are saved with the shard's checkpoints.
- durable acknowledgments: with ``checkpoint_every``, an add's reply (the first attempt's
  or a retry's) comes only after the checkpoint that is due for it is on disk; a retry of
  an add that no checkpoint on disk holds yet waits for the save under way, or writes one.
- masses: ``sample`` returns, beside the draw, the shard's current mass for the window
  length asked (valid window starts x streams for uniform samplers, windows inside one
  episode for episode-aware ones, the priority mass of the valid starts for prioritized
  ones) and its smallest priority mass, so the driver splits the next batch exactly.
- checkpoints: every ``checkpoint_every`` adds (and on ``save``) the buffer's state plus
  the shard's own bookkeeping go to its folder in the crash-safe checkpoint format
  (``replaybuf.persistence.folder``); a restarted actor reloads the latest one.
- the cluster's rate limiter: an add waits for the limiter actor's grant, then counts its
  evictions there; the shard keeps its own counts too, so a restarted limiter rebuilds.

Items arrive as NumPy arrays that may live in Ray's object store; ``add_batch`` copies them
into the buffer's storage, so the shard never keeps a view into the store (ray#8234).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import ray

from replaybuf.buffers.stream import StreamBuffer
from replaybuf.errors import ArgumentError, CheckpointError, EmptyBufferError, ReplayBufferError
from replaybuf.nest import FlatSpec
from replaybuf.persistence.folder import POINTER, read_state, write_state
from replaybuf.ray.remote import ResendRequested, call, reconstructed
from replaybuf.samplers.sequences import SequenceRule

__all__ = ["Shard"]

_ORDER_WAIT = 300.0  # seconds an add waits for its writer's previous add before failing


class Shard:
    """The state of one shard actor; see the module docstring."""

    def __init__(
        self,
        index: int,
        buffer_class: type,
        data_spec: Any,
        batch_size: int,
        max_length: int,
        seed: int,
        options: dict,
        checkpoint_dir: str | None,
        checkpoint_every: int | None,
        limiter: Any = None,
        limiter_timeout: float | None = None,
    ):
        if not (isinstance(buffer_class, type) and issubclass(buffer_class, StreamBuffer)):
            raise ArgumentError(
                f"buffer_class: expected a replaybuf NumPy buffer class (UniformReplayBuffer, "
                f"PrioritizedReplayBuffer, ...), got {buffer_class!r}"
            )
        self.index = index
        self.buffer = buffer_class(data_spec, batch_size=batch_size, max_length=max_length, seed=seed, **options)
        if self.buffer.single_stream:
            raise ArgumentError(f"buffer_class: expected a buffer of batch_size streams, got {buffer_class.__name__}")
        self.flat = FlatSpec(data_spec)
        self.epochs = options.get("replacement") is False  # the driver walks one epoch over every shard
        self.lock = threading.RLock()  # the shard's bookkeeping; the buffer has its own lock
        self.cond = threading.Condition(self.lock)
        self.saving = threading.RLock()
        self.writers: dict[str, dict] = {}  # writer key -> {"applied": seq, "epoch", "busy"}
        self.counts = {"inserts": 0, "samples": 0, "deletes": 0}
        self.waiting = 0  # adds waiting for an earlier add of their writer (or for it to finish)
        self.limiter, self.limiter_timeout = limiter, limiter_timeout
        self.folder = None if checkpoint_dir is None else os.path.join(checkpoint_dir, f"shard-{index:03d}")
        self.checkpoint_every = checkpoint_every
        self.since_checkpoint = 0
        self.durable: dict[str, int] = {}  # writer key -> its last add in the checkpoint on disk
        self.restored = False
        self.renewed: set[str] = set()  # writers that resent under a new epoch since this restart
        self.restarted = reconstructed()
        if self.folder is not None and os.path.exists(os.path.join(self.folder, POINTER)):
            self.load(self.folder)  # a restarted actor: back to its latest checkpoint
            self.restored = True

    # -- writes ---------------------------------------------------------------------------------
    def add(self, leaves: list, key: str, seq: int, epoch: int = 0, start: int = 1, priorities: Any = None) -> bool:
        """Add one step (flat leaves, ``[batch_size, ...]``, and its ``priorities`` or None) of
        writer ``key``, in ``seq`` order.

        A writer numbers its adds 1, 2, ...; they are applied in that order whatever order
        Ray delivers them in, and a ``seq`` already applied is a retry: acknowledged (once a
        checkpoint holding it is on disk), not inserted (returns False). After a failure the
        writer resends its unacknowledged adds under a new ``epoch`` starting at ``start``;
        adds before ``start`` that this shard lost (it restarted from an older checkpoint,
        with ``checkpoint_every`` > 1) are then skipped, not waited for. A
        restarted shard answers an add past a gap, from a writer that has not resent since,
        with ``ResendRequested``: it cannot tell lost adds from ones still in flight.
        Returns True when inserted.
        """
        with self.cond:
            state = self.writers.setdefault(key, {"applied": 0, "epoch": 0, "busy": False})
            if epoch > state["epoch"]:  # every add before ``start`` was acknowledged to the writer
                state["epoch"] = epoch
                state["applied"] = max(state["applied"], start - 1)
                self.renewed.add(key)
                self.cond.notify_all()
            if self.restarted and key not in self.renewed and seq > state["applied"] + 1:
                raise ResendRequested(
                    f"shard {self.index} restarted: writer {key} must resend from its first "
                    f"unacknowledged add (this is add {seq}; the checkpoint holds up to {state['applied']})"
                )
            turn = lambda: state["applied"] >= seq or (state["applied"] == seq - 1 and not state["busy"])  # noqa: E731
            waits = not turn()
            self.waiting += waits
            try:
                while not self.cond.wait_for(turn, _ORDER_WAIT):
                    if state["applied"] < seq - 1 and not state["busy"]:  # (a busy one may be rate limited)
                        raise ReplayBufferError(
                            f"shard {self.index}: add {seq} of writer {key} waited {_ORDER_WAIT} s for add "
                            f"{state['applied'] + 1}, which never came"
                        )
            finally:
                self.waiting -= waits
            retry = state["applied"] >= seq
            if not retry:
                state["busy"] = True
        if retry:
            self._make_durable(key, seq)
            return False
        inserted = False
        try:
            n = self.buffer.batch_size
            items = self.flat.unflatten(leaves)
            if self.limiter is not None:
                self.flat.flatten_batch(items, n)  # a bad add fails before it is counted
                call(self.limiter.await_insert, n, self.limiter_timeout)
            with self.saving:  # not during a save; a due save follows before any other add
                with self.cond:  # the item and its writer's number change together
                    evicted = n if self.buffer.ring.steps >= self.buffer.max_length else 0
                    if priorities is None:  # (a buffer_class of the user's may not take priorities)
                        self.buffer.add_batch(items)  # copies into the storage
                    else:
                        self.buffer.add_batch(items, priorities=priorities)
                    inserted = True
                    self.counts["inserts"] += n
                    self.counts["deletes"] += evicted
                    self.since_checkpoint += 1
                    due = self.checkpoint_every is not None and self.since_checkpoint >= self.checkpoint_every
                    state["applied"], state["busy"] = seq, False
                    self.cond.notify_all()
                if due:
                    self.save(self.folder)
        except ReplayBufferError:  # a refused add (spec, limiter timeout, closed) is not resent:
            with self.cond:  # the writer's later adds go on
                state["applied"], state["busy"] = seq, False
                self.cond.notify_all()
            raise
        finally:
            if not inserted:  # any other failure: the writer may resend this add
                with self.cond:
                    state["busy"] = False
                    self.cond.notify_all()
        if evicted and self.limiter is not None:
            self.limiter.delete.remote(evicted)
        return True

    def _make_durable(self, key: str, seq: int) -> None:
        """Return once a checkpoint holding add ``seq`` of writer ``key`` is on disk (with
        ``checkpoint_every``). A retry is acknowledged like the first attempt, whose save may
        still be under way (this waits for it: saves hold ``saving``) or may have failed (this
        writes one); acknowledged from memory, a kill before that save would lose the add."""
        if self.checkpoint_every is None:
            return
        with self.saving:
            if self.durable.get(key, 0) < seq:
                self.save(self.folder)

    def update_priorities(self, local_ids: np.ndarray, priorities: np.ndarray, keys: list) -> list[float]:
        """Set priorities; returns the shard's new mass for each ``(num_steps, sequence rule or
        None)`` in ``keys``."""
        buffer = self.buffer
        with buffer.lock:
            buffer.update_priorities(local_ids, priorities)
            return [buffer.mass(*key)[0] for key in keys]

    def clear(self) -> None:
        with self.lock:
            self.buffer.clear()
            self.counts = {"inserts": 0, "samples": 0, "deletes": 0}

    # -- reads ----------------------------------------------------------------------------------
    def sample(self, count: int, num_steps: int | None, rule: SequenceRule | None = None) -> dict:
        """``count`` draws (windows of ``num_steps``, or sequences of ``rule``: replaybuf.samplers.sequences)
        and the shard's mass after them.

        Returns ``{"mass", "smallest", "beta", "leaves", "ids", "probabilities", "weights",
        "mask", "learn"}``; with ``count == 0`` only the first three. An ``EmptyBufferError``
        (the shard cannot draw such windows now) comes back as ``{"mass": 0.0, "error": message}``.
        """
        buffer = self.buffer
        beta = float(buffer.beta) if hasattr(buffer, "update_priorities") else 0.0
        result: dict = {"beta": beta}
        if count:
            sequence = {} if rule is None else {"burn_in": rule.burn_in, "period": rule.period}
            try:
                items, info = buffer.get_next(count, num_steps, **sequence)
            except EmptyBufferError as err:
                return {"mass": 0.0, "smallest": 1.0, "beta": beta, "error": str(err)}
            result["leaves"] = self.flat.flatten(items)
            result["ids"] = np.asarray(info.ids)
            result["probabilities"] = np.asarray(info.probabilities, np.float64)
            for name in ("weights", "mask", "learn"):
                result[name] = getattr(info, name, None)
            with self.lock:
                self.counts["samples"] += count
        with buffer.lock:
            result["mass"], result["smallest"] = buffer.mass(num_steps, rule)
            if self.epochs:
                result["left"] = buffer.epoch_position()[2]
        return result

    # -- sample-count rules (the driver's side: replaybuf.samplers.parts) ---------------------
    def begin_epoch(self, num_steps: int | None) -> int:
        """Begin this shard's part of a new epoch now; its size."""
        return self.buffer.begin_epoch(num_steps)

    def rules_position(self) -> dict:
        """The policy version and, with epochs, ``(epoch, size, left)``: what the driver
        restores after a load."""
        found = {"policy_version": self.buffer.policy_version}
        if self.epochs:
            found["epoch"], found["size"], found["left"] = self.buffer.epoch_position()
        return found

    def set_policy_version(self, version: int) -> None:
        self.buffer.policy_version = version

    def sequence_starts(self, rule: SequenceRule) -> np.ndarray:
        """The local ids of ``rule``'s eligible learning starts now, in id order."""
        return self.buffer.sequence_starts(rule)

    def read_sequences(
        self, local_starts: np.ndarray, rule: SequenceRule
    ) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
        """``(flat leaves, local ids, mask, learn)`` of the sequences from ``local_starts`` (1-d)."""
        items, info = self.buffer.read_sequences(np.asarray(local_starts, np.int64), rule)
        return self.flat.flatten(items), np.asarray(info.ids), np.asarray(info.mask), np.asarray(info.learn)

    def read(self, local_ids: np.ndarray) -> list:
        """The flat leaves of the items stored under ``local_ids`` (1-d)."""
        items, _ = self.buffer.read_ids(np.asarray(local_ids, np.int64))
        return self.flat.flatten(items)

    def gather(self) -> tuple[int, int, list]:
        """``(first valid step, steps, flat leaves [batch_size, n, ...])``."""
        with self.buffer.lock:
            ring = self.buffer.ring
            return ring.first_valid_step(), ring.steps, self.flat.flatten(self.buffer.gather_all())

    def info(self) -> dict:
        """Counters the driver and the limiter read: frames, steps, inserts/samples/deletes, the
        adds waiting for their turn, whether this actor reloaded a checkpoint when it started,
        its pid and node id."""
        with self.lock:
            counts = {**self.counts, "waiting": self.waiting}
        ring = self.buffer.ring
        return {
            "num_frames": self.buffer.num_frames(),
            "num_eligible": self.buffer.num_eligible(),
            "steps": ring.steps,
            "first": ring.first_valid_step(),
            "restored": self.restored,
            "pid": os.getpid(),
            "node": ray.get_runtime_context().get_node_id(),
            **counts,
        }

    def ping(self) -> int:
        return self.index

    # -- checkpoints ----------------------------------------------------------------------------
    def save(self, folder: str) -> str:
        """Write the buffer's state and the shard's bookkeeping to ``folder`` (a new version)."""
        # One save at a time, so versions follow the states they hold; adds wait until it is
        # written, so no add is acknowledged between a copy and its version on disk (a shard
        # killed mid-save then loses fewer than checkpoint_every acknowledged adds).
        with self.saving:
            with self.lock:
                applied = {key: w["applied"] for key, w in self.writers.items()}
                state = {
                    "buffer": self.buffer.state_dict(),
                    "shard": {"index": self.index, "applied": applied, **self.counts},
                }
                self.since_checkpoint = 0
            written = str(write_state(folder, state))
            if os.fspath(folder) == self.folder:  # what a restart reloads
                self.durable = applied
            return written

    def state_dict(self) -> dict:
        """The buffer's ``state_dict()`` (a gathered checkpoint joins every shard's)."""
        return self.buffer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Replace the buffer with a checked part of a one-folder checkpoint (the writers'
        numbering goes on: their later adds follow the loaded items)."""
        with self.lock:
            self.buffer.load_state_dict(state)

    def load(self, folder: str) -> None:
        """Replace the buffer and bookkeeping with the checkpoint in ``folder``."""
        state = read_state(folder)
        meta = state.get("shard") if isinstance(state, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("applied"), dict):
            raise CheckpointError(f"{folder}: expected a shard checkpoint (with a 'shard' entry), got another state")
        with self.lock:
            self.buffer.load_state_dict(state["buffer"])
            self.writers = {str(k): {"applied": int(v), "epoch": 0, "busy": False} for k, v in meta["applied"].items()}
            own = os.fspath(folder) == self.folder
            self.durable = {key: w["applied"] for key, w in self.writers.items()} if own else {}
            self.cond.notify_all()
            self.counts = {key: int(meta.get(key, 0)) for key in ("inserts", "samples", "deletes")}
            self.since_checkpoint = 0
