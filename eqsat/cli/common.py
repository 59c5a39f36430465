"""What the ``eqsat`` subcommands share: the ``--input-shape`` option and writing output files safely.

:mod:`eqsat.cli.app` (the main command) and the subcommand modules (:mod:`eqsat.cli.egraph`, :mod:`eqsat.cli.costs`)
import it; it imports none of them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from eqsat.errors import UsageError

__all__ = ["parse_shape", "input_shapes", "check_output", "write_file"]


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=d1,d2,...`` as (name, dims); the argparse type of ``--input-shape``. Sizes are checked when the
    model is loaded (positive, matching the input)."""
    name, sep, dims = text.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, tuple(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=d1,d2,... (e.g. input=1,3,224,224), got {text!r}") from None


def input_shapes(given: Sequence[tuple[str, tuple[int, ...]]] | None) -> dict[str, tuple[int, ...]]:
    """The ``--input-shape`` options as a dict; an input given twice with different shapes is an error."""
    out: dict[str, tuple[int, ...]] = {}
    for name, dims in given or []:
        if name in out and out[name] != dims:
            raise UsageError(f"--input-shape gives {name!r} twice ({','.join(map(str, out[name]))} and "
                             f"{','.join(map(str, dims))}); give it once")
        out[name] = dims
    return out


def check_output(path: str, option: str, example: str) -> Path:
    """Fail at once, before any work, when ``path`` cannot be written as a file. Missing folders on the way
    are fine: they are created when the file is written (only after everything else succeeded)."""
    p = Path(path)
    if p.is_dir() or path.endswith(("/", os.sep)):
        raise UsageError(f"{option} {path} names a directory; give a file path, e.g. {option} {p / example}")
    folder = p.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: {folder} is a file, not a folder; choose another path")
    if not os.access(folder, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"{option} {path}: no permission to write there; choose another path")
    return p


def write_file(out: Path, write: Callable[[Path], None]) -> None:
    """Create ``out``'s folders and write it through a temporary file, so a failure leaves nothing behind."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
