"""Half precision: does a model exported in float16 (uniformly, or mixed with float32 islands as transformers'
LLaMA computes its RMSNorm) import as fully as its float32 copy, optimize as a drop-in in its own precisions, and
pass the numeric check at a tolerance fit for float16?

For each pair ``NAME_fp16_KIND.onnx`` / ``NAME_KIND.onnx`` in a folder (``benchmarks/export_dynamic.py --half``
writes the first, without ``--half`` the second): the precision eqsat recognises (uniform or mixed with
float32), the operators left opaque in each (by ONNX type; the target is none in the half model that its float32
copy imports), the casts kept as changes of precision, and for ``eqsat.optimize`` of the half model at its
defaults (analytic costs, dynamic axes kept): the costs before and after (each operator priced in its own
precision), whether the signature is the original's, the check's sizes, worst error and tolerance, the run's
time, and the end-to-end speedup of what it wrote over the original (onnxruntime CPU, 1 thread, interleaved
rounds, median ratio and its 95 % interval, at ``--dims``).

Saves ``half_precision.{md,json}``.

Usage: python benchmarks/half_precision.py FOLDER [--dims batch=1,sequence=32] [--time-limit 60]
       [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import parse_sizes, ran_as, save_results
from dynamic_axes import signature

import eqsat
from eqsat import onnx_io
from eqsat.costs.measured_cpu import end_to_end_rounds
from eqsat.pipeline.candidates import speedup
from eqsat.pipeline.check import trial_feeds


def _opaque(path: Path) -> Counter[str]:
    graph = onnx_io.load_model(path, symbolic=True)
    return Counter(n.p["op_type"] for n in graph.nodes if n.is_opaque)


def run(half: Path, single: Path, dims: dict[str, int], time_limit: float) -> dict[str, Any]:
    """One model: its import beside its float32 copy's, its optimization and the end-to-end timing."""
    original, _ = onnx_io.read_model(half)
    graph = onnx_io.load_model(half, symbolic=True)
    kind = ("uniform " + onnx_io.uniform_half(original)) if onnx_io.uniform_half(original) else (
        f"float32 + {onnx_io.mixed_half(original)}" if onnx_io.mixed_half(original) else "float32")
    opaque_half, opaque_single = _opaque(half), _opaque(single)
    start = time.perf_counter()
    res = eqsat.optimize(original, time_limit=time_limit, cache=False)
    seconds = time.perf_counter() - start
    symbols = {d for _, _, ds in signature(original) for d in ds if isinstance(d, str)}
    feeds = trial_feeds(original, 0, sizes={k: v for k, v in dims.items() if k in symbols})
    times = end_to_end_rounds([original, res.model], [feeds] * 2, threads=1, rounds=21, budget_s=30.0)
    s = speedup(times[0], times[1])
    check = res.numeric.summary() if res.numeric is not None else "-"
    worst = re.search(r"worst error ([0-9.e+-]+)", check)
    tol = re.search(r"tolerance ([0-9.e+-]+)", check)
    return {
        "model": half.stem, "precision": kind,
        "opaque": sum(opaque_half.values()), "opaque_float32_copy": sum(opaque_single.values()),
        "opaque_only_in_half": dict(opaque_half - opaque_single),
        "casts": sum(n.op == "cast" for n in graph.nodes),
        "cost_before": res.cost_before, "cost_after": res.cost_after, "written": res.decision,
        "kept_original": res.kept_original, "signature_kept": signature(res.model) == signature(original),
        "check_ok": res.numeric is not None and res.numeric.ok,
        "worst_error": float(worst.group(1)) if worst else None, "tolerance": float(tol.group(1)) if tol else None,
        "seconds": seconds, "speedup": [s.median, s.low, s.high],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--dims", type=parse_sizes, default={"batch": 1, "sequence": 32})
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    pairs = []
    for half in sorted(args.folder.glob("*_fp16_*.onnx")):
        single = half.with_name(half.name.replace("_fp16", ""))
        if single.exists():
            pairs.append((half, single))
    rows = []
    for half, single in pairs:
        print(f"{half.name} ...", flush=True)
        rows.append(run(half, single, args.dims, args.time_limit))
    head = ["model", "precision", "opaque (float32 copy)", "casts kept", "cost before -> after (ms)",
            "signature kept", "check (worst error / tolerance)", "written", "time (s)", "speedup (95% CI)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        worst = "-" if r["worst_error"] is None else f"{r['worst_error']:.1e} / {r['tolerance']:g}"
        lines.append(
            f"| {r['model']} | {r['precision']} | {r['opaque']} ({r['opaque_float32_copy']}) | {r['casts']} | "
            f"{r['cost_before']:.3f} -> {r['cost_after']:.3f} | {'yes' if r['signature_kept'] else 'NO'} | "
            f"{'ok' if r['check_ok'] else 'FAILED'} ({worst}) | "
            f"{'original' if r['kept_original'] else 'optimized'} | {r['seconds']:.1f} | "
            f"{r['speedup'][0]:.3f}x ({r['speedup'][1]:.3f}-{r['speedup'][2]:.3f}) |")
    table = "\n".join(lines)
    print(table)
    dims = ",".join(f"{k}={v}" for k, v in args.dims.items())
    save_results(args.out, "half_precision",
                 f"# Half precision: float16 exports beside their float32 copies\n\n{ran_as()}\n\nTimed at {dims}, "
                 "onnxruntime CPU, 1 thread (2-core machine).\n\n", table, rows)


if __name__ == "__main__":
    main()
