"""``eqsat rules ...``: generate, select, verify, list and show the rule corpus.

``generate`` and ``select`` write a verified corpus (``--no-verify``: candidates for ``select``); ``verify``
only checks that a corpus file is what verification gives, and never writes it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eqsat.cli.common import Count, Seconds, check_output
from eqsat.errors import UsageError
from eqsat.rules import corpus
from eqsat.rules.corpus import CORPUS4_PATH, CORPUS_PATH
from eqsat.rules.corpus_verify import (
    VerifyOptions,
    regenerate_command,
    registry_record,
    reverify,
    rewrite_advice,
    stale_message,
    verify_corpus,
)
from eqsat.rules.distributed import BACKENDS, default_results_dir

# corpus_verify loads Z3 (the verification's defaults), as the verifier's budgets did when the parser was built;
# the generator and the engine (select) load with the commands that use them (start-up time)


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _dist_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The executor and results-folder options of the generator, the selection and the verifier."""
    return {"executor": args.executor, "address": args.address,
            "results_dir": args.results_dir or default_results_dir(), "fresh": args.fresh}


def _verify_options(args: argparse.Namespace) -> VerifyOptions:
    return VerifyOptions(rlimit=args.rlimit, timeout=args.timeout, axiom_rlimit=args.axiom_rlimit,
                         axiom_timeout=args.axiom_timeout, redundancy=not args.skip_redundancy,
                         workers=args.workers, dist=_dist_kwargs(args))


def _no_verify_elsewhere(args: argparse.Namespace, committed: Path) -> None:
    """``--no-verify`` writes candidates: never over a committed corpus, which would then hold no proved rule."""
    if args.no_verify and Path(args.out).resolve() == committed.resolve():
        raise UsageError(f"--no-verify writes unverified candidates; give --out FILE (the committed {committed.name} "
                         "is written verified)")


def _verify_and_report(entries: list[corpus.Entry], meta: dict[str, Any], args: argparse.Namespace) -> None:
    """Verify ``entries`` into ``meta`` (:func:`eqsat.rules.corpus_verify.verify_corpus`); print the outcome."""
    verify_corpus(entries, meta, _verify_options(args), progress=_say)
    _print_verification(meta)


def _print_verification(meta: dict[str, Any]) -> None:
    ax = meta["axioms"]
    redundant = ax["redundant"] if isinstance(ax["redundant"], str) else ", ".join(ax["redundant"]) or "none"
    print(f"axioms: {ax['count']} valid; entailed by the others: {redundant}")
    print("rules: " + ", ".join(f"{k} {v}" for k, v in meta["verification"].items()))


