"""Depth without the cost of depth: how optimize time grows from a 2-layer transformer export to a deep one, with
repeated blocks optimized once (the default) and every block saturated (``reuse_blocks=False``).

For each pair SHALLOW:DEEP of ONNX files (``benchmarks/export_dynamic.py OUT bert bert:12 llama llama:16``): the
analytic run's time per stage, total, stop reason, e-graph size and predicted speedup, and the measured-cost run's
time and its end-to-end speedup (the candidate timed against the original under onnxruntime, 1 thread; the
original's own timing when it is kept). The
engine's stages (saturate, extract) grow with what is saturated; import, export and the numeric check read,
write and run the whole model, so they grow with its weights and layers whatever the optimizer does. Target of
issue 29: the deep export optimizes in at most twice the 2-layer time, with the same speedup.

Saves ``depth.{md,json}``.

Usage: python benchmarks/depth.py SHALLOW.onnx:DEEP.onnx ... [--dims batch=1,sequence=128] [--time-limit 60]
       [--no-measured] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from _common import parse_sizes, ran_as, save_results

import eqsat

ENGINE = ("saturate", "cost", "extract")


def run(path: str, dims: dict[str, int], time_limit: float, reuse: bool, measured: bool) -> dict[str, Any]:
    """One model, one setting: the analytic run (the faster of two: reading and writing hundreds of MB of weights
    varies from run to run on a small machine), then (``measured``) the measured-cost run."""
    Path(path).read_bytes()  # the file in the page cache for every setting alike
    runs = []
    for _ in range(2):
        t = time.perf_counter()
        a = eqsat.optimize(path, dims=dims, time_limit=time_limit, reuse_blocks=reuse, cache=False)
        runs.append((time.perf_counter() - t, a))
    seconds, a = min(runs, key=lambda r: r[0])
    row: dict[str, Any] = {
        "model": Path(path).stem, "reuse_blocks": reuse, "blocks": a.blocks, "seconds": seconds,
        "stages": {k: round(v, 3) for k, v in a.stage_seconds.items()}, "stop": str(a.stop_reason),
        "enodes": a.egraph_size[0], "predicted": a.cost_before / a.cost_after, "check_ok": a.numeric.ok}
    if measured:
        t = time.perf_counter()
        m = eqsat.optimize(path, dims=dims, time_limit=time_limit, reuse_blocks=reuse, cost_model="measured",
                           cache=False)
        lat = m.latency
        again = lat.again if lat is not None and lat.again is not None else lat.race if lat is not None else None
        row["measured"] = {"seconds": time.perf_counter() - t, "written": m.decision,
                           "e2e": None if again is None else [again.median, again.low, again.high]}
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table."""
    out = ["| model | blocks reused | analytic s | engine s (saturate+cost+extract) | other stages s | stop "
           "| e-nodes | predicted | measured s | measured e2e (1 thread) |", "|---" * 10 + "|"]
    for r in rows:
        st = r["stages"]
        engine = sum(st.get(k, 0.0) for k in ENGINE)
        other = sum(v for k, v in st.items() if k not in ENGINE)
        m = r.get("measured")
        e2e = "-" if not m or not m["e2e"] else f"{m['e2e'][0]:.3f}x [{m['e2e'][1]:.3f}, {m['e2e'][2]:.3f}]"
        out.append(f"| {r['model']} | {r['blocks'].split(':')[0] if r['blocks'] else 'no'} | {r['seconds']:.1f} "
                   f"| {engine:.2f} | {other:.2f} | {r['stop']} | {r['enodes']} | {r['predicted']:.4f}x "
                   f"| {'-' if not m else format(m['seconds'], '.1f')} | {e2e} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", help="SHALLOW.onnx:DEEP.onnx")
    ap.add_argument("--dims", default="batch=1,sequence=128", help="representative sizes, NAME=SIZE,...")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--no-measured", action="store_true", help="analytic runs only")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    dims = parse_sizes(args.dims)
    rows = []
    for pair in args.pairs:
        shallow, deep = pair.split(":")
        for path, reuse in ((shallow, True), (deep, True), (deep, False)):
            print(f"{path} (reuse_blocks={reuse}) ...", file=sys.stderr, flush=True)
            rows.append(run(path, dims, args.time_limit, reuse, not args.no_measured))
    text = table(rows)
    print(text)
    head = (f"# Depth without the cost of depth\n\nCommand: {ran_as()}. Per model: the analytic run (seconds in total, "
            "in the engine's stages and in the others: import, export, check), then the measured-cost run and the "
            "end-to-end speedup it measured (onnxruntime, 1 thread, the timing that decided).\n\n")
    save_results(args.out, "depth", head, text, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
