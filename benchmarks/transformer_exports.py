"""The models users export today, as exported (dynamic axes kept): what stays opaque, how long optimizing takes,
and is the optimized model faster end to end than the original under onnxruntime?

For each ONNX file (the exports ``benchmarks/export_dynamic.py`` writes: BERT, GPT-2, a LLaMA-style decoder and
ViT, 2 layers each, with torch's dynamo and TorchScript exporters):

* the opaque operator types that compute float tensors, split into those in the data flow (they read an
  activation, so they stop rewrites through them) and leaves (they compute a float tensor from ids, masks,
  sizes and weights only: an embedding lookup, an additive attention mask, rotary positions); integer and
  boolean size and mask arithmetic is counted apart (it stays computed at run time with dynamic axes);
* ``eqsat.optimize`` with analytic costs (its time and stop reason), then with measured CPU costs (its time,
  what it wrote);
* the written model, onnxruntime's own transformer optimizer's output where it loads, and eqsat's (measured)
  output for that output (the two tools chained: the optimizer's fused kernels import as what they fuse,
  ``eqsat/ops/contrib.py``; any left opaque are listed), timed against the original end to end at the
  representative sizes in onnxruntime at its default level (``ORT_ENABLE_ALL``), with 1 and 2 intra-op threads
  (median of the per-round ratios in interleaved rounds, 95 % interval);
* the ceiling at 1 thread (``_ort_profile``): the speedup if every kernel but the products with a weight took no
  time, from onnxruntime's profile of the original.

Targets of issue 29: no opaque float operator but ``Gather``; a geometric-mean speedup of at least 1.3x, none
below 0.99x; optimize time at most 30 s.

Saves ``transformer_exports.{md,json}`` and ``transformer_exports.png`` (with matplotlib), or with ``--target
onnxruntime`` (the measured runs may write onnxruntime's fused kernels) ``transformer_exports_onnxruntime.*``. (Not
``transformers.py``: the exports script, run from this folder, imports Hugging Face ``transformers``, which a
file of that name here would shadow.)

Usage: python benchmarks/transformer_exports.py EXPORTS/*.onnx [--dims batch=1,sequence=128] [--time-limit 60]
       [--ort-python /tmp/torchenv/bin/python] [--target onnx|onnxruntime] [--out benchmarks/results]
       python benchmarks/transformer_exports.py --render benchmarks/results/transformer_exports.json  (plot only)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import geomean, parse_sizes, ran_as, save_results


def opaque_ops(graph: Any) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Opaque operator types: float ones in the data flow, float leaves (no activation read), the others (sizes,
    masks)."""
    dtypes = graph.dtypes
    # activations: float graph inputs and everything computed from one or from a leaf; weights are not
    active = {i.name for i in graph.inputs if i.dtype.startswith("float")}
    flow, leaves, others = Counter(), Counter(), Counter()
    seen: set[str] = set()
    for n in graph.nodes:
        reads_activation = any(i in active for i in n.inputs)
        is_float = str(dtypes[n.output]).startswith("float")
        if n.op == "opaque" and n.p["key"] not in seen:
            seen.add(n.p["key"])
            kind = n.p["op_type"] if n.p["domain"] in ("", "ai.onnx") else f"{n.p['domain']}:{n.p['op_type']}"
            (others if not is_float else flow if reads_activation else leaves)[kind] += 1
        if is_float and (reads_activation or n.op == "opaque"):  # sizes and masks are never activations
            active.add(n.output)
    return flow, leaves, others


def transformer_optimizer(path: str, python: str) -> Any | None:
    """onnxruntime's transformer optimizer's output for the model (its type guessed from the file name), run by
    the interpreter ``python`` (the optimizer imports torch, which eqsat does not depend on: give the exports'
    environment), or None where it does not load or fails."""
    import onnx

    stem = Path(path).stem
    kind = "bert" if "bert" in stem else "vit" if "vit" in stem else "gpt2"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ort_optimized.onnx"
        code = ("import sys\nfrom onnxruntime.transformers import optimizer\n"
                "optimizer.optimize_model(sys.argv[1], model_type=sys.argv[2], num_heads=0, hidden_size=0, "
                "opt_level=None, use_gpu=False).save_model_to_file(sys.argv[3])\n")
        try:
            done = subprocess.run([python, "-c", code, path, kind, str(out)], capture_output=True, text=True,
                                  timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            print(f"  onnxruntime's transformer optimizer did not run on {stem}: {e}", file=sys.stderr)
            return None
        if done.returncode or not out.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"  onnxruntime's transformer optimizer failed on {stem}: {last}", file=sys.stderr)
            return None
        return onnx.load(str(out))


