"""A KV-cache decoder step as torch's dynamo exporter writes it, optimized as exported (issue 40): is the written
model a drop-in, and how much faster is it at a decode step under onnxruntime?

For the step ``benchmarks/export_kv_decoder.py`` exports (batch, sequence and past-length axes), each eqsat
configuration given (``--configs``: ``default`` is ``eqsat optimize MODEL`` as it is, analytic costs and portable
ONNX; ``ort-measured`` adds ``--costs measured --target onnxruntime``) is run once and its written model

* keeps the original's signature (input and output names, element types and dimensions, ``past_sequence +
  sequence`` included), and equals the original (onnxruntime, optimizations off) at (batch, sequence, past) =
  (1, 1, 31) and (3, 17, 5), and at the timed sizes;
* is timed end to end against the original under onnxruntime's default level (``ORT_ENABLE_ALL``), one intra-op
  thread, at a decode step (1, 1, 128) and a prefill (1, 128, 1): in rounds that run the models in a random order,
  each its median of a few runs after two warm-up runs (:func:`timed_rounds`); the median of the per-round ratios
  and its 95 % interval;
* is profiled at the decode step (onnxruntime's profiler, which adds a per-kernel overhead: its shares, not its
  milliseconds, are what to read): the kernels onnxruntime runs after its own fusions, per operator type, and the
  products with a weight's share, whose inverse is the most any rewrite of the rest could gain (``ceiling``).

Target of issue 40: at least 1.10x at the decode step. Saves ``kv_decoder.{md,json}``.

Usage: /tmp/torchenv/bin/python benchmarks/export_kv_decoder.py /tmp/kvx --layers 2
       python benchmarks/kv_decoder.py /tmp/kvx/kv_decoder_2l_dynamo.onnx [--configs default,ort-measured]
       [--rounds 101] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from _common import ran_as, save_results, timed_rounds

#: (batch, sequence, past_sequence) where the written model must equal the original (issue 40's sizes)
CHECKED = ((1, 1, 31), (3, 17, 5))
#: the timed sizes: a decode step (one new token, a past of 128) and a prefill (128 new tokens, a past of 1)
TIMED = {"decode": (1, 1, 128), "prefill": (1, 128, 1)}
#: timed runs of a model per round at each timed size (a decode step takes about 0.2 ms, a prefill about 6)
RUNS = {"decode": 10, "prefill": 2}
#: eqsat's options per configuration
CONFIGS: dict[str, dict[str, Any]] = {"default": {},
                                      "ort-measured": {"cost_model": "measured", "target": "onnxruntime"}}


def signature(model: onnx.ModelProto) -> list[tuple[str, str, int, list[Any]]]:
    """Inputs and outputs: kind, name, element type and dimensions (a symbolic one by its name)."""
    g = model.graph
    return [(kind, v.name, v.type.tensor_type.elem_type,
             [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
            for kind, vs in (("input", g.input), ("output", g.output)) for v in vs]


def feeds(model: onnx.ModelProto, batch: int, seq: int, past: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids below the vocabulary and normal past keys and values at these sizes."""
    from eqsat.pipeline.check import trial_feeds

    return trial_feeds(model, 0, seed=seed, sizes={"batch": batch, "sequence": seq, "past_sequence": past})


def worst_error(original: onnx.ModelProto, written: onnx.ModelProto, sizes: tuple[int, int, int]) -> float:
    """The largest difference of an output, over that output's largest magnitude (onnxruntime, optimizations
    off); inf where a shape differs."""
    from eqsat.onnx_io import run_onnxruntime

    f = feeds(original, *sizes, seed=sum(sizes))
    worst = 0.0
    for a, b in zip(run_onnxruntime(original, f), run_onnxruntime(written, f), strict=True):
        if a.shape != b.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-12)))
    return worst


def profile(model: onnx.ModelProto, f: dict[str, np.ndarray], runs: int = 200) -> dict[str, Any]:
    """onnxruntime's kernels after its own graph optimizations at its default level, one thread: per operator
    type their count and mean profiled ms per run; the products with a weight apart (``weight product``)."""
    from _ort_profile import WEIGHT_PRODUCTS

    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        so.enable_profiling, so.profile_file_prefix = True, os.path.join(tmp, "profile")
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for _ in range(10):
            sess.run(None, f)
        for _ in range(runs):
            sess.run(None, f)
        events = json.loads(Path(sess.end_profiling()).read_text(encoding="utf-8"))
        optimized = onnx.load(so.optimized_model_filepath, load_external_data=False)
    inits = {t.name for t in optimized.graph.initializer}
    kind = {n.name: ("weight product" if n.op_type in WEIGHT_PRODUCTS and len(n.input) > 1 and n.input[1] in inits
                     else n.op_type) for n in optimized.graph.node}
    counts = Counter(kind.values())
    ms: Counter[str] = Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            ms[kind.get(e["name"][: -len("_kernel_time")], e["args"]["op_name"])] += e["dur"] / 1000 / (runs + 10)
    total = sum(ms.values())
    return {"kernels": len(optimized.graph.node), "total_ms": total,
            "ops": {k: {"count": counts[k], "ms": v, "share": v / total} for k, v in ms.most_common()},
            "weight_product_share": ms["weight product"] / total if total else 0.0}


