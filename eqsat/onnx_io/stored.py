"""A model file and its external data: reading it, with its large weights left in their files as read-only memory
maps where asked, and writing it, with its weights streamed into one data file beside it.

A weight left on disk stays an external tensor of the ``ModelProto``, marked with the folder its data file is read
from (the ``basepath`` entry ONNX defines); :func:`tensor_array` gives its values as a read-only view of one shared
memory map of that file, so the import, the numeric check and the writer read the same pages and no copy of the
weights is made in Python (protobuf copies a tensor's bytes on every read of ``raw_data``). Such a file must not be
truncated while the model is in use; eqsat replaces the files it writes (a new file, then a rename), so writing a
model over its own input is safe.
"""

from __future__ import annotations

import errno
import mmap
import os
import sys
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import onnx
from onnx import helper, numpy_helper

# _open_external_data_fd: onnx's own check of a location, the one its loader uses (onnx is pinned to a minor release)
from onnx.external_data_helper import _open_external_data_fd, load_external_data_for_model, uses_external_data

from eqsat.errors import ModelReadError
from eqsat.files import is_special_file, write_file
from eqsat.onnx_io.protos import all_graphs, copy_fields

__all__ = ["EXTERNAL_DATA_THRESHOLD", "ModelNotFoundError", "ON_DISK_BYTES", "PLAIN_TYPES", "drop_read_pages",
           "is_on_disk", "read_model", "read_model_stored", "save_model", "stored_bytes", "tensor_array", "with_data",
           "with_data_of", "write_model"]


class ModelNotFoundError(ModelReadError, FileNotFoundError):
    """The model file does not exist."""


#: external weights of at least this many bytes stay in their files when a model is read with its weights on disk;
#: smaller ones (shapes, scalars, which shape inference and folding read) are read into the model
ON_DISK_BYTES = 64 * 1024
#: the element types numpy holds as they are stored (a weight of another stays in the model)
PLAIN_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                          onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                          onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
                          onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL})
_BASE_KEY = "basepath"


