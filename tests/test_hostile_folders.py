"""Damaged checkpoint and memmap folders (issue 18, classes 3-5): every byte of a small
checkpoint flipped and every file truncated, ``.npy`` headers NumPy's parser chokes on, a
``CURRENT`` pointer that lost its checksum, and memmap folders with damaged metadata.

A refused load raises CheckpointError (a ReplayBufferError and a ValueError) and leaves the
buffer equal to its untouched twin; only an item file whose checksum fails while it streams
into the storage may leave the buffer empty instead (docs/persistence.md). No damage ever
loads other content.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import zlib
from pathlib import Path

import numpy as np
import optree
import pytest

import replaybuf
from conformance_data import SPEC, fields_for_ids, step_batch
from hostile_buffers import (
    KINDS,
    assert_equal_trees,
    assert_twins,
    build,
    plain,
    twins,
)
from replaybuf.errors import CheckpointError, ReplayBufferError
from replaybuf.storages import memmap as memmap_module


def _saved(kind: str, tmp_path: Path) -> Path:
    root = tmp_path / f"ckpt-{kind}"
    build(kind, tmp_path, variant=1).save(root)
    return root


def _version(root: Path) -> Path:
    return root / json.loads((root / "CURRENT").read_text())["current"]


def _refuse(buffer, root: Path, match: str | None = None) -> CheckpointError:
    with pytest.raises(CheckpointError, match=match) as caught:
        buffer.load(root)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ReplayBufferError)
    return caught.value


# -- every byte flipped, every file truncated --------------------------------------------------
def _damaged(path: Path, stride: int = 1):
    """Damage ``path`` in place in every way in turn, yielding a name for each: every byte's
    lowest bit flipped, then the file cut at every length (with ``stride`` > 1, only every
    stride-th of an array's data bytes: its header and the other files stay whole). The
    bytes are changed and put back with positioned writes: truncating and rewriting a file
    costs a flush on some filesystems, and this runs ~10k times."""
    original = path.read_bytes()
    start = _header_end(path) if path.suffix == ".npy" and stride > 1 else len(original)
    positions = [i for i in range(len(original)) if i < start or (i - start) % stride == 0]
    fd = os.open(path, os.O_RDWR)
    try:
        for i in positions:
            os.pwrite(fd, bytes([original[i] ^ 0x01]), i)
            yield f"flip {i}"
            os.pwrite(fd, original[i : i + 1], i)
        for i in positions:
            os.ftruncate(fd, i)
            yield f"cut {i}"
            os.pwrite(fd, original[i:], i)
    finally:
        os.close(fd)
    assert path.read_bytes() == original


def _exhaust(kind: str, tmp_path: Path, stride: int = 1) -> dict:
    """Load every damaged variant of a saved folder of ``kind`` into one buffer; returns counts."""
    root = _saved(kind, tmp_path)
    buffer = build(kind, tmp_path)
    before_raw = buffer.state_dict()
    before = plain(before_raw)
    fingerprint = pickle.dumps(before)
    outcomes = {"refused": 0, "emptied": 0}
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for path in files:
        item_file = "-items." in path.name
        for what in _damaged(path, stride):
            try:
                buffer.load(root)
            except CheckpointError:
                pass
            except Exception as err:  # anything else escapes the promise
                pytest.fail(f"{path.name} {what}: {type(err).__name__}: {err}")
            else:
                pytest.fail(f"{path.name} {what}: the damaged checkpoint loaded")
            after = plain(buffer.state_dict())
            if pickle.dumps(after) == fingerprint:  # the quick check; the full one otherwise
                outcomes["refused"] += 1
                continue
            try:
                assert_equal_trees(after, before)
                outcomes["refused"] += 1
            except AssertionError:
                # only an item file found corrupt while streaming in may empty the buffer
                assert item_file, f"{path.name} {what}: the buffer changed"
                assert (buffer.num_frames() if hasattr(buffer, "num_frames") else buffer.size()) == 0
                outcomes["emptied"] += 1
                buffer.load_state_dict(before_raw)
    buffer.load(root)  # the undamaged folder still loads
    return outcomes


def test_every_byte_of_a_checkpoint_flipped_and_every_file_truncated_is_refused(tmp_path):
    """Every byte of a small checkpoint (items, priorities, episode index, the generator's
    state in the manifest) flipped in turn, and every file cut at every length: ~7k loads,
    each refused, each leaving the buffer as it was or (an item file) empty."""
    outcomes = _exhaust("episodes", tmp_path)
    assert outcomes["refused"] > 6000 and outcomes["emptied"] > 0


@pytest.mark.parametrize("kind", ["frames", "torch", "mindspore"])
def test_other_checkpoints_damaged_byte_by_byte_are_refused(kind, tmp_path):
    """The same for frame stacks, torch and MindSpore-style buffers (a torch generator state
    array): every byte of the pointer, the manifest and each array's header, and every 16th
    of the array data."""
    if KINDS[kind].torch:
        pytest.importorskip("torch")
    outcomes = _exhaust(kind, tmp_path, stride=16)
    assert outcomes["refused"] > 1000
    if kind == "frames":  # its files are all read and checked before it loads anything
        assert outcomes["emptied"] == 0


# -- .npy headers --------------------------------------------------------------------------------
def _header_end(path: Path) -> int:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        (np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0)(f)
        return f.tell()


@pytest.mark.parametrize("byte", [b"}", b"'", b"(", b"\n", b"\\", b" "])
def test_a_npy_header_that_numpys_parser_chokes_on_is_refused(byte, tmp_path):
    """Issue 18: a flipped byte in a header's dict escaped as tokenize.TokenError (an unclosed
    brace), SyntaxError, ... Every position of a small array's header set to ``byte``."""
    root = _saved("episodes", tmp_path)
    path = next(_version(root).glob("*-priorities.mass.npy"))
    original = path.read_bytes()
    buffer, twin = twins("episodes", tmp_path)
    for i in range(10, _header_end(path)):
        damaged = bytearray(original)
        damaged[i : i + 1] = byte
        if bytes(damaged) == original:
            continue
        path.write_bytes(bytes(damaged))
        _refuse(buffer, root, match=path.name)
    assert_twins(buffer, twin)


