"""What the ``eqsat`` subcommands share: the ``--input-shape`` option and, from :mod:`eqsat.files`, checking and
writing output files.

:mod:`eqsat.cli.app` (the main command) and the subcommand modules (:mod:`eqsat.cli.egraph`, :mod:`eqsat.cli.costs`)
import it; it imports none of them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from eqsat.errors import UsageError
from eqsat.files import check_output, write_file

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