def read_model(src: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """Parse an ONNX model from a path, bytes or a ``ModelProto``, its external data loaded into it; returns it and a
    label for messages.

    Raises :class:`ModelReadError` (:class:`ModelNotFoundError` for a missing file) with a one-line message
    for a missing, empty, truncated or non-ONNX file.
    """
    model, label, _ = read_model_stored(src)
    return model, label


def read_model_stored(src: str | Path | bytes | onnx.ModelProto, weights_on_disk: bool = False
                      ) -> tuple[onnx.ModelProto, str, bool]:
    """:func:`read_model`, and whether the file kept tensors as external data. With ``weights_on_disk``, the main
    graph's external weights of :data:`ON_DISK_BYTES` and more stay in their files (:func:`tensor_array` reads
    them); their files are checked here to hold them."""
    if isinstance(src, onnx.ModelProto):
        return src, "<model>", False
    label = "<bytes>" if isinstance(src, bytes) else str(src)
    hint = "check that it is a complete .onnx file (re-export or download it again)"
    if isinstance(src, bytes | bytearray):
        if not src:
            raise ModelReadError(f"{label} is empty (0 bytes); {hint}")
    else:
        path = Path(src)
        if not path.exists():
            raise ModelNotFoundError(f"no such model file: {src}; check the path")
        if path.is_dir():
            raise ModelReadError(f"{label} is a directory, not an ONNX model file; give the path of a .onnx file")
        try:
            size = path.stat().st_size
        except OSError as e:
            raise ModelReadError(f"{label}: cannot read it ({e.strerror or e}); check its permissions") from None
        if size == 0:
            raise ModelReadError(f"{label} is empty (0 bytes); {hint}")
    external = False
    try:
        if isinstance(src, bytes | bytearray):
            model = onnx.load_from_string(bytes(src))
        else:  # as onnx.load does, noting whether there was external data to load
            model = onnx.load(str(src), load_external_data=False)
            external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
            base = str(Path(src).resolve().parent)
            for name in {_entries(t).get("location", "") for t in model.graph.initializer if uses_external_data(t)}:
                if not (Path(base) / name).exists():  # (onnx says "not a regular file")
                    raise FileNotFoundError(errno.ENOENT, "no such file", name)
            left = _leave_on_disk(model, base) if weights_on_disk else []
            for t in left:  # onnx's loader passes over them: every other tensor is loaded, bodies' too
                t.data_location = onnx.TensorProto.DEFAULT
            try:
                load_external_data_for_model(model, base)
            finally:
                for t in left:
                    t.data_location = onnx.TensorProto.EXTERNAL
    except FileNotFoundError as e:  # external data next to the model is missing
        raise ModelNotFoundError(f"{label}: a file it needs is missing ({e.filename or e}); keep the model's "
                                 "external data files next to it") from None
    except PermissionError as e:
        raise ModelReadError(f"{label}: cannot read it ({e.strerror or e}); check its permissions") from None
    except ModelReadError as e:  # a weight its data file does not hold
        raise ModelReadError(f"{label}: {e}") from None
    except Exception as e:
        detail = " ".join(f"{type(e).__name__}: {e}".split())
        raise ModelReadError(f"{label}: not a readable ONNX model ({detail}); {hint}") from None
    return model, label, external


def _leave_on_disk(model: onnx.ModelProto, base: str) -> list[onnx.TensorProto]:
    """Mark the main graph's external weights that stay in their files (read from ``base``), each checked to fit in
    its file; returns them."""
    left = []
    for t in model.graph.initializer:
        if not uses_external_data(t) or t.data_type not in PLAIN_TYPES or _nbytes(t) < ON_DISK_BYTES:
            continue
        entry = t.external_data.add()
        entry.key, entry.value = _BASE_KEY, base
        _, offset, length = _mapping(t)  # the file opens, and holds the tensor
        if length != _nbytes(t):
            raise ModelReadError(f"weight {t.name!r} has {length} bytes of external data, but its shape "
                                 f"{list(t.dims)} needs {_nbytes(t)}; export the model again")
        left.append(t)
    return left


def is_on_disk(t: onnx.TensorProto) -> bool:
    """Whether ``t`` is a weight left in its file by :func:`read_model_stored` (its values: :func:`tensor_array`)."""
    return uses_external_data(t) and any(e.key == _BASE_KEY for e in t.external_data)


def _nbytes(t: onnx.TensorProto) -> int:
    return int(np.prod(t.dims, dtype=np.int64)) * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize


def _entries(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def _open(t: onnx.TensorProto) -> int:
    """A read-only file descriptor of an on-disk tensor's data file, its location checked as onnx checks it (within
    its folder: no absolute path, no ``..``)."""
    info = _entries(t)
    return _open_external_data_fd(info[_BASE_KEY], info.get("location", ""), t.name, True)


#: each data file's bytes as one memory map (by device, inode, size and change time), while any view of it is
#: alive: the import, the check and the writer read the same pages
_MAPS: weakref.WeakValueDictionary[tuple[int, int, int, int], np.ndarray] = weakref.WeakValueDictionary()
_MMAPS: weakref.WeakSet[mmap.mmap] = weakref.WeakSet()  # their memory maps, whose pages drop_read_pages lets go


def _mapping(t: onnx.TensorProto) -> tuple[np.ndarray, int, int]:
    """The memory map of an on-disk tensor's data file (bytes) and the tensor's offset and length in it."""
    fd = _open(t)
    try:
        st = os.fstat(fd)
        info = _entries(t)
        offset = int(info.get("offset") or 0)
        length = int(info["length"]) if info.get("length") else _nbytes(t)
        if offset < 0 or length < 0 or offset + length > st.st_size:
            raise ModelReadError(f"weight {t.name!r}: its external data file {info.get('location')} ends at "
                                 f"{st.st_size} bytes, before the tensor's end ({offset} + {length}); the file is "
                                 "truncated: copy or export it again")
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        mapped = _MAPS.get(key)
        if mapped is None:
            whole = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)  # its own handle of the file
            _MMAPS.add(whole)
            mapped = _MAPS[key] = np.frombuffer(whole, dtype=np.uint8)  # (read-only, as the map)
        return mapped, offset, length
    finally:
        os.close(fd)


def drop_read_pages() -> None:
    """Let go of the pages of weights left on disk that this process has read: they stay in the page cache and
    come back on the next read (a fault, no disk read), but no longer count in this process's memory, so that a
    step that reads only some of the weights holds only those (the numeric check's run of the optimized model,
    once the original's has read them all)."""
    if hasattr(mmap, "MADV_DONTNEED"):
        for m in list(_MMAPS):
            m.madvise(mmap.MADV_DONTNEED)


def tensor_array(t: onnx.TensorProto) -> np.ndarray:
    """The values of a tensor as numpy holds them: of a weight left on disk, a read-only view of its file's memory
    map (copied only where its offset is not aligned to its element size, or on a big-endian machine); of any other,
    ``numpy_helper.to_array``."""
    if not is_on_disk(t):
        return numpy_helper.to_array(t)
    mapped, offset, length = _mapping(t)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    raw = mapped[offset:offset + length]
    if offset % dtype.itemsize:
        raw = raw.copy()
    array = raw.view(dtype.newbyteorder("<")).reshape(tuple(t.dims))
    return array if sys.byteorder == "little" else array.astype(dtype)


def _stored_bytes(t: onnx.TensorProto) -> Iterator[memoryview]:
    """An on-disk tensor's bytes, in pieces read from its file (not through the memory map: they never count
    in this process's memory)."""
    _, offset, length = _mapping(t)  # checks that the file still holds it
    fd = _open(t)
    try:
        end = offset + length
        while offset < end:
            piece = os.pread(fd, min(_PIECE, end - offset), offset)
            if not piece:
                raise ModelReadError(f"weight {t.name!r}: its external data file ended early; copy it again")
            offset += len(piece)
            yield memoryview(piece)
    finally:
        os.close(fd)


_PIECE = 16 * 1024 * 1024


def with_data_of(t: onnx.TensorProto) -> onnx.TensorProto:
    """A copy of a weight left on disk with its bytes in it."""
    out = onnx.TensorProto()
    copy_fields(t, out, skip=("raw_data", "external_data", "data_location"))
    out.raw_data = b"".join(bytes(p) for p in _stored_bytes(t))
    return out


def with_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the bytes of its weights left on disk in it: a copy where it has any, else ``model``."""
    if not any(is_on_disk(t) for t in model.graph.initializer):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)  # the weights on disk are references: a small copy
    for k, t in enumerate(out.graph.initializer):
        if is_on_disk(t):
            out.graph.initializer[k].CopyFrom(with_data_of(t))
    return out


#: weights of at least this many bytes go to the external data file when a model is written with one
EXTERNAL_DATA_THRESHOLD = 1024
#: a weight of at least _ALIGN_FROM bytes starts at a multiple of _LARGE_ALIGN in the data file (what onnxruntime
#: needs to memory-map it), any other at a multiple of _ALIGN (so that a view of it is aligned for its type)
_ALIGN_FROM, _LARGE_ALIGN, _ALIGN = 1024 * 1024, 64 * 1024, 64


class _DataFile:
    """The external data file a model is written with: each large weight appended, aligned."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: BinaryIO | None = None

    def stored(self, t: onnx.TensorProto) -> onnx.TensorProto:
        """``t`` itself if it stays in the model, else a copy without its bytes, which are appended to the file."""
        if is_on_disk(t):
            pieces: Iterator[memoryview] | list[bytes] = _stored_bytes(t)
            size = _nbytes(t)
        elif t.HasField("raw_data") and t.data_location != onnx.TensorProto.EXTERNAL:
            raw = t.raw_data  # a copy (protobuf's): one weight at a time
            if len(raw) < EXTERNAL_DATA_THRESHOLD:
                return t
            pieces, size = [raw], len(raw)
        else:
            return t
        if self.file is None:
            self.file = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        align = _LARGE_ALIGN if size >= _ALIGN_FROM else _ALIGN
        offset = -self.file.tell() % align + self.file.tell()
        self.file.write(b"\0" * (offset - self.file.tell()))
        for p in pieces:
            self.file.write(p)
        out = onnx.TensorProto()
        copy_fields(t, out, skip=("raw_data", "external_data", "data_location"))
        out.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.path.name), ("offset", str(offset)), ("length", str(size))):
            entry = out.external_data.add()
            entry.key, entry.value = key, value
        return out

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def write_model(model: onnx.ModelProto, path: str | Path, data: str | None = None) -> None:
    """Save ``model`` to ``path`` (with the bytes of any weight left on disk); with ``data``, a file name, its
    weights of :data:`EXTERNAL_DATA_THRESHOLD` bytes and more go to that file beside it (an older one is replaced,
    not appended to), streamed one at a time: the model is neither changed nor copied with its weights.

    onnx's own ``save_model(save_as_external_data=True)`` refuses a data file name that exists in the current
    folder, wherever the model goes: a second run writing next to its first output failed there."""
    path = Path(path)
    if data is None:
        onnx.save(with_data(model), str(path))
        return
    target = path.parent / data
    target.unlink(missing_ok=True)
    out = _DataFile(target)
    try:
        skeleton = onnx.ModelProto()
        copy_fields(model, skeleton, skip=("graph",))
        copy_fields(model.graph, skeleton.graph, skip=("initializer",))
        for t in model.graph.initializer:
            skeleton.graph.initializer.append(out.stored(t))
        for g in list(all_graphs(skeleton.graph))[1:]:  # the control-flow bodies' weights (copied with their nodes)
            for k, t in enumerate(g.initializer):
                s = out.stored(t)
                if s is not t:
                    g.initializer[k].CopyFrom(s)
    finally:
        out.close()
    onnx.save(skeleton, str(path))


