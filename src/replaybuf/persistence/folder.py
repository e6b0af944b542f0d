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

Arrays stream in blocks, never joined or copied whole: an :class:`ArrayRun` (views of a
buffer's storage) is written from that memory, and ``read_state(path, lazy=...)`` returns
:class:`StoredArray` handles that a buffer reads straight into its storage, the CRC-32
checked while reading (by a worker thread, overlapping the I/O).

Every file is readable without replaybuf: ``json.load`` for the manifest and
``np.load(file, allow_pickle=False)`` for the arrays.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import weakref
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from replaybuf.errors import ArgumentError, CheckpointError

try:  # ISA-L's CRC-32 (the same checksum as zlib's) runs ~7x faster; optional, in the "fast" extra
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - depends on the environment
    from zlib import crc32 as _crc32

__all__ = ["FORMAT", "FORMAT_VERSION", "ArrayRun", "StoredArray", "read_npy_header", "read_state", "write_state"]

FORMAT = "replaybuf-checkpoint"
FORMAT_VERSION = 1
POINTER = "CURRENT"
MANIFEST = "manifest.json"
_ARRAY_KEY = "__npy__"
_VERSION = re.compile(r"^v(\d{6,})$")
_TEMP = re.compile(r"^\.tmp-v\d{6,}-\d+$|^" + POINTER + r"\.tmp$")
_CHUNK = 1 << 21  # 2 MiB per write step: its bounce copy stays in cache
_READ_CHUNK = 1 << 25  # 32 MiB per read step: large requests read a cold file faster
_READ_ATTEMPTS = 3  # versions a load tries when saves keep replacing the one it opens


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
        manifest = json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION, "state": tree}, indent=1).encode()
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


def read_state(path: str | os.PathLike, lazy: Sequence[str] = ()) -> dict:
    """The state stored under ``path`` (a checkpoint folder or one version folder in it).

    Every file's size and header are checked first. Arrays are read and verified, except
    those under the top-level keys in ``lazy``: they come as :class:`StoredArray` handles
    whose data a buffer reads straight into its storage (verified while reading).

    A save into the same folder meanwhile (another thread or process) does not break it:
    each file is opened when its header is checked and read through that handle, and a
    version replaced before its files were opened is read again from ``CURRENT``.

    Raises:
        CheckpointError: no checkpoint there, or a file is missing, truncated or corrupt,
            or it was written by a newer format; nothing is returned in part.
    """
    root = Path(path)
    attempt = 1
    while True:
        try:
            return _read_state(root, lazy)
        except _Vanished:  # a save into the folder replaced the version while it was opened
            if attempt == _READ_ATTEMPTS:
                raise
            attempt += 1


def _read_state(root: Path, lazy: Sequence[str]) -> dict:
    """``read_state`` of one version: its files opened (so a later save may delete them)."""
    expected_crc = None
    if (root / POINTER).is_file():
        version, expected_crc = _read_pointer(root / POINTER)
        folder = root / version
    elif (root / MANIFEST).is_file():
        folder = root
    else:
        raise CheckpointError(f"{root}: no replaybuf checkpoint here (neither {POINTER} nor {MANIFEST})")
    try:
        manifest_bytes = (folder / MANIFEST).read_bytes()
    except FileNotFoundError as err:
        raise (_Vanished if expected_crc is not None else CheckpointError)(
            f"{folder / MANIFEST}: cannot read the manifest ({err})"
        ) from None
    except OSError as err:
        raise CheckpointError(f"{folder / MANIFEST}: cannot read the manifest ({err})") from None
    if expected_crc is not None and zlib.crc32(manifest_bytes) != expected_crc:
        raise CheckpointError(f"{folder / MANIFEST}: checksum mismatch; the manifest is corrupt")
    manifest = _json(folder / MANIFEST, manifest_bytes)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{folder / MANIFEST}: not a {FORMAT} manifest")
    if type(manifest.get("format_version")) is not int or manifest["format_version"] != FORMAT_VERSION:
        raise CheckpointError(
            f"{folder / MANIFEST}: format_version {manifest.get('format_version')!r}; this replaybuf "
            f"reads version {FORMAT_VERSION}"
        )
    if set(manifest) != {"format", "format_version", "state"}:
        raise CheckpointError(f"{folder / MANIFEST}: unexpected keys {sorted(manifest)}; corrupt")
    state = manifest.get("state")
    if not isinstance(state, dict):
        raise CheckpointError(f"{folder / MANIFEST}: the state is not a dict")
    opened = {key: _decode(value, folder, expected_crc is not None) for key, value in state.items()}
    return {key: value if key in lazy else _materialize(value) for key, value in opened.items()}


