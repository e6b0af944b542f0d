"""Checkpoint folders: a buffer's ``state_dict()`` on disk, written atomically, read verified.

A state is a plain tree: dicts with string keys, lists, NumPy arrays, and JSON scalars (int,
float, str, bool, None). :func:`write_state` maps it onto a folder::

    path/
      CURRENT                  {"current": "v000002", "manifest_crc32": ...}  (the pointer)
      v000002/
        manifest.json          the state tree, each array replaced by a file entry
        000-items.0.npy ...    one raw .npy per array (no pickle), with its CRC-32 in the manifest

A save writes a new version folder under a temporary name, fsyncs every file and the folder,
renames it into place, then atomically replaces ``CURRENT`` (write, fsync, rename, fsync the
folder) and only then deletes the previous version. A process killed at any moment therefore
leaves ``CURRENT`` naming a complete version: the previous one or the new one. A reader
checks the manifest's CRC-32 against the pointer and every array file's size, header and
CRC-32 before returning anything, so a corrupt or truncated checkpoint raises
:class:`~replaybuf.errors.CheckpointError` and nothing is half-loaded.

Every file is readable without replaybuf: ``json.load`` for the manifest and
``np.load(file, allow_pickle=False)`` for the arrays.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError

__all__ = ["FORMAT", "FORMAT_VERSION", "read_state", "write_state"]

FORMAT = "replaybuf-checkpoint"
FORMAT_VERSION = 1
POINTER = "CURRENT"
MANIFEST = "manifest.json"
_ARRAY_KEY = "__npy__"
_VERSION = re.compile(r"^v(\d{6,})$")
_TEMP = re.compile(r"^\.tmp-v\d{6,}-\d+$|^" + POINTER + r"\.tmp$")
_CHUNK = 1 << 24  # 16 MiB per read/write step; its CRC-32 runs in a thread meanwhile


def write_state(path: str | os.PathLike, state: dict) -> Path:
    """Write ``state`` as a new checkpoint version under ``path``; returns its folder.

    Raises:
        ArgumentError: ``state`` holds something that is not plain (an object array, a
            non-string key, an arbitrary Python object).
        CheckpointError: ``path`` exists and is not a checkpoint folder.
    """
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise CheckpointError(f"{root}: expected a checkpoint folder, got an existing file")
    root.mkdir(parents=True, exist_ok=True)
    names = _existing_versions(root)
    version = f"v{(max(names.values()) + 1 if names else 1):06d}"
    temp = root / f".tmp-{version}-{os.getpid()}"
    if temp.exists():
        shutil.rmtree(temp)
    temp.mkdir()
    try:
        files: list[str] = []
        tree = _encode(state, "", temp, files)
        manifest = json.dumps(
            {"format": FORMAT, "format_version": FORMAT_VERSION, "state": tree}, indent=1
        ).encode()
        _write_file(temp / MANIFEST, manifest)
        _fsync_dir(temp)
        os.replace(temp, root / version)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    _fsync_dir(root)
    pointer = json.dumps({"format": FORMAT, "current": version, "manifest_crc32": zlib.crc32(manifest)})
    _write_file(root / (POINTER + ".tmp"), pointer.encode())
    os.replace(root / (POINTER + ".tmp"), root / POINTER)
    _fsync_dir(root)
    for name in os.listdir(root):  # the previous version and leftovers of killed saves
        if name != version and (name in names or _TEMP.match(name)):
            shutil.rmtree(root / name, ignore_errors=True)
    return root / version


def read_state(path: str | os.PathLike) -> dict:
    """The state stored under ``path`` (a checkpoint folder or one version folder in it).

    Raises:
        CheckpointError: no checkpoint there, or a file is missing, truncated or corrupt,
            or it was written by a newer format; nothing is returned in part.
    """
    root = Path(path)
    expected_crc = None
    if (root / POINTER).is_file():
        pointer = _json(root / POINTER, (root / POINTER).read_bytes())
        version = pointer.get("current") if isinstance(pointer, dict) else None
        if not isinstance(version, str) or not _VERSION.match(version):
            raise CheckpointError(f"{root / POINTER}: corrupt pointer file {pointer!r}")
        folder, expected_crc = root / version, pointer.get("manifest_crc32")
    elif (root / MANIFEST).is_file():
        folder = root
    else:
        raise CheckpointError(f"{root}: no replaybuf checkpoint here (neither {POINTER} nor {MANIFEST})")
    try:
        manifest_bytes = (folder / MANIFEST).read_bytes()
    except OSError as err:
        raise CheckpointError(f"{folder / MANIFEST}: cannot read the manifest ({err})") from None
    if expected_crc is not None and zlib.crc32(manifest_bytes) != expected_crc:
        raise CheckpointError(f"{folder / MANIFEST}: checksum mismatch; the manifest is corrupt")
    manifest = _json(folder / MANIFEST, manifest_bytes)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{folder / MANIFEST}: not a {FORMAT} manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{folder / MANIFEST}: format_version {manifest.get('format_version')!r}; this replaybuf "
            f"reads version {FORMAT_VERSION}"
        )
    return _decode(manifest.get("state"), folder)


# -- the state tree <-> manifest -------------------------------------------------------------
def _encode(value: Any, key: str, folder: Path, files: list[str]) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or k == _ARRAY_KEY:
                raise ArgumentError(f"state{key}: keys must be strings other than {_ARRAY_KEY!r}, got {k!r}")
            out[k] = _encode(v, f"{key}/{k}", folder, files)
        return out
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{key}/{i}", folder, files) for i, v in enumerate(value)]
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise ArgumentError(f"state{key}: object arrays cannot be saved without pickle")
        safe = re.sub(r"[^A-Za-z0-9_.-]", ".", key.strip("/"))[:80]
        name = f"{len(files):03d}-{safe}.npy"
        files.append(name)
        crc, size = _write_npy(folder / name, value)
        return {_ARRAY_KEY: name, "shape": list(value.shape), "dtype": value.dtype.str, "bytes": size, "crc32": crc}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ArgumentError(f"state{key}: expected a dict, list, NumPy array or JSON scalar, got {type(value).__name__}")


def _decode(value: Any, folder: Path) -> Any:
    if isinstance(value, dict):
        if _ARRAY_KEY in value:
            return _read_npy(folder, value)
        return {k: _decode(v, folder) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, folder) for v in value]
    return value


# -- files -----------------------------------------------------------------------------------
def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _raw_bytes(array: np.ndarray) -> memoryview:
    return memoryview(array.reshape(-1).view(np.uint8))


class _Crc32:
    """A CRC-32 computed in one background thread, chunk after chunk, while I/O proceeds.

    zlib releases the GIL on large buffers, so checksumming chunk i overlaps reading or
    writing chunk i + 1 instead of adding a second pass over the data.
    """

    def __init__(self, pool: ThreadPoolExecutor, data: bytes):
        self._pool = pool
        self._future = pool.submit(zlib.crc32, data)

    def update(self, chunk: memoryview) -> None:
        previous = self._future  # one worker: tasks run in order, so previous is done first
        self._future = self._pool.submit(lambda: zlib.crc32(chunk, previous.result()))

    def value(self) -> int:
        return self._future.result()


def _write_npy(path: Path, array: np.ndarray) -> tuple[int, int]:
    """Write a standard .npy file, computing its CRC-32 on the way; (crc32, file size)."""
    array = np.ascontiguousarray(array)
    buffer = io.BytesIO()
    np.lib.format.write_array_header_2_0(buffer, np.lib.format.header_data_from_array_1_0(array))
    header = buffer.getvalue()
    raw = _raw_bytes(array)
    with open(path, "wb", buffering=0) as f, ThreadPoolExecutor(1) as pool:
        f.write(header)
        crc = _Crc32(pool, header)
        for start in range(0, len(raw), _CHUNK):
            chunk = raw[start : start + _CHUNK]
            crc.update(chunk)
            while chunk:
                chunk = chunk[f.write(chunk) :]
        os.fsync(f.fileno())
        return crc.value(), len(header) + len(raw)


def _read_npy(folder: Path, entry: dict) -> np.ndarray:
    name = entry.get(_ARRAY_KEY)
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        raise CheckpointError(f"{folder / MANIFEST}: bad array file name {name!r}")
    path = folder / name
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if size != entry.get("bytes"):
                raise CheckpointError(f"{path}: {size} bytes, the manifest says {entry.get('bytes')}; truncated or corrupt")
            try:
                major, _ = np.lib.format.read_magic(f)
                read_header = np.lib.format.read_array_header_2_0 if major == 2 else np.lib.format.read_array_header_1_0
                shape, fortran, dtype = read_header(f)
            except ValueError as err:
                raise CheckpointError(f"{path}: corrupt .npy header ({err})") from None
            if fortran or list(shape) != entry.get("shape") or dtype.str != entry.get("dtype"):
                raise CheckpointError(
                    f"{path}: header says {shape} {dtype.str}, the manifest says "
                    f"{entry.get('shape')} {entry.get('dtype')}; corrupt"
                )
            header_size = f.tell()
            if header_size + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != size:
                raise CheckpointError(f"{path}: size does not match its header; truncated or corrupt")
            f.seek(0)
            array = np.empty(shape, dtype)
            raw = _raw_bytes(array)
            with ThreadPoolExecutor(1) as pool:
                running = _Crc32(pool, f.read(header_size))
                done = 0
                while done < len(raw):
                    n = f.readinto(raw[done : done + _CHUNK])
                    if not n:
                        raise CheckpointError(f"{path}: file ended early; truncated")
                    running.update(raw[done : done + n])
                    done += n
                crc = running.value()
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err})") from None
    if crc != entry.get("crc32"):
        raise CheckpointError(f"{path}: checksum mismatch; the file is corrupt")
    return array


def _json(path: Path, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON, truncated or corrupt ({err})") from None


def _existing_versions(root: Path) -> dict[str, int]:
    """Version folders under ``root`` by name; raises unless ``root`` is ours or empty."""
    versions = {}
    for name in os.listdir(root):
        match = _VERSION.match(name)
        if match:
            versions[name] = int(match.group(1))
        elif name != POINTER and not _TEMP.match(name):
            raise CheckpointError(
                f"{root}: not a replaybuf checkpoint folder (it holds {name!r}); save into a new "
                "or empty folder, or one written by save()"
            )
    return versions
