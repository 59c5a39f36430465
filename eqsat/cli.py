"""The ``eqsat`` command line: optimize, inspect, demo, extract, and the rules/costs tools."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def _parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    try:
        name, dims = text.rsplit("=", 1)
        return name, tuple(int(d) for d in dims.split(",") if d.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=d1,d2,..., got {text!r}") from None


def _progress(quiet: bool):
    start = time.perf_counter()

    def say(msg: str) -> None:
        if not quiet:
            print(f"[{time.perf_counter() - start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    return say


def _cost_model(name: str):
    from eqsat.gpu import get_cost_model

    return get_cost_model(name)


def _rules(name: str):
    from eqsat import rules

    return rules.starter_rules() if name == "starter" else rules.corpus_or_starter()


def cmd_optimize(args: argparse.Namespace) -> int:
    """Optimize an ONNX file and write the result."""
    from eqsat.pipeline import optimize

    say = _progress(args.quiet)
    res = optimize(args.model, cost_model=_cost_model(args.costs), rules=_rules(args.rules),
                   time_limit=args.time_limit, node_limit=args.node_limit, iter_limit=args.iter_limit,
                   solver=args.solver, input_shapes=dict(args.input_shape or []), check=not args.no_check,
                   dump_egraph=args.dump_egraph, progress=say)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    import onnx

    onnx.save(res.model, str(out))
    print(res.summary())
    print(f"\nwrote {out}")
    if args.dump_egraph:
        print(f"wrote e-graph {args.dump_egraph}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print an operator histogram, input/output shapes and the opaque operators of a model."""
    from eqsat import onnx_io

    g = onnx_io.load_model(args.model, input_shapes=dict(args.input_shape or []))
    shapes = g.shapes
    print(f"model {args.model}: {len(g.nodes)} IR nodes, {len(g.weights)} weights, opset {g.meta.get('opset')}")
    for i in g.inputs:
        print(f"  input  {i.name}: {list(i.shape)} {i.dtype}")
    for o in g.outputs:
        print(f"  output {o}: {list(shapes[o])}")
    print("operators:")
    for op, n in sorted(g.op_histogram().items(), key=lambda kv: -kv[1]):
        print(f"  {op:<24} {n}")
    opaque = sorted({n.p["op_type"] for n in g.nodes if n.op == "opaque"})
    print("opaque (kept as is, not optimized across): " + (", ".join(opaque) if opaque else "none"))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Optimize a built-in model end to end and print the report."""
    import onnx

    from eqsat import zoo
    from eqsat.pipeline import optimize

    builders = zoo.builtin_models()
    if args.model in builders:
        model = builders[args.model]()
    else:
        model = zoo.load_zoo_model(args.model)
    say = _progress(args.quiet)
    say(f"demo: optimizing the built-in model {args.model!r}")
    res = optimize(model, cost_model=_cost_model(args.costs), time_limit=args.time_limit, progress=say)
    print(res.summary())
    if args.output:
        onnx.save(res.model, args.output)
        print(f"\nwrote {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    p = argparse.ArgumentParser(prog="eqsat", description="ONNX superoptimizer by equality saturation")
    sub = p.add_subparsers(dest="command", required=True)

    o = sub.add_parser("optimize", help="optimize an ONNX model")
    o.add_argument("model")
    o.add_argument("-o", "--output", required=True)
    o.add_argument("--time-limit", type=float, default=60.0, help="seconds for the whole run (default 60)")
    o.add_argument("--node-limit", type=int, default=50_000, help="e-node limit (default 50000)")
    o.add_argument("--iter-limit", type=int, default=10, help="saturation iterations (default 10)")
    o.add_argument("--dump-egraph", metavar="PATH", help="write the saturated e-graph (extraction-gym JSON)")
    o.add_argument("--input-shape", action="append", type=_parse_shape, metavar="NAME=1,3,224,224",
                   help="fix a dynamic input shape (repeatable)")
    o.add_argument("--costs", default="analytic", help="cost model: analytic (default), measured/cpu, gpu")
    o.add_argument("--solver", default="cpsat", choices=["cpsat", "greedy"])
    o.add_argument("--rules", default="default", choices=["default", "starter"])
    o.add_argument("--no-check", action="store_true", help="skip the onnxruntime numeric check")
    o.add_argument("-q", "--quiet", action="store_true")
    o.set_defaults(func=cmd_optimize)

    i = sub.add_parser("inspect", help="op histogram, shapes and opaque ops of a model")
    i.add_argument("model")
    i.add_argument("--input-shape", action="append", type=_parse_shape, metavar="NAME=1,3,224,224")
    i.set_defaults(func=cmd_inspect)

    d = sub.add_parser("demo", help="optimize a built-in model")
    d.add_argument("--model", default="bert_attention_block")
    d.add_argument("--costs", default="analytic")
    d.add_argument("--time-limit", type=float, default=60.0)
    d.add_argument("-o", "--output")
    d.add_argument("-q", "--quiet", action="store_true")
    d.set_defaults(func=cmd_demo)

    # subcommands owned by the other packages register themselves when present
    for module in ("eqsat.extract.cli", "eqsat.rules.cli", "eqsat.gpu.cli"):
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module).register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``eqsat`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        print(f"eqsat: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
