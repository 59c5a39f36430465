"""onnxruntime's fused transformer kernels against the nodes they replace, on the CPU at the sizes of the
transformer exports: which fusion pays, and which one onnxruntime applies that does not.

Each pair is two small ONNX models computing the same tensor: the fused kernel (``com.microsoft``, or the
standard spelling onnxruntime fuses into it at its default level) and the unfused nodes (spelled so onnxruntime
does not fuse them: ``Sum`` where it would fuse an ``Add``). Each is timed in onnxruntime at its default level
(median of batched runs, interleaved), the outputs compared. These figures decide what issue 29's item 2 (fused
kernels as e-graph alternatives, ``--target onnxruntime``) could gain on this machine.

Saves ``ort_kernels.{md,json}``.

Usage: python benchmarks/ort_kernels.py [--threads 1] [--seq 128] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from _common import ran_as, save_results
from onnx import TensorProto, helper, numpy_helper

Case = tuple[list[Any], dict[str, np.ndarray], list[tuple[str, list[int]]], list[int]]


def _session(case: Case, threads: int, opset: int = 18) -> ort.InferenceSession:
    nodes, consts, inputs, out_shape = case
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _time(pairs: list[tuple[ort.InferenceSession, dict[str, np.ndarray]]], rounds: int = 15) -> list[float]:
    """Median ms per run of each session, in interleaved rounds of batched runs."""
    per: list[list[float]] = [[] for _ in pairs]
    for s, f in pairs:
        for _ in range(10):
            s.run(None, f)
    for _ in range(rounds):
        for k, (s, f) in enumerate(pairs):
            t = time.perf_counter()
            for _ in range(20):
                s.run(None, f)
            per[k].append((time.perf_counter() - t) / 20 * 1e3)
    return [statistics.median(p) for p in per]


def cases(seq: int) -> dict[str, tuple[Case, Case]]:
    """name -> (fused, unfused) at BERT's (768) and the LLaMA-style export's (512) widths."""
    rng = np.random.default_rng(0)
    d, dl, heads = 768, 512, 12
    g, b, gl = (rng.random(d, dtype=np.float32), rng.random(d, dtype=np.float32), rng.random(dl, dtype=np.float32))
    x2 = [("x", [1, seq, d]), ("r", [1, seq, d])]
    xl = [("x", [1, seq, dl]), ("r", [1, seq, dl])]
    rms = {"two": np.float32(2), "ax": np.array([-1]), "eps": np.float32(1e-6), "g": gl}

    def rms_nodes(src: str, spelling: str) -> list[Any]:
        head = [helper.make_node("Pow", [src, "two"], ["p"]), helper.make_node("ReduceMean", ["p", "ax"], ["m"]),
                helper.make_node("Add", ["m", "eps"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"])]
        if spelling == "div":
            return head + [helper.make_node("Div", [src, "s"], ["n"]), helper.make_node("Mul", ["n", "g"], ["y"])]
        return head + [helper.make_node("Reciprocal", ["s"], ["i"]), helper.make_node("Mul", [src, "i"], ["n"]),
                       helper.make_node("Mul", ["g", "n"], ["y"])]

    qkv = [(n, [1, seq, d]) for n in "qkv"]
    attn: list[Any] = []
    for n in "qkv":
        attn += [helper.make_node("Reshape", [n, "heads"], [n + "r"]),
                 helper.make_node("Transpose", [n + "r"], [n + "t"], perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
    attn += [helper.make_node("MatMul", ["qt", "kt"], ["sc"]), helper.make_node("Mul", ["sc", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["pr"], axis=-1), helper.make_node("MatMul", ["pr", "vt"], ["o"]),
             helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["ot", "merged"], ["y"])]
    attn_consts = {"heads": np.array([1, seq, heads, d // heads]), "merged": np.array([1, seq, d]),
                   "scale": np.float32((d // heads) ** -0.5)}
    return {
        "SkipLayerNormalization vs Add + LayerNormalization (BERT, ViT)": (
            ([helper.make_node("SkipLayerNormalization", ["x", "r", "g", "b"], ["y"], domain="com.microsoft",
                               epsilon=1e-12)], {"g": g, "b": b}, x2, [1, seq, d]),
            ([helper.make_node("Sum", ["x", "r"], ["t"]),
              helper.make_node("LayerNormalization", ["t", "g", "b"], ["y"], axis=-1, epsilon=1e-12)],
             {"g": g, "b": b}, x2, [1, seq, d])),
        "SimplifiedLayerNormalization (the Div spelling it fuses) vs the exporters' Reciprocal spelling (LLaMA)": (
            (rms_nodes("x", "div"), rms, [xl[0]], [1, seq, dl]),
            (rms_nodes("x", "recip"), rms, [xl[0]], [1, seq, dl])),
        "SkipSimplifiedLayerNormalization vs Add + SimplifiedLayerNormalization (LLaMA)": (
            ([helper.make_node("SkipSimplifiedLayerNormalization", ["x", "r", "g"], ["y"], domain="com.microsoft",
                               epsilon=1e-6)], {"g": gl}, xl, [1, seq, dl]),
            ([helper.make_node("Add", ["x", "r"], ["t"]), *rms_nodes("t", "div")], rms, xl, [1, seq, dl])),
        "MultiHeadAttention vs its decomposition (12 heads, no mask)": (
            ([helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft",
                               num_heads=heads)], {}, qkv, [1, seq, d]),
            (attn, attn_consts, qkv, [1, seq, d])),
    }


def run(threads: int, seq: int) -> list[dict[str, Any]]:
    rows = []
    rng = np.random.default_rng(1)
    for name, (fused, plain) in cases(seq).items():
        sf, sp = _session(fused, threads), _session(plain, threads)
        feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in fused[2]}
        diff = float(np.abs(sf.run(None, feeds)[0] - sp.run(None, feeds)[0]).max())
        tf, tp = _time([(sf, feeds), (sp, feeds)])
        rows.append({"pair": name, "fused_ms": tf, "unfused_ms": tp, "fused_speedup": tp / tf, "max_diff": diff})
        print(f"{name}: fused {tf:.4f} ms, unfused {tp:.4f} ms", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| pair | fused, ms | unfused, ms | the fusion's speedup | max difference |", "|---|---|---|---|---|"]
    out += [f"| {r['pair']} | {r['fused_ms']:.4f} | {r['unfused_ms']:.4f} | {r['fused_speedup']:.2f}x "
            f"| {r['max_diff']:.1e} |" for r in rows]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    rows = run(args.threads, args.seq)
    text = table(rows)
    print(text)
    head = (f"# onnxruntime's fused transformer kernels\n\nCommand: {ran_as()}, onnxruntime "
            f"{ort.__version__}, {args.threads} thread(s), batch 1, sequence {args.seq}. A speedup below 1: the fused "
            "kernel is the slower one.\n\n")
    save_results(args.out, "ort_kernels", head, text, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
