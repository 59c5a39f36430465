"""PET's corrected mutants measured where they could pay (issue 43, point 5): convolutional networks at batch 1 and
16, optimized with measured costs with and without ``--pet``, and the written models timed end to end.

For each model given (``benchmarks/export_convnets.py`` writes torchvision's ResNet-18 and a CSRNet at fixed
batches), two runs of ``eqsat.optimize`` with the same cost model and time limit: the fully equivalent rules alone,
and the same with PET's corrected mutants in the e-graph (``pet=True``). Each written model has passed eqsat's
numeric check against the original. The three (the original, both written models) and a control (the original in a
second session) are timed under onnxruntime's default level, one intra-op thread, in rounds that run them in a
random order (:func:`_common.timed_rounds`); speedups are medians of per-round ratios with 95 % intervals.

The table says how many corrected mutants each run found and added, which ones the extraction chose, their
predicted cost, and, where none was chosen, the cheapest one's predicted cost against the convolution it would
replace (why none paid).

Usage: /tmp/torchenv/bin/python benchmarks/export_convnets.py /tmp/cnn --batch 1,16 --image 112
       python benchmarks/pet.py /tmp/cnn/resnet18_b16.onnx ... [--costs measured] [--time-limit 300]
       [--rounds 15] [--out benchmarks/results]
Saves ``pet.{md,json}``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from _common import git_commit, ran_as, save_results, timed_rounds

#: the search for the mutants to price begins no convolution past this many seconds (batch 16 is slow)
PRICE_SECONDS = 120.0


def feeds(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 inputs at the model's (fixed) input shapes."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input if i.name not in inits}


def run_one(path: str, costs: str, time_limit: float, rounds: int) -> dict[str, Any]:
    """Both runs of one model, their reports and the end-to-end timings."""
    import eqsat
    from eqsat.onnx_io import read_model
    from eqsat.pipeline.candidates import speedup

    original, _ = read_model(path)
    runs: dict[str, Any] = {}
    written = {}
    for name, pet in (("full", False), ("pet", True)):
        t = time.perf_counter()
        res = eqsat.optimize(original, cost_model=costs, time_limit=time_limit, cache=False, pet=pet,
                             progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
        seconds = time.perf_counter() - t
        written[name] = res.model
        runs[name] = {"optimize_s": seconds, "cost_before_ms": res.cost_before, "cost_after_ms": res.cost_after,
                      "decision": res.decision, "numeric_ok": bool(res.numeric and res.numeric.ok),
                      "stage_seconds": res.stage_seconds,
                      "pet": None if res.pet is None else {"found": res.pet.found,
                                                           "convolutions": res.pet.convolutions,
                                                           "corrections": res.pet.corrections,
                                                           "correction_flops": res.pet.correction_flops,
                                                           "seconds": res.pet.seconds,
                                                           "chosen": [list(c) for c in res.pet.chosen]}}
        print(f"{Path(path).name} {name}: {seconds:.0f} s, {res.decision}"
              + ("" if res.pet is None else f"; pet: {res.pet.describe()}"), file=sys.stderr, flush=True)
    f = feeds(original)
    models = [original, written["full"], written["pet"], original]
    times = timed_rounds(models, f, rounds, runs=3)
    timing = {"original_ms": float(np.median(times[0]))}
    for name, k in (("full", 1), ("pet", 2), ("control", 3)):
        s = speedup(times[0], times[k])
        timing[name] = {"ms": float(np.median(times[k])), "speedup": [s.median, s.low, s.high]}
    s = speedup(times[1], times[2])
    timing["pet_over_full"] = [s.median, s.low, s.high]
    return {"model": Path(path).name, "runs": runs, "timing": timing, "priced": priced_rewrites(path, costs)}


def priced_rewrites(path: str, costs: str) -> list[dict[str, Any]]:
    """Each subprogram with corrected mutants (a convolution, or a chain of them ending at one): its cost and its
    cheapest corrected mutant's (mutant and corrections) under ``costs``, as the extraction priced them (the model
    imported as optimize imports it); the subprograms the search reaches within :data:`PRICE_SECONDS`."""
    from eqsat.costs import get_cost_model, graph_cost
    from eqsat.ir.graph import Graph
    from eqsat.onnx_io import load_model
    from eqsat.rules.pet import find_rewrites
    from eqsat.rules.pet.program import chain_of

    graph, model = load_model(path), get_cost_model(costs)
    found = find_rewrites(graph, deadline=time.perf_counter() + PRICE_SECONDS,
                          progress=lambda m: print(f"  priced: {m}", file=sys.stderr, flush=True))
    out = []
    for tensor, length in dict.fromkeys((r.tensor, len(r.windows)) for r in found):
        sub = chain_of(graph, graph.producers[tensor], length)  # the subprogram the rewrites compute again
        assert sub is not None  # find_rewrites found it
        g = sub.graph
        alone = graph_cost(g, model)
        priced = sorted((graph_cost(Graph(g.inputs, g.weights, r.nodes, g.outputs), model), r.name)
                        for r in found if (r.tensor, len(r.windows)) == (tensor, length))
        out.append({"tensor": tensor, "convolutions": length, "shape": list(graph.shapes[tensor]),
                    "original_ms": alone, "best_mutant_ms": priced[0][0], "best_mutant": priced[0][1]})
    return out


def _x(v: list[float]) -> str:
    return f"{v[0]:.3f}x [{v[1]:.3f}, {v[2]:.3f}]"


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table."""
    out = ["| model | run | optimize (s) | predicted (ms) before / after | found / chosen | measured (ms) | "
           "speedup over the original | PET over fully equivalent |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["timing"]
        out.append(f"| {r['model']} | original | - | - | - | {t['original_ms']:.2f} | control "
                   f"{_x(t['control']['speedup'])} | - |")
        for name in ("full", "pet"):
            u = r["runs"][name]
            pet = u["pet"]
            found = "-" if pet is None else f"{pet['found']} / {len(pet['chosen'])}"
            out.append(f"| {r['model']} | {'fully equivalent' if name == 'full' else 'with PET'} | "
                       f"{u['optimize_s']:.0f} | {u['cost_before_ms']:.4g} / {u['cost_after_ms']:.4g} | {found} | "
                       f"{t[name]['ms']:.2f} | {_x(t[name]['speedup'])} | "
                       f"{_x(t['pet_over_full']) if name == 'pet' else '-'} |")
    chosen = [f"- {r['model']}: " + "; ".join(f"{c[0]}: {c[1]} ({c[2]} corrections)" for c in
                                              r["runs"]["pet"]["pet"]["chosen"])
              for r in rows if r["runs"]["pet"]["pet"] and r["runs"]["pet"]["pet"]["chosen"]]
    priced = ["", "Each subprogram with corrected mutants (a convolution, or a chain of two ending at it) against its "
              "cheapest one (mutant and corrections), as the run's cost model prices them (ms; ratio > 1: the "
              "mutant costs more):", "",
              "| model | convolution | convolutions | output | original (ms) | cheapest mutant (ms) | ratio | mutant |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for p in r["priced"]:
            priced.append(f"| {r['model']} | {p['tensor']} | {p.get('convolutions', 1)} | "
                          f"{'x'.join(map(str, p['shape']))} | "
                          f"{p['original_ms']:.4g} | {p['best_mutant_ms']:.4g} | "
                          f"{p['best_mutant_ms'] / p['original_ms']:.2f} | {p['best_mutant']} |")
    return "\n".join(out + ["", "Chosen corrected mutants:", *(chosen or ["- none"]), *priced])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--costs", default="measured")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    rows = [run_one(p, args.costs, args.time_limit, args.rounds) for p in args.models]
    head = (f"# PET's corrected mutants, measured end to end\n\ncommit {git_commit()}, {platform.machine()} "
            f"{os.cpu_count()} cores, onnxruntime {ort.__version__} (1 intra-op thread), costs {args.costs}, "
            f"time limit {args.time_limit:g} s per run\n\nCommand: `{ran_as()}`\n\n")
    save_results(args.out, "pet", head, table(rows), {"rows": rows, "costs": args.costs,
                                                      "time_limit": args.time_limit, "commit": git_commit()})
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
