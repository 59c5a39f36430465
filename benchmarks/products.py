"""Where a model's time goes on this CPU: its matrix products alone, separate and merged.

The model's MatMul/Gemm/Conv nodes run as a model of their own (same shapes and weights, activations fed as
inputs, each product's first element returned), once as written and once *merged* (every group of MatMuls
that share their left operand as one MatMul over concatenated weights, TASO's and eqsat's merge). The table
gives the products' share of the model's latency, what merging them gains on this runtime, and the rate at
which they stream weights (GB/s) and compute (GFLOP/s). The *floor* is one MatMul that reads all the weights
a run must read: where a model is not much slower than its floor (memory-bound, as TASO's NasRNN at batch 1),
no rewrite that keeps every weight and fp32 can make it much faster. The products' columns are measurements,
not bounds: a rewrite can also change how fast a product runs (onnxruntime's Gemm with a transposed weight is
not its MatMul).

Usage: python benchmarks/products.py [--models taso_nasrnn taso_bert ...] [--threads 1 2] [--rounds 15]
Writes benchmarks/results/products.{md,json}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from _common import git_commit  # the script's folder is on sys.path
from onnx import helper, numpy_helper

HEAVY = ("MatMul", "Gemm", "Conv")
DEFAULT = ["taso_nasrnn", "nasrnn_cell", "taso_bert", "bert_attention_block", "hf_bert", "squeezenet"]


def _shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Concrete shapes of the heavy nodes' tensors: the model run once in onnxruntime with them as outputs
    (exports leave symbolic dimensions that shape inference cannot settle)."""
    import onnxruntime as ort

    from eqsat import onnx_io
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    names = sorted({t for n in model.graph.node if n.op_type in HEAVY for t in [*n.input, *n.output]
                    if t and t not in inits})
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None)
                              for t in names if t not in known)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    values = sess.run(outs, onnx_io.random_feeds(model, seed=0))
    return {**inits, **{n: list(v.shape) for n, v in zip(outs, values, strict=True)}}


def heavy_only(model: onnx.ModelProto, merged: bool = False) -> tuple[onnx.ModelProto, dict[str, float]]:
    """The model's heavy nodes alone: each one's activation inputs become graph inputs, its weights stay
    initializers, every output is a graph output. With ``merged``, MatMuls that share their left operand and
    have constant right operands become one MatMul over the concatenated weights. Also returns the heavy
    part's weight bytes and FLOPs."""
    shapes = _shapes(model)
    inits = {t.name: t for t in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type in HEAVY]
    if merged:
        groups: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        rest = []
        for n in nodes:
            if n.op_type == "MatMul" and n.input[1] in inits and len(shapes[n.input[1]]) == 2:
                groups[n.input[0]].append(n)
            else:
                rest.append(n)
        new_inits = dict(inits)
        nodes = list(rest)
        for x, ns in groups.items():
            if len(ns) == 1:
                nodes += ns
                continue
            w = np.concatenate([numpy_helper.to_array(inits[n.input[1]]) for n in ns], axis=1)
            name = f"merged_{ns[0].input[1]}"
            new_inits[name] = numpy_helper.from_array(w, name)
            nodes.append(helper.make_node("MatMul", [x, name], [f"{name}_out"]))
            shapes[f"{name}_out"] = [*shapes[ns[0].output[0]][:-1], w.shape[1]]
        inits = new_inits
    used_inits = {i for n in nodes for i in n.input if i in inits}
    made = {n.output[0] for n in nodes}  # a product of another product (attention) stays computed inside
    acts = sorted({i for n in nodes for i in n.input if i and i not in inits and i not in made})
    # each product's first element is an output: returning whole tensors would time copying them out
    tails, outs, extra = [], [], []
    for n in nodes:
        rank = len(shapes[n.output[0]])
        zeros, ones = f"{n.output[0]}_z", f"{n.output[0]}_o"
        extra += [numpy_helper.from_array(np.zeros(rank, np.int64), zeros),
                  numpy_helper.from_array(np.ones(rank, np.int64), ones)]
        outs.append(f"{n.output[0]}_first")
        tails.append(helper.make_node("Slice", [n.output[0], zeros, ones], [outs[-1]]))
    g = helper.make_graph(
        nodes + tails, "heavy",
        [helper.make_tensor_value_info(a, onnx.TensorProto.FLOAT, shapes[a]) for a in acts],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, [1] * len(shapes[n.output[0]]))
         for o, n in zip(outs, nodes, strict=True)],
        [inits[i] for i in sorted(used_inits)] + extra)
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    wbytes = float(sum(np.prod(inits[i].dims) * 4 for i in used_inits))
    flops = 0.0
    for n in nodes:
        out = shapes[n.output[0]]
        if n.op_type in ("MatMul", "Gemm"):
            k = shapes[n.input[0]][-1] if n.op_type == "MatMul" else shapes[n.input[1]][0]
            flops += 2.0 * float(np.prod(out)) * k
        else:
            w = shapes[n.input[1]]
            flops += 2.0 * float(np.prod(out)) * float(np.prod(w[1:]))
    return m, {"weight_mb": wbytes / 2**20, "gflop": flops / 1e9, "products": len(nodes)}


