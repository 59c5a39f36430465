"""Which candidate rules a rule set already derives: the filter that keeps a larger generated corpus to the rules
worth running.

A candidate ``lhs = rhs`` is *derivable* by a rule set within ``k`` iterations when saturating its left-hand
side alone (its variables as graph inputs of the generator's shapes) for ``k`` iterations builds the right-hand
side in the same e-class (each output for a two-output rule). Such a rule adds nothing to a run that saturates
for more than ``k`` iterations except a shortcut, and every extra rule costs matching time in every iteration,
so a corpus of rules of four operators keeps only the candidates the smaller rules cannot derive.

Checking one candidate at a time is dominated by loading the rules into the engine (about 0.4 s), so candidates
are checked in batches: one e-graph holds the left-hand sides of a batch, each with its variables renamed apart
(so two candidates never share an input and can only meet through true equalities). A batch whose saturation
stops at a node or time limit is split in halves and checked again, down to single candidates, and a candidate
that its batch did not derive is checked again alone (the engine holds back a rule whose matches over the whole
batch exceed what the limits allow), so a candidate is kept only when its left-hand side alone does not derive
it. One derived in its batch is dropped: its derivation used only the base rules, though possibly through
constants or merged terms the other candidates brought, so a few verdicts may depend on the batching; both
choices are sound, as every dropped rule is a consequence of the base rules. Batches are units of
:mod:`eqsat.rules.distributed` (local processes or Ray, results stored by content hash and resumable).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eqsat.ir.rule import Rule, eval_param, is_var, parse, split_args, terms_graph

#: Candidates per e-graph.
BATCH = 40
#: Bounds on the saturation of one batch (a batch that reaches them is split).
BATCH_NODE_LIMIT = 60_000
BATCH_TIME_LIMIT = 60.0

_VAR = re.compile(r"\?([A-Za-z]\w*)")


def _norm(v: Any) -> Any:
    return tuple(_norm(x) for x in v) if isinstance(v, list | tuple) else v


def classes_of(egraph: Any, term: Any, shapes: Mapping[str, tuple[int, ...]]) -> set[str]:
    """The e-classes of a saturated e-graph (:class:`eqsat.engine.egraph.EGraph`) that represent ``term`` (a parsed
    pattern whose variables are the graph's inputs, of the given ``shapes``)."""
    nodes = egraph.nodes
    if is_var(term):
        return {n.eclass for n in nodes if n.op == "Input" and n.p.get("name") == term[1:]}
    spec, params, ins = split_args(term)
    env = {v: np.zeros(s) for v, s in shapes.items()}
    want = spec.normalize({n: eval_param(v, env) for (n, _), v in zip(spec.params, params, strict=True)})
    kids = [classes_of(egraph, x, shapes) for x in ins]
    out = set()
    for n in nodes:
        if n.op != spec.name or len(n.children) != len(kids):
            continue
        p = n.p
        if any(_norm(p[k]) != _norm(want[k]) for k in p if k in want):
            continue
        if all(c in k for c, k in zip(n.children, kids, strict=True)):
            out.add(n.eclass)
    return out


def derives(source: Sequence[str], target: Sequence[str], shapes: Mapping[str, tuple[int, ...]],
            rules: Sequence[Rule], iters: int, node_limit: int = 20_000, time_limit: float = 60.0) -> bool:
    """Whether saturating the terms ``source`` alone for ``iters`` iterations builds each term of ``target`` in
    the e-class of the source term at the same position."""
    return _saturate_and_check([(tuple(source), tuple(target))], shapes, rules, iters, node_limit,
                               time_limit)[0][0]


def _saturate_and_check(pairs: Sequence[tuple[tuple[str, ...], tuple[str, ...]]],
                        shapes: Mapping[str, tuple[int, ...]], rules: Sequence[Rule], iters: int,
                        node_limit: int, time_limit: float) -> tuple[list[bool], bool]:
    """Saturate all sources of ``pairs`` in one e-graph: (derived per pair, whether a node/time limit stopped it)."""
    # deferred: the engine imports the rule language (eqsat.ir.rule), so eqsat.rules must import without it
    from eqsat.engine.limits import Limits, StopReason
    from eqsat.engine.saturation import saturate

    outs = [s for src, _ in pairs for s in src]
    res = saturate(terms_graph(outs, shapes), list(rules),
                   Limits(iter_limit=iters, node_limit=node_limit, time_limit=time_limit), in_process=True)
    derived, at = [], 0
    for src, tgt in pairs:
        roots = res.egraph.roots[at:at + len(src)]
        at += len(src)
        derived.append(all(r in classes_of(res.egraph, parse(t), shapes) for r, t in zip(roots, tgt, strict=True)))
    cut = res.stop_reason not in (StopReason.SATURATED, StopReason.ITERATION_LIMIT)
    return derived, cut


def instance(lhs: Sequence[str], rhs: Sequence[str], tag: str = "") -> tuple[tuple[str, ...], tuple[str, ...],
                                                                             dict[str, tuple[int, ...]]]:
    """A candidate's sides over concrete inputs: variables get the generator's first shape set and the suffix
    ``tag`` (to rename candidates apart in one e-graph); parameter variables (a reshape target) are replaced by
    their value. Returns (lhs, rhs, input shapes)."""
    from eqsat.rules.generator import is_param_var, var_shape

    shapes: dict[str, tuple[int, ...]] = {}

    def sub(m: re.Match[str]) -> str:
        var = "?" + m.group(1)
        if is_param_var(var):
            return "[" + " ".join(map(str, var_shape(var, 0))) + "]"
        shapes[var + tag] = tuple(var_shape(var, 0))
        return var + tag

    return tuple(_VAR.sub(sub, s) for s in lhs), tuple(_VAR.sub(sub, s) for s in rhs), shapes


def check_batch(args: tuple[Sequence[tuple[tuple[str, ...], tuple[str, ...]]], Sequence[Rule], int]) -> list[bool]:
    """One work unit: whether ``rules`` derive each candidate ``(lhs, rhs)`` within ``iters`` iterations (see the
    module docstring)."""
    cands, rules, iters = args
    pairs, shapes = [], {}
    for k, (lhs, rhs) in enumerate(cands):
        lo, ro, sh = instance(lhs, rhs, f"_{k}")
        pairs.append((lo, ro))
        shapes.update(sh)
    derived, cut = _saturate_and_check(pairs, shapes, rules, iters, BATCH_NODE_LIMIT, BATCH_TIME_LIMIT)
    if len(cands) == 1:
        return derived
    if cut:
        half = len(cands) // 2
        return check_batch((cands[:half], rules, iters)) + check_batch((cands[half:], rules, iters))
    # the engine holds a rule back in an iteration when its matches (over the whole batch) exceed what the
    # limits allow, so a candidate the batch did not derive is checked again alone
    return [d or check_batch(([c], rules, iters))[0] for c, d in zip(cands, derived, strict=True)]


def _rules_digest(rules: Sequence[Rule]) -> str:
    return hashlib.sha256(json.dumps([[r.name, r.lhs, r.rhs, r.conditions, r.multi] for r in rules]).encode()
                          ).hexdigest()[:16]


def derivable_salt() -> str:
    """The version of the code that verdicts depend on (the rules package, the engine and the registry)."""
    import eqsat.engine  # deferred, as in _saturate_and_check
    from eqsat import ops
    from eqsat.rules import distributed

    here = Path(__file__).parent
    # the whole rules package: since the generator's split, the shapes instance() uses live in several modules
    return distributed.source_salt(here, Path(eqsat.engine.__file__).parent, Path(ops.__file__).parent)


def derivable_many(cands: Sequence[tuple[Sequence[str], Sequence[str]]], rules: Sequence[Rule], iters: int = 3,
                   workers: int = 2, executor: str = "auto", address: str | None = None, results_dir: Any = None,
                   fresh: bool = False, progress: Callable[[str], None] | None = None) -> list[bool]:
    """For each candidate ``(lhs, rhs)``, whether ``rules`` derive it within ``iters`` iterations; batches run on
    an executor of :mod:`eqsat.rules.distributed` and are stored by a hash of the candidates, rules and code, so
    a rerun redoes only what did not finish."""
    from eqsat.rules.distributed import Executor, ResultStore, run_stage

    items = [(tuple(lhs), tuple(rhs)) for lhs, rhs in cands]
    batches = [items[i:i + BATCH] for i in range(0, len(items), BATCH)]
    ex = Executor(workers=workers, backend=executor, address=address, recycle_after=25)
    store = ResultStore(results_dir)
    if fresh:
        store.clear()
    salt = derivable_salt() + _rules_digest(rules)
    rules = list(rules)
    try:
        keys = [store.key("derive", salt, (iters, b)) for b in batches]
        out, _ = run_stage(ex, store, check_batch, keys, lambda i: (batches[i], rules, iters), label="derive",
                           say=progress)
    finally:
        store.close()
    return [d for b in out for d in b]


def select_novel(entries: Sequence[Any], base: Sequence[Any], rules: Sequence[Rule], iters: int = 3,
                 progress: Callable[[str], None] | None = None, **dist: Any) -> tuple[list[Any], dict[str, int]]:
    """The corpus entries (:class:`eqsat.rules.corpus.Entry`) worth adding to the corpus ``base``, whose engine
    rules are ``rules``: those not in ``base`` that ``rules`` cannot derive within ``iters`` iterations (and, of
    two-output rules, only those that merge work: :func:`eqsat.rules.corpus.merges_work`).

    A rule applied in both directions is checked in each; when only its reverse is new, the entry is kept as a
    one-way rule from its right-hand side. Returns the kept entries (in their order) and the counts per step.
    ``dist``: executor options of :func:`derivable_many`.
    """
    from eqsat.rules.corpus import merges_work

    known = {(tuple(e.lhs), tuple(e.rhs)) for e in base}
    new = [e for e in entries if (tuple(e.lhs), tuple(e.rhs)) not in known
           and not (e.bidirectional and (tuple(e.rhs), tuple(e.lhs)) in known)]
    merging = [e for e in new if not e.multi or merges_work(e.lhs, e.rhs)]
    checks: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    for e in merging:
        checks.append((tuple(e.lhs), tuple(e.rhs)))
        if e.bidirectional:
            checks.append((tuple(e.rhs), tuple(e.lhs)))
    verdicts = iter(derivable_many(checks, rules, iters=iters, progress=progress, **dist))
    kept, reversed_only = [], 0
    for e in merging:
        forward = next(verdicts)
        backward = next(verdicts) if e.bidirectional else True
        if forward and backward:
            continue
        if forward:  # only the reverse direction is new: keep it one way
            e.lhs, e.rhs, e.ops = e.rhs, e.lhs, e.ops[::-1]
            reversed_only += 1
        e.bidirectional = e.bidirectional and not (forward or backward)
        kept.append(e)
    counts = {"candidates": len(entries), "already in the base corpus": len(entries) - len(new),
              "two-output rules that merge no work": len(new) - len(merging),
              f"derivable within {iters} iterations": len(merging) - len(kept), "kept": len(kept),
              "kept one way (reverse only new)": reversed_only}
    return kept, counts
