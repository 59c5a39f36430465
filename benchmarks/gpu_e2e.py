"""Whole models timed end to end on a GPU (or the CPU), beside the speedups the summed kernel costs predict.

The GPU cost model prices a graph as the sum of its operators' times, each timed alone from Python; this runs the
original and the optimized graphs as whole models in PyTorch (:mod:`eqsat.gpu.torch_run`), eagerly and replayed
as one CUDA graph (what a deployment does to remove launch overhead), in float32 and float16. Three steps, the
middle one on the GPU machine (it needs PyTorch, onnx, onnxruntime and eqsat's wheel; not egglog or OR-Tools):

1. ``prepare``, here: optimize each model with the GPU costs measured before (``benchmarks/results/
   gpu_measured_h200*.json``, :mod:`gpu_replay`), keep every candidate the latency check would time (the original,
   the first choice, the other extractions), price each one under those costs, and write a bundle: the graphs
   with their large float weights left out (the bundle travels to the GPU machine, whose copy is limited in size;
   each is drawn again there with its mean and deviation: times do not depend on the values), the inputs at the
   sizes the costs were measured at, and ``manifest.json``.
2. ``time``, there (or here with ``--device cpu``): each graph's weights drawn, its float32 output checked
   against onnxruntime's on the CPU, then timed eagerly and under CUDA graphs (GPU only) in float32 and float16.
3. ``report``, here: predicted against measured speedups, and the Spearman rank correlation of predicted and
   measured latency over every graph timed (within each model, and over all of them).

Usage::

    python benchmarks/gpu_e2e.py prepare taso_bert ... --measured benchmarks/results/gpu_measured_h200.json \\
        --bundle gpu_bundle [--dims batch=1,sequence=128] [--candidates 4]
    python benchmarks/gpu_e2e.py time gpu_bundle --out times.json [--device cuda]          # on the GPU machine
    python benchmarks/gpu_e2e.py report gpu_bundle times.json [--out benchmarks/results] [--stem gpu_e2e]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import geomean, git_commit, ran_as, save_results, spearman  # noqa: E402

#: float initializers of at least this many elements are left out of the bundle and drawn again where timed
DRAWN_ELEMENTS = 4096
TIME_LIMIT = 60.0
#: the doc string marking an initializer whose values were left out: its mean and deviation follow
DRAWN = "eqsat-e2e-drawn "


# -- the bundle ----------------------------------------------------------------------------------------------------


def strip_weights(model: Any, min_elements: int = DRAWN_ELEMENTS) -> Any:
    """A copy of ``model`` whose float32 initializers of ``min_elements`` or more keep their shape, type, mean and
    deviation but no values (:func:`draw_weights` fills them)."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and math.prod(t.dims) >= min_elements:
            a = numpy_helper.to_array(t)
            dims, name = list(t.dims), t.name
            t.Clear()
            t.name, t.data_type = name, onnx.TensorProto.FLOAT
            t.dims.extend(dims)
            t.doc_string = DRAWN + json.dumps({"mean": float(a.mean()), "std": float(a.std())})
    return out


def draw_weights(model: Any, seed: int = 0) -> Any:
    """``model`` with each initializer :func:`strip_weights` left out drawn from a normal distribution of its
    mean and deviation (seeded by ``seed`` and the tensor's name)."""
    import zlib

    from onnx import numpy_helper

    for t in model.graph.initializer:
        if t.doc_string.startswith(DRAWN):
            stats = json.loads(t.doc_string[len(DRAWN):])
            rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
            a = rng.normal(stats["mean"], stats["std"], size=tuple(t.dims)).astype(np.float32)
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    return model


@contextlib.contextmanager
def _recording_candidates(seen: list[tuple[list[Any], Any]]) -> Iterator[None]:
    """The pipeline's end-to-end timing of the candidates, replaced by a recorder: each call's models (the
    original first) and graph are kept, and every model is reported as equally fast (the pipeline then keeps its
    first choice, which is what the cost model chose; nothing here is a measurement)."""
    from eqsat.pipeline import candidates

    real = candidates.latencies

    def record(models: list[Any], graph: Any, cost_model: Any, budget_s: float = 0.0) -> list[list[float]]:
        seen.append((list(models), graph))
        return [[1.0] * 7 for _ in models]

    candidates.latencies = record
    try:
        yield
    finally:
        candidates.latencies = real