def streamed_weights(model: onnx.ModelProto) -> int:
    """Bytes of the weights a run must read: right operands (initializers) of the heavy nodes whose left operand
    is computed at run time (a product of two constants is folded when the session loads)."""
    inits = {t.name: t for t in model.graph.initializer}
    return int(sum(np.prod(inits[n.input[1]].dims) * 4 for n in model.graph.node
                   if n.op_type in HEAVY and n.input[1] in inits and n.input[0] not in inits))


def floor_model(weight_bytes: int, k: int = 512) -> onnx.ModelProto:
    """One MatMul of a (1, k) input by a (k, n) weight holding ``weight_bytes``: onnxruntime's fastest way to
    read that many weight bytes once (no graph that reads every weight can run faster than it streams them)."""
    n = max(1, weight_bytes // (4 * k))
    w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "floor",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, n])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def measure(name: str, threads: int, rounds: int) -> dict[str, Any]:
    """Latency of the model, its heavy part and its heavy part merged (interleaved, median, ms)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from speedup import build_model

    from eqsat import onnx_io
    from eqsat.costs.measured_cpu import end_to_end_latency

    model = build_model(name)
    heavy, stats = heavy_only(model)
    merged, merged_stats = heavy_only(model, merged=True)
    streamed = streamed_weights(model)
    models = [model, heavy, merged, floor_model(streamed)]
    feeds = [onnx_io.random_feeds(m, seed=0) for m in models]
    full_ms, heavy_ms, merged_ms, floor_ms = end_to_end_latency(models, feeds, threads=threads, rounds=rounds)
    return {"model": name, "threads": threads, "full_ms": full_ms, "heavy_ms": heavy_ms, "merged_ms": merged_ms,
            "streamed_mb": streamed / 2**20, "floor_ms": floor_ms, "bound": full_ms / floor_ms,
            "heavy_nodes": stats.pop("products"), "merged_nodes": merged_stats["products"], **stats,
            "share": heavy_ms / full_ms, "merge_gain": heavy_ms / merged_ms,
            "heavy_gbs": stats["weight_mb"] * 2**20 / 1e9 / (heavy_ms / 1e3),
            "heavy_gflops": stats["gflop"] / (heavy_ms / 1e3)}


def render(meta: dict, rows: list[dict]) -> str:
    """The results as Markdown."""
    lines = ["# Matrix products alone, separate and merged (onnxruntime, CPU)\n",
             f"commit {meta['commit']}, {meta['date']}, {meta['cpu']}, onnxruntime {meta['onnxruntime']}\n",
             f"Command: `{meta['command']}`\n",
             "products = the model's MatMul/Gemm/Conv nodes alone (same shapes and weights, activations fed as "
             "inputs, each product's first element returned); merged = MatMuls sharing a left operand as one "
             "MatMul over concatenated weights. share = products / model; merge gain = products / merged. "
             "streamed = the weights a run reads (right operands of products whose left operand is computed at "
             "run time); floor = one MatMul (1 x 512 by a weight of that size) reading them once, the fastest "
             "this runtime streams them; bound = model / floor, the most any rewrite that still reads every "
             "weight can gain (in fp32). Interleaved medians.\n",
             "| model | threads | model (ms) | products (ms) | merged (ms) | products (merged) | weights (MB) | "
             "GFLOP | GB/s | GFLOP/s | share | merge gain | streamed (MB) | floor (ms) | bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['threads']} | {r['error']} |" + " |" * 12)
            continue
        lines.append(f"| {r['model']} | {r['threads']} | {r['full_ms']:.3f} | {r['heavy_ms']:.3f} | "
                     f"{r['merged_ms']:.3f} | {r['heavy_nodes']} ({r['merged_nodes']}) | {r['weight_mb']:.1f} | "
                     f"{r['gflop']:.3f} | {r['heavy_gbs']:.1f} | {r['heavy_gflops']:.1f} | {r['share']:.2f} | "
                     f"{r['merge_gain']:.3f}x | {r['streamed_mb']:.1f} | {r['floor_ms']:.3f} | "
                     f"{r['bound']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Measure and write the results."""
    import onnxruntime as ort

    from eqsat.costs.measured_cpu import OnnxRuntimeCostModel

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=DEFAULT)
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    rows = []
    for name in args.models:
        for t in args.threads:
            try:
                r = measure(name, t, args.rounds)
            except Exception as e:  # a row, not the end of the run
                r = {"model": name, "threads": t, "error": f"{type(e).__name__}: {e}"}
            print(json.dumps(r), file=sys.stderr, flush=True)
            rows.append(r)
    meta = {"commit": git_commit(mark_uncommitted=True), "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
            "cpu": OnnxRuntimeCostModel().device_identity()["cpu"], "onnxruntime": ort.__version__,
            "python": platform.python_version(),
            "command": "python benchmarks/products.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = render(meta, rows)
    (out / "products.md").write_text(md)
    (out / "products.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