def cmd_generate(args: argparse.Namespace) -> int:
    """Enumerate, fingerprint, prune and confirm candidates, select the corpus, verify it (unless
    ``--no-verify``) and write it."""
    from eqsat.rules import generator

    _no_verify_elsewhere(args, CORPUS_PATH)
    check_output(str(args.out), "--out", "corpus.json")  # before the long run
    t0 = time.perf_counter()
    record = registry_record()["generator"]  # what the generator enumerates, read before it runs
    cands, rep = generator.generate(args.max_ops, workers=args.workers, progress=_say, **_dist_kwargs(args))
    entries = corpus.select(cands)
    meta = {"max_ops": args.max_ops, "stages": dict(rep.table()), "selected": len(entries), "generator": record}
    for stage, n in rep.table():
        print(f"{stage:<45} {n}")
    print(f"{'selected for the corpus':<45} {len(entries)}")
    print("units: " + ", ".join(f"{name} {st.units} ({st.computed} run, {st.reused} reused)"
                                for name, st in rep.stages.items()))
    if not args.no_verify:
        _verify_and_report(entries, meta, args)
    corpus.save_corpus(entries, args.out, meta)
    print(f"wrote {args.out} ({'unverified' if args.no_verify else 'verified'}) in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_select(args: argparse.Namespace) -> int:
    """Keep the candidates the base corpus (with the extra and layout rules) cannot derive; verify them (unless
    ``--no-verify``) and write them."""
    from eqsat.rules import derivable
    from eqsat.rules.layout import LAYOUT_RULES
    from eqsat.rules.starter import EXTRA_RULES

    _no_verify_elsewhere(args, CORPUS4_PATH)
    check_output(str(args.out), "--out", "rules4.json")  # before the long run
    t0 = time.perf_counter()
    entries, meta = corpus.read_corpus(args.candidates)
    if not entries:
        raise UsageError(f"no candidates in {args.candidates}; run `eqsat rules generate --no-verify --out "
                         f"{args.candidates}` first")
    base, _ = corpus.read_corpus(args.base)
    rules = corpus.entries_rules(base) + list(EXTRA_RULES) + list(LAYOUT_RULES)
    kept, counts = derivable.select_novel(entries, base, rules, iters=args.iters, workers=args.workers,
                                          progress=_say, **_dist_kwargs(args))
    corpus.assign_ids(kept)
    meta = {**meta, "selected": len(kept), "novelty": {"base": str(args.base.name), "iterations": args.iters,
                                                      **counts}}
    if "stages" in meta:  # the candidates' stage counts describe the generation, not this file
        meta["generation"] = meta.pop("stages")
    for step, n in counts.items():
        print(f"{step:<45} {n}")
    if not args.no_verify:
        _verify_and_report(kept, meta, args)
    corpus.save_corpus(kept, args.out, meta)
    print(f"wrote {args.out} ({'unverified' if args.no_verify else 'verified'}) in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Verify the corpus file's rules again and compare: exit 1, with what differs, unless the file is exactly
    what verification gives. Never writes the file (``--out`` writes what verification gives elsewhere)."""
    if not args.corpus.is_file():
        raise UsageError(f"no corpus at {args.corpus}; run `{regenerate_command(args.corpus)}` first")
    out = None
    if args.out is not None:
        if args.out.exists() and args.out.resolve() == args.corpus.resolve():
            raise UsageError(f"--out {args.out}: is the corpus being checked; verify never rewrites it (give "
                             f"another file, or run `{regenerate_command(args.corpus)}`)")
        out = check_output(str(args.out), "--out", "verified.json")  # before the long run
    t0 = time.perf_counter()
    res = reverify(args.corpus, _verify_options(args), progress=_say)
    _print_verification(res.meta)
    if out is not None:
        corpus.save_corpus(res.entries, out, res.meta)
        print(f"wrote {out}")
    if not res.reproduces:
        if res.text != res.written:
            summary = res.summary()
            for line in summary[:20]:
                print(line)
            if len(summary) > 20:
                print(f"... {len(summary) - 20} more differences")
            print()
            for line in res.diff():
                print(line)
        why = (stale_message(args.corpus, res.meta) if res.stale else
               f"{args.corpus} is not what verification gives (differences above); "
               + rewrite_advice(args.corpus))
        print(f"eqsat: error: {why}", file=sys.stderr)
        return 1
    print(f"{args.corpus}: reproduced exactly ({len(res.entries)} rules) in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """List corpus rules (proved ones unless --all)."""
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
    from eqsat.ir.rule import parse, pretty

    for k, (a, b) in enumerate(zip(lhs, rhs, strict=True)):
        print(f"source[{k}]:   {pretty(parse(a))}")
        print(f"target[{k}]:   {pretty(parse(b))}")
    for c in conditions:
        print(f"condition:   {c}")


def cmd_show(args: argparse.Namespace) -> int:
    """Show one rule in full: a corpus entry (with the engine rules it compiles to) or a hand-written rule.
    Every name the optimizer reports under "rules fired" resolves, ``-rev`` (reverse direction) included."""
    entries, _ = corpus.read_corpus(args.corpus)
    if args.corpus == CORPUS_PATH:  # the size-4 rules' names appear in reports of --rules size4
        entries += corpus.read_corpus(CORPUS4_PATH)[0]
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


def _add_verify_options(p: argparse.ArgumentParser, writes: bool) -> None:
    """The verification's budgets; ``writes``: the command writes a corpus, and ``--no-verify`` skips them."""
    d = VerifyOptions()
    p.add_argument("--rlimit", action=Count, minimum=1, unit="resource units", default=d.rlimit, metavar="N",
                   help=f"Z3 resource units per rule, reproducible unlike time (default {d.rlimit})")
    p.add_argument("--timeout", action=Seconds, default=d.timeout, metavar="S",
                   help=f"wall-clock safety net in seconds per rule (default {d.timeout:g}); the rlimit normally "
                        "stops Z3 first")
    p.add_argument("--axiom-rlimit", action=Count, minimum=1, unit="resource units", default=d.axiom_rlimit,
                   metavar="N", help=f"Z3 resource units per axiom in the redundancy check (default {d.axiom_rlimit})")
    p.add_argument("--axiom-timeout", action=Seconds, default=d.axiom_timeout, metavar="S",
                   help=f"wall-clock safety net in seconds per axiom in the redundancy check (default "
                        f"{d.axiom_timeout:g})")
    p.add_argument("--skip-redundancy", action="store_true",
                   help="skip checking which axioms the others entail (the statuses of the rules do not depend on "
                        "it; " + ("the corpus records 'not checked')" if writes else
                                  "the redundant axioms the corpus records are not compared)"))
    if writes:
        p.add_argument("--no-verify", action="store_true",
                       help="write the rules unverified (candidates for `eqsat rules select`; not over a committed "
                            "corpus)")


def register(subparsers: Any) -> None:
    """Add ``eqsat rules {generate,select,verify,list,show}``."""
    corpus_help = "the corpus file (default: the committed one, of rules up to three operators)"

    p = subparsers.add_parser("rules", help="generate, verify and browse the rule corpus")
    sub = p.add_subparsers(dest="rules_command", required=True, help="what to do with the corpus")
    g = sub.add_parser("generate", help="enumerate graphs, select the corpus, verify it with Z3 and write it")
    g.add_argument("--max-ops", action=Count, minimum=1, unit="operators", default=3, metavar="N",
                   help="enumerate graphs of up to N operators per side (default 3)")
    g.add_argument("--out", type=Path, default=CORPUS_PATH, metavar="CORPUS.json",
                   help="where to write the corpus (default: the committed one)")
    _add_verify_options(g, writes=True)
    _add_dist_options(g)
    g.set_defaults(func=cmd_generate)
    n = sub.add_parser("select", help="keep the generated rules a smaller corpus cannot derive (e.g. size 4 over 3), "
                                      "verify them and write them")
    n.add_argument("candidates", type=Path, help="a corpus written by `eqsat rules generate --no-verify --out`")
    n.add_argument("--base", type=Path, default=CORPUS_PATH, help="the corpus to add to (default: the committed one)")
    n.add_argument("--iters", action=Count, minimum=0, unit="iterations", default=3, metavar="N",
                   help="a candidate the base rules derive within this many iterations is dropped (default 3)")
    n.add_argument("--out", type=Path, default=CORPUS4_PATH, metavar="CORPUS.json",
                   help="where to write the selected rules (default: the committed size-4 corpus)")
    _add_verify_options(n, writes=True)
    _add_dist_options(n)
    n.set_defaults(func=cmd_select)
    v = sub.add_parser("verify", help="check a corpus: verify every rule with Z3 again and compare with the file "
                                      "(never writes it)")
    v.add_argument("--corpus", type=Path, default=CORPUS_PATH, metavar="CORPUS.json", help=corpus_help)
    v.add_argument("--out", type=Path, default=None, metavar="FILE",
                   help="also write what verification gives to FILE (never the corpus checked)")
    _add_verify_options(v, writes=False)
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
