"""``eqsat rules ...``: generate, verify, list and show the rule corpus."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eqsat.cli.common import Count, Seconds


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_generate(args: argparse.Namespace) -> int:
    """Enumerate, fingerprint, prune and confirm candidates; write the (unverified) corpus."""
    from eqsat.files import check_output
    from eqsat.rules import corpus, generator

    check_output(str(args.out), "--out", "corpus.json")  # before the long run
    t0 = time.perf_counter()
    cands, rep = generator.generate(args.max_ops, workers=args.workers, progress=_say, **_dist_kwargs(args))
    entries = corpus.select(cands)
    meta = {"max_ops": args.max_ops, "stages": dict(rep.table()), "selected": len(entries)}
    corpus.save_corpus(entries, args.out, meta)
    for stage, n in rep.table():
        print(f"{stage:<45} {n}")
    print(f"{'selected for the corpus':<45} {len(entries)}")
    print("units: " + ", ".join(f"{name} {st.units} ({st.computed} run, {st.reused} reused)"
                                for name, st in rep.stages.items()))
    print(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def _dist_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The executor and results-folder options of ``generate`` / ``verify_many`` from the command line."""
    from eqsat.rules.distributed import default_results_dir

    return {"executor": args.executor, "address": args.address,
            "results_dir": args.results_dir or default_results_dir(), "fresh": args.fresh}


#: Random shape assignments the numeric re-check before Z3 tries per rule, beside the generator's shape sets: a
#: rule true only where a broadcast happens to fit the generator's shapes (a one-channel kernel added to an
#: input) fails on some of them.
NUMERIC_RANDOM_SHAPES = 40


def verify_entries(entries: list[Any], timeout: float, workers: int, rlimit: int, **dist: Any) -> None:
    """Set the status of each entry: numerically re-checked, then Z3 entailment from the axioms (within the
    deterministic resource budget ``rlimit`` and the wall-clock safety net ``timeout``); ``dist``: the executor
    options of :func:`eqsat.rules.verifier.verify_many`."""
    from eqsat.rules import generator, verifier

    todo = []
    for e in entries:
        bad = generator.check_numeric(e.lhs, e.rhs, shape_sets=(0, 1, 2), random_shapes=NUMERIC_RANDOM_SHAPES, seed=7,
                                      conditions=e.conditions)
        if bad is not None:
            e.status, e.reason = "refuted", f"numeric counterexample: {bad}"
        else:
            todo.append(e)
    verdicts = verifier.verify_many([(e.lhs, e.rhs, e.conditions) for e in todo], timeout=timeout, workers=workers,
                                    rlimit=rlimit, **dist)
    for e, v in zip(todo, verdicts, strict=True):
        e.status, e.reason = v.status, v.reason


