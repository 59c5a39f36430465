"""``eqsat extract``: extract a cheapest acyclic DAG from an extraction-gym JSON e-graph."""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import SOLVERS, extract, extract_cpsat, load_egraph
from .result import Extraction

__all__ = ["register", "main", "run"]


def _fmt(x: float | None, digits: int = 6) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _seconds(text: str) -> float:
    """``--time-limit``: a finite number of seconds greater than zero."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text}: give a positive number of seconds, e.g. --time-limit 60")
    return value


def _workers(text: str) -> int:
    """``--workers``: a whole number of at least one."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a whole number of workers >= 1, e.g. --workers 8")
    return value


def _check_out(path: str) -> Path:
    """Fail before any work when ``--out`` cannot be written: a folder, or a place nothing can be created in."""
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"--out {path} names a directory; give a file path, e.g. --out {out / 'selection.json'}")
    if out.exists() and not out.is_file():  # a device or a FIFO: written through
        return out
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ValueError(f"--out {path}: cannot create a file in {folder} ({e.strerror}); choose another path") \
            from None
    return out


def _write(out: Path, text: str) -> None:
    """Write ``text`` to ``out``: a special file (``/dev/null``, a FIFO) through, a regular file whole (a temporary
    file renamed over it, so a failure leaves the old one)."""
    if out.exists() and not out.is_file():
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        return
    out = out.resolve() if out.is_symlink() else out  # a link keeps pointing at its target, which is replaced
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def _defaults(fn: Callable[..., Any]) -> dict[str, Any]:
    """The defaults of ``fn``'s parameters: the options' defaults are the functions' own, written there only."""
    return {name: p.default for name, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("egraph", metavar="EGRAPH.json", help="e-graph in extraction-gym / egraph-serialize JSON")
    cpsat, solver = _defaults(extract_cpsat), _defaults(extract)["solver"]
    p.add_argument("--time-limit", type=_seconds, default=cpsat["time_limit"], metavar="S",
                   help=f"seconds for the CP-SAT extractor (default: {cpsat['time_limit']:g})")
    p.add_argument("--solver", choices=list(SOLVERS), default=solver,
                   help="extractor: " + "; ".join(f"{name} ({'default: ' if name == solver else ''}{text})"
                                                  for name, text in SOLVERS.items()))
    p.add_argument("--workers", type=_workers, default=cpsat["num_workers"], metavar="N",
                   help=f"CP-SAT workers (default: {cpsat['num_workers']})")
    p.add_argument("--seed", type=int, default=None, help="CP-SAT random seed")
    p.add_argument("--log", action="store_true", help="print the CP-SAT search log")
    p.add_argument("--out", metavar="SELECTION.json", help="write {selection, cost, status} as JSON")


def _report(path: str, eg_nodes: int, eg_classes: int, load_s: float, ext: Extraction) -> str:
    gap = "-" if ext.gap is None else f"{100 * ext.gap:.4f} %"
    lines = [
        f"e-graph      {path}",
        f"nodes        {eg_nodes}",
        f"classes      {eg_classes}",
        f"greedy cost  {_fmt(ext.greedy_cost)}",
        f"final cost   {_fmt(ext.cost)}",
        f"status       {ext.status} ({ext.solver})",
        f"bound        {_fmt(ext.bound)}",
        f"gap          {gap}",
        f"time         {ext.seconds:.2f} s (+ {load_s:.2f} s loading)",
        f"selected     {len(ext.selection)} classes",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Execute the ``extract`` subcommand for parsed ``args``; returns the exit status."""
    try:
        out = _check_out(args.out) if args.out else None
        t = time.perf_counter()
        eg = load_egraph(args.egraph)
        load_s = time.perf_counter() - t
        kw = {} if args.solver == "greedy" else {
            "time_limit": args.time_limit, "num_workers": args.workers, "random_seed": args.seed,
            "log_progress": args.log}
        ext = extract(eg, solver=args.solver, **kw)
    except (OSError, ValueError) as e:
        print(f"eqsat extract: error: {e}", file=sys.stderr)
        return 2
    print(_report(args.egraph, eg.num_nodes, eg.num_classes, load_s, ext))
    if out is not None:
        try:
            _write(out, json.dumps({"selection": ext.selection, "cost": ext.cost, "status": ext.status},
                                   indent=1) + "\n")
        except OSError as e:
            print(f"eqsat extract: error: cannot write {out}: {e.strerror}; choose another path", file=sys.stderr)
            return 2
        print(f"wrote        {out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``extract`` subcommand to an argparse ``subparsers`` object."""
    p = subparsers.add_parser("extract", help="extract a cheapest acyclic DAG from an e-graph JSON file",
                              description=__doc__)
    _add_arguments(p)
    p.set_defaults(func=run)


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point: ``python -m eqsat.extract.cli EGRAPH.json [options]``."""
    parser = argparse.ArgumentParser(prog="eqsat extract", description=__doc__)
    _add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
