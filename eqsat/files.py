"""Output files a user names: checked before a run, written whole after it.

:func:`check_output` refuses a path that cannot be written before any work is done, :func:`check_space` one on a
disk without room for the output; :func:`write_file` writes it once everything succeeded. A regular file is
written through a temporary file and a rename, so a failure leaves the old file (or nothing) behind. A special
file the path already names (``/dev/null``, ``/dev/stdout``, a FIFO) is written through instead: a rename would
replace the device or the pipe with a regular file. The command line (:mod:`eqsat.cli`) and the e-graph dumps
(:mod:`eqsat.inspect.dump`) share them.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from eqsat.errors import EqsatError, OutputError, UsageError

__all__ = ["check_output", "check_space", "write_file", "is_special_file"]


def is_special_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a folder (a character device such as
    ``/dev/null``, a FIFO, a socket), following symbolic links (``/dev/stdout``)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_output(path: str, option: str, example: str) -> Path:
    """Fail at once, before any work, when ``path`` cannot be written as a file; ``option`` and ``example``
    (a file name) make the message. Missing folders on the way are fine: they are created when the file is
    written (only after everything else succeeded)."""
    p = Path(path)
    if p.is_dir() or path.endswith(("/", os.sep)):
        raise UsageError(f"{option} {path} names a directory; give a file path, e.g. {option} {p / example}")
    if is_special_file(p):  # written through as it is (a device, a pipe): never created nor renamed
        if not os.access(p, os.W_OK):
            raise UsageError(f"{option} {path}: no permission to write there; choose another path")
        return p
    target = Path(os.path.realpath(p))  # where write_file writes: a symbolic link's target
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: {folder} is a file, not a folder; choose another path")
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"{option} {path}: no permission to write there; choose another path")
    problem = _probe(folder, target.name)
    if problem:
        raise UsageError(f"{option} {path}: cannot create a file in {folder} ({problem}); choose another path")
    return p


def check_space(path: str | os.PathLike[str], needed: int, what: str) -> None:
    """Fail at once, before any work, when the file system ``path`` (a file or a folder to write, which need not
    exist yet) is written to has fewer than ``needed`` bytes free; ``what`` names the output in the message (``-o
    out.onnx``). A special file (``/dev/null``) is written through and never checked."""
    if needed <= 0 or is_special_file(path):
        return
    folder = Path(os.path.realpath(path))
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:  # nothing to tell: the write reports what goes wrong
        return
    if free < needed:
        raise UsageError(f"{what}: writing it takes about {_size(needed)}, and only {_size(free)} is free in "
                         f"{folder}; free some space or choose another path")


def _size(n: int) -> str:
    """A size in bytes as ``2.2 GB`` (decimal units, as ``df -H`` shows them)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _probe(folder: Path, name: str) -> str | None:
    """Create and remove an empty file in ``folder``; the reason it failed, or None. ``os.access`` alone
    says yes to root everywhere, also where nothing can be created (``/proc``, ``/sys``)."""
    probe = folder / f".{name}.{os.getpid()}.probe"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return None  # a leftover of this process: the folder takes files
    except OSError as e:
        return e.strerror or str(e)
    probe.unlink(missing_ok=True)
    return None


def write_file(out: Path, write: Callable[[Path], None]) -> None:
    """Write ``out`` with ``write`` (which writes a given path): a regular file through a temporary file in
    its folder and a rename (creating missing folders), a special file (``/dev/null``, a FIFO) by copying
    the finished bytes into it. ``write`` always gets a new regular file.

    Raises:
        OutputError: the file cannot be written (no permission, disk full, ...); the message names ``out``,
            never the temporary file.
    """
    try:
        if is_special_file(out):
            _write_through(out, write)
        else:
            _write_replacing(Path(os.path.realpath(out)), write)  # a symbolic link keeps pointing at it
    except OSError as e:
        if isinstance(e, EqsatError):
            raise
        raise OutputError(f"cannot write {out}: {e.strerror or e}; {_advice(e)}") from e


def _write_replacing(out: Path, write: Callable[[Path], None]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _write_through(out: Path, write: Callable[[Path], None]) -> None:
    # the special file's folder (/dev) takes no new files: the bytes are made in a private temporary folder
    with tempfile.TemporaryDirectory(prefix="eqsat-") as folder:
        tmp = Path(folder) / (out.name or "out")
        write(tmp)
        with open(tmp, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)


def _advice(e: OSError) -> str:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free some space or choose another path"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "choose a path you can write to"
    return "choose another path"
