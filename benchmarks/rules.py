"""Rule generation and verification benchmark: counts per stage (TASO's Table 3), times, and the optimized
cost of the built-in BERT attention block and NasRNN cell with the corpus versus the starter rules.

Run: ``.venv/bin/python benchmarks/rules.py [--max-ops 3] [--workers 2] [--scale-max-ops 4]``; writes
``benchmarks/results/rules.md`` and ``rules.json``. Verification runs on the corpus selected from each
generation (not on the committed corpus file, which is left untouched); the model costs use the committed
corpus and the deterministic analytic cost model. ``--scale-only`` times a sample of the size-4 enumeration
units on 1 and 2 local workers (pool and Ray) and projects the whole enumeration, on those workers and on a
64-core cluster, from the measured per-unit times; it rewrites only that section. The size-4 section (also
``--size4-only``) optimizes the benchmark graphs with the committed corpus and with the committed size-4 rules
(``rules/corpus/rules4.json``) added: cost, e-graph size and saturation time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from eqsat.rules import axioms, corpus, generator, verifier
from eqsat.rules.corpus_verify import verify_entries

OUT = Path(__file__).parent / "results" / "rules.md"


def families(cands: list[Any], entries: list[Any], before: list[Any] | None = None) -> list[dict[str, Any]]:
    """Rules per family (TASO Table 2 style properties): confirmed candidates, selected, both directions, proved
    (and the same counts for an older corpus ``before``)."""
    rows = {name: {"family": name, "candidates": 0, "selected": 0, "both": 0, "proved": 0}
            for name in [f.name for f in corpus.FAMILIES] + [corpus.OTHER_FAMILY]}
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
             "(`eqsat.rules.starter.EXTRA_RULES`), not counted here; `tests/rules/test_derivations.py` derives a "
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


def _worker_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def scale(max_ops: int, sample: int, workers: int, backends: list[str], cores: int = 64) -> dict[str, Any]:
    """Time a sample of the enumeration units of size ``max_ops`` on 1 and on ``workers`` local workers, and
    project the whole enumeration from the measured per-unit times.

    The sample is ``sample`` units evenly spaced over the unit list (the bare-variable units left out). Each
    unit runs as :func:`eqsat.rules.generator.enumerate_unit` (enumeration, sharding by fingerprint and
    compression, as in ``eqsat rules generate``): one after another in this process (1 worker), then all
    of them on each backend with ``workers`` workers (Ray started before the clock). Projections: serial = per
    domain, the mean sampled unit time x the domain's units; ``workers`` workers = serial / measured speedup;
    ``cores`` cores = max(longest sampled unit, serial / cores). Pairing, pruning and confirmation are not
    included.
    """
    import resource

    from eqsat.rules.distributed import Executor

    units = generator.work_units(max_ops)
    shards = generator.SHARDS.get(max_ops, generator.SHARDS[4])
    real = [i for i, u in enumerate(units) if u.first >= 0]
    picks = sorted({real[round(j * (len(real) - 1) / max(1, sample - 1))] for j in range(sample)})
    for d in {units[i].domain for i in real} - {units[i].domain for i in picks}:  # every domain in the sample
        picks.append(next(i for i in real if units[i].domain == d))
    per_unit = []
    t0 = time.perf_counter()
    for i in picks:
        t = time.perf_counter()
        (states, graphs, _), parts = generator.enumerate_unit((units[i], shards))
        per_unit.append({"unit": i, "domain": units[i].domain, "first": units[i].first, "states": states,
                         "graphs": graphs, "stored_mb": sum(map(len, parts)) / 1e6,
                         "seconds": time.perf_counter() - t})
        del parts
    t_serial = time.perf_counter() - t0
    rss_serial = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    parallel: dict[str, dict[str, float]] = {}
    for backend in backends:
        ex = Executor(workers=workers, backend=backend)
        if ex.resolved == "ray":
            list(ex.imap(generator.run_unit, 1, lambda _: units[0]))  # start Ray and its workers first
        t = time.perf_counter()
        for _ in ex.imap(generator.enumerate_unit, len(picks), lambda j: (units[picks[j]], shards)):
            pass
        wall = time.perf_counter() - t
        parallel[ex.resolved] = {"seconds": wall, "speedup": t_serial / wall}
        if ex.resolved == "ray":
            import ray

            ray.shutdown()
    secs = [u["seconds"] for u in per_unit]
    total = 0.0  # per domain: mean sampled unit time x the domain's units (all domains are in the sample)
    for d in {u.domain for u in units}:
        ds = [u["seconds"] for u in per_unit if u["domain"] == d] or secs
        total += statistics.mean(ds) * sum(u.domain == d and u.first >= 0 for u in units)
    best = max(parallel.values(), key=lambda r: r["speedup"]) if parallel else {"speedup": 1.0}
    return {"max_ops": max_ops, "units": len(units), "sample": per_unit, "workers": workers,
            "serial_seconds": t_serial, "parallel": parallel, "peak_rss_mb_serial": rss_serial,
            "peak_rss_mb_worker": _worker_rss_mb(),
            "unit_seconds": {"min": min(secs), "median": statistics.median(secs), "mean": statistics.mean(secs),
                             "max": max(secs)},
            "projected_seconds": {"1 worker": total, f"{workers} workers": total / best["speedup"],
                                  f"{cores} cores": max(max(secs), total / cores)},
            "cores": cores}


def scale_lines(sc: dict[str, Any]) -> list[str]:
    """The scaling section of the report in markdown."""
    n, w = sc["max_ops"], sc["workers"]
    us = sc["unit_seconds"]
    lines = [f"## N = {n} enumeration: workers and projection", "",
             f"{sc['units']} work units. A sample of {len(sc['sample'])} units evenly spaced over them, each run as "
             "in `eqsat rules generate` (enumeration, sharding by fingerprint, compression): "
             f"{sc['serial_seconds']:.1f} s on 1 worker (peak RSS {sc['peak_rss_mb_serial']:.0f} MB, the "
             f"largest unit), and on {w} local workers:", "",
             "| executor | seconds | speedup |", "|---|---|---|", f"| 1 worker | {sc['serial_seconds']:.1f} | 1.00 |"]
    lines += [f"| {b}, {w} workers | {r['seconds']:.1f} | {r['speedup']:.2f} |" for b, r in sc["parallel"].items()]
    lines += ["", f"Per unit: min {us['min']:.1f} s, median {us['median']:.1f} s, mean {us['mean']:.1f} s, "
              f"max {us['max']:.1f} s.", "",
              "| unit | domain | first op | states | graphs | stored MB | seconds |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {u['unit']} | {u['domain']} | {u['first']} | {u['states']} | {u['graphs']} | "
              f"{u['stored_mb']:.1f} | {u['seconds']:.1f} |" for u in sc["sample"]]
    proj = sc["projected_seconds"]
    lines += ["", "Projected enumeration time of all units from the sample (per domain, mean unit time x units; with "
              f"{w} workers divided by the measured speedup; on {sc['cores']} cores the larger of the longest "
              "sampled unit and the total over the cores; pairing, pruning and confirmation not included):", ""]
    lines += [f"- {k}: {v / 3600:.2f} h ({v:.0f} s)" for k, v in proj.items()]
    return lines + [""]


def _rewrite_section(heading: str, lines: list[str], key: str, value: Any) -> None:
    """Replace the report's section starting with ``heading`` (append it when absent) and the json's ``key``."""
    text = OUT.read_text() if OUT.exists() else ""
    start = text.find(heading)
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + "\n".join(lines) + ("\n" + text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(lines)
    OUT.write_text(text)
    js = OUT.with_suffix(".json")
    data = json.loads(js.read_text()) if js.exists() else {}
    data.pop("probe", None)
    data[key] = value
    js.write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(lines))


def scale_only(max_ops: int, sample: int, workers: int, backends: list[str]) -> None:
    """Measure the scaling only and rewrite that section of the report and the ``scale`` entry of the json."""
    sc = scale(max_ops, sample, workers, backends)
    _rewrite_section(f"## N = {max_ops} ", scale_lines(sc), "scale", sc)


#: The graphs the size-4 rules are measured on: the backtracking comparison suite and the built-in blocks.
SIZE4_MODELS = ("bert_attention_block", "nasrnn_cell", "taso_bert", "taso_nasrnn", "taso_resnext50", "taso_nasnet_a",
                "taso_inception_v3", "taso_squeezenet", "taso_vgg19")


#: The substitutions of four operators TASO's paper gives as examples, in our operators (a convolution carries its
#: activation, ``enlarge`` pads a 1x1 kernel to 3x3): (name, sources, targets).
_MERGED = "(conv2d [1 1] [1 1 1 1] [1 1] 1 1 ?i1 (concat 0 ?k1 ?k2) (concat 0 ?bk1 ?bk2))"
TASO_SIZE4_EXAMPLES = (
    ("two convolutions that each feed a relu, merged",
     ["(relu (conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?i1 ?k1 ?bk1))",
      "(relu (conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?i1 ?k2 ?bk2))"],
     [f"(split 1 0 (dim ?k1 0) {_MERGED})", f"(split 1 (dim ?k1 0) (dim ?k2 0) {_MERGED})"]),
    ("an enlarged 1x1 kernel and a 3x3 one under an add, merged",
     ["(ewadd (conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?i1 (enlarge [3 3] ?u1) ?bu1) "
      "(conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?i1 ?k1 ?bk1))"],
     ["(conv2d [1 1] [1 1 1 1] [1 1] 1 0 ?i1 (ewadd (enlarge [3 3] ?u1) ?k1) (ewadd ?bu1 ?bk1))"]),
)


def taso_examples_derived(max_iters: int = 4) -> dict[str, int | None]:
    """For each of :data:`TASO_SIZE4_EXAMPLES`, the fewest iterations in which the committed corpus derives it
    (None: not within ``max_iters``)."""
    from eqsat.pipeline import default_rules
    from eqsat.rules import derivable

    rules = default_rules()
    out: dict[str, int | None] = {}
    for name, lhs, rhs in TASO_SIZE4_EXAMPLES:
        lo, ro, shapes = derivable.instance(lhs, rhs)
        out[name] = next((k for k in range(1, max_iters + 1) if derivable.derives(lo, ro, shapes, rules, k)), None)
    return out


def size4_costs(models: tuple[str, ...] = SIZE4_MODELS) -> dict[str, Any]:
    """Optimized analytic cost, e-graph size and saturation time of each model with the committed corpus (rules of
    up to three operators) and with the size-4 rules added (``default_rules(max_ops=4)``), default limits."""
    from eqsat import models as zoo
    from eqsat import optimize
    from eqsat.pipeline import default_rules
    from eqsat.rules.corpus import CORPUS4_PATH

    entries, meta = corpus.read_corpus(CORPUS4_PATH)
    size4_ids = {e.id for e in entries}
    out: dict[str, Any] = {"corpus4": {"rules": len(entries), "proved": sum(e.status == "proved" for e in entries),
                                       "novelty": meta.get("novelty", {}), "generation": meta.get("generation", {})},
                          "models": {}, "taso_examples": taso_examples_derived()}
    builders = zoo.builtin_models()
    for name in models:
        row = {}
        for label, rules in (("size 3", default_rules()), ("size 4", default_rules(max_ops=4))):
            t = time.perf_counter()
            res = optimize(builders[name](), rules=rules, cache=False)
            fired4 = sum(v for k, v in res.rules_fired.items() if k.removesuffix("-rev") in size4_ids)
            row[label] = {"cost": res.cost_after, "original": res.cost_before, "enodes": res.iterations[-1].enodes,
                          "iterations": len(res.iterations) - 1, "stop": str(res.stop_reason),
                          "saturation_s": res.stage_seconds.get("saturate", float("nan")),
                          "seconds": time.perf_counter() - t, "size4_matches": fired4}
            print(f"{name} {label}: {row[label]}", flush=True)
        out["models"][name] = row
    return out


def size4_lines(res: dict[str, Any]) -> list[str]:
    """The size-4 section of the report in markdown."""
    c4 = res["corpus4"]
    nov = c4["novelty"]
    lines = ["## Rules of four operators: what they buy", "",
             "`eqsat rules generate --max-ops 4 --no-verify --out cands4.json`, then `eqsat rules select cands4.json` "
             "(keeps the candidates that the committed corpus, with the extra and layout rules, cannot derive within "
             f"{nov.get('iterations', '?')} iterations, and verifies them). "
             f"Of {nov.get('candidates', '?')} candidates: "
             + ", ".join(f"{v} {k}" for k, v in nov.items() if k not in ("iterations", "base", "candidates", "kept"))
             + f"; {nov.get('kept', '?')} kept, of which {c4['proved']} proved: they run with `--rules size4` "
             "(`default_rules(max_ops=4)`; two-output rules whose sources share no tensor stay off, as in the corpus).",
             "",
             "Each model optimized with the analytic cost model and default limits (10 iterations, 50 000 e-nodes, "
             "60 s), with the committed corpus (size 3) and with the size-4 rules added. Size-4 matches: matches "
             "of size-4 rules during saturation.", "",
             "| model | original | cost, size 3 | cost, size 4 | e-nodes 3 / 4 | iterations 3 / 4 | stop 3 / 4 "
             "| saturation s 3 / 4 | total s 3 / 4 | size-4 matches |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in res["models"].items():
        a, b = row["size 3"], row["size 4"]
        lines.append(f"| {name} | {a['original']:.6g} | {a['cost']:.6g} | {b['cost']:.6g} | {a['enodes']} / "
                     f"{b['enodes']} | {a['iterations']} / {b['iterations']} | {a['stop']} / {b['stop']} | "
                     f"{a['saturation_s']:.1f} / {b['saturation_s']:.1f} | {a['seconds']:.1f} / {b['seconds']:.1f} "
                     f"| {b['size4_matches']} |")
    rows = list(res["models"].values())
    better = sum(r["size 4"]["cost"] < r["size 3"]["cost"] * (1 - 1e-9) for r in rows)
    worse = sum(r["size 4"]["cost"] > r["size 3"]["cost"] * (1 + 1e-9) for r in rows)
    ratio = statistics.geometric_mean([r["size 4"]["saturation_s"] / r["size 3"]["saturation_s"] for r in rows])
    grow = max(r["size 4"]["enodes"] / r["size 3"]["enodes"] for r in rows)
    lines += ["", f"With the size-4 rules the optimized cost is lower on {better} of {len(rows)} models and higher on "
              f"{worse}; saturation takes {ratio:.2f}x as long (geometric mean; about a second more even where no "
              f"size-4 rule matches: loading and searching the extra rules) and the e-graph grows by at most "
              f"{grow:.2f}x, within the same limits. They stay opt-in (`--rules size4`)."]
    if c4.get("generation"):
        lines += ["", "Counts per stage of the size-4 generation (from the metadata of `rules/corpus/rules4.json`):",
                  "", "| stage | N = 4 |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in sorted(c4["generation"].items(), key=lambda kv: -kv[1])]
    lines += ["", "TASO's examples of rules of four operators, in eqsat's operators (a convolution carries its "
              "activation, `enlarge` is an operator), are rules of the committed corpus already:", ""]
    lines += [f"- {name}: " + (f"derived by the size-3 corpus in {k} iteration{'s' * (k > 1)}" if k else "not derived")
              for name, k in res["taso_examples"].items()]
    return lines + [""]


def size4_only() -> None:
    """Measure the size-4 rules only and rewrite that section of the report and the ``size4`` entry of the json."""
    res = size4_costs()
    _rewrite_section("## Rules of four operators", size4_lines(res), "size4", res)


def model_costs() -> dict[str, dict[str, float]]:
    """Optimized analytic cost of the built-in models with the corpus and with the starter rules."""
    from eqsat import models as zoo
    from eqsat import optimize
    from eqsat.rules import corpus_or_starter, starter_rules
    from eqsat.rules.layout import LAYOUT_RULES

    out = {}
    for name in ("bert_attention_block", "nasrnn_cell"):
        row = {}
        for label, rules in (("corpus", corpus_or_starter()), ("starter", starter_rules())):
            res = optimize(getattr(zoo, name)(), rules=rules + list(LAYOUT_RULES), cache=False)
            row["original"] = res.cost_before
            row[label] = res.cost_after
        out[name] = row
    return out


def independent_merges() -> dict[str, dict[str, Any]]:
    """The two-output rules left out by default (their two sources share no tensor, e.g. any two relus -> one
    relu over a concat): optimized cost, e-nodes and time with them off (default) and on."""
    from eqsat import models as zoo
    from eqsat import optimize
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
            res = optimize(build(), rules=rules, cache=False)
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
    ap.add_argument("--scale-max-ops", type=int, default=4,
                    help="size whose enumeration is timed on a sample of units with 1 and --workers workers (0: none)")
    ap.add_argument("--scale-sample", type=int, default=6, help="units in that sample")
    ap.add_argument("--scale-executors", nargs="+", default=["pool", "ray"],
                    help="executors timed with --workers workers (ray is skipped where it is not installed)")
    ap.add_argument("--scale-only", action="store_true", help="only measure the scaling and rewrite its section")
    ap.add_argument("--families-only", action="store_true",
                    help="only regenerate the candidates and rewrite the families table of the report")
    ap.add_argument("--before", help="an older corpus file whose family counts the table shows too")
    ap.add_argument("--size4-only", action="store_true",
                    help="only measure the committed size-4 rules on the benchmark graphs and rewrite their section")
    args = ap.parse_args()
    if args.size4_only:
        size4_only()
        return
    if args.families_only:
        families_only(args.workers, args.before)
        return
    from eqsat.rules.distributed import ray_available

    backends = [b for b in args.scale_executors if b != "ray" or ray_available()]
    if args.scale_only:
        scale_only(args.scale_max_ops, args.scale_sample, args.workers, backends)
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
    scaled = scale(args.scale_max_ops, args.scale_sample, args.workers, backends) if args.scale_max_ops else None
    size4 = size4_costs()
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
    if scaled:
        lines += scale_lines(scaled)
    lines += size4_lines(size4)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines))
    data = {"workers": args.workers, "rlimit": args.rlimit, "timeout": args.timeout, "runs": results,
            "model_costs": costs, "independent_merges": merges,
            "axioms": {"count": len(checks), "validate_seconds": t_ax,
                       "redundant": redundant, "redundancy_seconds": t_red,
                       "planted": planted.status},
            "scale": scaled, "size4": size4}
    OUT.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
