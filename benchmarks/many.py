"""Many models at once: ``eqsat optimize A B ... --out-dir DIR`` one model at a time, in a process pool and as Ray
tasks (on a Ray the run starts here, and on one already running, whose start is not timed), the same models and
options each way (analytic costs, no cached
transformations: every run a search), timed from the command's start to its table.

For each way: the wall time, its ratio to the sequential run, and whether every model was written with the
sequential run's cost. Target of issue 40: Ray over 8 models in at most 0.75x the sequential time on 2 cores.
Saves ``many.{md,json}``.

Usage: python benchmarks/many.py MODEL.onnx ... [--workers 2] [--time-limit 60] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ran_as, save_results

import eqsat.pipeline.many as many


def run(models: list[str], out: Path, backend: str, workers: int, time_limit: float) -> tuple[float, list]:
    t = time.perf_counter()
    outcomes = many.optimize_many(models, out, workers=workers, backend=backend, time_limit=time_limit,
                                  cache=False)
    return time.perf_counter() - t, outcomes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base: list = []
        ways = (("one at a time", "serial", 1), ("process pool", "pool", args.workers),
                ("Ray, started by the run", "ray", args.workers), ("Ray, running before", "ray", args.workers))
        for k, (label, backend, workers) in enumerate(ways):
            if k == 3:  # a Ray already running on this machine, as a cluster would be: its start is not timed
                import ray

                ray.get([ray.remote(lambda: None).remote() for _ in range(workers)])
            seconds, outcomes = run(args.models, Path(tmp) / f"{k}", backend, workers, args.time_limit)
            base = base or outcomes
            same = all(o.written == b.written and abs(o.cost_after - b.cost_after) <= 1e-6 * max(1.0, b.cost_after)
                       for o, b in zip(outcomes, base, strict=True))
            rows.append({"way": label, "workers": workers, "seconds": seconds, "ratio": seconds / rows[0]["seconds"]
                         if rows else 1.0, "same_costs": same,
                         "failed": sum(o.written == "failed" for o in outcomes)})
            print(rows[-1], flush=True)
    cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    head = (f"# Many models at once\n\nCommand: {ran_as()}; {len(args.models)} models "
            f"({', '.join(Path(m).name for m in args.models)}), analytic costs, no cached transformations, "
            f"{cpus} cores. Wall time of `eqsat.optimize_many` each way (Ray's includes starting it here), and "
            "whether every model was written with the cost the sequential run wrote.\n\n")
    table = "| way | workers | seconds | vs one at a time | same costs | failed |\n|---|---|---|---|---|---|\n"
    for r in rows:
        table += (f"| {r['way']} | {r['workers']} | {r['seconds']:.1f} | {r['ratio']:.2f}x | "
                  f"{'yes' if r['same_costs'] else 'no'} | {r['failed']} |\n")
    save_results(args.out, "many", head, table, rows)
    print(head + table)
    sys.exit(0)


if __name__ == "__main__":
    main()
