"""Compiled frame loops for ``replaybuf.storages.frames`` (used when numba is installed:
``replaybuf[fast]``).

Frames live in a pool ``[R, pre, post]`` of bytes (``R = pool_size + 1``: the last row is
the zero frame); a stack of ``k`` frames along an axis is ``[pre, k, post]`` bytes
(``pre``: the frame's bytes before the axis, ``post``: after it, times the item size).
A pointer ``p`` names row ``p % pool_size``, or the zero row when ``p < 0``.

``gather`` is the general case. Stacks on the last axis of 1-byte frames (``[84, 84, 4]``)
interleave one byte of each frame per pixel, which NumPy does as slow strided copies;
``interleave4`` builds each pixel's four bytes as one little-endian uint32 word instead, and
``interleave4_pair`` also builds the next observation in the same pass when it shares
three frames with the observation (its word is the observation's shifted by one byte,
plus the new frame's byte).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = [
    "copy_rows",
    "decode_plan",
    "deinterleave",
    "deinterleave4_after",
    "gather",
    "interleave4",
    "interleave4_pair",
    "match",
    "same",
]


@njit(cache=True, nogil=True, inline="always")
def _row(pointer, pool_size):  # pragma: no cover - compiled
    return pool_size if pointer < 0 else pointer % pool_size


@njit(cache=True, nogil=True)
def gather(frames, pool_size, pointers, out):  # pragma: no cover - compiled
    """Frames ``[R, pre, post]``, pointers ``[n, k]``, ``out`` ``[n, pre * k * post]``: item i's
    stack ``[pre, k, post]`` holds frame ``row(pointers[i, j])`` at position j."""
    n, k = pointers.shape
    pre, post = frames.shape[1], frames.shape[2]
    for i in range(n):
        dst = out[i]
        for j in range(k):
            src = frames[_row(pointers[i, j], pool_size)]
            if post == 1:  # one byte per pixel: a plain strided loop (LLVM handles it well)
                for p in range(pre):
                    dst[p * k + j] = src[p, 0]
            else:
                for p in range(pre):
                    start = (p * k + j) * post
                    dst[start : start + post] = src[p]


@njit(cache=True, nogil=True)
def copy_rows(block, targets, sources):  # pragma: no cover - compiled
    """``block[targets[i]] = block[sources[i]]`` row by row, without NumPy's temporary copy of
    the source rows (no row is both a source and a target)."""
    for i in range(targets.shape[0]):
        block[targets[i]] = block[sources[i]]


@njit(cache=True, nogil=True)
def decode_plan(every, pool_size):  # pragma: no cover - compiled
    """What a read of the frame pointers ``every`` (``[m]``, < 0: the zero frame) decodes:
    ``(rows, first, targets, sources, zeros)``: the pool rows of its distinct frames, each
    decoded into ``first``, the first place holding it; every other place of a frame
    copies it (``targets[i]`` from ``sources[i]``); the zero frame's places."""
    m = every.shape[0]
    order = np.argsort(every, kind="mergesort")  # stable: a frame's first place comes first
    rows, first = np.empty(m, np.int64), np.empty(m, np.int64)
    targets, sources, zeros = np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64)
    distinct = copies = zero = 0
    previous, source = -1, 0
    for k in range(m):
        place = order[k]
        pointer = every[place]
        if pointer < 0:
            zeros[zero] = place
            zero += 1
        elif pointer != previous:
            rows[distinct], first[distinct] = pointer % pool_size, place
            distinct += 1
            previous, source = pointer, place
        else:
            targets[copies], sources[copies] = place, source
            copies += 1
    return rows[:distinct], first[:distinct], targets[:copies], sources[:copies], zeros[:zero]


@njit(cache=True, nogil=True, inline="always")
def _pack4(out, a, b, c, d):  # pragma: no cover - compiled
    for x in range(out.shape[0]):
        out[x] = np.uint32(a[x]) | (np.uint32(b[x]) << 8) | (np.uint32(c[x]) << 16) | (np.uint32(d[x]) << 24)


@njit(cache=True, nogil=True)
def interleave4(frames, pool_size, pointers, out):  # pragma: no cover - compiled
    """Frames ``[R, m]`` uint8, pointers ``[n, 4]``, ``out`` ``[n, m]`` uint32 (little endian)."""
    for i in range(pointers.shape[0]):
        _pack4(
            out[i],
            frames[_row(pointers[i, 0], pool_size)],
            frames[_row(pointers[i, 1], pool_size)],
            frames[_row(pointers[i, 2], pool_size)],
            frames[_row(pointers[i, 3], pool_size)],
        )


@njit(cache=True, nogil=True)
def interleave4_pair(frames, pool_size, first, second, out_first, out_second):  # pragma: no cover - compiled
    """``interleave4`` of two leaves at once; where ``second[i, :3] == first[i, 1:]`` (a next
    observation after its observation) the second stack is the first shifted by one frame."""
    for i in range(first.shape[0]):
        a = frames[_row(first[i, 0], pool_size)]
        b = frames[_row(first[i, 1], pool_size)]
        c = frames[_row(first[i, 2], pool_size)]
        d = frames[_row(first[i, 3], pool_size)]
        e = frames[_row(second[i, 3], pool_size)]
        if second[i, 0] == first[i, 1] and second[i, 1] == first[i, 2] and second[i, 2] == first[i, 3]:
            o, s = out_first[i], out_second[i]
            _pack4(o, a, b, c, d)
            for x in range(o.shape[0]):  # a second pass over words still in cache vectorises
                s[x] = (o[x] >> 8) | (np.uint32(e[x]) << 24)
        else:
            _pack4(out_first[i], a, b, c, d)
            _pack4(
                out_second[i],
                frames[_row(second[i, 0], pool_size)],
                frames[_row(second[i, 1], pool_size)],
                frames[_row(second[i, 2], pool_size)],
                e,
            )


