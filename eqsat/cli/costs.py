"""``eqsat costs``: prefill the measured-cost cache for a model, and list what the cache holds."""

from __future__ import annotations

import argparse
import sys

from eqsat import engine
from eqsat.cli.common import Count, Seconds, merged_dims, parse_dims, parse_shape
from eqsat.costs import CachedCostModel, CostCache, get_cost_model, graph_cost_keys
from eqsat.errors import UsageError


def _bar(done: int, total: int) -> None:
    width = 30
    filled = width * done // max(total, 1)
    print(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", file=sys.stderr, flush=True)
    if done == total:
        print(file=sys.stderr)


def cmd_measure(args: argparse.Namespace) -> int:
    """Measure every operator configuration the optimizer will price for MODEL (its saturated e-graph)."""
    # lazy: eqsat.onnx_io and the pipeline load in about 0.2 s; the CLI starts without them
    from eqsat import onnx_io
    from eqsat.pipeline import default_rules
    from eqsat.pipeline.anytime import node_cost_keys

    if args.threads is not None and args.device == "gpu":  # a bad count is refused by the parser
        raise UsageError(f"--threads {args.threads}: applies to --device cpu only; leave it out with --device gpu")
    model = get_cost_model("gpu") if args.device == "gpu" else get_cost_model(
        "measured", **({} if args.threads is None else {"threads": args.threads}))
    proto, label = onnx_io.read_model(args.model)
    graph, _ = onnx_io.load_with_axes(proto, label=label, input_shapes=dict(args.input_shape or []) or None,
                                      dims=merged_dims(args.dim) or None, dynamic=not args.static)
    model = model.in_context(graph.weight_bytes)  # as optimize will price it
    sat = engine.saturate(graph, default_rules(), engine.Limits(iter_limit=args.iter_limit,
                                                                time_limit=args.time_limit))
    # what optimize prices: the e-graph's configurations (its opaque nodes as the graph's) and the input graph's
    keys = {k for ks in [*node_cost_keys(sat.egraph, graph).values(), *graph_cost_keys(graph)] for k in ks}
    print(f"measuring {len(keys)} operator configurations with {model.name}", file=sys.stderr)
    costs = model.costs(keys, progress=_bar)
    hits = model.hits if isinstance(model, CachedCostModel) else 0
    print(f"{len(costs)} configurations priced ({hits} already cached); total {sum(costs.values()):.3f} ms")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """List cached costs (device hash, key, milliseconds)."""
    cache = CostCache(args.cache_dir)
    entries = cache.entries()
    print(f"cache {cache.path}: {len(entries)} entries")
    for device, key, ms, _ in entries[: args.limit]:
        print(f"  {device}  {ms:10.4f} ms  {key}")
    if len(entries) > args.limit:
        print(f"  ... {len(entries) - args.limit} more (use --limit)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``eqsat costs measure|show`` to the main CLI; saturation's defaults are the engine's
    (:class:`eqsat.engine.Limits`)."""
    limits = engine.Limits()
    p = subparsers.add_parser("costs", help="measured operator costs and their cache")
    sub = p.add_subparsers(dest="costs_command", required=True, help="measure or show")
    m = sub.add_parser("measure", help="prefill the cost cache for a model")
    m.add_argument("model", metavar="MODEL.onnx", help="the model whose saturated e-graph is priced")
    m.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                   help="measure with onnxruntime on the CPU (default) or with CuPy on the GPU")
    m.add_argument("--input-shape", action="append", type=parse_shape, metavar="NAME=1,3,224,224",
                   help="as optimize's: the shape a dynamic input is costed at (repeatable)")
    m.add_argument("--dim", action="append", type=parse_dims, metavar="NAME=SIZE,...",
                   help="as optimize's: the size a symbolic dimension is costed at (repeatable)")
    m.add_argument("--static", action="store_true", help="as optimize's: fix the dynamic dimensions")
    m.add_argument("--iter-limit", action=Count, minimum=0, unit="iterations", default=limits.iter_limit,
                   metavar="N", help=f"saturation iterations, as optimize's --iter-limit (default {limits.iter_limit})")
    m.add_argument("--threads", action=Count, minimum=0, unit="threads", note="0: onnxruntime's default",
                   example=4, default=None, metavar="N",
                   help="onnxruntime intra-op threads (default 1, as optimize times them; 0 = onnxruntime's own)")
    m.add_argument("--time-limit", action=Seconds, default=limits.time_limit, metavar="S",
                   help=f"seconds of saturation (default {limits.time_limit:g})")
    m.set_defaults(func=cmd_measure)
    s = sub.add_parser("show", help="list cached costs")
    s.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="the cache's folder (default: $EQSAT_CACHE_DIR, else eqsat's folder in the user cache)")
    s.add_argument("--limit", action=Count, minimum=0, unit="entries", default=50, metavar="N",
                   help="list at most N entries (default 50)")
    s.set_defaults(func=cmd_show)
