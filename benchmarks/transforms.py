"""Cached transformations: a model of one structure optimized, then another export of it with other weights
replayed (eqsat.pipeline.transforms). Target (issue 40): the second run in at most 0.1x the first's time, the
same structure written, the numeric check passing on the new weights.

For each model, in a fresh cache folder: ``optimize`` of the model (seed 0), timed; then of the same architecture
with seed 1 and every weight and computed tensor renamed (as a fine-tune exported again), timed. A pair of ONNX
files (``--pair FIRST.onnx:SECOND.onnx``) measures your own exports instead. Prints a table and saves
``transforms.{md,json}`` under ``--out``.

Usage: python benchmarks/transforms.py [--models NAME ...] [--pair A.onnx:B.onnx ...] [--time-limit S] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import ran_as, save_results

import eqsat
from eqsat import models
from eqsat.testing.onnx_builders import reexported

#: built-in models of a seed: (name, builder of (seed) -> model)
MODELS = {
    "nasrnn_cell": lambda seed: models.nasrnn_cell(seed=seed),
    "bert_attention_block": lambda seed: models.bert_attention_block(seed=seed),
    "small_cnn": lambda seed: models.small_cnn(seed=seed),
    "taso_bert": lambda seed: models.taso_bert(seed=seed),
    "taso_squeezenet": lambda seed: models.taso_squeezenet(seed=seed),
    "taso_inception_v3": lambda seed: models.taso_inception_v3(seed=seed),
}


def _ops(model: Any) -> Counter[str]:
    return Counter(n.op_type for n in model.graph.node)


def measure(name: str, first: Any, second: Any, time_limit: float) -> dict[str, Any]:
    """Optimize ``first`` then ``second`` in a fresh transformation cache; the row of the table."""
    with tempfile.TemporaryDirectory(prefix="eqsat-transforms-") as folder:
        os.environ["EQSAT_TRANSFORMS_DIR"] = folder
        t = time.perf_counter()
        a = eqsat.optimize(first, time_limit=time_limit)
        first_s = time.perf_counter() - t
        t = time.perf_counter()
        b = eqsat.optimize(second, time_limit=time_limit)
        second_s = time.perf_counter() - t
    row = {"model": name, "first_s": round(first_s, 2), "second_s": round(second_s, 3),
           "ratio": round(second_s / first_s, 3), "replayed": b.transformation.startswith("replayed"),
           "same_structure": _ops(a.model) == _ops(b.model), "check_ok": b.numeric is not None and b.numeric.ok,
           "written": "optimized" if not b.kept_original else "original", "stages": dict(b.stage_seconds)}
    print(" ".join(f"{k}={v}" for k, v in row.items() if k != "stages"), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--pair", action="append", default=[], metavar="FIRST.onnx:SECOND.onnx")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    rows = [measure(name, MODELS[name](0), reexported(MODELS[name](1)), args.time_limit) for name in args.models]
    rows += [measure(Path(a).name, a, b, args.time_limit) for a, b in (p.split(":", 1) for p in args.pair)]
    md = ["| model | first run (s) | other weights, re-exported (s) | ratio | replayed | same structure | "
          "check | written |", "|---|---|---|---|---|---|---|---|"]
    md += [f"| {r['model']} | {r['first_s']} | {r['second_s']} | {r['ratio']} | {r['replayed']} | "
           f"{r['same_structure']} | {'ok' if r['check_ok'] else 'FAILED'} | {r['written']} |" for r in rows]
    worst = max(r["ratio"] for r in rows)
    head = (f"# Cached transformations: the same structure, other weights\n\n{ran_as()}, eqsat {eqsat.__version__}; "
            f"analytic costs, time limit {args.time_limit:g} s\n\nWorst ratio {worst:.3f} (target 0.1).\n\n")
    print(head + "\n".join(md))
    save_results(args.out, "transforms", head, "\n".join(md), rows)


if __name__ == "__main__":
    main()
