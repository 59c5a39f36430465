"""Candidate rules of the generator: pairing graphs of equal fingerprints, canonical renaming, TASO's pruning.

Graphs with equal fingerprints are paired with the smallest graph of their bucket (its outputs matched by hash:
the input/output mapping), giving a candidate rule ``graph => smallest``. Pruning (TASO §4) drops candidates
equal up to a renaming of variables, those whose sides share an operator applied to the same arguments (common
subgraph), and those whose roots are one operator differing in one argument (common supergraph); two-output
rules are kept only where exactly one side shares work. A candidate's sides are pattern texts (its identity,
order and storage form), parsed once into :attr:`Candidate.terms` where the pruning reads their structure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from eqsat import ops
from eqsat.ir.rule import Sexp, parse, split_args, unparse
from eqsat.rules.domains import KERNELS, WEIGHTS, var_prefix
from eqsat.rules.enumeration import GraphRecord

_VAR = re.compile(r"\?[A-Za-z_]\w*")


@dataclass
class Candidate:
    """A candidate rule ``lhs => rhs`` (one or two outputs), in expression form."""

    lhs: tuple[str, ...]
    rhs: tuple[str, ...]
    n_lhs: int
    n_rhs: int
    domain: str
    lhs_ops: tuple[str, ...] = ()
    rhs_ops: tuple[str, ...] = ()
    conditions: tuple[str, ...] = ()

    @property
    def multi(self) -> bool:
        """True for a two-output rule."""
        return len(self.lhs) == 2

    def text(self) -> str:
        """A canonical one-line form."""
        return " ; ".join(self.lhs) + " => " + " ; ".join(self.rhs)

    def terms(self) -> tuple[tuple[Sexp, ...], tuple[Sexp, ...]]:
        """The sides as patterns (parsed once; not part of the candidate's value or of what is pickled)."""
        cached = self.__dict__.get("_terms")
        if cached is None or cached[0] != (self.lhs, self.rhs):
            cached = ((self.lhs, self.rhs), (tuple(map(parse, self.lhs)), tuple(map(parse, self.rhs))))
            self.__dict__["_terms"] = cached
        return cached[1]

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_terms"}


def _rename_map(texts: Sequence[str]) -> dict[str, str]:
    seen: dict[str, str] = {}
    counters: dict[str, int] = {}
    for text in texts:
        for tok in parse_vars(text):
            pre = var_prefix(tok)
            if pre.startswith("b"):
                continue
            if tok not in seen:
                counters[pre] = counters.get(pre, 0) + 1
                seen[tok] = f"?{pre}{counters[pre]}"
    for tok in list(seen):
        pre = var_prefix(tok)
        if pre in KERNELS:  # a kernel's bias follows its kernel
            seen["?b" + tok[1:]] = "?b" + seen[tok][1:]
    return seen


def parse_vars(text: str) -> list[str]:
    """Variables of a pattern text in order of appearance."""
    return _VAR.findall(text)


def _apply_rename(text: str, m: dict[str, str]) -> str:
    return _VAR.sub(lambda mt: m.get(mt.group(0), mt.group(0)), text)


def canonical(c: Candidate) -> Candidate:
    """Rename variables in order of first appearance (trying both output orders of a two-output rule)."""
    best = None
    orders = [(0, 1), (1, 0)] if c.multi else [(0,)]
    for order in orders:
        lhs = tuple(c.lhs[i] for i in order)
        rhs = tuple(c.rhs[i] for i in order)
        m = _rename_map(lhs + rhs)
        cand = Candidate(tuple(_apply_rename(t, m) for t in lhs), tuple(_apply_rename(t, m) for t in rhs),
                         c.n_lhs, c.n_rhs, c.domain, c.lhs_ops, c.rhs_ops)
        if best is None or cand.text() < best.text():
            best = cand
    assert best is not None
    return best


def _computing_subterms(e: Sexp, out: set[str]) -> None:
    """Subterms applying an operator to tensors, by text, except those over weights only or that only move data."""
    if isinstance(e, list):
        spec, _, ins = split_args(e)
        if (spec.inputs or spec.variadic) and spec.shares_work:
            text = unparse(e)
            if not _weight_only(text):
                out.add(text)
        for x in ins:
            _computing_subterms(x, out)


def common_subgraph(c: Candidate) -> bool:
    """TASO's first pruning: both sides apply the same operator to the same arguments."""
    return bool(set(c.lhs_ops) & set(c.rhs_ops))


def _root_args(e: Sexp) -> tuple[str, list[str]] | None:
    """A root's operator with its parameters (less those picking a piece) and its operands (a kernel with its
    bias as one)."""
    if not isinstance(e, list):
        return None
    spec, params, ins = split_args(e)
    kept = [unparse(p) for (name, _), p in zip(spec.params, params, strict=True) if name not in spec.piece_params]
    head = f"{e[0]} {' '.join(kept)}"
    args = [unparse(x) for x in ins]
    if spec.kernel_bias is not None:
        k, b = spec.kernel_bias
        args = [a for i, a in enumerate(args) if i != b]
        args[k] = unparse(ins[k]) + " " + unparse(ins[b])
    return head, args


def common_supergraph(c: Candidate) -> bool:
    """TASO's second pruning: both roots are the same operator with all but one operand equal."""
    if c.multi:
        return False
    (lhs, *_), (rhs, *_) = c.terms()
    a, b = _root_args(lhs), _root_args(rhs)
    if a is None or b is None or a[0] != b[0] or len(a[1]) != len(b[1]):
        return False
    return sum(x != y for x, y in zip(a[1], b[1], strict=True)) <= 1


def _shared_ops(outputs: Sequence[Sexp]) -> bool:
    """True when two outputs have an operator in common (a shared subgraph) that computes something."""
    if len(outputs) < 2:
        return False
    subs = []
    for o in outputs:
        s: set[str] = set()
        _computing_subterms(o, s)
        if isinstance(o, list) and ops.get(o[0]).piece_params:  # both pieces of one split are one operator
            s.add(unparse(o[-1]) + f"#{o[0]}")
        subs.append(s)
    return bool(subs[0] & subs[1])


def _weight_only(term: str) -> bool:
    """A term over kernel variables and constants only (work done once on weights, not shared computation)."""
    return all(var_prefix(v) in WEIGHTS for v in parse_vars(term))


def orient_multi(c: Candidate) -> Candidate | None:
    """Keep a two-output rule only where exactly one side shares work; that side becomes the right side.

    A rule whose sides both share work, or neither does, is implied by single-output rules.
    """
    lhs, rhs = c.terms()
    ls, rs = _shared_ops(lhs), _shared_ops(rhs)
    if ls == rs:
        return None
    if ls:
        return Candidate(c.rhs, c.lhs, c.n_rhs, c.n_lhs, c.domain, c.rhs_ops, c.lhs_ops)
    return c


def _skeleton(c: Candidate) -> tuple[str, tuple[str, ...]]:
    text = c.text()
    return _VAR.sub("?", text), tuple(_VAR.findall(text))


def _erase_types(c: Candidate) -> str:
    m: dict[str, str] = {}
    for tok in parse_vars(c.text()):
        if var_prefix(tok).startswith("b") or tok in m:
            continue
        m[tok] = f"?t{len(m) + 1}"
        if var_prefix(tok) in KERNELS:
            m["?b" + tok[1:]] = f"?bt{len(m)}"
    return _apply_rename(c.text(), m)


def prune_instances(cands: Sequence[Candidate]) -> list[Candidate]:
    """Drop rules that are instances of another rule under a (non-injective) renaming of its variables."""
    erased: dict[str, Candidate] = {}
    for c in cands:  # variable types do not matter to the engine: keep one rule per type-erased text
        erased.setdefault(_erase_types(c), c)
    cands = list(erased.values())
    groups: dict[str, list[tuple[Candidate, tuple[str, ...]]]] = {}
    for c in cands:
        sk, vs = _skeleton(c)
        groups.setdefault(sk, []).append((c, vs))
    out = []
    for c in cands:
        sk, vs = _skeleton(c)
        inst = False
        for g, gvs in groups[sk]:
            if g is c or len(set(gvs)) <= len(set(vs)):
                continue
            m: dict[str, str] = {}
            if all(m.setdefault(a, b) == b for a, b in zip(gvs, vs, strict=True)):
                inst = True
                break
        if not inst:
            out.append(c)
    return out


def _op_keys_of(rec: GraphRecord) -> tuple[str, ...]:
    return tuple(k.split(":", 1)[1] for k in rec.op_keys)


def candidates_from(graphs: Iterable[GraphRecord]) -> tuple[list[Candidate], int]:
    """Pair every graph with the smallest graph of its fingerprint bucket. Returns (candidates, #buckets)."""
    keyed, n_buckets = keyed_candidates(graphs)
    return [c for _, c in keyed], n_buckets


def keyed_candidates(graphs: Iterable[GraphRecord]) -> tuple[list[tuple[Any, Candidate]], int]:
    """:func:`candidates_from` with each candidate's place in the global order: ``(domain, fingerprint,
    position in its bucket)``. Candidates from disjoint sets of buckets (fingerprint shards) merge into the
    order of one in-memory pass by sorting on these keys."""
    buckets: dict[tuple[Any, ...], list[GraphRecord]] = {}
    for g in graphs:
        buckets.setdefault((g.domain,) + g.fingerprint, []).append(g)
    out: list[tuple[Any, Candidate]] = []
    n_buckets = 0
    for key in sorted(buckets, key=lambda k: (k[0], k[1:])):
        gs = buckets[key]
        if len(gs) < 2:
            continue
        n_buckets += 1
        gs.sort(key=lambda g: (g.n_ops, sum(len(o) for o in g.outputs), g.outputs))
        rep = gs[0]
        for j, g in enumerate(gs[1:]):
            order = [rep.hashes.index(h) for h in g.hashes]
            if sorted(order) != list(range(len(order))):
                continue
            out.append(((key[0], key[1:], j),
                        Candidate(g.outputs, tuple(rep.outputs[i] for i in order), g.n_ops, rep.n_ops, g.domain,
                                  _op_keys_of(g), _op_keys_of(rep))))
    return out, n_buckets
