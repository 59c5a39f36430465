"""Rule generation and verification benchmark: counts per stage (TASO's Table 3) and times, at N = 2 and 3.

Run: ``.venv/bin/python benchmarks/rules.py [--max-ops 2 3] [--workers 2] [--timeout 4]``; writes
``benchmarks/results/rules.md``. Verification runs on the corpus selected from each generation (not on the
committed corpus file, which is left untouched).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

from eqsat.rules import axioms, corpus, generator, verifier
from eqsat.rules.cli import verify_entries

OUT = Path(__file__).parent / "results" / "rules.md"


def run(max_ops: int, workers: int, timeout: float) -> dict:
    """Generate, select and verify at one size; returns counts and times."""
    t0 = time.perf_counter()
    cands, rep = generator.generate(max_ops, workers=workers)
    t_gen = time.perf_counter() - t0
    entries = corpus.select(cands)
    t1 = time.perf_counter()
    verify_entries(entries, timeout, workers)
    t_ver = time.perf_counter() - t1
    status: dict[str, int] = {}
    for e in entries:
        status[e.status] = status.get(e.status, 0) + 1
    return {"max_ops": max_ops, "stages": rep.table(), "seconds": rep.seconds, "generate": t_gen,
            "selected": len(entries), "verify": t_ver, "status": status}


def main() -> None:
    """Run the benchmark and write the markdown report."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-ops", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=4.0)
    args = ap.parse_args()
    t = time.perf_counter()
    checks = verifier.validate_axioms(list(axioms.AXIOMS), workers=args.workers)
    t_ax = time.perf_counter() - t
    t = time.perf_counter()
    redundant = verifier.redundant_axioms()
    t_red = time.perf_counter() - t
    planted = verifier.validate_axiom(axioms.PLANTED_WRONG)
    results = [run(n, args.workers, args.timeout) for n in args.max_ops]
    lines = ["# Rule generation and verification", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
             f"{args.workers} workers; Z3 timeout {args.timeout} s per rule.", "",
             "## Counts per stage", "", "| stage | " + " | ".join(f"N = {r['max_ops']}" for r in results) + " |",
             "|---|" + "---|" * len(results)]
    for k, (stage, _) in enumerate(results[0]["stages"]):
        lines.append(f"| {stage} | " + " | ".join(str(r["stages"][k][1]) for r in results) + " |")
    lines.append("| selected for the corpus | " + " | ".join(str(r["selected"]) for r in results) + " |")
    for st in ("proved", "unknown", "refuted"):
        lines.append(f"| {st} | " + " | ".join(str(r["status"].get(st, 0)) for r in results) + " |")
    lines += ["", "## Times (seconds)", "", "| phase | " + " | ".join(f"N = {r['max_ops']}" for r in results) + " |",
              "|---|" + "---|" * len(results)]
    for phase in ("enumerate", "pair+prune", "confirm"):
        lines.append(f"| {phase} | " + " | ".join(f"{r['seconds'][phase]:.1f}" for r in results) + " |")
    lines.append("| generation total | " + " | ".join(f"{r['generate']:.1f}" for r in results) + " |")
    lines.append("| verification (numeric + Z3) | " + " | ".join(f"{r['verify']:.1f}" for r in results) + " |")
    lines += ["", "## Axioms", "",
              f"{len(checks)} axioms validated by symbolic execution in {t_ax:.1f} s: "
              f"{sum(c.status == 'valid' for c in checks)} valid"
              + "".join(f"; {c.name}: {c.status}" for c in checks if c.status != "valid") + ".",
              f"Redundancy check ({t_red:.1f} s): {', '.join(redundant) or 'no axiom entailed by the others'}.",
              f"Planted wrong axiom `{axioms.PLANTED_WRONG.name}`: {planted.status} ({planted.reason}).", ""]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
