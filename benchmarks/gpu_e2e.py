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
        --bundle gpu_bundle [--dims batch=1,sequence=128] [--candidates 4] [--regroup taso_resnext50]
        [--pet CONVNET.onnx ... --pet-limit 6] [--append]
    python benchmarks/gpu_e2e.py time gpu_bundle --out times.json [--device cuda]          # on the GPU machine
    python benchmarks/gpu_e2e.py report gpu_bundle times.json [--out benchmarks/results] [--stem gpu_e2e]
        [--reprice measured.json,grouped.json] [--graph-costs graph.json]

``--regroup`` adds a model's grouped convolutions written with fewer groups (TASO's regrouping, :mod:`_regroup`),
``--pet`` PET's subprograms of a model alone and as their cheapest corrected mutants (:mod:`_pet_variants`):
variants of one function, timed like the rest and reported in tables of their own.
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


def _write_graphs(folder: Path, models: list[Any], roles: list[str], shapes: dict[str, list[int]],
                  measured: dict[str, Any]) -> list[dict[str, Any]]:
    """Each model of ``models`` priced under ``measured`` and written into ``folder`` without its large weights;
    the manifest's rows of them (the first is the original)."""
    import onnx
    from gpu_replay import Replayed

    from eqsat.costs import graph_cost
    from eqsat.onnx_io import load_model

    graphs = []
    for k, (m, role) in enumerate(zip(models, roles, strict=True)):
        priced = Replayed(measured)
        ms = graph_cost(load_model(m, input_shapes=dict(shapes)), priced)
        file = f"{k}_{'original' if k == 0 else f'candidate{k - 1}'}.onnx"
        onnx.save(strip_weights(m), str(folder / file))
        graphs.append({"file": file, "role": role, "predicted_ms": ms, "nodes": len(m.graph.node),
                       "missed": len(priced.missed)})
    return graphs


def _regrouped_entry(name: str, build: Any, measured: dict[str, Any], bundle: Path) -> dict[str, Any]:
    """The bundle's entry of ``name``'s grouped convolutions regrouped (:mod:`_regroup`): the original, then each
    group count it divides into, down to one group."""
    from _regroup import group_counts, regrouped

    original = build()
    counts = group_counts(original)
    if len(counts) != 1:
        raise SystemExit(f"{name}: --regroup needs one group count, found {counts}")
    groups = counts[0]
    factors = list(dict.fromkeys(f for f in (2, 4, 8, groups) if f <= groups and groups % f == 0))
    return _variant_entry(f"{name}_regrouped", "regrouped", [original, *(regrouped(original, f) for f in factors)],
                          [f"{groups // f} group{'s' if groups // f > 1 else ''}" for f in (1, *factors)],
                          measured, bundle)


def _variant_entry(name: str, kind: str, models: list[Any], roles: list[str], measured: dict[str, Any],
                   bundle: Path) -> dict[str, Any]:
    """A bundle entry of variants of one function (the first is the reference), each checked against it in
    onnxruntime on random inputs."""
    import onnxruntime as ort

    from eqsat.onnx_io import random_feeds

    t0, feeds = time.perf_counter(), random_feeds(models[0], seed=0)
    ref = ort.InferenceSession(models[0].SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for m in models[1:]:
        got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        for a, b in zip(ref, got, strict=True):  # the same function, up to float32 summation order
            np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-3 * float(np.abs(a).max()))
    folder = bundle / name
    folder.mkdir(exist_ok=True)
    shapes = {k: list(v.shape) for k, v in feeds.items()}
    return {"name": name, "kind": kind, "shapes": shapes, "numeric_ok": True,
            "drawn_inputs": _save_inputs(folder, feeds),
            "graphs": _write_graphs(folder, models, roles, shapes, measured), "seconds": time.perf_counter() - t0}


def _save_inputs(folder: Path, feeds: dict[str, np.ndarray]) -> list[str]:
    """``feeds`` saved into ``folder``, but for the float32 ones of :data:`DRAWN_ELEMENTS` or more, which the
    bundle leaves out (activations of a batch are megabytes) and :func:`load_inputs` draws again; their names."""
    drawn = [k for k, v in feeds.items() if v.dtype == np.float32 and v.size >= DRAWN_ELEMENTS]
    np.savez(folder / "inputs.npz", **{k: v for k, v in feeds.items() if k not in drawn})
    return drawn


