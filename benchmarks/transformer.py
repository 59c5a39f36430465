"""BERT as Hugging Face transformers exports it: what imports, and is the optimized model faster end to end?

For each export variant of one BERT-base encoder layer (sequence 128, hidden 768, 12 heads; embeddings and
pooler included, `eqsat.models.hf_bert`): the IR nodes and the opaque node types with their reasons, then
`eqsat.optimize` with measured CPU costs (onnxruntime, one thread), then the original and the optimized
model timed end to end in onnxruntime with all its graph optimizations (`ORT_ENABLE_ALL`, one thread; median
of interleaved runs). The baseline is therefore onnxruntime's own optimizer on the original.

Usage: python benchmarks/transformer.py [--variants 5-eager 5-sdpa 4-eager 4-sdpa] [--layers 1]
       [--rounds 30] [--time-limit 120] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

from _common import git_commit

VARIANTS = ("5-eager", "5-sdpa", "4-eager", "4-sdpa")


def build(variant: str, layers: int) -> Any:
    """The export of one variant: ``<transformers major>-<attention implementation>``."""
    from eqsat import models
    gen, attention = variant.split("-")
    return models.hf_bert(layers=layers, transformers=gen, attention=attention, token_type_ids=gen == "4")


def run(variant: str, layers: int, rounds: int, time_limit: float) -> dict[str, Any]:
    """Import, optimize with measured costs, time both models."""
    from eqsat import onnx_io
    from eqsat.costs import get_cost_model
    from eqsat.costs.measured_cpu import end_to_end_latency
    from eqsat.pipeline import optimize

    model = build(variant, layers)
    graph = onnx_io.load_model(model)
    opaque = onnx_io.opaque_reasons(graph)
    t0 = time.perf_counter()
    res = optimize(model, cost_model=get_cost_model("measured", threads=1), time_limit=time_limit,
                   verify_latency=False, cache=False)
    seconds = time.perf_counter() - t0
    feeds = onnx_io.random_feeds(model, seed=0)
    before, after = end_to_end_latency([model, res.model], [feeds, feeds], rounds=rounds)
    row = {"variant": variant, "layers": layers, "ir_nodes": len(graph.nodes),
           "opaque": [[op, n, why] for op, n, why in opaque],
           "predicted_before_ms": res.cost_before, "predicted_after_ms": res.cost_after,
           "original_ms": before, "optimized_ms": after, "speedup": before / after, "optimize_s": seconds,
           "checked": bool(res.numeric and res.numeric.ok),
           "rules_fired": dict(sorted(res.rules_fired.items(), key=lambda kv: -kv[1])[:8]),
           "onnx_nodes": list(res.onnx_nodes)}
    print(f"{variant}: {before:.3f} ms -> {after:.3f} ms ({before / after:.3f}x), optimize {seconds:.1f} s",
          file=sys.stderr)
    return row


def main(argv: list[str] | None = None) -> int:
    """Run every variant, print the table, save benchmarks/results/transformer.{md,json}."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)
    rows = [run(v, args.layers, args.rounds, args.time_limit) for v in args.variants]
    from eqsat.costs import OnnxRuntimeCostModel

    ident = OnnxRuntimeCostModel(threads=1).device_identity()
    md = ["# BERT-base as transformers exports it, optimized with measured CPU costs\n",
          f"commit {git_commit(mark_uncommitted=True)}, {datetime.date.today()}, {ident['cpu']}, "
          f"onnxruntime {ident['onnxruntime']}, 1 thread, all onnxruntime graph optimizations on both models\n",
          f"Command: `python benchmarks/transformer.py --layers {args.layers} --rounds {args.rounds} "
          f"--time-limit {args.time_limit:g}`\n",
          "| export | IR nodes | opaque types | predicted before -> after (ms) | original (ms) | optimized (ms) "
          "| speedup | optimize (s) | checked |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['variant']} | {r['ir_nodes']} | {len(r['opaque'])} | {r['predicted_before_ms']:.3f} -> "
                  f"{r['predicted_after_ms']:.3f} | {r['original_ms']:.3f} | {r['optimized_ms']:.3f} | "
                  f"{r['speedup']:.3f}x | {r['optimize_s']:.1f} | {'yes' if r['checked'] else 'NO'} |")
    md.append("\n## What stays opaque, and why\n")
    for r in rows:
        md.append(f"- **{r['variant']}**: " + "; ".join(f"{op} x{n}: {why}" for op, n, why in r["opaque"]))
    text = "\n".join(md) + "\n"
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "transformer.md").write_text(text)
    (out / "transformer.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