def test_an_object_array_header_is_refused_before_anything_is_read(tmp_path):
    """A header claiming Python objects (the manifest agreeing) is never read into memory."""
    root = _saved("prioritized", tmp_path)
    version = _version(root)
    path = next(version.glob("*-priorities.mass.npy"))
    text = path.read_bytes().replace(b"'<f8'", b"'|O' ")
    path.write_bytes(text)
    manifest = json.loads((version / "manifest.json").read_text())
    manifest["state"]["priorities"]["mass"]["dtype"] = "|O"
    raw = json.dumps(manifest).encode()
    (version / "manifest.json").write_bytes(raw)
    pointer = json.loads((root / "CURRENT").read_text())
    pointer["manifest_crc32"] = zlib.crc32(raw)
    (root / "CURRENT").write_text(json.dumps(pointer))
    buffer, twin = twins("prioritized", tmp_path)
    _refuse(buffer, root, match="not plain data|corrupt")
    assert_twins(buffer, twin)


# -- the pointer ---------------------------------------------------------------------------------
def _edit_pointer(change):
    def edit(root: Path) -> None:
        pointer = json.loads((root / "CURRENT").read_text())
        (root / "CURRENT").write_text(json.dumps(change(pointer)))

    return edit


def _rename(old, new):
    return lambda p: {new if k == old else k: v for k, v in p.items()}


def _steps_shifted_and_checksum_key_lost(root: Path) -> None:
    """Issue 18's example: ``manifest_crc33`` (one flipped byte) and a changed ``steps``."""
    manifest = _version(root) / "manifest.json"
    text = manifest.read_text()
    state = json.loads(text)["state"]
    manifest.write_text(text.replace(f'"steps": {state["steps"]}', f'"steps": {state["steps"] + 1}'))
    _edit_pointer(_rename("manifest_crc32", "manifest_crc33"))(root)


POINTER_DAMAGE = {
    "checksum key lost": (_edit_pointer(_rename("manifest_crc32", "manifest_crc33")), "manifest_crc32"),
    "checksum key lost, steps changed": (_steps_shifted_and_checksum_key_lost, "manifest_crc32"),
    "checksum a string": (_edit_pointer(lambda p: {**p, "manifest_crc32": str(p["manifest_crc32"])}), "manifest_crc32"),
    "checksum negative": (_edit_pointer(lambda p: {**p, "manifest_crc32": -1}), "manifest_crc32"),
    "checksum 2**32": (_edit_pointer(lambda p: {**p, "manifest_crc32": 2**32}), "manifest_crc32"),
    "checksum true": (_edit_pointer(lambda p: {**p, "manifest_crc32": True}), "manifest_crc32"),
    "checksum wrong": (_edit_pointer(lambda p: {**p, "manifest_crc32": p["manifest_crc32"] ^ 1}), "checksum mismatch"),
    "format lost": (_edit_pointer(lambda p: {k: v for k, v in p.items() if k != "format"}), "format"),
    "format other": (_edit_pointer(lambda p: {**p, "format": "replaybuf-checkpoinu"}), "format"),
    "format a number": (_edit_pointer(lambda p: {**p, "format": 1}), "format"),
    "extra key": (_edit_pointer(lambda p: {**p, "extra": 1}), "keys"),
    "current outside": (_edit_pointer(lambda p: {**p, "current": "../v000001"}), "current"),
    "current a number": (_edit_pointer(lambda p: {**p, "current": 1}), "current"),
    "current missing folder": (_edit_pointer(lambda p: {**p, "current": "v000009"}), "manifest"),
    "a list": (_edit_pointer(lambda p: list(p)), "CURRENT"),
    "not JSON": (lambda root: (root / "CURRENT").write_bytes(b"\xff\xfe"), "CURRENT"),
    "empty": (lambda root: (root / "CURRENT").write_bytes(b""), "CURRENT"),
    "deeply nested": (lambda root: (root / "CURRENT").write_text("[" * 100_000), "CURRENT"),
}


