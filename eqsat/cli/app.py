"""The ``eqsat`` command line: optimize, inspect, demo, extract, and the rules/costs tools.

A problem the user can fix (an :class:`eqsat.errors.EqsatError`, a file-system error, a failed numeric check)
prints one line, ``eqsat: error: <what happened>; <what to do>``, exits with status 2 and writes nothing.
Any other exception is a bug and keeps its traceback (``EQSAT_TRACEBACK=1`` shows one for user errors too).
Results go to stdout; progress and log messages go to stderr (``-q`` keeps only warnings).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from eqsat.cli.common import (
    AtLeast,
    Count,
    Seconds,
    builtin_by_name,
    check_output,
    defaults_of,
    input_shapes,
    merged_dims,
    named_cost_model,
    parse_dims,
    parse_shape,
    progress_printer,
    write_file,
)
from eqsat.cli.egraph import is_json_file, print_egraph_file
from eqsat.errors import DynamicShapeError, EqsatError, InputShapeError, ModelLoadError, ModelReadError, UsageError
from eqsat.files import check_space, is_special_file

# onnx, eqsat.onnx_io, eqsat.pipeline, eqsat.models and eqsat.search.comparison (about 0.2 s together) are imported
# by the commands that use them, so that the CLI starts (and --help answers) without them
if TYPE_CHECKING:

    from eqsat.onnx_io import ModelSummary

class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: what is wrong, and where the usage is."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE; run 'PROG --help' for usage`` and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message}; run '{self.prog} --help' for usage\n")


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever ``sys.stderr`` is when a record is emitted (tests swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        """The current ``sys.stderr``."""
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


class _Elapsed(logging.Formatter):
    """``[  12.3s] message`` like the progress lines; warnings and errors say so."""

    def __init__(self) -> None:
        super().__init__()
        self.start = time.time()

    def format(self, record: logging.LogRecord) -> str:
        """Elapsed seconds, level (above INFO), message."""
        level = "" if record.levelno <= logging.INFO else f"{record.levelname.lower()}: "
        return f"[{record.created - self.start:6.1f}s] {level}{super().format(record)}"


def _setup_logging(quiet: bool) -> None:
    """Send the library's log records (the ``eqsat`` loggers) to stderr: INFO and up, WARNING and up with -q."""
    log = logging.getLogger("eqsat")
    for h in list(log.handlers):
        if isinstance(h, _StderrHandler):
            log.removeHandler(h)
    handler = _StderrHandler()
    handler.setFormatter(_Elapsed())
    log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)


def _costs_option(p: argparse.ArgumentParser, default: str) -> None:
    """``--costs`` of optimize, demo and compare."""
    p.add_argument("--costs", default=default, metavar="NAME",
                   help=f"cost model (default {default}): analytic, gpu-sim (a simulated V100: computed, not "
                        "measured), measured (onnxruntime's timings on this CPU; cpu is the same), gpu, gpu-graph "
                        "(each operator timed as a CUDA graph runs it, for a deployment that captures the model)")


def _choices_help(table: Mapping[str, Any], default: str) -> str:
    """What each choice of a table of :mod:`eqsat.pipeline.choices` is, from its own description, the default
    marked."""
    return "; ".join(f"{name} ({'default: ' if name == default else ''}{choice.help})"
                     for name, choice in table.items())


def many_workers() -> int:
    """``--workers`` when not given: optimize_many's own default (models optimized at once with ``--out-dir``)."""
    import inspect

    from eqsat.pipeline.many import optimize_many  # lazy: CLI start-up (see the imports)

    return int(inspect.signature(optimize_many).parameters["workers"].default)

#: ``--rules`` when not given: optimize's own default rule set
DEFAULT_RULE_SET = "default"


def rule_set(name: str) -> Any:
    """The rules of a named rule set of :data:`eqsat.pipeline.choices.RULE_SETS` (None: optimize's default)."""
    from eqsat.pipeline.choices import RULE_SETS  # lazy, as build_parser's imports

    return RULE_SETS[name].rules()