def run(path: str, dims: dict[str, int], time_limit: float, ort_python: str, target: str = "onnx") -> dict[str, Any]:
    """One model: opaque operators, both optimizations, and the end-to-end timings (the measured runs for
    ``target``)."""
    from _ort_profile import ceiling, kernel_times, summary

    import eqsat
    from eqsat.costs.measured_cpu import end_to_end_rounds
    from eqsat.ir.symbols import graph_symbols
    from eqsat.onnx_io import load_with_axes, opaque_reasons, read_model
    from eqsat.pipeline.candidates import speedup
    from eqsat.pipeline.check import trial_feeds

    model, label = read_model(path)
    graph, fixed = load_with_axes(model, label=label)
    symbols = set(graph_symbols(graph).generic)
    at = {k: v for k, v in dims.items() if k in symbols}
    flow, leaves, others = opaque_ops(graph)
    t = time.perf_counter()
    analytic = eqsat.optimize(model, dims=at or None, time_limit=time_limit, cache=False)
    analytic_s = time.perf_counter() - t
    t = time.perf_counter()
    measured = eqsat.optimize(model, dims=at or None, cost_model="measured", time_limit=time_limit, target=target,
                              cache=False)
    measured_s = time.perf_counter() - t
    feeds = trial_feeds(model, 0, sizes=measured.dims or at)
    times_1, share = kernel_times(model, feeds, threads=1)
    ort_opt = transformer_optimizer(path, ort_python)
    models = [model, measured.model]
    chained = None
    if ort_opt is not None:  # and eqsat run over the optimizer's output (its fused kernels imported)
        chained = eqsat.optimize(ort_opt, dims=at or None, cost_model="measured", time_limit=time_limit,
                                 target=target, cache=False)
        models += [ort_opt, chained.model]
    speedups, ort_speedups, chained_speedups = {}, {}, {}
    for threads in (1, 2):
        times = end_to_end_rounds(models, [feeds] * len(models), threads=threads, rounds=31, budget_s=20.0)
        s = speedup(times[0], times[1])
        speedups[threads] = [s.median, s.low, s.high]
        if ort_opt is not None:
            o, c = speedup(times[0], times[2]), speedup(times[0], times[3])
            ort_speedups[threads] = [o.median, o.low, o.high]
            chained_speedups[threads] = [c.median, c.low, c.high]
    return {"model": Path(path).stem, "dims": measured.dims, "axes": measured.dynamic_axes or "static model",
            "fixed_because": fixed, "opaque_float": dict(flow), "opaque_float_leaves": dict(leaves),
            "opaque_sizes_masks": sum(others.values()),
            "ceiling_1_thread": ceiling(share), "weight_product_share": share,
            "largest_other_kernels": summary(times_1),
            "analytic": {"seconds": analytic_s, "stop": str(analytic.stop_reason), "cost_before": analytic.cost_before,
                         "cost_after": analytic.cost_after},
            "measured": {"seconds": measured_s, "cost_before": measured.cost_before,
                         "cost_after": measured.cost_after, "written": measured.decision,
                         "kernels": measured.kernels},
            "speedup": speedups, "ort_transformer_optimizer": ort_speedups,
            "ort_optimizer_then_eqsat": chained_speedups,
            "ort_optimizer_then_eqsat_opaque": {} if chained is None else
            {k: n for k, n, _ in opaque_reasons(chained.original) if ":" in k or k == "SimplifiedLayerNormalization"}}


def _kernels(kernels: dict[str, int] | None) -> str:
    return "; kernels " + _ops(kernels) if kernels else ""


