"""What the fusions into a convolution are worth under a cost model, on TASO's graphs as written.

TASO and Tensat time their graphs in their own runtime, where a ReLU or a residual add after a convolution is a
kernel of its own until a rewrite fuses it into the convolution (cuDNN applies it in the epilogue). eqsat prices
the ONNX it writes, where Conv then Relu (or Add) is two nodes whether the IR fused them or not: a GPU runtime
fuses the pair itself, in the original as in the optimized graph, so the fusion gains nothing here. This script
measures what that difference in pricing is worth: the cost of every ReLU and add that reads a convolution's
output (its only use), and the speedup if each were free, folded into the convolution.

Run: ``python benchmarks/fusion_headroom.py [--costs gpu-sim] [MODEL ...]``; writes
``benchmarks/results/fusion_headroom_<costs>.{md,json}``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from _common import ran_as, save_results

from eqsat.costs import get_cost_model, graph_cost_keys
from eqsat.models import builtin_models
from eqsat.onnx_io import load_model

MODELS = ("taso_bert", "taso_nasrnn", "taso_resnext50", "taso_nasnet_a", "taso_inception_v3", "taso_squeezenet",
          "taso_vgg19")


def headroom(model: str, costs: str) -> dict[str, Any]:
    """The model's cost as written, and that of the relus and adds that read a convolution's only output."""
    g = load_model(builtin_models()[model](), as_written=True)
    cm = get_cost_model(costs)
    producer = {n.output: n for n in g.nodes}
    uses: dict[str, int] = {}
    for n in g.nodes:
        for i in n.inputs:
            uses[i] = uses.get(i, 0) + 1
    node_costs = [sum(cm.cost(k) for k in ks) for ks in graph_cost_keys(g)]
    total = sum(node_costs)
    fused = {"relu": [0, 0.0], "ewadd": [0, 0.0]}
    for n, c in zip(g.nodes, node_costs, strict=True):
        of_conv = any(i in producer and producer[i].op.startswith("conv") and uses[i] == 1 for i in n.inputs)
        if n.op in fused and of_conv:
            fused[n.op][0] += 1
            fused[n.op][1] += c
    relu, add = fused["relu"][1], fused["ewadd"][1]
    return {"model": model, "cost": total, "relus": fused["relu"][0], "relu_ms": relu, "adds": fused["ewadd"][0],
            "add_ms": add, "relu_pct": 100 * (total / (total - relu) - 1),
            "both_pct": 100 * (total / (total - relu - add) - 1)}


def main() -> None:
    """Parse the command line, compute, print and save."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--costs", default="gpu-sim")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    rows = [headroom(m, args.costs) for m in args.models]
    table = "\n".join(["| model | cost as written (ms) | relus of a conv | their cost (ms) | adds of a conv | "
                       "their cost (ms) | speedup, relus fused % | speedup, relus and adds fused % |",
                       "|---|---|---|---|---|---|---|---|"]
                      + [f"| {r['model']} | {r['cost']:.4f} | {r['relus']} | {r['relu_ms']:.4f} | {r['adds']} | "
                         f"{r['add_ms']:.4f} | {r['relu_pct']:.1f} | {r['both_pct']:.1f} |" for r in rows])
    head = (f"# Fusions into a convolution under {args.costs}, TASO's graphs as written\n\nRan as {ran_as()}. "
            "The cost of each ReLU and add that reads a convolution's only output, and the speedup if each were "
            "folded into its convolution (free), as TASO's and Tensat's runtimes count a fusion.\n\n")
    print(head + table)
    save_results(args.out, f"fusion_headroom_{args.costs}", head, table, rows)


if __name__ == "__main__":
    main()