@pytest.mark.parametrize("kind", ["episodes", "torch", "mindspore"])
@pytest.mark.parametrize("damage", sorted(POINTER_DAMAGE))
def test_a_damaged_pointer_is_refused(kind, damage, tmp_path):
    if KINDS[kind].torch:
        pytest.importorskip("torch")
    root = _saved(kind, tmp_path)
    change, match = POINTER_DAMAGE[damage]
    change(root)
    buffer, twin = twins(kind, tmp_path)
    _refuse(buffer, root, match=match)
    assert_twins(buffer, twin)


def test_a_manifest_with_extra_keys_or_a_bool_version_is_refused(tmp_path):
    """Loaded from its version folder (no pointer checksum), the manifest itself is checked."""
    root = _saved("uniform", tmp_path)
    manifest = _version(root) / "manifest.json"
    original = json.loads(manifest.read_text())
    buffer, twin = twins("uniform", tmp_path)
    for changed, match in [
        ({**original, "format_version": True}, "format_version"),
        ({**original, "extra": 1}, "unexpected keys"),
        ({**original, "format": "other"}, "not a replaybuf-checkpoint manifest"),
    ]:
        manifest.write_text(json.dumps(changed))
        _refuse(buffer, _version(root), match=match)
    manifest.write_text(json.dumps(original))
    entry = original["state"]["items"]["0"]
    for bad_entry in [{**entry, "shape": [2**70]}, {**entry, "bytes": -1}, {**entry, "crc32": "x"}, {"__npy__": 5}]:
        changed = json.loads(json.dumps(original))
        changed["state"]["items"]["0"] = bad_entry
        manifest.write_text(json.dumps(changed))
        _refuse(buffer, _version(root), match="manifest")
    assert_twins(buffer, twin)


# -- memmap folders ------------------------------------------------------------------------------
def _memmap(path, **kwargs):
    return replaybuf.UniformReplayBuffer(SPEC, 2, 5, seed=1, storage="memmap", path=path, **kwargs)


def _filled_memmap(path):
    buffer = _memmap(path)
    for t in range(3):
        buffer.add_batch(step_batch(t, 2))
    return buffer


def _cursor(values, dtype=np.int64):
    def damage(folder: Path) -> None:
        np.save(folder / "cursor.npy", np.array(values, dtype))

    return damage


def _meta(change):
    def damage(folder: Path) -> None:
        meta = json.loads((folder / "meta.json").read_text())
        (folder / "meta.json").write_text(json.dumps(change(meta)))

    return damage


MEMMAP_DAMAGE = {
    "meta a list": (lambda f: (f / "meta.json").write_text("[1, 2]"), "meta.json.*expected an object"),
    "meta a string": (lambda f: (f / "meta.json").write_text('"meta"'), "meta.json.*expected an object"),
    "meta not JSON": (lambda f: (f / "meta.json").write_bytes(b"{\xff"), "meta.json"),
    "meta deeply nested": (lambda f: (f / "meta.json").write_text("[" * 100_000), "meta.json"),
    "meta spec dtypes zz": (_meta(lambda m: {**m, "spec": {**m["spec"], "dtypes": ["zz"] * 4}}), "spec"),
    "meta spec a list": (_meta(lambda m: {**m, "spec": [1]}), "spec"),
    "meta max_length a string": (_meta(lambda m: {**m, "max_length": "5"}), "max_length"),
    "meta batch_size true": (_meta(lambda m: {**m, "batch_size": True}), "batch_size"),
    "cursor negative": (_cursor([-5, -5]), "cursor.npy"),
    "cursor beyond the ids": (_cursor([2**62, 2**62]), "cursor.npy"),
    "cursor pending below committed": (_cursor([3, 2]), "cursor.npy"),
    "cursor int8": (_cursor([3, 3], np.int8), "cursor.npy.*int64"),
    "cursor float": (_cursor([3.0, 3.0], np.float64), "cursor.npy.*int64"),
    "cursor of 3": (_cursor([3, 3, 3]), "cursor.npy"),
    "cursor missing": (lambda f: (f / "cursor.npy").unlink(), "cursor.npy"),
    "cursor header unclosed": (
        lambda f: (f / "cursor.npy").write_bytes((f / "cursor.npy").read_bytes().replace(b"}", b"|", 1)),
        "cursor.npy",
    ),
    "records truncated": (
        lambda f: (f / "records.npy").write_bytes((f / "records.npy").read_bytes()[:-8]),
        "records.npy",
    ),
    "records header unclosed": (
        lambda f: (f / "records.npy").write_bytes((f / "records.npy").read_bytes().replace(b"}", b"|", 1)),
        "records.npy",
    ),
    "records of another dtype": (lambda f: np.save(f / "records.npy", np.zeros(10, np.float64)), "records.npy"),
}


