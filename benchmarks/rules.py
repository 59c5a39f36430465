"""Rule generation and verification benchmark: counts per stage (TASO's Table 3), times, and the optimized
cost of the built-in BERT attention block and NasRNN cell with the corpus versus the starter rules.

Run: ``.venv/bin/python benchmarks/rules.py [--max-ops 3] [--workers 2] [--probe-max-ops 4]``; writes
``benchmarks/results/rules.md`` and ``rules.json``. Verification runs on the corpus selected from each
generation (not on the committed corpus file, which is left untouched); the model costs use the committed
corpus and the deterministic analytic cost model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from eqsat.rules import axioms, corpus, generator, verifier
from eqsat.rules.cli import verify_entries

OUT = Path(__file__).parent / "results" / "rules.md"


def families(cands: list[Any], entries: list[Any], before: list[Any] | None = None) -> list[dict[str, Any]]:
    """Rules per family (TASO Table 2 style properties): confirmed candidates, selected, both directions, proved
    (and the same counts for an older corpus ``before``)."""
    rows = {name: {"family": name, "candidates": 0, "selected": 0, "both": 0, "proved": 0}
            for name in [f for f, _ in corpus.FAMILIES] + [corpus.OTHER_FAMILY]}
    for c in cands:
        rows[corpus.family([*c.lhs, *c.rhs])]["candidates"] += 1
    for label, es in (("", entries), ("before_", before or [])):
        for e in es:
            r = rows[corpus.family([*e.lhs, *e.rhs])]
            for k, v in (("selected", 1), ("both", int(e.bidirectional)), ("proved", int(e.status == "proved"))):
                r[label + k] = r.get(label + k, 0) + v
    return list(rows.values())


def family_lines(rows: list[dict[str, Any]], before: str = "") -> list[str]:
    """The families table in markdown (with the counts of an older corpus when ``before`` names it)."""
    lines = ["## Rule families", "",
             "Confirmed candidates (after pruning and numeric confirmation), rules selected for the corpus, of those "
             "applied in both directions, and proved by Z3. A family is the first of `eqsat.rules.corpus.FAMILIES` "
             "whose operators the rule uses; \"other\" are compositions of the families above. Convolution input "
             "linearity (two forms) and the pieces of a split concatenated back are hand-written extras "
             "(`eqsat.rules.starter.EXTRA_RULES`), not counted here; `tests/test_derivations.py` derives a "
             "source/target pair per family."
             + (f" Before: the corpus {before} (selected / both directions / proved)." if before else ""), "",
             "| family | candidates | selected | both directions | proved |" + (" before |" if before else ""),
             "|---|---|---|---|---|" + ("---|" if before else "")]
    for r in rows:
        line = f"| {r['family']} | {r['candidates']} | {r['selected']} | {r['both']} | {r['proved']} |"
        if before:
            line += f" {r.get('before_selected', 0)} / {r.get('before_both', 0)} / {r.get('before_proved', 0)} |"
        lines.append(line)
    return lines


def run(max_ops: int, workers: int, timeout: float, rlimit: int, before: str | None = None) -> dict[str, Any]:
    """Generate, select and verify at one size; returns counts and times."""
    t0 = time.perf_counter()
    cands, rep = generator.generate(max_ops, workers=workers)
    t_gen = time.perf_counter() - t0
    entries = corpus.select(cands)
    t1 = time.perf_counter()
    verify_entries(entries, timeout, workers, rlimit)
    t_ver = time.perf_counter() - t1
    status: dict[str, int] = {}
    for e in entries:
        status[e.status] = status.get(e.status, 0) + 1
    return {"max_ops": max_ops, "units": rep.units, "stages": rep.table(), "seconds": rep.seconds,
            "generate": t_gen, "selected": len(entries), "verify": t_ver, "status": status,
            "families": families(cands, entries, corpus.read_corpus(before)[0] if before else None)}


def families_only(workers: int, before: str | None = None) -> None:
    """Regenerate the candidates, select, take the statuses of the committed corpus, and rewrite only the
    families section of the report (``--families-only``; the committed corpus must be the selection's)."""
    cands, _ = generator.generate(3, workers=workers)
    entries = corpus.select(cands)
    committed, _ = corpus.read_corpus()
    status = {e.text(): e.status for e in committed}
    for e in entries:
        e.status = status.get(e.text(), "unverified")
    old = corpus.read_corpus(before)[0] if before else None
    lines = family_lines(families(cands, entries, old), Path(before).name if before else "")
    text = OUT.read_text() if OUT.exists() else ""
    start = text.find("## Rule families")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + "\n".join(lines) + "\n" + (text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    OUT.write_text(text)
    print("\n".join(lines))


def probe(max_ops: int, units: int) -> dict[str, Any]:
    """Whether a larger enumeration is feasible: its unit count and the time of its first few units."""
    t = time.perf_counter()
    all_units = generator.work_units(max_ops)
    out: dict[str, Any] = {"max_ops": max_ops, "units": len(all_units), "plan_seconds": time.perf_counter() - t,
                           "sample": []}
    for u in all_units[1:1 + units]:  # unit 0 holds just the bare variables
        t = time.perf_counter()
        graphs, states = generator.run_unit(u)
        out["sample"].append({"domain": u.domain, "first": u.first, "graphs": len(graphs), "states": states,
                              "seconds": time.perf_counter() - t})
    return out


def model_costs() -> dict[str, dict[str, float]]:
    """Optimized analytic cost of the built-in models with the corpus and with the starter rules."""
    from eqsat import optimize, zoo
    from eqsat.rules import corpus_or_starter, starter_rules
    from eqsat.rules.layout import LAYOUT_RULES

    out = {}
    for name in ("bert_attention_block", "nasrnn_cell"):
        row = {}
        for label, rules in (("corpus", corpus_or_starter()), ("starter", starter_rules())):
            res = optimize(getattr(zoo, name)(), rules=rules + list(LAYOUT_RULES))
            row["original"] = res.cost_before
            row[label] = res.cost_after
        out[name] = row
    return out


def independent_merges() -> dict[str, dict[str, Any]]:
    """The two-output rules left out by default (their two sources share no tensor, e.g. any two relus -> one
    relu over a concat): optimized cost, e-nodes and time with them off (default) and on."""
    from eqsat import optimize, zoo
    from eqsat.pipeline import default_rules
    from eqsat.rules import engine_worthy

    extra = [r for r in corpus.load_corpus_rules() if r.multi and not engine_worthy(r)]
    out: dict[str, dict[str, Any]] = {}
    models = {"squeezenet": lambda: zoo.load_zoo_model("squeezenet"),
              "inception_v1": lambda: zoo.load_zoo_model("inception_v1"),
              "two_matmul_shared_input": zoo.two_matmul_shared_input}
    for name, build in models.items():
        for label, rules in (("off", default_rules()), ("on", default_rules() + extra)):
            t = time.perf_counter()
            res = optimize(build(), rules=rules)
            out[f"{name} ({label})"] = {"cost": res.cost_after, "enodes": res.iterations[-1].enodes,
                                        "stop": str(getattr(res.stop_reason, "value", res.stop_reason)),
                                        "seconds": time.perf_counter() - t}
    return out


def main() -> None:
    """Run the benchmark and write the markdown and json reports."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-ops", type=int, nargs="+", default=[3])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=30.0, help="wall-clock safety net per rule")
    ap.add_argument("--rlimit", type=int, default=verifier.RULE_RLIMIT)
    ap.add_argument("--probe-max-ops", type=int, default=4, help="size whose feasibility is probed (0: none)")
    ap.add_argument("--probe-units", type=int, default=2)
    ap.add_argument("--families-only", action="store_true",
                    help="only regenerate the candidates and rewrite the families table of the report")
    ap.add_argument("--before", help="an older corpus file whose family counts the table shows too")
    args = ap.parse_args()
    if args.families_only:
        families_only(args.workers, args.before)
        return
    t = time.perf_counter()
    checks = verifier.validate_axioms(list(axioms.AXIOMS), workers=args.workers)
    t_ax = time.perf_counter() - t
    t = time.perf_counter()
    redundant = verifier.redundant_axioms(timeout=15.0, rlimit=verifier.AXIOM_RLIMIT)
    t_red = time.perf_counter() - t
    planted = verifier.validate_axiom(axioms.PLANTED_WRONG)
    results = [run(n, args.workers, args.timeout, args.rlimit, args.before) for n in args.max_ops]
    costs = model_costs()
    merges = independent_merges()
    probed = probe(args.probe_max_ops, args.probe_units) if args.probe_max_ops else None
    lines = ["# Rule generation and verification", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
             f"{args.workers} workers; Z3 budget {args.rlimit} resource units per rule "
             f"(wall-clock safety net {args.timeout:g} s).", "",
             "## Counts per stage", "", "| stage | " + " | ".join(f"N = {r['max_ops']}" for r in results) + " |",
             "|---|" + "---|" * len(results)]
    lines.append("| work units | " + " | ".join(str(r["units"]) for r in results) + " |")
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
    lines += ["", "## Optimized cost of the built-in models (analytic cost model, layout rules in both)", "",
              "| model | original | starter rules | corpus |", "|---|---|---|---|"]
    for name, row in costs.items():
        lines.append(f"| {name} | {row['original']:.6g} | {row['starter']:.6g} | {row['corpus']:.6g} |")
    lines += [""] + family_lines(results[0]["families"], Path(args.before).name if args.before else "")
    lines += ["", "## Two-output rules whose sources share no tensor (off by default)", "",
              "Any two relus (pools, transposes) become one over a concatenation: measured with them on and off "
              "(analytic costs, default limits). They grow the e-graph quadratically for no gain on the convolution "
              "models, so they stay off.", "",
              "| model (two-output rules) | optimized cost | e-nodes | stop | seconds end to end |",
              "|---|---|---|---|---|"]
    lines += [f"| {k} | {v['cost']:.6g} | {v['enodes']} | {v['stop']} | {v['seconds']:.1f} |"
              for k, v in merges.items()]
    lines += ["", "## Axioms", "",
              f"{len(checks)} axioms validated by symbolic execution in {t_ax:.1f} s: "
              f"{sum(c.status == 'valid' for c in checks)} valid"
              + "".join(f"; {c.name}: {c.status}" for c in checks if c.status != "valid") + ".",
              f"Redundancy check ({t_red:.1f} s): {', '.join(redundant) or 'no axiom entailed by the others'}.",
              f"Planted wrong axiom `{axioms.PLANTED_WRONG.name}`: {planted.status} ({planted.reason}).", ""]
    if probed:
        lines += [f"## N = {probed['max_ops']} feasibility", "",
                  f"{probed['units']} work units (planned in {probed['plan_seconds']:.1f} s). First units:", ""]
        lines += [f"- {s['domain']} unit {s['first']}: {s['graphs']} graphs, {s['states']} states, "
                  f"{s['seconds']:.1f} s" for s in probed["sample"]]
        lines.append("")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines))
    data = {"workers": args.workers, "rlimit": args.rlimit, "timeout": args.timeout, "runs": results,
            "model_costs": costs, "independent_merges": merges,
            "axioms": {"count": len(checks), "validate_seconds": t_ax,
                       "redundant": redundant, "redundancy_seconds": t_red,
                       "planted": planted.status},
            "probe": probed}
    OUT.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