def load_inputs(folder: Path, entry: dict[str, Any]) -> dict[str, np.ndarray]:
    """The inputs of a bundle's entry: those saved, and those left out drawn from a standard normal
    distribution (seeded by the name)."""
    import zlib

    arrays = dict(np.load(folder / "inputs.npz"))
    for k in entry.get("drawn_inputs", []):
        rng = np.random.default_rng(zlib.crc32(k.encode()))
        arrays[k] = rng.standard_normal(entry["shapes"][k]).astype(np.float32)
    return arrays


def prepare(args: argparse.Namespace) -> None:
    """Step 1, here: optimize, keep the candidates, price them, write the bundle."""
    from gpu_replay import Replayed, _models, read_measured

    import eqsat
    from eqsat.onnx_io import random_feeds

    measured = read_measured(args.measured)
    bundle = Path(args.bundle)
    bundle.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"gpu_costs": measured["identity"], "commit": git_commit(mark_uncommitted=True),
                                "models": []}
    if args.append and (bundle / "manifest.json").is_file():  # the entries of an earlier prepare stay
        manifest["models"] = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))["models"]

    def add(entry: dict[str, Any]) -> None:
        manifest["models"].append(entry)
        print(f"{entry['name']}: {len(entry['graphs'])} graphs, predicted " +
              ", ".join(f"{g['predicted_ms']:.4g}" for g in entry["graphs"]) + f" ms ({entry['seconds']:.0f} s)",
              flush=True)
        (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")

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
        roles = ["original", "first choice", *["other candidate"] * (len(models) - 2)][:len(models)]
        add({"name": name, "shapes": shapes, "graphs": _write_graphs(folder, models, roles, shapes, measured),
             "numeric_ok": bool(res.numeric and res.numeric.ok), "seconds": time.perf_counter() - t0})
    for name, (build, _) in _models(args.regroup).items():
        add(_regrouped_entry(name, build, measured, bundle))
    for path in args.pet:
        from _pet_variants import pet_variants

        for tensor, models, roles in pet_variants(path, Replayed(measured), args.pet_limit):
            add(_variant_entry(f"{Path(path).stem}_pet_{tensor}", "pet", models, roles, measured, bundle))
    _write_keys(bundle, manifest)


def _bundle_graph(bundle: Path, entry: dict[str, Any], graph: dict[str, Any]) -> Any:
    """A bundle's graph as an IR graph at its entry's input shapes, its left-out weights drawn again."""
    import onnx

    from eqsat.onnx_io import load_model

    model = draw_weights(onnx.load(str(bundle / entry["name"] / graph["file"])))
    return load_model(model, input_shapes=entry["shapes"])


def _write_keys(bundle: Path, manifest: dict[str, Any]) -> None:
    """Every operator configuration the bundle's graphs price, for ``gpu_replay.py measure`` (``keys_bundle.json``;
    the time step measures them launched and in CUDA graphs, for ``report --graph-costs``)."""
    from gpu_replay import key_to_json

    from eqsat.costs.graph import graph_cost_keys

    keys = set()
    for e in manifest["models"]:
        for g in e["graphs"]:
            keys |= {k for ks in graph_cost_keys(_bundle_graph(bundle, e, g)) for k in ks if k.op != "opaque"}
    ordered = sorted(keys, key=lambda k: k.as_str())
    (bundle / "keys_bundle.json").write_text(json.dumps([key_to_json(k) for k in ordered]), encoding="utf-8")


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
        arrays = load_inputs(bundle / entry["name"], entry)
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
        if not timed or entry.get("kind") in ("regrouped", "pet"):
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
    graph_text, graph_rows = _graph_costs_report(args, manifest, by_name, cols)
    regroup_text, regroup_rows = _regrouped_report(args, manifest, by_name, cols)
    pet_text, pet_rows = _pet_report(manifest, by_name, cols)
    text = table + "\n".join(lines) + "\n" + graph_text + regroup_text + pet_text
    save_results(args.out, args.stem, head, text, {"device": times, "rows": rows, "graph_costs": graph_rows,
                                                   "regrouped": regroup_rows, "pet": pet_rows,
                                                   "commit": manifest["commit"]})
    print(text)


def _priced(bundle: Path, entry: dict[str, Any], graph: dict[str, Any], table: dict[str, Any]) -> float:
    """A bundle's graph priced under a measured table (:class:`gpu_replay.Replayed`)."""
    from gpu_replay import Replayed

    from eqsat.costs import graph_cost

    return graph_cost(_bundle_graph(bundle, entry, graph), Replayed(table))


def _graph_costs_report(args: argparse.Namespace, manifest: dict[str, Any], by_name: dict[str, Any],
                        cols: list[tuple[str, str]]) -> tuple[str, list[dict[str, Any]]]:
    """Every graph priced again under ``--graph-costs`` (operators timed as a CUDA graph runs them,
    ``gpu_replay.py measure --replayed``): the rank correlations with each measured mode, and what choosing
    among each model's candidates by those costs gains, measured."""
    if not args.graph_costs:
        return "", []
    from gpu_replay import read_measured

    table, bundle = read_measured(args.graph_costs), Path(args.bundle)
    rows, pooled = [], {k: ([], []) for k, _ in cols}
    everything = {k: ([], []) for k, _ in cols}
    for entry in (e for e in manifest["models"] if e["name"] in by_name):
        timed = by_name[entry["name"]]
        priced = [_priced(bundle, entry, g, table) for g in entry["graphs"]]
        for k, _ in cols:
            meas = [_median(timed.get(g["file"], {}), k) for g in entry["graphs"]]
            for p, m in zip(priced, meas, strict=True):
                if not math.isnan(m):
                    everything[k][0].append(p)
                    everything[k][1].append(m)
                    if entry.get("kind") not in ("regrouped", "pet"):
                        pooled[k][0].append(p)
                        pooled[k][1].append(m)
        if entry.get("kind") in ("regrouped", "pet"):
            continue
        pick = min(range(len(priced)), key=lambda i: (priced[i], i))  # ties keep the original
        row = {"model": entry["name"], "predicted_speedup": priced[0] / priced[pick], "choice": pick,
               "first_choice_predicted_speedup": priced[0] / priced[min(1, len(priced) - 1)]}
        for k, _ in cols:
            row[f"{k}_speedup"] = (_median(timed.get(entry["graphs"][0]["file"], {}), k)
                                   / _median(timed.get(entry["graphs"][pick]["file"], {}), k))
        rows.append(row)
    text = ("\n### Priced as a CUDA graph runs the operators\n\n"
            f"Every graph priced again under `{args.graph_costs}`: each operator timed as a CUDA graph of 20 launches "
            "runs it (`gpu_replay.py measure --replayed 20`; no launch from Python in the time). Choice: the "
            "candidate these costs price cheapest (0 is the original).\n\n"
            "| model | first choice, predicted | choice | its predicted speedup | "
            + " | ".join(f"{label} speedup" for _, label in cols) + " |\n|" + "---|" * (4 + len(cols)) + "\n")
    for r in rows:
        text += (f"| {r['model']} | {r['first_choice_predicted_speedup']:.3f}x | {r['choice']} | "
                 f"{r['predicted_speedup']:.3f}x | "
                 + " | ".join(f"{r[f'{k}_speedup']:.3f}x" for k, _ in cols) + " |\n")
    text += f"\nGeometric mean predicted {geomean([r['predicted_speedup'] for r in rows]):.3f}x"
    for k, label in cols:
        ups = [r[f"{k}_speedup"] for r in rows if not math.isnan(r[f"{k}_speedup"])]
        text += (f"\n- {label}: the choices measured {geomean(ups):.3f}x; Spearman of these costs and the "
                 f"measured latency over the {len(pooled[k][0])} candidates {spearman(*pooled[k]):.3f}, over all "
                 f"{len(everything[k][0])} graphs (with the variants below) {spearman(*everything[k]):.3f}")
    return text + "\n", rows


def _pet_report(manifest: dict[str, Any], by_name: dict[str, Any],
                cols: list[tuple[str, str]]) -> tuple[str, list[dict[str, Any]]]:
    """The table of PET's subprograms (``prepare --pet``): each one's cheapest corrected mutant against the
    subprogram, predicted and measured."""
    rows = []
    for entry in (e for e in manifest["models"] if e.get("kind") == "pet" and e["name"] in by_name):
        timed, (orig, mutant) = by_name[entry["name"]], entry["graphs"]
        row = {"subprogram": entry["name"], "mutant": mutant["role"],
               "predicted_speedup": orig["predicted_ms"] / mutant["predicted_ms"]}
        for k, _ in cols:
            before, after = _median(timed.get(orig["file"], {}), k), _median(timed.get(mutant["file"], {}), k)
            row[f"{k}_before_ms"], row[f"{k}_speedup"] = before, before / after
        rows.append(row)
    if not rows:
        return "", rows
    text = ("\n### PET's corrected mutants, each subprogram alone\n\n| subprogram | the mutant | predicted speedup | "
            + " | ".join(f"{label} before (ms) | speedup" for _, label in cols) + " |\n|"
            + "---|" * (3 + 2 * len(cols)) + "\n")
    for r in rows:
        text += (f"| {r['subprogram']} | {r['mutant']} | {r['predicted_speedup']:.3f}x | "
                 + " | ".join(f"{r[f'{k}_before_ms']:.4g} | {r[f'{k}_speedup']:.3f}x" for k, _ in cols) + " |\n")
    for k, label in cols:
        ups = [r[f"{k}_speedup"] for r in rows if not math.isnan(r[f"{k}_speedup"])]
        text += (f"\n- {label}: {sum(u > 1 for u in ups)} of {len(ups)} mutants faster, geometric mean "
                 f"{geomean(ups):.3f}x")
    return text + "\n", rows


def _regrouped_report(args: argparse.Namespace, manifest: dict[str, Any], by_name: dict[str, Any],
                      cols: list[tuple[str, str]]) -> tuple[str, list[dict[str, Any]]]:
    """The table of the regrouped variants (``prepare --regroup``): each one's predicted and measured times and
    its speedup over the original's group count; predicted again under ``--reprice``'s tables where given (the
    grouped convolutions measured as operators in the same GPU run)."""
    from gpu_replay import read_measured

    repriced = read_measured(args.reprice) if args.reprice else None
    bundle = Path(args.bundle)
    text, out = "", []
    for entry in (e for e in manifest["models"] if e.get("kind") == "regrouped" and e["name"] in by_name):
        timed, base = by_name[entry["name"]], entry["graphs"][0]
        rows = []
        for g in entry["graphs"]:
            row = {"groups": g["role"], "predicted_ms": g["predicted_ms"]}
            if repriced is not None:
                row["repriced_ms"] = _priced(bundle, entry, g, repriced)
            for k, _ in cols:
                row[f"{k}_ms"] = _median(timed.get(g["file"], {}), k)
                row[f"{k}_speedup"] = _median(timed.get(base["file"], {}), k) / row[f"{k}_ms"]
            rows.append(row)
        text += (f"\n### {entry['name']}: the grouped convolutions regrouped (block-diagonal kernels)\n\n"
                 "| groups | predicted (ms) | " + ("predicted, grouped ops measured (ms) | " if repriced else "")
                 + " | ".join(f"{label} (ms) | speedup" for _, label in cols) + " |\n|"
                 + "---|" * (2 + (repriced is not None) + 2 * len(cols)) + "\n")
        for r in rows:
            text += (f"| {r['groups']} | {r['predicted_ms']:.4g} | "
                     + (f"{r['repriced_ms']:.4g} | " if repriced is not None else "")
                     + " | ".join(f"{r[f'{k}_ms']:.4g} | {r[f'{k}_speedup']:.3f}x" for k, _ in cols) + " |\n")
        out.append({"model": entry["name"], "rows": rows})
    return text, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("models", nargs="*")
    p.add_argument("--measured", nargs="+", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--dims", default="")
    p.add_argument("--candidates", type=int, default=4)
    p.add_argument("--time-limit", type=float, default=TIME_LIMIT)
    p.add_argument("--regroup", nargs="*", default=[],
                   help="models whose grouped convolutions are also timed regrouped into fewer groups")
    p.add_argument("--pet", nargs="*", default=[], help="ONNX models whose PET subprograms are also timed, each "
                   "alone and as its cheapest corrected mutant")
    p.add_argument("--append", action="store_true", help="add to the bundle's entries instead of replacing them")
    p.add_argument("--pet-limit", type=int, default=8, help="subprograms per --pet model (those with a "
                   "dilated convolution first, then the largest)")
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
    r.add_argument("--graph-costs", default="", help="a measured table of operators timed in CUDA graphs "
                   "(gpu_replay.py measure --replayed) to price every graph again with")
    r.add_argument("--reprice", default="", help="measured tables (comma-separated) to price the regrouped "
                   "variants again with")
    args = ap.parse_args()
    {"prepare": prepare, "time": time_bundle, "report": report}[args.step](args)


if __name__ == "__main__":
    main()
