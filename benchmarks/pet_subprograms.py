"""PET's mutants of single convolutions timed alone (issue 43): each named convolution of a model as a model of its
own, against its fold with the seam corrected and its fold with a zero gap (no correction), in onnxruntime.

Where ``benchmarks/pet.py`` times whole models and prices subprograms with the cost model, this times the
subprograms themselves, so a mutant the measured costs price cheaper can be checked as it runs. Each program is
checked equal to the convolution on random inputs, then timed in interleaved rounds (:func:`_common.timed_rounds`:
onnxruntime's default level, one thread); speedups are medians of per-round ratios with 95 % intervals.

Usage: python benchmarks/pet_subprograms.py MODEL.onnx:TENSOR [...] [--rounds 11] [--out benchmarks/results]
       (TENSOR: the output of a convolution of MODEL; ``benchmarks/pet.py``'s pricing table names them)
Saves ``pet_subprograms.{md,json}``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from _common import git_commit, ran_as, save_results, timed_rounds

#: the mutants timed, by the last step of their name: the fold into the width with the seam corrected, and with
#: a gap as wide as the convolution's pads
FOLDS = ("batch_to_width(2) > ", "batch_to_width_gapped(2,")


def programs(path: str, tensor: str) -> dict[str, Any]:
    """The subprogram computing ``tensor`` in the model at ``path`` and its folds, as ONNX models by name."""
    from eqsat.ir.graph import Graph
    from eqsat.onnx_io import load_model, to_onnx
    from eqsat.rules.pet.program import subprogram_of
    from eqsat.rules.pet.search import find_rewrites

    graph = load_model(path)
    sub = subprogram_of(graph, graph.producers[tensor])
    if sub is None:
        raise SystemExit(f"{tensor!r} is not the output of a convolution over weights in {path}")
    g = sub.graph
    out = {"convolution": to_onnx(g)}
    for r in find_rewrites(g, chain=1):
        if r.name.removeprefix("pet:").startswith(FOLDS):
            out[r.name.removeprefix("pet:")] = to_onnx(Graph(g.inputs, g.weights, r.nodes, g.outputs))
    return out


def run_one(path: str, tensor: str, rounds: int) -> dict[str, Any]:
    """One subprogram's programs, checked equal and timed."""
    from eqsat.pipeline.candidates import speedup

    models = programs(path, tensor)
    first = next(iter(models.values()))
    shapes = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in first.graph.input]
    feeds = {i.name: np.random.default_rng(k).standard_normal(s).astype(np.float32)
             for k, (i, s) in enumerate(zip(first.graph.input, shapes, strict=True))}
    runs = {k: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            for k, m in models.items()}
    for name, got in runs.items():
        np.testing.assert_allclose(got, runs["convolution"], rtol=1e-3, atol=1e-3, err_msg=name)
    times = timed_rounds(list(models.values()), feeds, rounds, runs=3)
    rows = []
    for name, t in zip(models, times, strict=True):
        s = speedup(times[0], t)
        rows.append({"program": name, "ms": float(np.median(t)), "speedup": [s.median, s.low, s.high]})
        print(f"{tensor} {name}: {np.median(t):.2f} ms, {s.median:.3f}x [{s.low:.3f}, {s.high:.3f}]",
              file=sys.stderr, flush=True)
    return {"model": Path(path).name, "tensor": tensor, "shape": shapes[0], "programs": rows}


def table(results: list[dict[str, Any]]) -> str:
    """The markdown table."""
    out = ["| model | convolution | input | program | measured (ms) | speedup over the convolution |",
           "|---|---|---|---|---|---|"]
    for r in results:
        for p in r["programs"]:
            s = p["speedup"]
            out.append(f"| {r['model']} | {r['tensor']} | {'x'.join(map(str, r['shape']))} | {p['program']} | "
                       f"{p['ms']:.2f} | {s[0]:.3f}x [{s[1]:.3f}, {s[2]:.3f}] |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("convolutions", nargs="+", metavar="MODEL:TENSOR")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    results = [run_one(*item.rsplit(":", 1), args.rounds) for item in args.convolutions]
    head = (f"# PET's folds of single convolutions, timed alone\n\ncommit {git_commit()}, {platform.machine()} "
            f"{os.cpu_count()} cores, onnxruntime {ort.__version__} (1 intra-op thread)\n\nCommand: `{ran_as()}`\n\n")
    save_results(args.out, "pet_subprograms", head, table(results), results)
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
