"""Item storage that keeps every distinct frame of stacked-frame observations once.

A stacked leaf (e.g. uint8 ``[84, 84, 4]``: 4 frames of ``[84, 84]`` along ``stack_axis``)
is not stored as a whole. Each of its frames is matched, byte for byte, against frames
already held: the previous add's stacks of the same stream (``obs[t+1] == next_obs[t]``,
``obs[t+1][j] == obs[t][j+1]``), this add's observation for its next observation
(``next_obs[t][j] == obs[t][j+1]``), the next newer frame of the same stack (Gymnasium's
"reset" padding repeats the first frame) and the all-zero frame ("zero" padding). A frame
that matches nothing is appended to a frame pool; the item record keeps ``k`` int64
pointers per stacked leaf (logical frame counters) beside the other, small fields in a
``RecordStorage``. Reading gathers the frames by pointer, so a read returns exactly the
bytes that were added, whatever the padding; matching only decides how much is stored:
one frame per transition in the steady state, plus one per episode start. When an add's
first stacked leaf has the bytes of the previous add's last one (``obs[t+1]`` is
``next_obs[t]``), it takes that leaf's frames and pointers without matching.

The frames live in a ``FramePool`` (``storages.frame_pool``: a ring by frame counter, raw
or compressed with a ``codec``); a checkpoint's ``frames`` key is built and checked by
``storages.frame_checkpoint``. Every record also keeps the smallest counter it points to
(its floor); floors never decrease along a stream, so the oldest stored items' floors are
the frames the pool must keep when it appends.

A stack along an inner axis (``[84, 84, 4]``) interleaves its frames pixel by pixel. With
numba installed (``replaybuf[fast]``) the interleave on read, its inverse on add and the
next observation (the observation shifted by one frame, plus one) run as compiled loops
(``replaybuf.storages._frame_kernels``); without it, NumPy strided copies give the same
bytes. Compressed frames that lie whole in their stacks are decoded straight into the batch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from math import prod
from types import ModuleType

import numpy as np

from replaybuf.errors import CheckpointError
from replaybuf.nest import FlatSpec
from replaybuf.persistence.folder import StoredArray
from replaybuf.persistence.state import check_items, read_run
from replaybuf.specs import ArraySpec
from replaybuf.storages.codecs import Codec
from replaybuf.storages.frame_checkpoint import check_frames, frames_state
from replaybuf.storages.frame_leaves import StackedLeaf
from replaybuf.storages.frame_pool import ZERO, FramePool, pool_rows
from replaybuf.storages.records import RecordStorage
from replaybuf.storages.row_copy import read_rows
from replaybuf.storages.threads import usable_threads

__all__ = ["FrameStorage"]

_kernels: ModuleType | None | bool = False  # False: not looked up yet


def compiled_kernels() -> ModuleType | None:
    """replaybuf.storages._frame_kernels when numba is importable, else None (looked up once)."""
    global _kernels
    if _kernels is False:
        try:
            from replaybuf.storages import _frame_kernels

            _frame_kernels.warm_up()
            _kernels = _frame_kernels
        except ImportError:
            _kernels = None
    return _kernels  # type: ignore[return-value]


def _words(stack: np.ndarray) -> np.ndarray:
    """A contiguous ``[B, k, *frame]`` array as ``[B, k, n]`` words (uint64 when the bytes allow)."""
    raw = stack.reshape(*stack.shape[:2], -1).view(np.uint8)
    return raw.view(np.uint64) if raw.shape[-1] % 8 == 0 else raw


class FrameStorage:
    """The storage of a frame-stack buffer (the storage protocol of ``replaybuf.storages``).

    ``leaves`` are the flat spec's leaves; ``stacked`` names the stacked ones (one ``pool``:
    every stacked leaf must share a frame shape and dtype). ``codec``: keep the pool's
    frames compressed with it (None: raw).
    """

    lazy_keys = ()  # load() reads every file of a frame-stack checkpoint before loading it
    crash_safe = False

    def __init__(
        self,
        leaves: Sequence[ArraySpec],
        stacked: Sequence[StackedLeaf],
        batch_size: int,
        max_length: int,
        compiled: bool | None = None,
        codec: Codec | None = None,
    ):
        self.leaves = list(leaves)
        self.decode_threads = usable_threads()  # a read's threads for decoding compressed frames
        self.stacked = list(stacked)
        self.batch_size, self.max_length = batch_size, max_length
        self.capacity = batch_size * max_length
        stacked_ids = {s.index for s in self.stacked}
        self._small = [i for i in range(len(self.leaves)) if i not in stacked_ids]
        record = [self.leaves[i] for i in self._small]
        record += [ArraySpec((s.length,), np.int64, f"frames{s.index}") for s in self.stacked]
        record.append(ArraySpec((), np.int64, "floor"))
        self.records = self.open_records(record)
        names = list(self.records.dtype.names or ())
        self._small_names = names[: len(self._small)]
        self._pointer_names = names[len(self._small) : -1]
        self._floor_name = names[-1]
        first = self.stacked[0]
        self.frame_dtype = self.leaves[first.index].dtype
        longest = max(s.length for s in self.stacked)
        # Steady state: one new frame per item; a quarter more for episode starts; then grow.
        pool_size = self.capacity + self.capacity // 4 + batch_size * (longest + 1) * len(self.stacked)
        self.pool = self.open_pool(first.frame_shape, pool_size, codec)
        self.kernels = compiled_kernels() if compiled is not False else None
        itemsize = self.frame_dtype.itemsize
        # Each stack as [pre, k, post] bytes: the frame bytes before and after the stack axis.
        self._layout = [(prod(s.frame_shape[: s.axis]), prod(s.frame_shape[s.axis :]) * itemsize) for s in self.stacked]
        little = sys.byteorder == "little"
        packs4 = [
            s.length == 4 and post == 1 and little for s, (_, post) in zip(self.stacked, self._layout, strict=True)
        ]
        self._packs4 = packs4  # built as one uint32 word per pixel
        # compressed frames that lie whole in their stacks are decoded straight into the batch
        self._decode_in_place = codec is not None and all(pre == 1 for pre, _ in self._layout)
        self._pair = [i for i, ok in enumerate(packs4) if ok][:2]  # observation and next, in one pass
        self.start()

    def open_records(self, specs: list[ArraySpec]) -> RecordStorage:
        """The item records (``specs``: small leaves, pointers, floor): in RAM here."""
        return RecordStorage(specs, self.capacity)

    def open_pool(self, frame_shape: tuple[int, ...], size: int, codec: Codec | None) -> FramePool:
        """The frame pool of ``size`` frames: in RAM here."""
        return FramePool(frame_shape, self.frame_dtype, size, self.batch_size, codec)

    def start(self) -> None:
        """Begin empty (a storage that reopens what it holds starts from that instead)."""
        self.clear()

    @property
    def fields(self) -> list[np.ndarray]:
        """The stored leaves by slot in flat-spec order, as the storage protocol has them; a
        stacked leaf's entry is its frame pointers (``[capacity, k]`` int64), not its frames."""
        stored = self.records.fields
        out: list = [None] * len(self.leaves)
        for j, i in enumerate(self._small):
            out[i] = stored[j]
        for m, leaf in enumerate(self.stacked):
            out[leaf.index] = stored[len(self._small) + m]
        return out

    def commit(self, steps: int) -> None:
        """The ring counts ``steps`` steps (after a write, a load or a clear)."""
        self.written = steps

    def clear(self) -> None:
        """Forget the frames, the previous add (nothing later is matched against it) and the floors."""
        self.pool.clear()
        self.written = 0  # steps written since the last clear
        self._previous: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._last_raw: np.ndarray | None = None  # the previous add's last stacked leaf, [B, bytes]
        self.records.records[self._floor_name] = 0

    # -- writing ---------------------------------------------------------------------------------
    def write(self, start: int, arrays: Sequence[np.ndarray], steps: int = 1) -> None:
        """Write one step of every stream (``arrays[k]`` shaped ``[batch_size, ...]``) at ``start``."""
        base = self.pool.counter
        new_frames: list[np.ndarray] = []  # [m, *frame] blocks of frames matching nothing held
        resolved: list[tuple[np.ndarray, np.ndarray]] = []  # (words [B, k, n], pointers [B, k])
        owned: list[bool] = []  # whether the words are a copy of ours (else copied for the next add)
        raws: list[np.ndarray] = []  # each stacked leaf as [B, bytes]
        for i, (leaf, layout) in enumerate(zip(self.stacked, self._layout, strict=True)):
            raw = np.ascontiguousarray(arrays[leaf.index]).reshape(self.batch_size, -1).view(np.uint8)
            raws.append(raw)
            if i == 0 and self._repeats(raw):  # obs[t] == next_obs[t-1]: the same frames, held
                resolved.append(self._previous[-1])  # type: ignore[index]
                owned.append(True)
                continue
            stack, copied = self._split(i, leaf, layout, raw, raws, resolved)
            words = _words(stack)
            pointers, fresh = self._match(words, self._candidates(leaf, resolved), base)
            if fresh.size:
                new_frames.append(stack.reshape(-1, *leaf.frame_shape)[fresh])
                base += fresh.size
            resolved.append((words, pointers))
            owned.append(copied)
        pointers = [p for _, p in resolved]
        live = pointers[0] if len(pointers) == 1 else np.concatenate(pointers, axis=1)
        floor = np.where(live >= 0, live, base).min(axis=1)
        rows = [arrays[i] for i in self._small] + pointers + [floor]
        self.records.write(start, rows)
        self.written += 1
        if new_frames:
            self.pool.append(
                new_frames[0] if len(new_frames) == 1 else np.concatenate(new_frames), self._oldest_floor(start)
            )
        self._previous = [(w if mine else w.copy(), p) for (w, p), mine in zip(resolved, owned, strict=True)]
        self._last_raw = raws[-1].copy() if len(raws) > 1 else None

    def _repeats(self, raw: np.ndarray) -> bool:
        """Whether the first stacked leaf's bytes ``raw`` equal the previous add's last stacked
        leaf's (an observation after the previous next observation), leaves of one shape."""
        last = self._last_raw
        if last is None or last.shape != raw.shape or self.stacked[0].length != self.stacked[-1].length:
            return False
        if self.stacked[0].axis != self.stacked[-1].axis:
            return False
        a, b = (raw.view(np.uint64), last.view(np.uint64)) if raw.shape[1] % 8 == 0 else (raw, last)
        return bool(self.kernels.same(a, b)) if self.kernels is not None else bool(np.array_equal(a, b))

    def _split(
        self, i: int, leaf: StackedLeaf, layout: tuple[int, int], raw: np.ndarray, raws: list, resolved: list
    ) -> tuple[np.ndarray, bool]:
        """``(frames, copied)``: stacked leaf ``i`` (``raw``: ``[B, bytes]``) as contiguous frames
        ``[B, k, *frame]``, and whether they are a new array (else a view of the caller's)."""
        batch, pre = raw.shape[0], layout[0]
        shape = (batch, leaf.length, *leaf.frame_shape)
        if pre == 1:  # the stack axis leads: the frames are already contiguous
            return raw.view(self.frame_dtype).reshape(shape), False
        if self.kernels is None:
            return np.ascontiguousarray(
                np.moveaxis(raw.view(self.frame_dtype).reshape(batch, *self.leaves[leaf.index].shape), 1 + leaf.axis, 1)
            ), True
        frames = np.empty(shape, self.frame_dtype)
        out = frames.reshape(batch, leaf.length, -1).view(np.uint8)
        if i > 0 and self._packs4[i] and self._packs4[0]:  # a next observation: 3 frames known
            first = resolved[0][0].view(np.uint8).reshape(batch, 4, -1)
            words, before = raw.view(np.uint32), raws[0].view(np.uint32)
            self.kernels.deinterleave4_after(raw, words, before, first, out)
        else:
            self.kernels.deinterleave(raw, pre, layout[1], out)
        return frames, True

    def _candidates(self, leaf: StackedLeaf, resolved: list) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """Up to two ``(words, pointers, offset)`` held frames that ``leaf``'s frame j may
        equal at position ``j + offset``, in the order they are tried."""
        out = []
        if self._previous is not None:
            out.append((*self._previous[len(resolved)], 1))  # this leaf one step earlier
            if not resolved and len(self._previous) > 1:
                out.append((*self._previous[-1], 0))  # obs[t+1] == next_obs[t]
        if resolved:
            out.append((*resolved[0], 1))  # next_obs[t] == obs[t] shifted
        return [c for c in out if c[0].shape[1] == leaf.length]

    def _match(self, words: np.ndarray, candidates: list, base: int) -> tuple[np.ndarray, np.ndarray]:
        """``(pointers [B, k], fresh)``: the frames of ``words`` (``[B, k, n]``) that match
        nothing held get pointers ``base, base + 1, ...`` and their flat ``b * k + j`` in ``fresh``."""
        batch, length = words.shape[:2]
        if self.kernels is not None:
            pointers = np.empty((batch, length), np.int64)
            fresh = np.empty(batch * length, np.int64)
            (a, pa, oa), (b, pb, ob) = (candidates + [(words, pointers, -1)] * 2)[:2]
            count = self.kernels.match(words, a, pa, oa, b, pb, ob, base, pointers, fresh)
            return pointers, fresh[:count]
        pointers = np.full((batch, length), -2, np.int64)  # -2: not found yet
        for other, other_pointers, offset in candidates:
            span = length - offset
            same = (words[:, :span] == other[:, offset:]).all(axis=-1)
            take = same & (pointers[:, :span] == -2)
            pointers[:, :span] = np.where(take, other_pointers[:, offset:], pointers[:, :span])
        pointers[~words.any(axis=-1) & (pointers == -2)] = ZERO
        # The next newer frame of the same stack (repeat padding), resolved newest first.
        alias = np.zeros((batch, length), bool)
        alias[:, :-1] = (words[:, :-1] == words[:, 1:]).all(axis=-1) & (pointers[:, :-1] == -2)
        fresh = np.flatnonzero((pointers == -2) & ~alias)
        pointers.reshape(-1)[fresh] = base + np.arange(fresh.size)
        for j in range(length - 2, -1, -1):
            pointers[:, j] = np.where(alias[:, j], pointers[:, j + 1], pointers[:, j])
        return pointers, fresh

    def _oldest_floor(self, start: int) -> int:
        """The smallest frame counter any stored item (after this write) points to."""
        if self.written >= self.max_length:  # full: the oldest are the next slots to be overwritten
            first = (start + self.batch_size) % self.capacity
        else:
            first = 0
        return int(self.records.records[self._floor_name][first : first + self.batch_size].min())

    # -- checkpoints ---------------------------------------------------------------------------
    def state(self, start: int, count: int, views: bool = False) -> dict:
        """``{"items", "frames"}`` of the ``count`` items from slot ``start`` (id order): the
        small leaves by flat index, and the frames they use once each with pointers into them
        (``frame_checkpoint.frames_state``; with ``views``, for ``save`` under the buffer's
        lock, raw frames are views of the pool's ring instead of a copy)."""
        runs = read_run(self.records.fields, start, count)
        frames = frames_state(self.pool, self.stacked, runs[len(self._small) : -1], runs[-1], views)
        return {"items": {str(i): run for i, run in zip(self._small, runs, strict=False)}, "frames": frames}

    def check_state(self, flat: FlatSpec, state: dict) -> tuple[int, tuple[list, dict]]:
        """``(count, (small leaves, frames))`` of a ``state()``; CheckpointError when it does not fit."""
        count = check_frames(state.get("frames"), self.stacked, self.pool)
        items = state.get("items")
        if isinstance(items, dict):  # files handed over lazily (read_state(lazy=...)) are read here, first
            items = {key: value.read() if isinstance(value, StoredArray) else value for key, value in items.items()}
        small = check_items(flat, dict(state, items=items), self._small, (np.ndarray,))
        if small and small[0].shape[0] != count:
            raise CheckpointError(f"state['items']: {small[0].shape[0]} items, but state['frames'] holds {count}")
        return count, (small, state["frames"], self.pool.checked(state["frames"]))

    def load_state(self, start: int, checked: tuple[list, dict]) -> None:
        """Hold the checked small leaves and ``frames`` of a ``state()`` from slot ``start``;
        later adds match against the newest step (``commit`` then gives the step count)."""
        small, frames, pool = checked
        self.clear()
        self.pool.load(pool)
        pointers = [frames["pointers"][str(leaf.index)] for leaf in self.stacked]
        count = frames["floors"].shape[0]
        if count:
            self.records.write(start, [*small, *pointers, frames["floors"]])
            self.resume(np.arange(start + count - self.batch_size, start + count) % self.capacity)

    def resume(self, newest: np.ndarray) -> None:
        """Match later adds against the items at slots ``newest`` (the newest step), as if
        they had just been added: their frames and pointers, and their last stacked leaf."""
        rows = self.records.records[newest]
        pointers = [np.ascontiguousarray(rows[name]) for name in self._pointer_names]
        held, size, renumbered = self.pool.frames_for(pointers, self.decode_threads)
        self._previous = [
            (_words(held.take(pool_rows(r, size), axis=0)), p) for r, p in zip(renumbered, pointers, strict=True)
        ]
        if len(self.stacked) > 1:  # the newest step's last stacked leaf, as added
            last = self.read(newest)[self.stacked[-1].index]
            self._last_raw = np.ascontiguousarray(last).reshape(self.batch_size, -1).view(np.uint8)

    # -- reading ---------------------------------------------------------------------------------
    def read(self, ids: np.ndarray) -> list[np.ndarray]:
        """The leaves of the items at ``ids`` (slot = id % capacity), each shaped ``ids.shape + leaf.shape``."""
        rows = read_rows(self.records.records, ids, self.records.read_threads)
        out: list = [None] * len(self.leaves)
        for i, name in zip(self._small, self._small_names, strict=True):
            out[i] = rows[name]
        pointers = [
            np.ascontiguousarray(rows[name]).reshape(-1, leaf.length)
            for leaf, name in zip(self.stacked, self._pointer_names, strict=True)
        ]
        if self._decode_in_place:
            stacks = self._decoded_stacks(pointers)
        else:
            stacks = self._stacks(pointers)
        for leaf, stack in zip(self.stacked, stacks, strict=True):
            out[leaf.index] = stack.reshape(ids.shape + self.leaves[leaf.index].shape)
        return out

    def _stacks(self, pointers: list[np.ndarray]) -> list[np.ndarray]:
        """The stacks of ``pointers`` gathered from the frame ring, or from the frames decoded
        into a scratch pool (compressed frames interleaved in their stacks)."""
        frames, size, pointers = self.pool.frames_for(pointers, self.decode_threads)
        if self.kernels is not None:
            return self._gather_compiled(pointers, frames, size)
        return self._gather_numpy(pointers, frames, size)

    def _decoded_stacks(self, pointers: list[np.ndarray]) -> list[np.ndarray]:
        """The stacks of ``pointers`` (compressed, frames whole in their stacks) decoded
        straight into one block by ``FramePool.decode_batch``; the stacked leaves returned
        are views of it."""
        n = pointers[0].shape[0]
        every = pointers[0].reshape(-1) if len(pointers) == 1 else np.concatenate([p.reshape(-1) for p in pointers])
        block = self.pool.decode_batch(every, self.kernels, self.decode_threads)
        stacks, at = [], 0
        for leaf in self.stacked:
            count = n * leaf.length
            stacks.append(block[at : at + count].view(self.frame_dtype).reshape(n, *self.leaves[leaf.index].shape))
            at += count
        return stacks

    def _gather_numpy(self, pointers: list[np.ndarray], pool: np.ndarray, size: int) -> list[np.ndarray]:
        """The stacks of ``pointers`` from ``pool`` of ``size`` rows (row ``size``: the zero frame)."""
        out = []
        for leaf, layout, leaf_pointers in zip(self.stacked, self._layout, pointers, strict=True):
            frames = pool.take(pool_rows(leaf_pointers, size), axis=0)  # [n, k, *frame]
            if layout[0] > 1:  # interleave: one strided copy per stack position beats one transpose
                stacked = np.empty((frames.shape[0], *self.leaves[leaf.index].shape), self.frame_dtype)
                view = np.moveaxis(stacked, 1 + leaf.axis, 1)
                for j in range(leaf.length):
                    view[:, j] = frames[:, j]
                frames = stacked
            out.append(frames)
        return out

    def _gather_compiled(self, pointers: list[np.ndarray], pool: np.ndarray, size: int) -> list[np.ndarray]:
        """The stacks of ``pointers`` from ``pool`` of ``size`` rows (row ``size``: the zero frame)."""
        kernels = self.kernels
        n = pointers[0].shape[0]
        out = [np.empty((n, *self.leaves[leaf.index].shape), self.frame_dtype) for leaf in self.stacked]
        if n == 0:  # nothing to read (an empty buffer's gather_all)
            return out
        raw = pool.reshape(size + 1, -1).view(np.uint8)
        words = [
            o.reshape(n, -1).view(np.uint8).view(np.uint32) if ok else None
            for o, ok in zip(out, self._packs4, strict=True)
        ]
        if len(self._pair) == 2:
            a, b = self._pair
            kernels.interleave4_pair(raw, size, pointers[a], pointers[b], words[a], words[b])  # type: ignore[union-attr]
        for i, (leaf, (pre, post)) in enumerate(zip(self.stacked, self._layout, strict=True)):
            if len(self._pair) == 2 and i in self._pair:
                continue
            if pre == 1:  # contiguous frames: a row memcpy (mode="clip": "raise" buffers out)
                rows = pool_rows(pointers[i], size)
                np.take(pool, rows, axis=0, out=out[i].reshape(n, leaf.length, *leaf.frame_shape), mode="clip")
            elif words[i] is not None:
                kernels.interleave4(raw, size, pointers[i], words[i])  # type: ignore[union-attr]
            else:
                flat = out[i].reshape(n, -1).view(np.uint8)
                kernels.gather(raw.reshape(size + 1, pre, post), size, pointers[i], flat)  # type: ignore[union-attr]
        return out