def _rule_set_has_pet(name: str) -> bool:
    """Whether ``--rules NAME`` turns PET on (``--rules pet``, the same as ``--pet``)."""
    from eqsat.pipeline.choices import RULE_SETS  # lazy, as build_parser's imports

    return RULE_SETS[name].pet


def optimize_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of ``eqsat optimize``'s arguments, by the names of :class:`eqsat.pipeline.OptimizeOptions`
    (``cost_model`` still a name, ``rules`` still the rule set's name)."""
    return {"cost_model": args.costs, "rules": args.rules, "candidates": args.candidates,
            "time_limit": args.time_limit, "node_limit": args.node_limit, "iter_limit": args.iter_limit,
            "solver": args.solver, "input_shapes": input_shapes(args.input_shape) or None,
            "dims": merged_dims(args.dim) or None, "dynamic": args.dynamic, "check": args.check,
            "provenance": args.provenance, "anytime": args.anytime, "reuse_blocks": args.reuse_blocks,
            "target": args.target, "cache": args.cache, "parallel": args.parallel,
            "critical_path_weight": args.critical_path_weight, "as_written": args.as_written,
            "pet": args.pet or _rule_set_has_pet(args.rules),
            "first_answer": args.first_answer}


def cmd_optimize(args: argparse.Namespace) -> int:
    """Optimize an ONNX file and write the result (and the e-graph with ``--dump-egraph``).

    The paths are checked before any work; missing folders are created when writing. Nothing is written
    unless the whole run succeeds (the e-graph dump is written after the model, with the extraction's choice).
    """
    from eqsat.pipeline.run import optimize

    if args.out_dir is not None:
        return _optimize_many(args)
    if len(args.model) > 1:
        raise UsageError(f"{len(args.model)} models given: optimize several with --out-dir DIR (each is written "
                         "there as <name>.opt.onnx), or one at a time with -o")
    if args.workers is not None or args.ray is not None:
        raise UsageError("--workers and --ray apply to several models at once: add --out-dir DIR")
    if args.output is None:
        raise UsageError("-o/--output OUT.onnx is required (the optimized model's path), or --out-dir DIR for "
                         "several models (eqsat optimize --help)")
    args.model = args.model[0]
    out = check_output(args.output, "-o", Path(args.model).stem + ".opt.onnx")
    from eqsat.onnx_io import stored_bytes  # lazy: CLI start-up (see the imports)

    # the optimized model takes about what the original takes, its external data included
    check_space(out, stored_bytes(args.model), f"-o {args.output}")
    dump = check_output(args.dump_egraph, "--dump-egraph", "egraph.json") if args.dump_egraph else None
    if dump is not None and dump.resolve() == out.resolve() and not is_special_file(out):  # /dev/null twice is fine
        raise UsageError(f"-o and --dump-egraph name the same file {out}; give two different paths")
    report = check_output(args.report_json, "--report-json", "report.json") if args.report_json else None
    if report is not None and not is_special_file(report) and report.resolve() in (
            out.resolve(), dump.resolve() if dump is not None else None):
        raise UsageError(f"--report-json {report} names the file of another output; give a path of its own")
    if args.provenance and dump is None:
        raise UsageError("--provenance records which rule built each e-node for the e-graph dump; give "
                         "--dump-egraph PATH too")
    options = optimize_options(args)
    options.update(cost_model=named_cost_model(args.costs, args.threads), rules=rule_set(args.rules),
                   dump_egraph=dump is not None,  # the dump object only: written here
                   progress=progress_printer(args.quiet))
    res = optimize(args.model, **options)
    # a model that keeps its weights as external data is written the same way (it may be too large for one file)
    from eqsat.onnx_io import save_model  # lazy: CLI start-up (see the imports)

    save_model(res.model, out, res.external_data)
    if dump is not None and res.egraph_dump is not None:
        res.egraph_dump.write(dump)  # creates missing folders, through a temporary file
    if report is not None:
        write_file(report, lambda p: p.write_text(json.dumps(res.to_dict(), indent=1) + "\n", encoding="utf-8"))
    print(res.summary())
    print(f"\nwrote {out}")
    if dump is not None:
        print(f"wrote e-graph {dump}")
    return 0


def _optimize_many(args: argparse.Namespace) -> int:
    """``eqsat optimize A.onnx B.onnx ... --out-dir DIR``: every model in worker processes (or Ray tasks), a line
    per model as it finishes, the summary table at the end; exit 1 if any model failed."""
    from eqsat.pipeline.many import optimize_many, outcomes_table

    for flag, given in (("-o", args.output), ("--dump-egraph", args.dump_egraph), ("--report-json", args.report_json),
                        ("--threads", args.threads)):
        if given is not None:
            raise UsageError(f"{flag} applies to one model at a time; with --out-dir each model is written as "
                             "DIR/<name>.opt.onnx")
    missing = [m for m in args.model if not Path(m).is_file()]
    if missing:
        raise UsageError(f"no such model file: {', '.join(missing)}")
    named_cost_model(args.costs)  # an unknown name is refused here, before any worker starts
    outcomes = optimize_many(args.model, args.out_dir, workers=args.workers or many_workers(),
                             backend="pool" if args.ray is None else "ray", address=args.ray or None,
                             progress=progress_printer(args.quiet), **optimize_options(args))
    print(outcomes_table(outcomes))
    return 1 if any(o.written == "failed" for o in outcomes) else 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Describe a model: operator histogram, input/output shapes and the opaque operators of its IR; for a
    model eqsat cannot import (dynamic shapes, control flow), what the ONNX file declares and how to fix it.
    A JSON file is an e-graph: an eqsat dump gets the ``eqsat egraph stats`` report, plain extraction-gym JSON
    its sizes and operators."""
    from eqsat import onnx_io  # lazy: CLI start-up (see the imports)
    from eqsat.ir.symbols import format_shape, graph_symbols, symbolic_shapes

    if is_json_file(args.model):
        return print_egraph_file(args.model)
    model, label = onnx_io.read_model(args.model)
    fixed = input_shapes(args.input_shape)
    try:  # dynamic axes as symbols, as eqsat optimize sees them (fixed where --input-shape gives a shape)
        g = onnx_io.load_model(model, input_shapes=fixed, label=label, symbolic=not fixed)
    except (ModelReadError, InputShapeError):
        raise
    except ModelLoadError as e:
        summary = onnx_io.summarize_model(model, label=label)
        # a dynamic input is already explained by the "dynamic dimensions" line
        _describe(summary, "" if isinstance(e, DynamicShapeError) and summary.dynamic_inputs()
                  else str(e).removeprefix(f"{label}: "))
        return 0
    shapes = symbolic_shapes(g) if graph_symbols(g) else g.shapes
    print(f"model {args.model}: {len(g.nodes)} IR nodes, {len(g.weights)} weights, opset {g.meta.get('opset')}")
    for i in g.inputs:
        print(f"  input  {i.name}: {format_shape(shapes[i.name])} {i.dtype}")
    for o in g.outputs:
        print(f"  output {o}: {format_shape(shapes[o])}")
    if graph_symbols(g):
        print(f"dynamic axes: {', '.join(graph_symbols(g).generic)} (eqsat optimize keeps them; --dim sets the "
              "sizes they are costed at)")
    print("operators:")
    for op, n in sorted(g.op_histogram().items(), key=lambda kv: -kv[1]):
        print(f"  {op:<24} {n}")
    reasons = onnx_io.opaque_reasons(g)
    print("opaque (kept as is, not optimized across): " + ("" if reasons else "none"))
    for op_type, count, why in reasons:
        print(f"  {op_type:<24} {count:>4}  {why}")
    summary = onnx_io.summarize_model(model, label=label)
    if summary.control_flow:  # the bodies, as the file has them
        print("control flow (kept as it is, the graph around it optimized): " + ", ".join(summary.control_flow))
        print("inside control-flow bodies (ONNX):")
        for op, n in sorted(summary.subgraph_op_histogram.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {op:<24} {n}")
    return 0


def _describe(s: ModelSummary, reason: str) -> None:
    """Print an :class:`eqsat.onnx_io.ModelSummary` of a model that cannot be imported as is."""
    print(f"model {s.label}: {s.nodes} ONNX nodes, {s.initializers} initializers, opset {s.opset}, "
          f"IR version {s.ir_version} (described from the ONNX file: it cannot be imported as is)")
    for i in s.inputs:
        dyn = f"  (dynamic: {', '.join(i.dynamic)})" if i.dynamic else ""
        print(f"  input  {i.name}: {i.shape_text()} {i.dtype}{dyn}")
    for o in s.outputs:
        print(f"  output {o.name}: {o.shape_text()} {o.dtype}")
    print("operators (ONNX):")
    for op, n in sorted(s.op_histogram.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {op:<24} {n}")
    if s.control_flow:
        print("inside control-flow bodies:")
        for op, n in sorted(s.subgraph_op_histogram.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {op:<24} {n}")
        print("control flow (kept as it is, the graph around it optimized): " + ", ".join(s.control_flow))
    if s.dynamic_inputs():
        dims = sorted({d for i in s.dynamic_inputs() for d in i.dynamic})
        print(f"dynamic dimensions: {', '.join(dims)}; eqsat optimize fixes them for the run (at --dim sizes, "
              f"else 1), or see the model at given sizes with {s.input_shape_hint()}")
    if reason:
        print(f"why it cannot be imported: {reason}")


def cmd_demo(args: argparse.Namespace) -> int:
    """Optimize a built-in model end to end and print the report."""
    import onnx  # lazy: CLI start-up (see the imports)

    from eqsat.pipeline.run import optimize

    out = check_output(args.output, "-o", f"{args.model}.opt.onnx") if args.output else None
    model = builtin_by_name(args.model, "--model")
    cost_model = named_cost_model(args.costs, args.threads)
    say = progress_printer(args.quiet)
    say(f"demo: optimizing the built-in model {args.model!r}")
    res = optimize(model, cost_model=cost_model, time_limit=args.time_limit, progress=say)
    if out is not None:
        write_file(out, lambda p: onnx.save(res.model, str(p)))
    print(res.summary())
    if out is not None:
        print(f"\nwrote {out}")
    return 0


def _threads_option(p: argparse.ArgumentParser) -> None:
    """``--threads`` of optimize, demo and compare."""
    p.add_argument("--threads", action=Count, minimum=0, unit="threads", note="0: onnxruntime's default",
                   example=4, default=None, metavar="N",
                   help="onnxruntime intra-op threads for measured costs and timings (default 1, so that timings "
                        "repeat; give your deployment's count, or 0 for onnxruntime's own: one per physical core)")


#: what --as-written keeps apart, for its help
_NOT_FOLDED = "no Conv + BatchNormalization, Add or Relu folded into one node"


def _as_written_option(p: argparse.ArgumentParser, default: bool, text: str) -> None:
    """``--as-written`` of optimize and compare."""
    p.add_argument("--as-written", action="store_true", default=default,
                   help=f"{text} (default: the model as onnxruntime runs it, those nodes folded)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand; the defaults and choices of optimize, demo and compare are those
    of :class:`eqsat.pipeline.OptimizeOptions`, :mod:`eqsat.pipeline.choices` and :func:`eqsat.compare`."""
    from eqsat import __version__
    from eqsat.pipeline.candidates import DEFAULT_CANDIDATES
    from eqsat.pipeline.choices import RULE_SETS, SOLVERS, TARGETS
    from eqsat.pipeline.options import OptimizeOptions
    from eqsat.search.comparison import METHODS, compare

    D = OptimizeOptions()

    p = _Parser(prog="eqsat", description="ONNX superoptimizer by equality saturation")
    p.add_argument("--version", action="version", version=f"eqsat {__version__}")
    sub = p.add_subparsers(dest="command", required=True, help="what to do (eqsat COMMAND --help for its options)")

    o = sub.add_parser("optimize", help="optimize an ONNX model (or several, with --out-dir)")
    o.add_argument("model", metavar="MODEL.onnx", nargs="+",
                   help="the ONNX model to optimize (several with --out-dir)")
    o.add_argument("-o", "--output",
                   help="the optimized model (missing folders are created; /dev/null or a FIFO is written through)")
    o.add_argument("--out-dir", metavar="DIR",
                   help="optimize every MODEL in worker processes and write each as DIR/<name>.opt.onnx as it "
                        "finishes; a failed model is reported on its line and the others go on; a table at the end")
    o.add_argument("--workers", action=Count, minimum=1, unit="workers", default=None, metavar="N",
                   help=f"with --out-dir: models optimized at once (default {many_workers()})")
    o.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="with --out-dir: run the models as Ray tasks, on the cluster at ADDRESS or, without one, "
                        "on a Ray started here with --workers CPUs (pip install eqsat[dist])")
    o.add_argument("--time-limit", action=Seconds, default=D.time_limit, metavar="S",
                   help=f"seconds for the whole run, measuring costs and timing included (default {D.time_limit:g})")
    o.add_argument("--node-limit", action=Count, minimum=1, unit="e-nodes", default=D.node_limit, metavar="N",
                   help=f"e-node limit (default {D.node_limit})")
    o.add_argument("--iter-limit", action=Count, minimum=0, unit="iterations", default=D.iter_limit, metavar="N",
                   help=f"saturation iterations (default {D.iter_limit}; 0 = none: extract from the input graph)")
    o.add_argument("--dump-egraph", metavar="PATH",
                   help="write the saturated e-graph with costs and the extraction's choice (an eqsat dump: "
                        "extraction-gym JSON plus eqsat's fields; 'eqsat egraph' reads it; missing folders are "
                        "created)")
    o.add_argument("--provenance", action="store_true",
                   help="with --dump-egraph: record the iteration and rule(s) that built each e-node (costs "
                        "saturation time and memory, see the README)")
    o.add_argument("--report-json", metavar="PATH",
                   help="also write the report's figures as JSON (the fields of OptimizeResult.to_dict)")
    o.add_argument("--input-shape", action="append", type=parse_shape, metavar="NAME=1,3,224,224",
                   help="the shape to cost and time a dynamic input at; its dynamic axes stay dynamic in the output "
                        "(with --static: the shape to fix it to) (repeatable)")
    o.add_argument("--dim", action="append", type=parse_dims, metavar="NAME=SIZE,...",
                   help="the size to cost, time and check a symbolic dimension at, e.g. --dim batch=8,seq=128 "
                        "(repeatable; default: timed and checked at 1, priced at typical sizes: a batch at 1, a "
                        "length at 128, a KV-cache step at a decode step and a prefill)")
    o.add_argument("--static", action="store_false", dest="dynamic", default=D.dynamic,
                   help="fix the dynamic dimensions (at --input-shape / --dim, else 1): the output has static shapes")
    _costs_option(o, D.cost_model)
    _threads_option(o)
    o.add_argument("--candidates", action=Count, minimum=1, unit="candidates", example=4, default=D.candidates,
                   metavar="K",
                   help="with measured costs: extract up to K distinct near-optimal graphs and time each end to end; "
                        "the first choice is raced against the original unless another ran measurably faster "
                        f"(default {DEFAULT_CANDIDATES}; 1 = the cost model's choice only)")
    o.add_argument("--solver", default=D.solver, choices=list(SOLVERS),
                   help="extractor: " + _choices_help(SOLVERS, D.solver))
    o.add_argument("--no-anytime", action="store_false", dest="anytime", default=D.anytime,
                   help="extract the final e-graph only (default: also each snapshot while it saturates)")
    o.add_argument("--no-first-answer", action="store_false", dest="first_answer", default=D.first_answer,
                   help="no graphs before the e-graph's (default: the sibling merges right after the import, then a "
                        "greedy descent over the rules while the engine starts)")
    o.add_argument("--no-block-reuse", action="store_false", dest="reuse_blocks", default=D.reuse_blocks,
                   help="saturate every repeated block (default: a model of repeated layers has one of them "
                        "optimized and the result written for all, with no rewrite across their boundaries)")
    o.add_argument("--target", default=D.target, choices=list(TARGETS),
                   help="what the output is written for: " + _choices_help(TARGETS, D.target))
    o.add_argument("--parallel", type=int, default=D.parallel, metavar="N",
                   help="optimize for a runtime that runs up to N independent operators at once (onnxruntime's "
                        "parallel executor with N inter-op threads): graphs compared by their total plus "
                        "--critical-path-weight times their critical path (AutoGraph's mixed cost; default: the "
                        "sum of their operators' costs)")
    o.add_argument("--critical-path-weight", type=float, default=D.critical_path_weight, metavar="ALPHA",
                   help=f"with --parallel, the weight of the critical path in the mixed cost (default "
                        f"{D.critical_path_weight:g})")
    _as_written_option(o, D.as_written, f"import the model as written, as TASO and Tensat do: {_NOT_FOLDED} "
                       "before the search, whose rules may fold them")
    o.add_argument("--rules", default=DEFAULT_RULE_SET, choices=list(RULE_SETS),
                   help=_choices_help(RULE_SETS, DEFAULT_RULE_SET))
    o.add_argument("--pet", action="store_true", default=D.pet,
                   help="also PET's partially equivalent rewrites of the convolutions, each with the correction "
                        "that makes it fully equivalent, as alternatives in the e-graph (off by default; docs/pet.md)")
    o.add_argument("--no-check", action="store_false", dest="check", default=D.check,
                   help="skip the onnxruntime numeric check")
    o.add_argument("--no-cache", action="store_false", dest="cache", default=D.cache,
                   help="neither replay nor store a cached transformation (default: a model of the structure of one "
                        "optimized before, with other weights or names, gets that run's graph without a search; "
                        "stored beside the measured costs: $EQSAT_CACHE_DIR, or $EQSAT_TRANSFORMS_DIR)")
    o.add_argument("-q", "--quiet", action="store_true", help="no progress lines (the report is still printed)")
    o.set_defaults(func=cmd_optimize)

    i = sub.add_parser("inspect", help="op histogram, shapes and opaque ops of a model (any ONNX model), or the "
                                       "report of an e-graph (JSON: an eqsat dump or extraction-gym)")
    i.add_argument("model", metavar="FILE", help="an ONNX model, or an e-graph as JSON (.json)")
    i.add_argument("--input-shape", action="append", type=parse_shape, metavar="NAME=1,3,224,224",
                   help="fix a dynamic input shape to see the model as eqsat imports it (repeatable)")
    i.set_defaults(func=cmd_inspect)

    d = sub.add_parser("demo", help="optimize a built-in model")
    d.add_argument("--model", default="bert_attention_block",
                   help="a built-in model (bert_attention_block, nasrnn_cell, TASO's taso_bert, taso_nasrnn, "
                        "taso_resnext50, taso_nasnet_a, taso_inception_v3, taso_squeezenet, taso_vgg19, ...) or an "
                        "onnx zoo name (resnet50, squeezenet, ...) (default bert_attention_block)")
    _costs_option(d, D.cost_model)
    _threads_option(d)
    d.add_argument("--time-limit", action=Seconds, default=D.time_limit, metavar="S",
                   help=f"seconds for the whole run (default {D.time_limit:g})")
    d.add_argument("-o", "--output", metavar="OUT.onnx",
                   help="also write the optimized model (missing folders are created)")
    d.add_argument("-q", "--quiet", action="store_true", help="no progress lines (the report is still printed)")
    d.set_defaults(func=cmd_demo)

    C = defaults_of(compare)
    c = sub.add_parser("compare", help="eqsat against TASO's backtracking, OCGGS's sampling search and AutoGraph's "
                                       "search on a model, or a sweep over several")
    c.add_argument("model", nargs="+", help="an ONNX file or a built-in model name (e.g. taso_bert); several, or "
                                            "--repetitions, --workers or --ray, run a sweep (one comparison a unit)")
    c.add_argument("--repetitions", type=int, default=1, metavar="R",
                   help="runs of each model, the sampling search seeded by the run's number; the tables are the "
                        "median run's, with each figure's median and range in the JSON (default 1)")
    c.add_argument("--workers", type=int, default=1, metavar="N",
                   help="comparisons at once, in a local process pool (default 1: one after the other)")
    c.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run each comparison as a Ray task of one CPU: on the cluster at ADDRESS, else on a Ray "
                        "started here with --workers CPUs")
    c.add_argument("--units", metavar="DIR",
                   help="a sweep writes each comparison's result here as it finishes, and a sweep over the same "
                        "folder again runs only those without one (default: a temporary folder)")
    c.add_argument("--methods", default=",".join(C["methods"]),
                   help=f"comma-separated, of {', '.join(METHODS)} (default: {','.join(C['methods'])})")
    c.add_argument("--budget", action=Seconds, default=C["budget"], metavar="S",
                   help=f"wall seconds per method (default {C['budget']:g})")
    c.add_argument("--alpha", action=AtLeast, minimum=1.0, default=C["alpha"],
                   help=f"backtracking's relaxation factor, >= 1 (default {C['alpha']:g})")
    c.add_argument("--seed", type=int, default=C["seed"], help=f"the sampling search's seed (default {C['seed']})")
    c.add_argument("--parallel", type=int, default=C["parallel"], metavar="N",
                   help="judge every method by AutoGraph's mixed critical-path cost for a runtime running N branches "
                        "at once, and optimize eqsat for it (default: the sum of operator costs)")
    _as_written_option(c, C["as_written"], f"every method starts from the model as written, as TASO and Tensat "
                       f"import it ({_NOT_FOLDED}; the rules folding them join every method's rules), and the "
                       "original and each result are priced as written")
    _costs_option(c, D.cost_model)
    _threads_option(c)
    c.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    c.add_argument("--plot", metavar="FILE",
                   help="also draw best cost over time per method (.png, .svg or .pdf; needs matplotlib)")
    c.add_argument("--no-check", action="store_false", dest="check", default=C["check"],
                   help="skip the onnxruntime numeric checks")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress lines (the table is still printed)")
    from eqsat.cli.compare import cmd_compare

    c.set_defaults(func=cmd_compare)

    # the subcommand modules register their own subcommands (imported here, not at module top: start-up time)
    from eqsat.cli import costs, egraph
    from eqsat.cli import rules as rules_cli
    from eqsat.extract import cli as extract_cli

    for module in (extract_cli, rules_cli, costs, egraph):
        module.register(sub)
    return p


def _is_user_error(e: BaseException) -> bool:
    """Whether ``e`` reports a problem the user can fix (one line, exit 2) rather than a bug (traceback)."""
    return isinstance(e, EqsatError | OSError)


def _one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror and e.filename and not isinstance(e, EqsatError):
        return f"{e.filename}: {e.strerror}"
    return " ".join(str(e).split()) or type(e).__name__


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed on one line
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    _setup_logging(getattr(args, "quiet", False))
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except KeyboardInterrupt:
        print("eqsat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise
    except Exception as e:
        if not _is_user_error(e) or os.environ.get("EQSAT_TRACEBACK"):
            raise
        print(f"eqsat: error: {_one_line(e)}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``eqsat`` console script; returns the exit status."""
    try:
        return _run(argv)
    except BrokenPipeError:
        # the reader went away (``eqsat inspect m.onnx | head -1``): stop quietly, as other Unix tools do;
        # stdout goes to devnull so the interpreter's final flush does not fail again
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by the closed pipe