def _ops(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "none"


def _ratio(v: list[float] | None) -> str:
    return f"{v[0]:.3f}x [{v[1]:.3f}, {v[2]:.3f}]" if v else "does not load"


def table(rows: list[dict[str, Any]]) -> str:
    """The results as markdown tables, with the geometric means."""
    out = ["| model | opaque float ops in the data flow | float leaves | size/mask ops | analytic: s, stop, "
           "predicted | measured: s, written |", "|---" * 6 + "|"]
    for r in rows:
        a, m = r["analytic"], r["measured"]
        out.append(f"| {r['model']} | {_ops(r['opaque_float'])} | {_ops(r['opaque_float_leaves'])} "
                   f"| {r['opaque_sizes_masks']} "
                   f"| {a['seconds']:.1f} s, {a['stop']}, {a['cost_before']:.4g} -> {a['cost_after']:.4g} ms "
                   f"| {m['seconds']:.1f} s, {m['written']}{_kernels(m.get('kernels'))} |")
    out += ["", "| model | eqsat, 1 thread | eqsat, 2 threads | onnxruntime's transformer optimizer, 1 thread "
            "| its 2 threads | the optimizer, then eqsat, 1 thread | its 2 threads | fused kernels left opaque "
            "| ceiling, 1 thread (weight products' share) | largest other kernels, ms |", "|---" * 10 + "|"]
    for r in rows:
        o, c = r["ort_transformer_optimizer"], r.get("ort_optimizer_then_eqsat", {})
        others = ", ".join(f"{k} {v:.2f}" for k, v in r["largest_other_kernels"].items())
        left = _ops(r.get("ort_optimizer_then_eqsat_opaque", {})) if o else "-"
        out.append(f"| {r['model']} | {_ratio(r['speedup'][1])} | {_ratio(r['speedup'][2])} "
                   f"| {_ratio(o.get(1))} | {_ratio(o.get(2))} | {_ratio(c.get(1))} | {_ratio(c.get(2))} | {left} "
                   f"| {r['ceiling_1_thread']:.3f}x ({100 * r['weight_product_share']:.1f} %) | {others} |")
    for threads in (1, 2):
        values = [r["speedup"][threads][0] for r in rows]
        if values:
            out.append(f"\nGeometric mean, {threads} thread(s): {geomean(values):.3f}x over {len(values)} models "
                       f"(lowest {min(values):.3f}x).")
        for key, name in (("ort_transformer_optimizer", "onnxruntime's transformer optimizer"),
                          ("ort_optimizer_then_eqsat", "the optimizer, then eqsat")):
            some = [r[key][threads][0] for r in rows if r.get(key)]
            if some:
                out.append(f"{name}, {threads} thread(s): {geomean(some):.3f}x over {len(some)} models.")
    if rows:
        out.append(f"\nCeiling at 1 thread, geometric mean: {geomean([r['ceiling_1_thread'] for r in rows]):.3f}x "
                   "(every kernel but the products with a weight taking no time).")
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """End-to-end speedup per model at 1 thread (eqsat, onnxruntime's transformer optimizer, with their
    intervals) beside the ceiling; False when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [r["model"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(models) + 2), 4.2))
    def one_thread(r: dict[str, Any], key: str) -> list[float] | None:  # JSON keys are strings once saved
        v = r.get(key) or {}
        return v.get("1") or v.get(1)

    series = [("eqsat", [one_thread(r, "speedup") for r in rows]),
              ("onnxruntime transformer optimizer", [one_thread(r, "ort_transformer_optimizer") for r in rows]),
              ("the optimizer, then eqsat", [one_thread(r, "ort_optimizer_then_eqsat") for r in rows])]
    width = 0.2
    for j, (label, values) in enumerate(series):
        xs = [i + (j - 1.5) * width for i, v in enumerate(values) if v]
        ys = [v[0] for v in values if v]
        err = [[v[0] - v[1] for v in values if v], [v[2] - v[0] for v in values if v]]
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=label)
    ax.bar([i + 1.5 * width for i in range(len(rows))], [r["ceiling_1_thread"] for r in rows], width,
           color="lightgray",
           label="ceiling (all but weight products free)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.3, color="red", linewidth=0.8, linestyle="--", label="issue 29's target (geometric mean)")
    ax.set_xticks(range(len(models)), models, rotation=30, ha="right")
    ax.set_ylabel("speedup over onnxruntime, 1 thread")
    ax.set_ylim(0.8, max(1.4, max(r["ceiling_1_thread"] for r in rows) + 0.05))
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--render", metavar="JSON", help="only draw the plot from a results file this script saved")
    ap.add_argument("--dims", default="batch=1,sequence=128", help="representative sizes, NAME=SIZE,...")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--ort-python", default=sys.executable,
                    help="the Python that runs onnxruntime's transformer optimizer (it needs torch: the exports' "
                         "environment; default this one)")
    ap.add_argument("--target", default="onnx", choices=("onnx", "onnxruntime"),
                    help="the measured runs' target (onnxruntime: its fused kernels may be written); results go "
                         "to transformer_exports_onnxruntime.* for it")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    if args.render:
        rows = json.loads(Path(args.render).read_text(encoding="utf-8"))
        out = Path(args.render).with_suffix(".png")
        print(f"wrote {out}" if plot(rows, out) else "matplotlib is not installed: no plot")
        return 0
    if not args.models:
        ap.error("give the exported models (or --render JSON)")
    dims = parse_sizes(args.dims)
    rows = []
    for m in args.models:
        print(f"{m} ...", file=sys.stderr, flush=True)
        rows.append(run(m, dims, args.time_limit, args.ort_python, args.target))
    text = table(rows)
    print(text)
    stem = "transformer_exports" + ("" if args.target == "onnx" else f"_{args.target}")
    head = (f"# The models users export today\n\nCommand: {ran_as()}; time limit {args.time_limit:g} s per run. "
            "End-to-end: the original and the written model (measured costs) in "
            "interleaved rounds at the sizes given, onnxruntime at its default level, median of the per-round "
            f"ratios [95 % interval]. Target of the measured runs: {args.target}.\n\n")
    save_results(args.out, stem, head, text, rows)
    plot(rows, Path(args.out) / f"{stem}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
