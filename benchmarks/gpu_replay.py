"""Measured GPU costs for whole optimizations, where the GPU machine cannot run the optimizer.

Three steps, the middle one on the GPU machine (it needs only eqsat's operator registry, CuPy and, for
convolutions, PyTorch: not egglog or OR-Tools):

1. ``collect``: optimize each model here under the simulated-GPU costs (``gpu-sim``) and save every operator
   configuration any run priced (the e-graph's, the snapshots', the candidates'), as JSON.
2. ``measure``: on the GPU, time each configuration with :class:`eqsat.gpu.CupyCostModel` and save the times,
   which configurations ran as a kernel and which the calibrated roofline priced, the device's identity and the
   roofline's calibration.
3. ``replay``: optimize each model again with those times as the cost model (a configuration missing from them
   is priced by the saved roofline, and counted), and compare with what ``gpu-sim`` predicted. Predicted, not
   timed: CuPy's model prices operators; it does not run whole models.

Usage::

    python benchmarks/gpu_replay.py collect taso_bert taso_nasrnn ... --keys keys.json [--as-written]
    python benchmarks/gpu_replay.py measure keys.json --out measured.json          # on the GPU machine
    python benchmarks/gpu_replay.py replay measured.json[,more.json] taso_bert ... [--as-written] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import geomean, parse_sizes, ran_as, save_results  # noqa: E402

from eqsat.costs.base import CostModel  # noqa: E402
from eqsat.ops import CostKey  # noqa: E402

TIME_LIMIT = 60.0


def _tupled(v: Any) -> Any:
    """A JSON value with its lists back as tuples (a CostKey's parameters and shapes are tuples)."""
    return tuple(_tupled(x) for x in v) if isinstance(v, list) else v


def key_to_json(k: CostKey) -> dict[str, Any]:
    """A configuration as JSON-ready data (:func:`key_from_json` reads it back)."""
    return {"op": k.op, "params": [[n, v] for n, v in k.params], "inputs": k.input_shapes, "output": k.output_shape,
            "dtype": k.dtype, "layout": k.layout, "weights": k.weights, "after": k.after}


def key_from_json(d: dict[str, Any]) -> CostKey:
    """The configuration :func:`key_to_json` wrote."""
    return CostKey(d["op"], tuple((n, _tupled(v)) for n, v in d["params"]), _tupled(d["inputs"]),
                   _tupled(d["output"]), d["dtype"], d["layout"], _tupled(d["weights"]), d["after"])


class Recording(CostModel):
    """``inner``'s costs, remembering every configuration priced."""

    def __init__(self, inner: CostModel) -> None:
        self.inner, self.keys = inner, set()
        self.name, self.is_measured = inner.name, inner.is_measured

    def cost(self, key: CostKey) -> float:
        self.keys.add(key)
        return self.inner.cost(key)


class Replayed(CostModel):
    """Costs measured on a GPU before, looked up by configuration; the GPU's calibrated roofline prices one that
    was not measured (``missed`` counts them). Nothing is timed here, so the pipeline treats it as computed."""

    def __init__(self, measured: dict[str, Any]) -> None:
        from eqsat.gpu.cupy_measure import Calibration

        self.table = {e["key"]: e["ms"] for e in measured["costs"]}
        self.roofline = Calibration(**measured["calibration"]).roofline()
        self.gpu = measured["identity"]["gpu"]
        self.name = f"cupy-gpu measured on {self.gpu}, replayed"
        self.missed: set[str] = set()

    def cost(self, key: CostKey) -> float:
        if key.op == "reshape":
            return 0.0
        ms = self.table.get(key.as_str())
        if ms is None:
            self.missed.add(key.as_str())
            return self.roofline.cost(key)
        return ms


def read_measured(paths: str | list[str]) -> dict[str, Any]:
    """The measured tables at ``paths`` (a list, or comma-separated; of one GPU) as one: every configuration, the
    first table's identity and calibration."""
    names = paths.split(",") if isinstance(paths, str) else paths
    tables = [json.loads(Path(p).read_text(encoding="utf-8")) for p in names]
    out = dict(tables[0])
    out["costs"] = [e for t in tables for e in t["costs"]]
    return out


def _models(names: list[str], dims: str = "", as_written: bool = False) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Name -> (builder, ``optimize``'s keywords) of each model: a built-in model's name, or an ONNX file, whose
    symbolic dimensions named in ``dims`` (``NAME=SIZE,...``) are costed at those sizes; with ``as_written``
    each is imported as written (no fusions folded in before the search, as TASO and Tensat import it)."""
    import onnx

    from eqsat.models.registry import builtin_models

    known, sizes, out = builtin_models(), parse_sizes(dims), {}
    for name in names:
        if name in known:
            out[name] = (known[name], {})
        elif name.endswith(".onnx") and Path(name).is_file():
            model = onnx.load(name, load_external_data=False)
            symbols = {d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
            kw = {"dims": {k: v for k, v in sizes.items() if k in symbols}} if symbols & set(sizes) else {}
            out[Path(name).stem] = (lambda path=name: onnx.load(path), kw)
        else:
            raise SystemExit(f"unknown model {name!r}: neither an ONNX file nor built-in ({', '.join(known)})")
    if as_written:
        for _, kw in out.values():
            kw["as_written"] = True
    return out


def collect(args: argparse.Namespace) -> None:
    """Step 1, here: optimize each model under gpu-sim and save every configuration priced."""
    import eqsat
    from eqsat.costs import get_cost_model

    rec = Recording(get_cost_model("gpu-sim"))
    for name, (build, kw) in _models(args.models, args.dims, args.as_written).items():
        t = time.perf_counter()
        eqsat.optimize(build(), cost_model=rec, time_limit=TIME_LIMIT, cache=False, **kw)
        print(f"{name}: {len(rec.keys)} configurations so far ({time.perf_counter() - t:.1f} s)", flush=True)
    # an opaque node's configuration is the ONNX node itself, which CuPy's model cannot run: the roofline's
    keys = sorted((k for k in rec.keys if k.op != "opaque"), key=lambda k: k.as_str())
    Path(args.keys).write_text(json.dumps([key_to_json(k) for k in keys]) + "\n", encoding="utf-8")
    print(f"wrote {len(keys)} configurations to {args.keys} ({len(rec.keys) - len(keys)} opaque left out)")


def measure(args: argparse.Namespace) -> None:
    """Step 2, on the GPU machine: time each configuration and save the times."""
    from eqsat.gpu import CupyCostModel
    from eqsat.gpu.cupy_measure import nhwc_conv_as_written

    m = CupyCostModel(replayed=args.replayed)
    keys = [key_from_json(d) for d in json.loads(Path(args.keys).read_text(encoding="utf-8"))]
    costs, t0 = [], time.perf_counter()
    for k, key in enumerate(keys):
        # timed as a kernel, or priced from ones (an NHWC convolution as what export writes), or a view (free)
        timed = nhwc_conv_as_written(key)[1] if key.op == "conv2d_nhwc" else key
        kernel = key.op not in ("reshape", "opaque") and m._kernel(timed) is not None
        failures = m.capture_failures
        costs.append({"key": key.as_str(), "op": key.op, "ms": m.cost(key), "kernel": kernel,
                      **({"captured": kernel and m.capture_failures == failures} if args.replayed else {})})
        if (k + 1) % 200 == 0:
            print(f"{k + 1}/{len(keys)} in {time.perf_counter() - t0:.0f} s", flush=True)
    c = m.calibration
    out = {"identity": m.device_identity(), "cudnn_backend": m.cudnn_backend,
           "calibration": {"gflops": c.gflops, "bandwidth_gbs": c.bandwidth_gbs, "launch_ms": c.launch_ms,
                           "resident_threads": c.resident_threads},
           "replayed": args.replayed, "capture_failures": m.capture_failures,
           "seconds": time.perf_counter() - t0, "costs": costs}
    Path(args.out).write_text(json.dumps(out, indent=0) + "\n", encoding="utf-8")
    timed, views = sum(e["kernel"] for e in costs), sum(e["op"] == "reshape" for e in costs)
    print(f"{len(costs)} configurations on {out['identity']['gpu']}: {timed} timed as kernels, {views} views (free), "
          f"{len(costs) - timed - views} priced by the calibrated roofline; wrote {args.out}")


def _timed_how(measured: dict[str, Any]) -> str:
    """How a measured table's operators were timed, in a sentence."""
    launch_us = measured["calibration"]["launch_ms"] * 1e3
    if measured.get("replayed"):
        return (f"Each operator is timed as a CUDA graph of {measured['replayed']} launches runs it (a kernel "
                f"{launch_us:.1f} us at least; configurations whose capture failed, "
                f"{measured.get('capture_failures', 0)} with the calibration's, are timed as launched from Python).")
    return (f"Each operator is timed alone, launched from Python (an empty launch takes {launch_us:.1f} us there), "
            "so a graph of fewer kernels gains more here than in a runtime that launches them from C++ or a CUDA "
            "graph.")


def replay(args: argparse.Namespace) -> None:
    """Step 3, here: optimize each model with the times; compare with gpu-sim's choices."""
    import eqsat
    from eqsat.costs import get_cost_model, graph_cost

    measured = read_measured(args.measured)
    rows = []
    for name, (build, kw) in _models(args.models, args.dims, args.as_written).items():
        gpu = Replayed(measured)
        res = eqsat.optimize(build(), cost_model=gpu, time_limit=TIME_LIMIT, cache=False, **kw)
        sim = eqsat.optimize(build(), cost_model=get_cost_model("gpu-sim"), time_limit=TIME_LIMIT, cache=False, **kw)

        # every graph priced alike, as an IR graph under the measured costs (an NHWC convolution as the transposes
        # and NCHW convolution export writes; a Gemm with its bias as one kernel, which an ONNX file's import
        # would split into a product and an add)
        priced = Replayed(measured)
        before = graph_cost(res.original, priced)
        after = before if res.kept_original else graph_cost(res.graph, priced)
        sim_after = before if sim.kept_original else graph_cost(sim.graph, priced)
        rows.append({"model": name, "before_ms": before, "after_ms": after, "speedup": before / after,
                     "extracted_speedup": res.speedup, "sim_speedup": sim.speedup,
                     "sim_choice_speedup_on_gpu": before / sim_after,
                     "numeric_ok": res.numeric.ok if res.numeric else None,
                     "missed": len(gpu.missed), "seconds": sum(res.stage_seconds.values())})
        print(json.dumps(rows[-1]), flush=True)
    kernels = sum(e["kernel"] for e in measured["costs"])
    views = sum(e["op"] == "reshape" for e in measured["costs"])
    head = (f"# eqsat under measured GPU costs ({measured['identity']['gpu']})\n\n"
            f"Command: {ran_as()}. Costs: {len(measured['costs'])} operator configurations timed on "
            f"{measured['identity']['gpu']} by `eqsat.gpu.CupyCostModel` (CuPy {measured['identity']['cupy']}, "
            f"cuDNN via {measured['cudnn_backend'] or 'none'}): {kernels} as kernels, {views} views (free), the "
            f"rest by the GPU's "
            f"calibrated roofline ({measured['calibration']['gflops'] / 1e3:.1f} TFLOP/s, "
            f"{measured['calibration']['bandwidth_gbs']:.0f} GB/s, "
            f"{measured['calibration']['launch_ms'] * 1e3:.1f} us a launch); collected under `gpu-sim`, measured "
            f"with `measure` on the GPU machine, replayed here. Speedups are predicted from the operator costs "
            f"(sums of per-operator times over each graph, priced alike), not timed end to end; the extraction's "
            f"own estimate is beside them. " + _timed_how(measured) + " "
            "The last columns price with the same measured costs the graph `gpu-sim` chose, and count the "
            "configurations of the replayed runs that were not measured (opaque ONNX nodes, which CuPy's model cannot "
            "run, such as hf_bert's mask arithmetic; priced by the roofline).\n\n")
    table = ("| model | cost before (ms) | after (ms) | speedup | the extraction's estimate | gpu-sim's predicted "
             "speedup | gpu-sim's choice under the measured costs | configurations not measured | numeric check |\n"
             "|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        table += (f"| {r['model']} | {r['before_ms']:.4g} | {r['after_ms']:.4g} | {r['speedup']:.3f}x | "
                  f"{r['extracted_speedup']:.3f}x | {r['sim_speedup']:.3f}x | {r['sim_choice_speedup_on_gpu']:.3f}x | "
                  f"{r['missed']} | {'ok' if r['numeric_ok'] else r['numeric_ok']} |\n")
    table += (f"\nGeometric mean speedup under the measured costs {geomean([r['speedup'] for r in rows]):.3f}x; "
              f"gpu-sim's choices priced by them {geomean([r['sim_choice_speedup_on_gpu'] for r in rows]):.3f}x.\n")
    print(head + table)
    if args.out:
        save_results(args.out, args.stem, head, table, {"measured": args.measured, "rows": rows})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    c = sub.add_parser("collect", help="optimize under gpu-sim here; save every configuration priced")
    c.add_argument("models", nargs="+", help="built-in models' names or ONNX files")
    c.add_argument("--keys", required=True, help="JSON file to write")
    c.add_argument("--dims", default="", help="sizes of the files' symbolic dimensions, NAME=SIZE,...")
    c.add_argument("--as-written", action="store_true", help="import each model as written (no folds)")
    m = sub.add_parser("measure", help="on the GPU machine: time every configuration")
    m.add_argument("keys")
    m.add_argument("--out", required=True, help="JSON file to write")
    m.add_argument("--replayed", type=int, default=0, help="time each configuration as a CUDA graph of this many "
                   "launches runs it (as a deployment that captures the model), not as launched from Python")
    r = sub.add_parser("replay", help="optimize with the measured times; compare with gpu-sim")
    r.add_argument("measured", help="the measured table (several: comma-separated, merged)")
    r.add_argument("models", nargs="+", help="built-in models' names or ONNX files")
    r.add_argument("--dims", default="", help="sizes of the files' symbolic dimensions, NAME=SIZE,...")
    r.add_argument("--as-written", action="store_true", help="import each model as written (no folds)")
    r.add_argument("--stem", default="gpu_replay", help="results files' name (default gpu_replay)")
    r.add_argument("--out", default=None, help="results folder (default: print only)")
    args = ap.parse_args()
    {"collect": collect, "measure": measure, "replay": replay}[args.step](args)


if __name__ == "__main__":
    main()