def cmd_select(args: argparse.Namespace) -> int:
    """Keep the candidates the base corpus (with the extra and layout rules) cannot derive; write them."""
    from eqsat.files import check_output
    from eqsat.rules import corpus, derivable
    from eqsat.rules.layout import LAYOUT_RULES
    from eqsat.rules.starter import EXTRA_RULES

    check_output(str(args.out), "--out", "rules4.json")  # before the long run
    t0 = time.perf_counter()
    entries, meta = corpus.read_corpus(args.candidates)
    if not entries:
        print(f"eqsat: error: no candidates in {args.candidates}; run `eqsat rules generate --out` first",
              file=sys.stderr)
        return 2
    base, _ = corpus.read_corpus(args.base)
    rules = corpus.entries_rules(base) + list(EXTRA_RULES) + list(LAYOUT_RULES)
    kept, counts = derivable.select_novel(entries, base, rules, iters=args.iters, workers=args.workers,
                                          progress=_say, **_dist_kwargs(args))
    corpus.assign_ids(kept)
    meta = {**meta, "selected": len(kept), "novelty": {"base": str(args.base.name), "iterations": args.iters,
                                                      **counts}}
    if "stages" in meta:  # the candidates' stage counts describe the generation, not this file
        meta["generation"] = meta.pop("stages")
    corpus.save_corpus(kept, args.out, meta)
    for step, n in counts.items():
        print(f"{step:<45} {n}")
    print(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Validate the axioms, then verify every corpus rule; write the statuses back."""
    from eqsat.files import check_output
    from eqsat.rules import axioms, corpus, verifier

    check_output(str(args.corpus), "--corpus", "corpus.json")  # the statuses are written back into it
    t0 = time.perf_counter()
    checks = verifier.validate_axioms(list(axioms.AXIOMS), workers=args.workers)
    bad = [c for c in checks if c.status != "valid"]
    for c in bad:
        print(f"axiom {c.name}: {c.status} ({c.reason})")
    redundant = (verifier.redundant_axioms(timeout=args.axiom_timeout, rlimit=args.axiom_rlimit)
                 if not args.skip_redundancy else [])
    entries, meta = corpus.read_corpus(args.corpus)
    if not entries:
        print(f"no corpus at {args.corpus}; run `eqsat rules generate` first")
        return 2
    verify_entries(entries, args.timeout, args.workers, args.rlimit, progress=_say, **_dist_kwargs(args))
    meta["axioms"] = {"count": len(checks), "invalid": [c.name for c in bad],
                      "redundant": "not checked" if args.skip_redundancy else redundant}
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.status] = counts.get(e.status, 0) + 1
    meta["verification"] = dict(sorted(counts.items()))
    corpus.save_corpus(entries, args.corpus, meta)
    print(f"axioms: {len(checks)} validated, {len(bad)} not valid, redundant: "
          + ("not checked" if args.skip_redundancy else ", ".join(redundant) or "none"))
    print("rules: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"wrote {args.corpus} in {time.perf_counter() - t0:.1f} s")
    return 0 if not bad else 1


def cmd_list(args: argparse.Namespace) -> int:
    """List corpus rules (proved ones unless --all)."""
    from eqsat.rules import corpus

    entries, _ = corpus.read_corpus(args.corpus)
    for e in entries:
        if args.all or e.status == "proved":
            tag = " [2-out]" if e.multi else ""
            print(f"{e.id} {e.status:<8}{tag} {e.text(named=True)}")
    return 0


def _hand_written_rules() -> list[tuple[str, Any]]:
    """The rules written by hand, one entry per direction, each with the set it belongs to."""
    from eqsat.rules.layout import LAYOUT_RULES
    from eqsat.rules.onnxruntime import ORT_KERNEL_RULES
    from eqsat.rules.starter import EXTRA_RULES, STARTER_RULES

    sets = [("extra rule, run by default beside the corpus", EXTRA_RULES),
            ("data-layout rule, run by default (optimize(layouts=False) leaves it out)", LAYOUT_RULES),
            ("onnxruntime kernel rule, run with --target onnxruntime", ORT_KERNEL_RULES),
            ("starter rule, run with --rules starter (or when there is no corpus)", STARTER_RULES)]
    return [(label, d) for label, rules in sets for r in rules for d in r.directions()]


def _print_sides(lhs: Sequence[str], rhs: Sequence[str], conditions: Sequence[str]) -> None:
    from eqsat.rules.rule import parse, pretty

    for k, (a, b) in enumerate(zip(lhs, rhs, strict=True)):
        print(f"source[{k}]:   {pretty(parse(a))}")
        print(f"target[{k}]:   {pretty(parse(b))}")
    for c in conditions:
        print(f"condition:   {c}")


def cmd_show(args: argparse.Namespace) -> int:
    """Show one rule in full: a corpus entry (with the engine rules it compiles to) or a hand-written rule.
    Every name the optimizer reports under "rules fired" resolves, ``-rev`` (reverse direction) included."""
    from eqsat.rules import corpus

    entries, _ = corpus.read_corpus(args.corpus)
    if args.corpus == corpus.CORPUS_PATH:  # the size-4 rules' names appear in reports of --rules size4
        entries += corpus.read_corpus(corpus.CORPUS4_PATH)[0]
    base = args.id[:-len("-rev")] if args.id.endswith("-rev") else args.id
    for e in entries:
        if e.id == base:
            print(f"id:          {e.id}")
            if base != args.id:
                print("direction:   reverse (each target is rewritten into its source)")
            print(f"status:      {e.status} ({e.reason})")
            print(f"domain:      {e.domain}   operators: {e.ops[0]} -> {e.ops[1]}")
            print(f"two-output:  {e.multi}   both directions: {e.bidirectional}")
            _print_sides(e.lhs, e.rhs, e.conditions)
            for r in corpus.engine_rules(e):
                print(f"engine rule {r.name}: {' ; '.join(r.lhs)} => {' ; '.join(r.rhs)}"
                      + (f"  if {' '.join(r.conditions)}" if r.conditions else ""))
            return 0
    for label, r in _hand_written_rules():
        if r.name == args.id:
            print(f"name:        {r.name}")
            print(f"kind:        written by hand; {label}")
            print(f"two-output:  {r.multi}")
            _print_sides(r.lhs, r.rhs, r.conditions)
            return 0
    print(f"eqsat: error: no rule {args.id!r}; `eqsat rules list --all` lists the corpus, and the optimizer's "
          "report names every rule that fired", file=sys.stderr)
    return 2


def _add_dist_options(p: argparse.ArgumentParser) -> None:
    from eqsat.rules.distributed import BACKENDS

    p.add_argument("--workers", action=Count, minimum=1, unit="workers", default=os.cpu_count() or 1, metavar="N",
                   help="parallel workers on this machine (default: one per core)")
    p.add_argument("--executor", choices=BACKENDS, default="auto",
                   help="auto (default): Ray if installed (pip install 'eqsat[dist]'), else a process pool; "
                        "serial runs in this process")
    p.add_argument("--address", default=None,
                   help="an existing Ray cluster (e.g. ray://head:10001; default: $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--results-dir", type=Path, default=None,
                   help="folder of per-unit results, by content hash, so that an interrupted run resumes "
                        "(default: eqsat/rules-units in the user cache directory)")
    p.add_argument("--fresh", action="store_true", help="forget stored unit results and recompute everything")


def register(subparsers: Any) -> None:
    """Add ``eqsat rules {generate,select,verify,list,show}``."""
    from eqsat.rules import verifier
    from eqsat.rules.corpus import CORPUS4_PATH, CORPUS_PATH

    corpus_help = "the corpus file (default: the committed one, of rules up to three operators)"

    p = subparsers.add_parser("rules", help="generate, verify and browse the rule corpus")
    sub = p.add_subparsers(dest="rules_command", required=True, help="what to do with the corpus")
    g = sub.add_parser("generate", help="enumerate graphs and write the candidate corpus")
    g.add_argument("--max-ops", action=Count, minimum=1, unit="operators", default=3, metavar="N",
                   help="enumerate graphs of up to N operators per side (default 3)")
    g.add_argument("--out", type=Path, default=CORPUS_PATH, metavar="CORPUS.json",
                   help="where to write the (unverified) corpus (default: the committed one)")
    _add_dist_options(g)
    g.set_defaults(func=cmd_generate)
    n = sub.add_parser("select", help="keep the generated rules a smaller corpus cannot derive (e.g. size 4 over 3)")
    n.add_argument("candidates", type=Path, help="a corpus written by `eqsat rules generate --out`")
    n.add_argument("--base", type=Path, default=CORPUS_PATH, help="the corpus to add to (default: the committed one)")
    n.add_argument("--iters", action=Count, minimum=0, unit="iterations", default=3, metavar="N",
                   help="a candidate the base rules derive within this many iterations is dropped (default 3)")
    n.add_argument("--out", type=Path, default=CORPUS4_PATH, metavar="CORPUS.json",
                   help="where to write the selected rules (default: the committed size-4 corpus)")
    _add_dist_options(n)
    n.set_defaults(func=cmd_select)
    v = sub.add_parser("verify", help="validate the axioms and verify every corpus rule with Z3")
    v.add_argument("--rlimit", action=Count, minimum=1, unit="resource units", default=verifier.RULE_RLIMIT,
                   metavar="N",
                   help=f"Z3 resource units per rule, reproducible unlike time (default {verifier.RULE_RLIMIT})")
    v.add_argument("--timeout", action=Seconds, default=30.0, metavar="S",
                   help="wall-clock safety net in seconds per rule (default 30); the rlimit normally stops Z3 first")
    v.add_argument("--axiom-rlimit", action=Count, minimum=1, unit="resource units", default=verifier.AXIOM_RLIMIT,
                   metavar="N", help="Z3 resource units per axiom in the redundancy check "
                                     f"(default {verifier.AXIOM_RLIMIT})")
    v.add_argument("--axiom-timeout", action=Seconds, default=15.0, metavar="S",
                   help="wall-clock safety net in seconds per axiom in the redundancy check (default 15)")
    v.add_argument("--skip-redundancy", action="store_true",
                   help="skip checking which axioms the others entail (the statuses of the rules do not depend on it)")
    v.add_argument("--corpus", type=Path, default=CORPUS_PATH, metavar="CORPUS.json",
                   help=corpus_help + "; the statuses are written back into it")
    _add_dist_options(v)
    v.set_defaults(func=cmd_verify)
    ls = sub.add_parser("list", help="list corpus rules")
    ls.add_argument("--all", action="store_true", help="include unknown and refuted rules")
    ls.add_argument("--corpus", type=Path, default=CORPUS_PATH, metavar="CORPUS.json", help=corpus_help)
    ls.set_defaults(func=cmd_list)
    s = sub.add_parser("show", help="show one rule")
    s.add_argument("id", help="a rule's id or name as 'eqsat rules list' and the optimizer's report print it "
                              "('-rev': its reverse direction)")
    s.add_argument("--corpus", type=Path, default=CORPUS_PATH, metavar="CORPUS.json",
                   help=corpus_help + "; with the default, the size-4 corpus too")
    s.set_defaults(func=cmd_show)