def _read_pointer(path: Path) -> tuple[str, int]:
    """``(version folder name, manifest CRC-32)`` of a ``CURRENT`` file; CheckpointError
    unless it is exactly what ``write_state`` writes (format, a version name, a checksum)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read the pointer file ({err})") from None
    pointer = _json(path, data)
    if not isinstance(pointer, dict) or set(pointer) != {"format", "current", "manifest_crc32"}:
        keys = sorted(pointer) if isinstance(pointer, dict) else type(pointer).__name__
        raise CheckpointError(
            f"{path}: corrupt pointer file: expected the keys ['current', 'format', 'manifest_crc32'], got {keys}"
        )
    if pointer["format"] != FORMAT:
        raise CheckpointError(f"{path}: corrupt pointer file: format {pointer['format']!r:.60}, expected {FORMAT!r}")
    version, crc = pointer["current"], pointer["manifest_crc32"]
    if not isinstance(version, str) or not _VERSION.match(version):
        raise CheckpointError(f"{path}: corrupt pointer file: current {version!r:.60} is not a version folder name")
    if type(crc) is not int or not 0 <= crc < 2**32:
        raise CheckpointError(f"{path}: corrupt pointer file: manifest_crc32 {crc!r:.60} is not a CRC-32")
    return version, crc


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
    if isinstance(value, (np.ndarray, ArrayRun)):
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


def _decode(value: Any, folder: Path, current: bool) -> Any:
    """The manifest's state with each array entry as a checked, opened StoredArray; ``current``:
    the version was found through ``CURRENT`` (a file gone is a version replaced meanwhile)."""
    if isinstance(value, dict):
        if _ARRAY_KEY in value:
            return _open_npy(folder, value, current)
        return {k: _decode(v, folder, current) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, folder, current) for v in value]
    return value


def _materialize(value: Any) -> Any:
    if isinstance(value, StoredArray):
        return value.read()
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_materialize(v) for v in value]
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


class _Vanished(CheckpointError):
    """A file of the version named by ``CURRENT`` is gone: a save replaced the version meanwhile."""


class ArrayRun:
    """An array given as consecutive row blocks (views), streamed without joining them first.

    ``save`` passes the valid region of a ring buffer's field this way (two views when it
    wraps, each possibly strided inside an item record), and ``load`` reads a file straight
    into the same kind of views of the receiving storage.
    """

    def __init__(self, parts: Sequence[np.ndarray]):
        self.parts = [part for part in parts if len(part)] or list(parts[:1])
        first = self.parts[0]
        self.dtype = first.dtype
        self.shape = (sum(len(part) for part in self.parts), *first.shape[1:])
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


class StoredArray:
    """An array file of a checkpoint whose size and header are checked, its data not yet read.

    ``read_state(path, lazy=...)`` returns these so that a buffer can read its items
    straight into its storage (``read_into``) instead of through a temporary copy.
    """

    def __init__(self, path: Path, entry: dict, header_size: int, shape: tuple, dtype: np.dtype, file: Any = None):
        self.path, self._entry, self._header_size = path, entry, header_size
        self.shape, self.dtype = shape, dtype
        # the file stays open from its header check on, so a save replacing the version
        # (it deletes the old files) cannot take it away before it is read
        self._file = file
        if file is not None:
            weakref.finalize(self, file.close)

    def read(self) -> np.ndarray:
        """The array, verified. Raises CheckpointError: unreadable, truncated or corrupt."""
        array = np.empty(self.shape, self.dtype)
        self.read_into(array)
        return array

    def read_into(self, target: np.ndarray | ArrayRun) -> None:
        """Fill ``target`` (same shape and dtype) from the file, verifying its CRC-32.

        Raises:
            CheckpointError: the file is unreadable, ends early or its checksum differs;
                ``target`` then holds partly read data, which the caller must discard.
        """
        shape = target.shape
        if shape != self.shape or target.dtype != self.dtype:
            raise CheckpointError(f"{self.path}: holds {self.shape} {self.dtype}, the target is {shape} {target.dtype}")
        run = _as_run(target)
        try:
            f = self._file if self._file is not None else open(self.path, "rb", buffering=0)  # noqa: SIM115
            self._file = None
            with f, _Checksum() as crc:
                f.seek(0)
                if hasattr(os, "posix_fadvise"):  # Linux: a larger read-ahead window
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
                crc.feed(f.read(self._header_size))
                chunk = min(_READ_CHUNK, max(_CHUNK, run.nbytes // 8))  # small files: blocks that still overlap
                for block, bounce in _blocks(run, crc, chunk):
                    into = block if bounce is None else bounce
                    _read_exactly(f, memoryview(into.reshape(-1).view(np.uint8)), self.path)
                    crc.feed(into, scatter=None if bounce is None else (block, bounce))
                value = crc.result()
        except OSError as err:
            raise CheckpointError(f"{self.path}: cannot read ({err})") from None
        if value != self._entry.get("crc32"):
            raise CheckpointError(f"{self.path}: checksum mismatch; the file is corrupt")


class _Checksum:
    """CRC-32 of a byte stream, computed by one worker thread in order while the caller does I/O.

    The CRC (ISA-L or zlib) releases the GIL, so checksumming block i overlaps reading or
    writing block i + 1 instead of adding a second pass over the data. A block of a strided
    field also carries its copy: gathered into a bounce buffer before its checksum (save)
    or scattered from it after (load), so that copy overlaps the I/O too.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1)
        self._value = 0
        self._last: Future | None = None
        self._previous: Future | None = None

    def __enter__(self) -> _Checksum:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)

    def feed(self, data: Any, gather: tuple | None = None, scatter: tuple | None = None) -> Future:
        """Queue ``data`` (after ``np.copyto(*gather)``, before ``np.copyto(*scatter)``)."""
        previous = self._last

        def task() -> None:
            if previous is not None:
                previous.result()  # a failed task fails every later one
            if gather is not None:
                np.copyto(*gather)
            self._value = _crc32(data, self._value)
            if scatter is not None:
                np.copyto(*scatter)

        self._previous, self._last = previous, self._pool.submit(task)
        return self._last

    def wait_for_all_but_last(self) -> None:
        """Block until every task but the newest is done (its bounce buffer is then free)."""
        if self._previous is not None:
            self._previous.result()

    def result(self) -> int:
        if self._last is not None:
            self._last.result()
        return self._value


