"""Time the optimize pipeline per stage on the zoo and built-in models; print a table and save it.

Usage: python benchmarks/pipeline.py [MODEL ...] [--time-limit 60] [--costs analytic] [--out benchmarks/results]
Target (issue 2): resnet50 end to end under 30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

from _common import git_commit

DEFAULT_MODELS = ["squeezenet", "resnet50", "inception_v1", "densenet121", "bert_attention_block", "nasrnn_cell",
                  "two_matmul_shared_input"]
STAGES = ["import", "saturate", "cost", "extract", "export", "check"]


def run(models: list[str], time_limit: float, costs: str) -> list[dict]:
    """Optimize each model and collect per-stage times and costs."""
    from eqsat import models as zoo
    from eqsat.costs import get_cost_model
    from eqsat.pipeline import optimize

    builders = zoo.builtin_models()
    rows = []
    for name in models:
        model = builders[name]() if name in builders else zoo.load_zoo_model(name)
        t0 = time.perf_counter()
        try:
            res = optimize(model, cost_model=get_cost_model(costs), time_limit=time_limit, cache=False)
        except Exception as e:  # a failing model is a row of the table, not the end of the run
            rows.append({"model": name, "error": f"{type(e).__name__}: {e}"})
            continue
        total = time.perf_counter() - t0
        last = res.iterations[-1]
        rows.append({
            "model": name, "nodes": len(res.original.nodes), "nodes_after": len(res.graph.nodes),
            "iterations": len(res.iterations) - 1, "stop": res.stop_reason, "enodes": last.enodes,
            "eclasses": last.eclasses, "cost_before": res.cost_before, "cost_after": res.cost_after,
            "speedup": res.speedup, "solver": res.solver_status, "total_s": total,
            **{f"{s}_s": res.stage_seconds.get(s, 0.0) for s in STAGES},
        })
        print(f"{name}: {total:.1f} s, cost {res.cost_before:.4g} -> {res.cost_after:.4g}", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown table of the results."""
    head = ["model", "nodes", "after", "iters", "stop", "e-nodes", "cost before", "cost after", "speedup",
            "solver", *STAGES, "total s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error']} |" + " |" * (len(head) - 2))
            continue
        cells = [r["model"], r["nodes"], r["nodes_after"], r["iterations"], r["stop"], r["enodes"],
                 f"{r['cost_before']:.4f}", f"{r['cost_after']:.4f}", f"{r['speedup']:.3f}x", r["solver"],
                 *[f"{r[f'{s}_s']:.2f}" for s in STAGES], f"{r['total_s']:.1f}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write benchmarks/results/pipeline.{md,json}."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--costs", default="analytic")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)
    rows = run(args.models, args.time_limit, args.costs)
    md = table(rows)
    print(md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    header = (f"# Pipeline timings\n\ncommit {git_commit()}, {datetime.date.today()}, {platform.processor() or 'cpu'}, "
              f"cost model {args.costs}, time limit {args.time_limit} s\n\n"
              f"Command: `python benchmarks/pipeline.py {' '.join(args.models)} --time-limit {args.time_limit}`\n\n")
    (out / "pipeline.md").write_text(header + md + "\n")
    (out / "pipeline.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
