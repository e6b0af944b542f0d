"""BlobRing: compressed frames end to end in reused chunks, addressed by pool row."""

from __future__ import annotations

import ctypes

import numpy as np

from replaybuf.storages.blobs import CHUNK_BYTES, BlobRing


def blob(rng: np.random.Generator, counter: int) -> bytes:
    return rng.integers(0, 256, int(rng.integers(1, 900)), dtype=np.uint8).tobytes() + counter.to_bytes(4, "little")


def test_live_blobs_read_back_and_chunks_are_reused_as_frames_die():
    rng, rows = np.random.default_rng(0), 1000
    ring = BlobRing(rows, 1024)
    written = {}
    for counter in range(20_000):  # ~9 MB appended through a ring that holds ~0.5 MB
        written[counter] = blob(rng, counter)
        ring.append(counter, written[counter], dead_below=counter + 1 - rows)
        written.pop(counter - rows, None)
    for counter, data in written.items():
        row = counter % rows
        assert ring.blob(row).tobytes() == data
        assert ring.lengths[row] == len(data)
        # the address the compiled decoder reads is the blob's first byte
        assert ctypes.string_at(int(ring.addresses[row]), len(data)) == data
    assert len(ring._chunks) <= 3  # the live ~0.5 MB and the chunk being filled: old ones reused
    assert ring.chunk_bytes == CHUNK_BYTES


def test_a_chunk_holding_a_live_frame_is_not_reused():
    ring = BlobRing(4, 1024)
    big = CHUNK_BYTES // 2 + 1  # one blob per chunk
    for counter in range(6):
        ring.append(counter, bytes([counter]) * big, dead_below=0)  # nothing dies: every chunk kept
    assert len(ring._chunks) == 6
    ring.append(6, bytes([6]) * big, dead_below=3)  # frames 0-2 died: their chunks are free again
    assert len(ring._chunks) == 6
    assert ring.blob(6 % 4).tobytes() == bytes([6]) * big and ring.blob(5 % 4).tobytes() == bytes([5]) * big


def test_resize_moves_the_live_blobs_to_their_new_rows():
    rng = np.random.default_rng(1)
    ring = BlobRing(8, 1024)
    written = {c: blob(rng, c) for c in range(5, 13)}
    for counter, data in written.items():
        ring.append(counter, data, dead_below=counter - 7)
    ring.resize(20, np.arange(5, 13))
    assert ring.rows == 20
    for counter, data in written.items():
        assert ring.blob(counter % 20).tobytes() == data


def test_clear_frees_every_chunk_for_the_next_blobs():
    ring = BlobRing(10, 1024)
    for counter in range(10):
        ring.append(counter, b"x" * (CHUNK_BYTES // 3), dead_below=0)
    chunks = len(ring._chunks)
    ring.clear()
    for counter in range(10):
        ring.append(counter, b"y" * (CHUNK_BYTES // 3), dead_below=0)
    assert len(ring._chunks) == chunks and ring.blob(9).tobytes() == b"y" * (CHUNK_BYTES // 3)
