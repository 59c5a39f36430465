"""What the ``eqsat`` subcommands share: the ``--input-shape`` option, the checked number options (:class:`Seconds`,
:class:`Count`, :class:`AtLeast`: a bad value says what to give) and, from :mod:`eqsat.files`, checking and
writing output files; the progress lines, the cost model by ``--costs`` name and a built-in model by name.

:mod:`eqsat.cli.app` (the main command) and the subcommand modules (:mod:`eqsat.cli.egraph`, :mod:`eqsat.cli.costs`)
import it; it imports none of them.
"""

from __future__ import annotations

import argparse
import inspect
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from eqsat.costs import get_cost_model
from eqsat.errors import UsageError
from eqsat.files import check_output, write_file

if TYPE_CHECKING:
    from eqsat.costs import CostModel

__all__ = ["parse_shape", "input_shapes", "check_output", "write_file", "Seconds", "Count", "AtLeast",
           "builtin_by_name", "named_cost_model", "progress_printer"]


def defaults_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """The defaults of ``fn``'s parameters, by name: an option's default, written once, in the function it
    passes to."""
    return {name: p.default for name, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty}


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


def parse_dims(text: str) -> dict[str, int]:
    """``NAME=SIZE[,NAME=SIZE...]`` as a dict; the argparse type of ``--dim``."""
    out: dict[str, int] = {}
    for part in text.split(","):
        name, sep, size = part.strip().partition("=")
        try:
            value = int(size)
            if not sep or not name or value < 1:
                raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected NAME=SIZE with a positive size, several separated by commas "
                                             f"(e.g. batch=8,seq=128), got {text!r}") from None
        out[name] = value
    return out


def merged_dims(given: Sequence[dict[str, int]] | None) -> dict[str, int]:
    """The ``--dim`` options as one dict; a symbol given two sizes is an error."""
    out: dict[str, int] = {}
    for d in given or []:
        for k, v in d.items():
            if out.setdefault(k, v) != v:
                raise UsageError(f"--dim gives {k} two sizes ({out[k]} and {v}); give it one")
    return out


def input_shapes(given: Sequence[tuple[str, tuple[int, ...]]] | None) -> dict[str, tuple[int, ...]]:
    """The ``--input-shape`` options as a dict; an input given twice with different shapes is an error."""
    out: dict[str, tuple[int, ...]] = {}
    for name, dims in given or []:
        if name in out and out[name] != dims:
            raise UsageError(f"--input-shape gives {name!r} twice ({','.join(map(str, out[name]))} and "
                             f"{','.join(map(str, dims))}); give it once")
        out[name] = dims
    return out


class _Checked(argparse.Action):
    """Store an option's value after converting and checking it. A bad value stops the parse with one line
    saying what to give instead: ``--time-limit 0: give a positive number of seconds, e.g. --time-limit 60``.

    ``example`` (default: the option's default) is the value the message suggests. Subclasses set ``what``
    and :meth:`convert`.
    """

    what = "a valid value"

    def __init__(self, option_strings: Sequence[str], dest: str, *, example: object = None, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.example = example if example is not None else self.default

    def convert(self, text: str) -> Any:
        """``text`` as the option's value; ValueError if it is not an acceptable one."""
        raise NotImplementedError

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        """Convert and check ``values`` (the text given), store it, or stop with a usage error."""
        option = option_string or self.dest
        try:
            value = self.convert(str(values))
        except ValueError:
            parser.error(f"{option} {values}: give {self.what}{self._example(option)}")
        setattr(namespace, self.dest, value)

    def _example(self, option: str) -> str:
        if isinstance(self.example, float):
            return f", e.g. {option} {self.example:g}"
        return "" if self.example is None else f", e.g. {option} {self.example}"


class Seconds(_Checked):
    """An option of seconds: a finite number greater than zero."""

    what = "a positive number of seconds"

    def convert(self, text: str) -> float:
        """``text`` as seconds; ValueError unless finite and positive."""
        value = float(text)
        if not (math.isfinite(value) and value > 0):
            raise ValueError(text)
        return value


class Count(_Checked):
    """An option counting something (``unit``): a whole number at least ``minimum``; ``note`` follows the
    message's ``what`` (e.g. what 0 means)."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, minimum: int = 1, unit: str = "",
                 note: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.minimum = minimum
        self.what = f"a whole number{' of ' + unit if unit else ''} >= {minimum}" + (f" ({note})" if note else "")

    def convert(self, text: str) -> int:
        """``text`` as a whole number; ValueError unless it is one, at least the minimum."""
        value = int(text)
        if value < self.minimum:
            raise ValueError(text)
        return value


class AtLeast(_Checked):
    """An option of a finite number at least ``minimum`` (e.g. a factor >= 1)."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, minimum: float, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.minimum = minimum
        self.what = f"a number >= {minimum:g}"

    def convert(self, text: str) -> float:
        """``text`` as a number; ValueError unless finite and at least the minimum."""
        value = float(text)
        if not (math.isfinite(value) and value >= self.minimum):
            raise ValueError(text)
        return value


def progress_printer(quiet: bool) -> Callable[[str], None]:
    """A progress printer: ``[  1.2s] message`` lines on stderr, seconds from now (none if ``quiet``)."""
    start = time.perf_counter()

    def say(msg: str) -> None:
        if not quiet:
            print(f"[{time.perf_counter() - start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    return say


def named_cost_model(name: str, threads: int | None = None) -> CostModel:
    """The cost model named by ``--costs``; ``threads`` (``--threads``) only for the measured CPU model, whose
    default is one thread."""
    if threads is not None and name not in ("measured", "cpu"):  # a bad count is refused by the parser
        raise UsageError(f"--threads {threads}: applies to measured CPU costs only; add --costs measured")
    try:
        return get_cost_model(name, threads=threads) if threads is not None else get_cost_model(name)
    except ValueError as e:  # unknown name
        raise UsageError(f"--costs {name}: {e}") from None
    except RuntimeError as e:  # e.g. CuPy or CUDA missing for --costs gpu
        raise UsageError(f"--costs {name}: {e}") from None


def builtin_by_name(name: str, option: str) -> Any:
    """A built-in or zoo model by name, as a ``ModelProto``."""
    from eqsat import models  # lazy: CLI start-up (see the imports)

    builders = models.builtin_models()
    if name in builders:
        return builders[name]()
    if name in models.zoo_names():
        return models.load_zoo_model(name)
    raise UsageError(f"{option} {name}: no such built-in model; choose one of "
                     f"{', '.join(list(builders) + models.zoo_names())}")