def save_model(model: onnx.ModelProto, out: str | Path, external_data: bool = False) -> None:
    """Write ``model`` to ``out`` as a finished file only (through a temporary one, :func:`eqsat.files.write_file`;
    missing folders are created). With ``external_data`` and a regular file, its weights go to ``<name>.data``
    beside it: both files are written aside first and then moved into place, so a failed write leaves an older
    model and its data as they were. Raises :class:`eqsat.errors.OutputError`."""
    out = Path(out)
    if not external_data or is_special_file(out):
        write_file(out, lambda p: write_model(model, p))
        return
    target = out.resolve()  # where write_file puts the model (a link's target)
    data = target.with_name(target.name + ".data")

    def aside_then_replace(path: Path) -> None:
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{target.name}.") as tmp:
            aside = Path(tmp) / target.name
            write_model(model, aside, data.name)
            if (Path(tmp) / data.name).exists():
                os.replace(Path(tmp) / data.name, data)
            os.replace(aside, path)

    write_file(out, aside_then_replace)


#: a model file at least this large is taken to hold its weights itself (reading it to find external data files
#: would read them all)
_SKELETON_BYTES = 64 * 1024 * 1024


def stored_bytes(path: str | Path) -> int:
    """About how many bytes a model file takes on disk with the external data files it names (0 for a file that
    cannot be read: reading it says why)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size >= _SKELETON_BYTES:
            return size
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # onnx's errors share no base class; the run's read reports them
        return 0
    files = {_entries(t).get("location", "") for g in all_graphs(model.graph) for t in g.initializer
             if uses_external_data(t)}
    for name in files - {""}:
        try:
            size += (path.parent / name).stat().st_size
        except OSError:
            continue
    return size

