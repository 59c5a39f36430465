"""Optimized cost of each built-in model: the figures a refactoring must leave unchanged.

For every model, ``eqsat.optimize`` with the analytic cost model (deterministic: limits by iterations and
e-nodes, a time limit far above what these models need) and, with ``--measured CACHE``, with measured CPU costs
read from (or written to) that cost cache and no end-to-end timing, so two commits that share the cache price
every operator alike. Prints a table and saves ``model_costs.{md,json}`` under ``--out``.

It also runs from another checkout's environment (the imports fall back to the layout before 0.2), which is how
the redesign was checked: ``cd OLD && .venv/bin/python NEW/benchmarks/model_costs.py --out /tmp/old``.

Usage: python benchmarks/model_costs.py [--models NAME ...] [--measured CACHE_DIR] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import eqsat

try:  # the script's folder is on sys.path when run as a script
    from _common import git_commit
except ImportError:  # run from another checkout: no commit to name
    def git_commit(mark_uncommitted: bool = False) -> str:
        return "unknown"

try:  # the layout since the redesign
    from eqsat import models
    from eqsat.costs import get_cost_model
except ImportError:  # before it (eqsat.zoo, cost models in eqsat.gpu)
    from eqsat import zoo as models  # type: ignore[no-redef]
    from eqsat.gpu import get_cost_model  # type: ignore[no-redef]

#: the built-in models and two light zoo models (measured costs: the first four)
DEFAULT = ["bert_attention_block", "nasrnn_cell", "two_matmul_shared_input", "small_cnn", "taso_bert", "taso_nasrnn",
           "taso_resnext50", "taso_nasnet_a", "taso_inception_v3", "taso_squeezenet", "taso_vgg19", "hf_bert"]


def build(name: str) -> Any:
    """A built-in or light-zoo model by name."""
    builders = models.builtin_models()
    return builders[name]() if name in builders else models.load_zoo_model(name)


def run(names: list[str], measured: str | None) -> list[dict[str, Any]]:
    """One row per model and cost model: costs before and after, e-nodes, stop reason, ONNX nodes, seconds."""
    rows = []
    for name in names:
        for costs in ["analytic"] + (["measured"] if measured else []):
            cm = get_cost_model("analytic") if costs == "analytic" else \
                get_cost_model("measured", cache_dir=measured, threads=1)
            t = time.perf_counter()
            r = eqsat.optimize(build(name), cost_model=cm, time_limit=300, verify_latency=False, cache=False)
            rows.append({"model": name, "costs": costs, "before": round(r.cost_before, 6),
                         "after": round(r.cost_after, 6), "enodes": r.iterations[-1].enodes if r.iterations else 0,
                         "stop": str(r.stop_reason), "onnx_nodes": list(r.onnx_nodes),
                         "cache_misses": getattr(cm, "misses", None), "seconds": round(time.perf_counter() - t, 1)})
            print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=DEFAULT)
    ap.add_argument("--measured", metavar="CACHE_DIR", help="also optimize with measured CPU costs from this cache")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    rows = run(args.models, args.measured)
    md = ["| model | costs | before (ms) | after (ms) | e-nodes | stopped | ONNX nodes | seconds |",
          "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['model']} | {r['costs']} | {r['before']:.6g} | {r['after']:.6g} | {r['enodes']} | {r['stop']} | "
           f"{r['onnx_nodes'][0]} -> {r['onnx_nodes'][1]} | {r['seconds']} |" for r in rows]
    cmd = "python benchmarks/model_costs.py" + (f" --measured {args.measured}" if args.measured else "")
    commit = git_commit(mark_uncommitted=True)
    text = (f"# Optimized cost of the built-in models\n\ncommit {commit}, eqsat {eqsat.__version__}, "
            f"{time.strftime('%Y-%m-%d')}\n\nCommand: `{cmd}`\n\n" + "\n".join(md) + "\n")
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "model_costs.md").write_text(text)
    (args.out / "model_costs.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
