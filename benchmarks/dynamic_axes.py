"""Dynamic axes kept: does a model exported with dynamic axes optimize as a drop-in replacement, and does it gain
what the static-shape run of the same model gains?

For each model, two runs of ``eqsat.optimize`` at the same representative sizes (``--dims``): one keeping the
dynamic axes (the default) and one with them fixed (``dynamic=False``, what eqsat did before). The table gives,
for the dynamic run, whether the output's signature is the original's (input and output names, dtypes and
dimensions, symbolic ones by name), the sizes the numeric check ran at, and what was written; for both runs the
predicted costs and what was written (under measured costs only a model measurably faster end to end than the
original is, as ``eqsat optimize`` does by default); and the end-to-end speedup over the original of each
written model, timed together in interleaved rounds at the representative sizes (onnxruntime CPU, 1 thread;
median of the per-round ratios and its 95 % interval). Target: the dynamic run's speedup at least the static
run's less 2 %.

Models: ONNX files (e.g. the exports ``benchmarks/export_dynamic.py`` writes with torch), or the built-in
``hf_bert_dynamic`` (the transformers 4.x export with dynamic batch and sequence, written without torch).

Saves ``dynamic_axes.{md,json}``.

Usage: python benchmarks/dynamic_axes.py [MODEL.onnx | hf_bert_dynamic ...] [--dims batch=1,sequence=128]
       [--costs analytic|measured] [--time-limit 60] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from _common import parse_sizes, ran_as, save_results

import eqsat
from eqsat.costs.measured_cpu import end_to_end_rounds
from eqsat.onnx_io import read_model
from eqsat.pipeline.candidates import speedup
from eqsat.pipeline.check import trial_feeds


def _model(name: str) -> tuple[str, onnx.ModelProto]:
    if name == "hf_bert_dynamic":
        from eqsat.models.hf_bert import hf_bert
        return name, hf_bert(transformers="4", dynamic=True)
    model, _ = read_model(name)
    return Path(name).stem, model


def signature(model: onnx.ModelProto) -> list[tuple[str, int, list[int | str]]]:
    """Each graph input and output: name, element type, dimensions (a symbolic one by its name)."""
    inits = {t.name for t in model.graph.initializer}
    return [(vi.name, vi.type.tensor_type.elem_type,
             [d.dim_param if not d.HasField("dim_value") else d.dim_value for d in vi.type.tensor_type.shape.dim])
            for vi in [*model.graph.input, *model.graph.output] if vi.name not in inits]


def run(name: str, dims: dict[str, int], costs: str, time_limit: float) -> dict[str, Any]:
    """Both runs of one model, and the end-to-end timing of what they wrote."""
    label, original = _model(name)
    # measured costs: with the end-to-end check, as users run; every run a search (no stored transformation)
    common = {"cost_model": costs, "time_limit": time_limit, "cache": False}
    symbols = set(dims) & {d for _, _, ds in signature(original) for d in ds if isinstance(d, str)}
    at = {k: v for k, v in dims.items() if k in symbols}
    dyn = eqsat.optimize(original, dims=at or None, **common)
    static = eqsat.optimize(original, dims=at or None, dynamic=False, **common)
    feeds = trial_feeds(original, 0, sizes=dyn.dims or at)
    times = end_to_end_rounds([original, dyn.model, static.model], [feeds] * 3, threads=1, rounds=31,
                              budget_s=30.0)
    s_dyn, s_static = speedup(times[0], times[1]), speedup(times[0], times[2])
    return {
        "model": label, "dims": dyn.dims, "axes": dyn.dynamic_axes or "static model",
        "signature_kept": signature(dyn.model) == signature(original),
        "check": "-" if dyn.numeric is None else (
            ("ok" if dyn.numeric.ok else "MISMATCH") + " at " + "; ".join(
                ", ".join(f"{k}={v}" for k, v in s.items()) for s in dyn.numeric.sizes)),
        "dynamic": {"cost_before": dyn.cost_before, "cost_after": dyn.cost_after, "written": dyn.decision,
                    "kept_original": dyn.kept_original,
                    "speedup": [s_dyn.median, s_dyn.low, s_dyn.high]},
        "static": {"cost_before": static.cost_before, "cost_after": static.cost_after, "written": static.decision,
                   "kept_original": static.kept_original,
                   "speedup": [s_static.median, s_static.low, s_static.high]},
        "original_ms": float(np.median(times[0])), "rounds": s_dyn.rounds,
        "within_2pct": s_dyn.median >= 0.98 * s_static.median,
    }


def _written(run: dict[str, Any]) -> str:
    return "original" if run["kept_original"] else "optimized"


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table."""
    out = ["| model | sizes | dynamic axes | signature kept | check | predicted dyn (ms) | predicted static (ms) "
           "| written dyn / static | e2e speedup dynamic | e2e speedup static | dynamic >= static - 2 % |",
           "|---" * 11 + "|"]
    for r in rows:
        d, s = r["dynamic"], r["static"]
        out.append(
            f"| {r['model']} | {', '.join(f'{k}={v}' for k, v in r['dims'].items()) or '-'} | {r['axes']} "
            f"| {'yes' if r['signature_kept'] else 'NO'} | {r['check']} "
            f"| {d['cost_before']:.4g} -> {d['cost_after']:.4g} | {s['cost_before']:.4g} -> {s['cost_after']:.4g} "
            f"| {_written(d)} / {_written(s)} "
            f"| {d['speedup'][0]:.3f}x [{d['speedup'][1]:.3f}, {d['speedup'][2]:.3f}] "
            f"| {s['speedup'][0]:.3f}x [{s['speedup'][1]:.3f}, {s['speedup'][2]:.3f}] "
            f"| {'yes' if r['within_2pct'] else 'NO'} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["hf_bert_dynamic"])
    ap.add_argument("--dims", default="batch=1,sequence=128", help="representative sizes, NAME=SIZE,...")
    ap.add_argument("--costs", default="measured", help="cost model (default measured)")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    dims = parse_sizes(args.dims)
    rows = []
    for m in args.models:
        print(f"{m} ...", file=sys.stderr, flush=True)
        rows.append(run(m, dims, args.costs, args.time_limit))
    text = table(rows)
    print(text)
    head = (f"# Dynamic axes kept vs fixed\n\nCommand: {ran_as()}, {platform.processor() or platform.machine()}; "
            f"costs {args.costs}, time limit {args.time_limit:g} s per run. End-to-end speedups: the original and "
            "both written models timed together in interleaved rounds at the sizes shown (onnxruntime CPU, 1 "
            "thread), median of the per-round ratios [95 % interval].\n\n")
    save_results(args.out, "dynamic_axes", head, text, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