def _as_run(array: np.ndarray | ArrayRun) -> ArrayRun:
    """``array`` as row blocks; a C-contiguous array as its flat bytes (streamed as is)."""
    if isinstance(array, ArrayRun):
        return array
    if array.ndim == 0 or array.flags.c_contiguous:
        return ArrayRun([array.reshape(-1)])
    return ArrayRun([array])


def _blocks(run: ArrayRun, crc: _Checksum, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """Row blocks of about ``chunk`` bytes of ``run``'s parts, in order.

    A contiguous block comes as ``(block, None)``; a strided one (a field inside records)
    as ``(block, bounce)``, ``bounce`` a contiguous scratch array of the same shape taken
    from two alternating buffers, so one can be filled while the other is still in use.
    """
    row_bytes = max(1, run.nbytes // max(1, run.shape[0]))
    rows = max(1, chunk // row_bytes)
    buffers: list[np.ndarray] = []
    turn = 0
    for part in run.parts:
        for start in range(0, len(part), rows):
            block = part[start : start + rows]
            if block.flags.c_contiguous:
                yield block, None
                continue
            if not buffers:
                size = min(rows, run.shape[0]) * row_bytes
                buffers = [np.empty(size, np.uint8), np.empty(size, np.uint8)]
            scratch = buffers[turn]
            turn ^= 1
            crc.wait_for_all_but_last()  # the task that last used this scratch buffer
            yield block, scratch[: block.nbytes].view(block.dtype).reshape(block.shape)


def _read_exactly(f: Any, view: memoryview, path: Path) -> None:
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])
        if not n:
            raise CheckpointError(f"{path}: file ended early; truncated")
        done += n


def _write_npy(path: Path, array: np.ndarray | ArrayRun) -> tuple[int, int]:
    """Write a standard .npy file from ``array``'s memory, with its CRC-32; (crc32, file size).

    Contiguous blocks are written from the array itself; strided ones are gathered into a
    small bounce buffer by the checksum's worker thread while the previous block is written.
    """
    run = _as_run(array)
    buffer = io.BytesIO()
    header_data = {"descr": np.lib.format.dtype_to_descr(run.dtype), "fortran_order": False, "shape": array.shape}
    np.lib.format.write_array_header_2_0(buffer, header_data)
    header = buffer.getvalue()
    with open(path, "wb", buffering=0) as f, _Checksum() as crc:
        f.write(header)
        crc.feed(header)
        pending: tuple[Future, np.ndarray] | None = None  # block i is written while i + 1 is prepared
        for block, bounce in _blocks(run, crc, _CHUNK):
            ready = crc.feed(block) if bounce is None else crc.feed(bounce, gather=(bounce, block))
            if pending is not None:
                _write_when(f, *pending)
            pending = (ready, block if bounce is None else bounce)
        if pending is not None:
            _write_when(f, *pending)
        os.fsync(f.fileno())
        return crc.result(), len(header) + run.nbytes


def _write_when(f: Any, ready: Future, block: np.ndarray) -> None:
    """Write ``block`` once ``ready`` (its gather and checksum) is done."""
    ready.result()
    view = memoryview(block.reshape(-1).view(np.uint8))
    while view:
        view = view[f.write(view) :]


def _open_npy(folder: Path, entry: dict, current: bool = False) -> StoredArray:
    """Open an array file and check its name, size and header against its manifest entry."""
    name = entry.get(_ARRAY_KEY)
    if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise CheckpointError(f"{folder / MANIFEST}: bad array file name {name!r:.80}")
    path = folder / name
    if set(entry) != {_ARRAY_KEY, "shape", "dtype", "bytes", "crc32"} or not (
        _is_shape(entry["shape"])
        and isinstance(entry["dtype"], str)
        and _is_count(entry["bytes"])
        and _is_count(entry["crc32"])
    ):
        raise CheckpointError(f"{folder / MANIFEST}: the entry of {name!r} is malformed ({entry!r:.160})")
    try:
        f = open(path, "rb", buffering=0)  # noqa: SIM115 - kept open by the StoredArray
    except FileNotFoundError as err:
        raise (_Vanished if current else CheckpointError)(f"{path}: cannot read ({err})") from None
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err})") from None
    try:
        size = os.fstat(f.fileno()).st_size
        if size != entry["bytes"]:
            raise CheckpointError(f"{path}: {size} bytes, the manifest says {entry['bytes']}; truncated or corrupt")
        shape, fortran, dtype = read_npy_header(f, path)
        header_size = f.tell()
        if fortran or list(shape) != entry["shape"] or dtype.str != entry["dtype"]:
            raise CheckpointError(
                f"{path}: header says {shape} {dtype.str}, the manifest says {entry['shape']} {entry['dtype']}; corrupt"
            )
        if header_size + math.prod(shape) * dtype.itemsize != size:
            raise CheckpointError(f"{path}: size does not match its header; truncated or corrupt")
    except BaseException:
        f.close()
        raise
    return StoredArray(path, entry, header_size, tuple(shape), dtype, f)


def read_npy_header(f: Any, path: Path) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` file ``f`` (version 1.0 or 2.0, the
    ones NumPy writes), of plain data; CheckpointError for anything else or a header NumPy's
    parser refuses (its errors vary with the damage: ValueError, SyntaxError, TokenError, ...)."""
    try:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f"format version {version}, expected 1.0 or 2.0")
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
    except Exception as err:  # NumPy's header parser: any failure means a damaged header
        raise CheckpointError(f"{path}: corrupt .npy header ({type(err).__name__}: {err})") from None
    if not isinstance(dtype, np.dtype) or dtype.hasobject or not dtype.itemsize or not _is_shape(list(shape)):
        raise CheckpointError(f"{path}: corrupt .npy header (holds {dtype!r:.60} {shape!r:.60}, not plain data)")
    return tuple(shape), bool(fortran), dtype


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_shape(value: Any) -> bool:
    """A list of at most 64 dims (NumPy's limit) of at most 2**62 elements in all."""
    return (
        isinstance(value, list)
        and len(value) <= 64
        and all(_is_count(n) for n in value)
        and math.prod(value) <= 2**62
        and all(n <= 2**62 for n in value)
    )


def _json(path: Path, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
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
