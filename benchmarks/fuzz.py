"""Differential fuzzing: random ONNX graphs optimized with the default rules, compared with onnxruntime.

Usage: python benchmarks/fuzz.py --graphs N [--seed S] [--per-model K] [--time-limit T] [--max-minutes M]
       [--avoid TopK,...] [--out benchmarks/results]

Graph ``i`` comes from seed ``S * 1_000_003 + i`` (eqsat.testing.fuzz.generate_graph); K graphs are packed side by side
into one model so one optimize() call covers K graphs (its ~0.3 s fixed cost, loading ~300 rules, is shared).
A failing pack is re-run graph by graph and the failing graph shrunk to a small reproducer. Prints a table and
writes benchmarks/results/fuzz.md (totals, findings with reproducers, every rule that fired).
Target (issue tracker): 10 000 graphs, 0 mismatches.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

from _common import git_commit


def table(rep, rule_total: int) -> str:
    """Markdown table of a :class:`eqsat.testing.fuzz.FuzzReport`."""
    fired = len(rep.rules_fired)
    rate = rep.graphs / rep.seconds if rep.seconds else 0.0
    rows = [
        ("graphs checked", f"{rep.graphs}"),
        ("optimize() calls (packed)", f"{rep.calls}"),
        ("optimize() calls re-running/shrinking failures", f"{rep.extra_calls}"),
        ("ONNX nodes generated", f"{rep.nodes}"),
        ("models changed by extraction", f"{rep.changed_models} of {rep.calls}"),
        ("rules fired (distinct one-way rules)", f"{fired} of {rule_total} ({100 * fired / max(rule_total, 1):.0f} %)"),
        ("rule matches (total)", f"{sum(rep.rules_fired.values())}"),
        ("**mismatches**", f"**{rep.mismatches}**"),
        ("crashes (optimize raised on a valid model)", f"{rep.errors}"),
        ("invalid generated models (skipped)", f"{rep.invalid}"),
        ("wall time", f"{rep.seconds:.1f} s"),
        ("throughput", f"{rate:.2f} graphs/s"),
        ("projected time for 10 000 graphs", f"{10_000 / rate / 60:.1f} min" if rate else "-"),
    ]
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])


def findings_md(rep) -> str:
    """The findings (mismatches, crashes), each with its shrunk reproducer."""
    if not rep.findings:
        return "No mismatches and no crashes.\n"
    out = []
    for f in rep.findings:
        out.append(f"### {f.kind} (graph seed {f.graph_seed}, {f.count} graph(s))\n")
        out.append("```\n" + f.detail.strip()[:3000] + "\n```\n")
        if f.onnx_text:
            out.append("Reproducer (`eqsat.testing.fuzz.ReplayChoices(" + str(f.record) + ")`):\n")
            out.append("```\n" + f.onnx_text.strip()[:4000] + "\n```\n")
        if f.rules_fired:
            out.append("Rules fired: " + ", ".join(f"{k} ({v})" for k, v in sorted(f.rules_fired.items())) + "\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer and write benchmarks/results/fuzz.md."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", type=int, default=1000, help="random graphs to check")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-model", type=int, default=8, help="graphs packed into one optimize() call")
    ap.add_argument("--max-motifs", type=int, default=6, help="motifs (a few nodes each) per graph, at most")
    ap.add_argument("--time-limit", type=float, default=10.0, help="optimize() time limit per call (s)")
    ap.add_argument("--max-minutes", type=float, default=None, help="stop after this long; report what ran")
    ap.add_argument("--avoid", default="", help="comma-separated motifs / opaque ops not to generate")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    from eqsat.testing import fuzz
    avoid = [a for a in args.avoid.split(",") if a]
    deadline = time.time() + 60 * args.max_minutes if args.max_minutes else None
    last = [0.0]

    def progress(rep) -> None:
        if not args.quiet and (time.time() - last[0] > 30 or rep.graphs >= args.graphs):
            last[0] = time.time()
            print(f"  {rep.graphs} graphs, {rep.calls} calls, {rep.seconds:.0f} s, {len(rep.rules_fired)} rules, "
                  f"{rep.mismatches} mismatches, {rep.errors} crashes", file=sys.stderr, flush=True)

    rep = fuzz.run_fuzz(args.graphs, seed=args.seed, per_model=args.per_model, max_motifs=args.max_motifs,
                        time_limit=args.time_limit, avoid=avoid, progress=progress, deadline=deadline)
    names = fuzz.default_rule_names()
    md = table(rep, len(names))
    print(md)
    for f in rep.findings:
        print(f"\n{f.kind} (graph seed {f.graph_seed}, {f.count} graph(s)): {f.detail.strip().splitlines()[0]}")
    cmd = (f"python benchmarks/fuzz.py --graphs {args.graphs} --seed {args.seed} --per-model {args.per_model} "
           f"--max-motifs {args.max_motifs} --time-limit {args.time_limit}"
           + (f" --max-minutes {args.max_minutes}" if args.max_minutes else "")
           + (f" --avoid {args.avoid}" if avoid else ""))
    stopped = "" if rep.graphs + rep.invalid >= args.graphs else \
        f"\n\nStopped at the time limit after {rep.graphs} of {args.graphs} graphs."
    never = sorted(set(names) - set(rep.rules_fired))
    rules = "\n".join(f"| {k} | {v} | {rep.rule_calls[k]} |" for k, v in
                      sorted(rep.rules_fired.items(), key=lambda kv: (-kv[1], kv[0])))
    motifs = ", ".join(f"{k} {v}" for k, v in rep.motifs.most_common())
    text = (f"# Differential fuzzing\n\ncommit {git_commit(mark_uncommitted=True)}, {datetime.date.today()}, "
            f"{platform.processor() or 'cpu'}, {platform.python_version()}\n\n"
            f"Command: `{cmd}`{stopped}\n\n{md}\n\n"
            f"Each graph: 1-{args.max_motifs} motifs ({motifs}). Outputs compared by the optimizer's numeric "
            "check (eqsat.pipeline.check.check_equal: onnxruntime, graph optimizations off, two random input sets, "
            "every output, tolerance 1e-4 of each output's scale, NaN/inf matched by position).\n\n"
            f"## Findings\n\n{findings_md(rep)}\n"
            f"## Rules fired\n\n{len(rep.rules_fired)} distinct one-way rules of {len(names)} default ones.\n\n"
            f"| rule | matches | calls it fired in |\n|---|---|---|\n{rules}\n\n"
            f"Never fired ({len(never)}): {', '.join(never)}\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz.md").write_text(text)
    return 1 if rep.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