@pytest.mark.parametrize("damage", sorted(MEMMAP_DAMAGE))
def test_a_damaged_memmap_folder_is_refused(damage, tmp_path):
    folder = tmp_path / "rb"
    _filled_memmap(folder)
    change, match = MEMMAP_DAMAGE[damage]
    change(folder)
    damaged = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(CheckpointError, match=match) as caught:
        _memmap(folder)
    assert isinstance(caught.value, ValueError)
    # opening refused: the folder is not written to, not a byte of it
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == damaged


def test_a_memmap_folder_of_the_largest_steps_opens_and_keeps_working(tmp_path):
    folder = tmp_path / "rb"
    _filled_memmap(folder)
    largest = 2**62 // 2
    _cursor([largest, largest])(folder)
    buffer = _memmap(folder)
    assert buffer.num_frames() == 10
    buffer.add_batch(step_batch(0, 2))
    items, info = buffer.get_next(64, 2)
    # steps [largest - 4, largest] are stored; a 2-step window starts at one of the first 4
    assert info.ids.min() >= (largest - 4) * 2 and info.ids.max() <= largest * 2 + 1
    np.testing.assert_array_equal(info.ids[:, 1] - info.ids[:, 0], 2)
    # step t of stream s sits in slot t % 5: slots 0-2 hold what steps 0-2 wrote, the new
    # step (largest % 5 == 2) rewrote slot 2 with step 0's items, slots 3-4 were never written
    written = {0: 0, 1: 1, 2: 0}
    steps, streams = np.divmod(info.ids, 2)
    for slot in range(5):
        got = optree.tree_map(lambda leaf, at=steps % 5 == slot: leaf[at], items)
        if slot in written:
            want = fields_for_ids(written[slot] * 2 + streams[steps % 5 == slot])
        else:
            want = optree.tree_map(np.zeros_like, got)
        assert_equal_trees(got, want, f"slot {slot}")


def test_every_byte_of_a_memmap_folders_metadata_flipped_opens_or_is_refused_cleanly(tmp_path):
    """meta.json, cursor.npy and records.npy's header: each byte flipped, each file cut.
    The folder has no checksums, so a flip may open (a cursor of fewer steps); it must then
    be a working buffer. It is never another exception."""
    folder = tmp_path / "rb"
    _filled_memmap(folder).get_next(2)
    opened = refused = 0
    for name, stride in (("meta.json", 1), ("cursor.npy", 1), ("records.npy", 10**9)):
        for what in _damaged(folder / name, stride):
            try:
                buffer = _memmap(folder)
            except CheckpointError:
                refused += 1
            except Exception as err:
                pytest.fail(f"{name} {what}: {type(err).__name__}: {err}")
            else:
                opened += 1
                assert 0 <= buffer.num_frames() <= buffer.capacity
                if buffer.num_frames():
                    buffer.get_next(2)
                buffer.gather_all()
                del buffer
    assert refused > 0
    assert _memmap(folder).num_frames() == 6


def test_a_failed_memmap_creation_leaves_no_folder_behind(tmp_path, monkeypatch):
    """A full disk while the files are built: the error is the OS's, and no temporary or
    half-built folder is left (the next attempt starts clean)."""

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(memmap_module.np, "save", no_space)
    with pytest.raises(OSError, match="No space left"):
        _memmap(tmp_path / "rb")
    assert sorted(os.listdir(tmp_path)) == []
    monkeypatch.undo()
    buffer = _filled_memmap(tmp_path / "rb")
    assert buffer.num_frames() == 6
    assert sorted(os.listdir(tmp_path)) == ["rb"]


def test_an_interrupted_memmap_creation_leaves_no_folder_behind(tmp_path, monkeypatch):
    original = memmap_module.np.lib.format.open_memmap

    def interrupted(*args, **kwargs):
        original(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(memmap_module.np.lib.format, "open_memmap", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _memmap(tmp_path / "rb")
    assert sorted(os.listdir(tmp_path)) == []
