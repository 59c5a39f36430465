"""``eqsat compare``: eqsat against the research baselines on one model, or a sweep over several
(:mod:`eqsat.search.comparison`, :mod:`eqsat.search.sweep`); its options are declared with the others in
:func:`eqsat.cli.app.build_parser`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from eqsat.cli.common import builtin_by_name, check_output, named_cost_model, progress_printer, write_file
from eqsat.errors import UsageError

__all__ = ["cmd_compare"]


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare eqsat with the backtracking, sampling and AutoGraph searches on one model; print a table."""
    from eqsat.search.comparison import METHODS, compare  # lazy: CLI start-up (see the imports)
    from eqsat.search.comparison_plot import plot_comparison, plot_format, require_matplotlib

    out = check_output(args.json, "--json", "compare.json") if args.json else None
    plot = check_output(args.plot, "--plot", "compare.png") if args.plot else None
    fmt = plot_format(plot) if plot is not None else None
    if plot is not None:  # before the methods spend their budgets
        require_matplotlib()
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise UsageError(f"--methods {args.methods}: unknown method(s) {', '.join(bad) or '(none)'}; choose from "
                         f"{','.join(METHODS)}")
    if len(args.model) > 1 or args.repetitions != 1 or args.workers != 1 or args.ray is not None:
        return _compare_sweep(args, methods, out)
    (model_arg,) = args.model
    if Path(model_arg).exists() or model_arg.endswith(".onnx"):
        model, name = model_arg, model_arg
    else:
        model, name = builtin_by_name(model_arg, "MODEL"), model_arg
    res = compare(model, methods, budget=args.budget, cost_model=named_cost_model(args.costs, args.threads),
                  alpha=args.alpha, seed=args.seed, check=args.check, progress=progress_printer(args.quiet), name=name,
                  parallel=args.parallel, as_written=args.as_written)
    print(res.table())
    if out is not None or plot is not None:
        print()
    if out is not None:
        write_file(out, lambda p: p.write_text(json.dumps(res.as_dict(), indent=1, allow_nan=False) + "\n"))
        print(f"wrote {out}")
    if plot is not None:
        title = f"{res.model}: cost model {res.cost_model}, budget {res.budget:g} s per method"
        write_file(plot, lambda p: plot_comparison([res.as_dict()], p, title=title, fmt=fmt))
        print(f"wrote {plot}")
    return 0 if all(r.status == "ok" for r in res.methods.values()) else 1


def _compare_sweep(args: argparse.Namespace, methods: tuple[str, ...], out: Path | None) -> int:
    """``eqsat compare`` over several models or repetitions: a sweep (:mod:`eqsat.search.sweep`), one table per
    model, the median run's."""
    import functools
    import tempfile

    from eqsat.models.registry import builtin_model
    from eqsat.rules.distributed import Executor
    from eqsat.search.comparison import ComparisonResult
    from eqsat.search.sweep import aggregate, grid, run_sweep, run_unit

    if args.repetitions < 1 or args.workers < 1:
        raise UsageError("--repetitions and --workers must be at least 1")
    if args.plot or not args.check or args.threads is not None:
        raise UsageError("--plot, --no-check and --threads compare one model: a sweep checks every result, with its "
                         "cost model's default threads (benchmarks/compare.py draws a sweep's plots)")
    for name in args.model:
        if not (Path(name).exists() or name.endswith(".onnx")):
            builtin_by_name(name, "MODEL")  # a wrong name fails before any comparison runs
        elif not Path(name).exists():
            raise UsageError(f"MODEL {name}: no such file")
    units = grid(args.model, [args.budget], [args.costs], args.repetitions, methods, alpha=args.alpha,
                 parallel=args.parallel, as_written=(args.as_written,))
    executor = Executor(workers=args.workers, backend="ray", address=args.ray or None) if args.ray is not None \
        else Executor(workers=args.workers, backend="pool") if args.workers > 1 else None
    say = progress_printer(args.quiet)
    with tempfile.TemporaryDirectory(prefix="eqsat-sweep-") as tmp:
        every = run_sweep(units, args.units or tmp, executor, progress=say,
                          runner=functools.partial(run_unit, load=builtin_model))
    results = aggregate(every)
    for r in results:
        runs = f", the median of {r['repetitions']} runs" if r["repetitions"] > 1 else ""
        print(f"{r['model']}{runs}:\n{ComparisonResult.from_dict(r).table()}\n")
    if out is not None:
        write_file(out, lambda p: p.write_text(json.dumps({"command": "eqsat compare " + " ".join(args.model),
                                                           "costs": args.costs, "results": results},
                                                          indent=1, allow_nan=False) + "\n"))
        print(f"wrote {out}")
    return 0 if all(m["status"] == "ok" for r in every for m in r["methods"].values()) else 1