def run(path: str, configs: list[str], rounds: int, time_limit: float) -> dict[str, Any]:
    """Every configuration's run, checks and timings, and the profiles at the decode step."""
    import eqsat
    from eqsat.onnx_io import read_model
    from eqsat.pipeline.candidates import speedup

    original, _ = read_model(path)
    written: dict[str, onnx.ModelProto] = {}
    rows: dict[str, Any] = {}
    for name in configs:
        t = time.perf_counter()
        res = eqsat.optimize(original, time_limit=time_limit, cache=False, **CONFIGS[name])
        seconds = time.perf_counter() - t
        written[name] = res.model
        rows[name] = {"options": CONFIGS[name], "optimize_s": seconds, "decision": res.decision,
                      "kept_original": res.kept_original, "onnx_nodes": len(res.model.graph.node),
                      "signature_kept": signature(res.model) == signature(original),
                      "worst_error": {f"{b},{s},{p}": worst_error(original, res.model, (b, s, p))
                                      for b, s, p in (*CHECKED, *TIMED.values())},
                      "kernels": res.kernels, "price_points": [
                          {"label": p.label, "before_ms": p.cost_before, "after_ms": p.cost_after}
                          for p in res.price_points]}
        print(f"{name}: optimized in {seconds:.1f} s, {res.decision}", file=sys.stderr, flush=True)
    models = [original, *written.values(), original]  # the last: a control, the original in a second session
    timings: dict[str, Any] = {}
    for point, sizes in TIMED.items():
        f = feeds(original, *sizes)
        runs = RUNS[point]
        times = timed_rounds(models, f, rounds, runs)
        timings[point] = {"original_ms": float(np.median(times[0])), "runs": rounds * runs}
        for name, t in zip([*written, "control"], times[1:], strict=True):
            s = speedup(times[0], t)
            timings[point][name] = {"ms": float(np.median(t)), "speedup": [s.median, s.low, s.high],
                                    "rounds": s.rounds}
    decode = feeds(original, *TIMED["decode"])
    profiles = {"original": profile(original, decode), **{n: profile(m, decode) for n, m in written.items()}}
    return {"model": Path(path).name, "onnx_nodes": len(original.graph.node), "configs": rows, "timings": timings,
            "profiles": profiles, "machine": f"{platform.machine()}, {os.cpu_count()} cores, onnxruntime "
                                             f"{ort.__version__}, 1 intra-op thread"}


def _speed(t: dict[str, Any]) -> str:
    m, lo, hi = t["speedup"]
    return f"{t['ms']:.3f} ms, {m:.3f}x [{lo:.3f}, {hi:.3f}]"


def table(r: dict[str, Any]) -> str:
    """The configurations' results, then the decode step's profile per operator type."""
    t = r["timings"]
    lines = ["| eqsat run | ONNX nodes | onnxruntime kernels (decode) | signature kept | worst error at (1,1,31), "
             "(3,17,5) | decode step (1, 1, 128) | prefill (1, 128, 1) | optimize |", "|" + "---|" * 8,
             f"| original | {r['onnx_nodes']} | {r['profiles']['original']['kernels']} | | | "
             f"{t['decode']['original_ms']:.3f} ms | {t['prefill']['original_ms']:.3f} ms | |"]
    c = t["decode"]["control"], t["prefill"]["control"]
    lines.append(f"| control | | | | | {_speed(c[0])} | {_speed(c[1])} | |")
    for name, c in r["configs"].items():
        errs = ", ".join(f"{c['worst_error'][k]:.1e}" for k in ("1,1,31", "3,17,5"))
        lines.append(f"| {name} | {c['onnx_nodes']} | {r['profiles'][name]['kernels']} | "
                     f"{'yes' if c['signature_kept'] else 'NO'} | {errs} | {_speed(t['decode'][name])} | "
                     f"{_speed(t['prefill'][name])} | {c['optimize_s']:.1f} s |")
    names = list(r["profiles"])
    ops = sorted({k for p in r["profiles"].values() for k in p["ops"]},
                 key=lambda k: -r["profiles"]["original"]["ops"].get(k, {"share": 0})["share"])
    lines += ["", "Decode step under onnxruntime's profiler: kernels per operator type after onnxruntime's own "
              "fusions, count / share of the profiled kernel time.", "",
              "| kernel | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for k in ops:
        cells = [(f"{p['ops'][k]['count']} / {100 * p['ops'][k]['share']:.1f} %" if k in p["ops"] else "")
                 for p in r["profiles"].values()]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines.append("| ceiling (1 / weight products' share) | " + " | ".join(
        f"{1 / p['weight_product_share']:.2f}x" for p in r["profiles"].values()) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the exported step (benchmarks/export_kv_decoder.py)")
    ap.add_argument("--configs", default="default,ort-measured", help=f"of {', '.join(CONFIGS)}")
    ap.add_argument("--rounds", type=int, default=101,
                    help=f"interleaved timing rounds (runs of a model per round: {RUNS})")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        ap.error(f"unknown configurations {sorted(unknown)}; choose of {', '.join(CONFIGS)}")
    r = run(args.model, configs, args.rounds, args.time_limit)
    text = table(r)
    print(text)
    head = (f"# A KV-cache decoder step, optimized as exported\n\nCommand: {ran_as()}; {r['machine']}. "
            f"Model: {r['model']} (`benchmarks/export_kv_decoder.py`). End to end: interleaved rounds in a random "
            "order, onnxruntime at its default level (ORT_ENABLE_ALL), median time and the median of the per-round "
            f"speedups [95 % interval], {args.rounds} rounds ({RUNS['decode']} runs a model a round at the decode "
            f"step, {RUNS['prefill']} at the prefill); *control* is the original in a second session, timed alike "
            "(its speedup is the timing's own error). The machine is shared (2 cores): timings are noisy, compare "
            "the speedups, not the milliseconds across runs.\n\n")
    save_results(args.out, "kv_decoder", head, text, r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