def prepare(args: argparse.Namespace) -> None:
    """Step 1, here: optimize, keep the candidates, price them, write the bundle."""
    import onnx
    from gpu_replay import Replayed, _models

    import eqsat
    from eqsat.costs import graph_cost
    from eqsat.onnx_io import load_model, random_feeds

    measured = _merged([json.loads(Path(p).read_text(encoding="utf-8")) for p in args.measured])
    bundle = Path(args.bundle)
    bundle.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"gpu_costs": measured["identity"], "commit": git_commit(mark_uncommitted=True),
                                "models": []}
    for name, (build, kw) in _models(args.models, args.dims).items():
        t0, seen = time.perf_counter(), []
        with _recording_candidates(seen):
            res = eqsat.optimize(build(), cost_model=Replayed(measured), time_limit=args.time_limit,
                                 verify_latency=True, candidates=args.candidates, cache=False, **kw)
        # no candidates when nothing priced cheaper than the original: the original alone (speedup 1 by choice)
        models, graph = seen[0] if seen else ([build()], res.original)
        feeds = random_feeds(graph, seed=0)
        shapes = {k: list(v.shape) for k, v in feeds.items()}
        folder = bundle / name
        folder.mkdir(exist_ok=True)
        np.savez(folder / "inputs.npz", **feeds)
        graphs = []
        for k, m in enumerate(models):
            priced = Replayed(measured)
            ms = graph_cost(load_model(m, input_shapes={i: s for i, s in shapes.items()}), priced)
            file = f"{k}_{'original' if k == 0 else f'candidate{k - 1}'}.onnx"
            onnx.save(strip_weights(m), str(folder / file))
            graphs.append({"file": file, "role": "original" if k == 0 else ("first choice" if k == 1 else
                                                                               "other candidate"),
                           "predicted_ms": ms, "nodes": len(m.graph.node), "missed": len(priced.missed)})
        manifest["models"].append({"name": name, "shapes": shapes, "graphs": graphs,
                                   "numeric_ok": bool(res.numeric and res.numeric.ok),
                                   "seconds": time.perf_counter() - t0})
        print(f"{name}: {len(graphs)} graphs, predicted " +
              ", ".join(f"{g['predicted_ms']:.4g}" for g in graphs) + f" ms ({time.perf_counter() - t0:.0f} s)",
              flush=True)
        (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")


def _merged(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """Several measured tables (of one GPU) as one: every configuration, the first table's calibration."""
    out = dict(tables[0])
    out["costs"] = [e for t in tables for e in t["costs"]]
    return out


# -- timing --------------------------------------------------------------------------------------------------------


def time_bundle(args: argparse.Namespace) -> None:
    """Step 2: check and time every graph of the bundle, writing the times as they come."""
    import onnx
    import onnxruntime as ort
    import torch

    from eqsat.gpu.torch_run import TorchModel, UnsupportedModel, relative_error, time_calls

    bundle = Path(args.bundle)
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    cuda = args.device.startswith("cuda")
    if cuda:  # float32 products in float32, as the costs were measured (TF32 off)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    out: dict[str, Any] = {"device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
                           "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
                           "cudnn": torch.backends.cudnn.version() if cuda else None, "onnxruntime": ort.__version__,
                           "threads": torch.get_num_threads(), "models": []}
    wanted = set(args.models or [])
    t_start = time.perf_counter()
    for entry in manifest["models"]:
        if wanted and entry["name"] not in wanted:
            continue
        arrays = dict(np.load(bundle / entry["name"] / "inputs.npz"))
        timed = []
        for g in entry["graphs"]:
            model = draw_weights(onnx.load(str(bundle / entry["name"] / g["file"])))
            row: dict[str, Any] = {"file": g["file"]}
            try:
                ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                    None, arrays)
                for half in (False, True) if "float16" in args.dtypes else (False,):
                    if half and not cuda and not args.half_on_cpu:
                        continue
                    tm = TorchModel(model, device=args.device, half=half)
                    feeds = tm.feeds(arrays)
                    with torch.inference_mode():
                        err = relative_error(tm.plan(feeds), ref)
                        dt = "float16" if half else "float32"
                        row[f"error_{dt}"] = err
                        row[f"eager_{dt}"] = time_calls(lambda tm=tm, f=feeds: tm.run(f), args.device,
                                                        args.budget).__dict__
                    if cuda and "graph" in args.modes:
                        try:
                            replay = tm.captured(feeds)
                            row[f"error_graph_{dt}"] = relative_error(replay(), ref)
                            row[f"graph_{dt}"] = time_calls(replay, args.device, args.budget).__dict__
                        except (UnsupportedModel, RuntimeError) as e:
                            row[f"graph_{dt}"] = {"error": str(e)[:300]}
                    del tm
            except (UnsupportedModel, RuntimeError, ValueError) as e:
                row["error"] = str(e)[:300]
            timed.append(row)
            print(json.dumps({"model": entry["name"], **row}), flush=True)
        out["models"].append({"name": entry["name"], "graphs": timed})
        out["seconds"] = time.perf_counter() - t_start
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        if cuda:
            torch.cuda.empty_cache()
    print(f"timed {len(out['models'])} models in {time.perf_counter() - t_start:.0f} s; wrote {args.out}")