@njit(cache=True, nogil=True)
def deinterleave(stacks, pre, post, out):  # pragma: no cover - compiled
    """The inverse of ``gather``'s layout: stacks ``[n, pre * k * post]`` bytes to frames
    ``out`` ``[n, k, pre * post]``."""
    n, k = out.shape[0], out.shape[1]
    for i in range(n):
        src = stacks[i]
        for j in range(k):
            dst = out[i, j]
            if post == 1:
                for p in range(pre):
                    dst[p] = src[p * k + j]
            else:
                for p in range(pre):
                    start = (p * k + j) * post
                    dst[p * post : (p + 1) * post] = src[start : start + post]


@njit(cache=True, nogil=True)
def deinterleave4_after(stacks, words, before, before_frames, out):  # pragma: no cover - compiled
    """``deinterleave`` of 4-frame uint8 stacks ``[n, 4 * m]`` (``words``: the same bytes as
    ``[n, m]`` uint32) into ``out`` ``[n, 4, m]``; where a stack is the one in ``before``
    (``[n, m]`` uint32 words, split into ``before_frames`` ``[n, 4, m]``) shifted by one frame,
    as a next observation is, frames 0-2 are copied from ``before_frames`` instead."""
    n, m = words.shape
    for i in range(n):
        w, o, dst = words[i], before[i], out[i]
        diff = 0
        for x in range(m):  # branch-free, so it vectorises
            diff |= (w[x] & 0xFFFFFF) ^ (o[x] >> 8)
        if diff == 0:
            for j in range(3):
                dst[j, :] = before_frames[i, j + 1]
        else:
            src = stacks[i]
            for j in range(3):
                for p in range(m):
                    dst[j, p] = src[p * 4 + j]
        for x in range(m):
            dst[3, x] = w[x] >> 24


@njit(cache=True, nogil=True)
def same(a, b):  # pragma: no cover - compiled
    """Whether two arrays of one shape (1-d or 2-d) hold the same values."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    for x in range(flat_a.shape[0]):
        if flat_a[x] != flat_b[x]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _equal(a, b):  # pragma: no cover - compiled
    for x in range(a.shape[0]):
        if a[x] != b[x]:
            return False
    return True


@njit(cache=True, nogil=True)
def _take_matches(words, other, other_pointers, offset, pointers):  # pragma: no cover - compiled
    for b in range(words.shape[0]):
        for j in range(words.shape[1] - offset):
            if pointers[b, j] == -2 and _equal(words[b, j], other[b, j + offset]):
                pointers[b, j] = other_pointers[b, j + offset]


@njit(cache=True, nogil=True)
def match(  # pragma: no cover - compiled
    words, first, first_pointers, first_offset, second, second_pointers, second_offset, base, pointers, fresh
):
    """Pointers ``[B, k]`` of the frames ``words`` ``[B, k, n]``, FrameStorage's rules in one pass.

    A frame takes, in order: the pointer of an equal frame ``first[b, j + first_offset]``
    (then ``second``; an offset < 0 skips a candidate), the zero pointer -1 when all zero,
    the pointer of the next newer frame of its stack when equal to it, else a new pointer
    ``base + c`` with ``fresh[c] = b * k + j``. Returns the number of new frames.
    """
    batch, k = pointers.shape
    pointers[:] = -2
    if first_offset >= 0:
        _take_matches(words, first, first_pointers, first_offset, pointers)
    if second_offset >= 0:
        _take_matches(words, second, second_pointers, second_offset, pointers)
    count = 0
    for b in range(batch):
        for j in range(k - 1, -1, -1):  # newest first: an alias takes its newer frame's pointer
            if pointers[b, j] != -2:
                continue
            zero = True
            for x in range(words.shape[2]):
                if words[b, j, x] != 0:
                    zero = False
                    break
            if zero:
                pointers[b, j] = -1
            elif j < k - 1 and _equal(words[b, j], words[b, j + 1]):
                pointers[b, j] = pointers[b, j + 1]
            else:
                pointers[b, j] = base + count
                fresh[count] = b * k + j
                count += 1
    return count


def warm_up() -> None:
    """Compile (or load from the cache) every kernel on tiny arrays."""
    frames = np.zeros((3, 2, 1), np.uint8)
    pointers = np.array([[0, -1, 1, 0]], np.int64)
    gather(frames, 2, pointers, np.zeros((1, 8), np.uint8))
    gather(frames.reshape(3, 1, 2), 2, pointers, np.zeros((1, 8), np.uint8))
    interleave4(frames[:, :, 0], 2, pointers, np.zeros((1, 2), np.uint32))
    interleave4_pair(frames[:, :, 0], 2, pointers, pointers, np.zeros((1, 2), np.uint32), np.zeros((1, 2), np.uint32))
    deinterleave(np.zeros((1, 8), np.uint8), 2, 1, np.zeros((1, 4, 2), np.uint8))
    deinterleave(np.zeros((1, 8), np.uint8), 1, 2, np.zeros((1, 4, 2), np.uint8))
    words = np.zeros((1, 2), np.uint32)
    deinterleave4_after(
        np.zeros((1, 8), np.uint8), words, words, np.zeros((1, 4, 2), np.uint8), np.zeros((1, 4, 2), np.uint8)
    )
    decode_plan(np.array([2, -1, 2, 5]), 4)
    for dtype in (np.uint8, np.uint64):
        same(np.zeros((1, 2), dtype), np.zeros((1, 2), dtype))
        words = np.zeros((1, 4, 2), dtype)
        match(words, words, pointers, 1, words, pointers, -1, 0, np.zeros((1, 4), np.int64), np.zeros(4, np.int64))