# -- the report ----------------------------------------------------------------------------------------------------


def _median(row: dict[str, Any], key: str) -> float:
    v = row.get(key)
    return v["median_ms"] if isinstance(v, dict) and "median_ms" in v else math.nan


def report(args: argparse.Namespace) -> None:
    """Step 3, here: predicted and measured speedups side by side, and the rank correlations."""
    manifest = json.loads((Path(args.bundle) / "manifest.json").read_text(encoding="utf-8"))
    times = json.loads(Path(args.times).read_text(encoding="utf-8"))
    by_name = {m["name"]: {g["file"]: g for g in m["graphs"]} for m in times["models"]}
    modes = [k for k in ("eager_float32", "graph_float32", "eager_float16", "graph_float16")
             if any(k in g for m in times["models"] for g in m["graphs"])]
    rows, pooled, within = [], {k: ([], []) for k in modes}, {k: [] for k in modes}
    for entry in manifest["models"]:
        timed = by_name.get(entry["name"])
        if not timed:
            continue
        graphs = entry["graphs"]
        orig, first = graphs[0], graphs[min(1, len(graphs) - 1)]  # the original alone: kept
        t_orig, t_first = timed.get(orig["file"], {}), timed.get(first["file"], {})
        row: dict[str, Any] = {"model": entry["name"], "graphs": len(graphs),
                               "predicted_before_ms": orig["predicted_ms"], "predicted_after_ms": first["predicted_ms"],
                               "predicted_speedup": orig["predicted_ms"] / first["predicted_ms"],
                               "error": max((timed.get(g["file"], {}).get("error_float32", math.inf)
                                             for g in graphs), default=math.inf)}
        for k in modes:
            before, after = _median(t_orig, k), _median(t_first, k)
            row[f"{k}_before_ms"], row[f"{k}_after_ms"] = before, after
            row[f"{k}_speedup"] = before / after if after > 0 else math.nan
            pred = [g["predicted_ms"] for g in graphs]
            meas = [_median(timed.get(g["file"], {}), k) for g in graphs]
            pairs = [(p, m) for p, m in zip(pred, meas, strict=True) if not math.isnan(m)]
            pooled[k][0].extend(p for p, _ in pairs)
            pooled[k][1].extend(m for _, m in pairs)
            rho = spearman([p for p, _ in pairs], [m for _, m in pairs])
            row[f"{k}_spearman"] = rho
            if not math.isnan(rho):
                within[k].append(rho)
        rows.append(row)

    def fmt(v: float, spec: str = ".3f") -> str:
        return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)

    cols = [("eager_float32", "eager fp32"), ("graph_float32", "CUDA graph fp32"), ("eager_float16", "eager fp16"),
            ("graph_float16", "CUDA graph fp16")]
    cols = [(k, label) for k, label in cols if k in modes]
    table = ("| model | graphs | predicted before (ms) | predicted speedup | " +
             " | ".join(f"{label} before (ms) | {label} speedup" for _, label in cols) +
             " | Spearman (" + cols[0][1] + ") | worst fp32 error |\n|" + "---|" * (6 + 2 * len(cols)) + "\n")
    for r in rows:
        table += (f"| {r['model']} | {r['graphs']} | {fmt(r['predicted_before_ms'], '.4g')} | "
                  f"{fmt(r['predicted_speedup'])}x | " +
                  " | ".join(f"{fmt(r[f'{k}_before_ms'], '.4g')} | {fmt(r[f'{k}_speedup'])}x" for k, _ in cols) +
                  f" | {fmt(r[f'{cols[0][0]}_spearman'], '.2f')} | {fmt(r['error'], '.1e')} |\n")
    lines = ["", f"Geometric mean speedup predicted {fmt(geomean([r['predicted_speedup'] for r in rows]))}x"]
    for k, label in cols:
        ups = [r[f"{k}_speedup"] for r in rows if not math.isnan(r[f"{k}_speedup"])]
        lines.append(f"- {label}: measured geometric-mean speedup {fmt(geomean(ups))}x over {len(ups)} models; "
                     f"Spearman of predicted and measured latency over all {len(pooled[k][0])} graphs "
                     f"{fmt(spearman(*pooled[k]), '.3f')}, within a model (mean over {len(within[k])} with several "
                     f"graphs) {fmt(float(np.mean(within[k])) if within[k] else math.nan, '.2f')}")
    head = (f"# Whole models timed end to end ({times['device']})\n\n"
            f"Command: {ran_as()}; the bundle prepared at {manifest['commit']} with the GPU costs measured on "
            f"{manifest['gpu_costs']['gpu']}, timed with PyTorch {times['torch']} (CUDA {times['cuda']}, cuDNN "
            f"{times['cudnn']}) through `eqsat.gpu.torch_run`. Predicted: sums of the measured operator costs over "
            "each graph. Measured: the median of runs between device events, eager (each operator launched from "
            "Python) and replayed as one CUDA graph, float32 (TF32 off, as the costs were measured) and float16. "
            "Weights are drawn anew with each tensor's mean and deviation (times do not depend on the values); each "
            "graph's float32 output is checked against onnxruntime's on the CPU with the same weights (worst "
            "relative error in the last column). Spearman: the rank correlation of predicted and measured "
            "latency over the original, the first choice and the other candidates.\n\n")
    save_results(args.out, args.stem, head, table + "\n".join(lines) + "\n",
                 {"device": times, "rows": rows, "commit": manifest["commit"]})
    print(table + "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("models", nargs="+")
    p.add_argument("--measured", nargs="+", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--dims", default="")
    p.add_argument("--candidates", type=int, default=4)
    p.add_argument("--time-limit", type=float, default=TIME_LIMIT)
    t = sub.add_parser("time")
    t.add_argument("bundle")
    t.add_argument("--out", required=True)
    t.add_argument("--device", default="cuda")
    t.add_argument("--models", nargs="*")
    t.add_argument("--modes", default="eager,graph")
    t.add_argument("--dtypes", default="float32,float16")
    t.add_argument("--budget", type=float, default=0.3, help="seconds of runs per timing")
    t.add_argument("--half-on-cpu", action="store_true", help="time float16 on the CPU too (slow)")
    r = sub.add_parser("report")
    r.add_argument("bundle")
    r.add_argument("times")
    r.add_argument("--out", default="benchmarks/results")
    r.add_argument("--stem", default="gpu_e2e")
    args = ap.parse_args()
    {"prepare": prepare, "time": time_bundle, "report": report}[args.step](args)


if __name__ == "__main__":
    main()
