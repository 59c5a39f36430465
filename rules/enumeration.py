"""Enumeration of the rule generator's graphs (TASO Algorithm 1): every small graph of a domain, fingerprinted.

In each domain a depth-first search builds every acyclic graph of at most ``max_ops`` operators over its typed
variables, without duplicated computation (a new tensor equal to an existing computed tensor is pruned). Ops
are added in a canonical order (a new op either consumes the previous op's output or has a larger key), so each
graph is built about once. A graph is recorded with one or two outputs (a split piece nothing consumes may be
dropped). The work is cut into independent :class:`WorkUnit` (one per domain and first operator).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from eqsat.ir.rule import unparse
from eqsat.rules.domains import DOMAINS, Domain
from eqsat.rules.fingerprints import Evaluator, Tensor
from eqsat.rules.templates import Templates


@dataclass(frozen=True)
class WorkUnit:
    """An independent piece of the enumeration: one domain, one first operator (or the bare variables)."""

    domain: str
    first: int  # index into the domain's first-operator list; -1: the zero-operator graphs
    max_ops: int
    seed: int = 0


@dataclass(frozen=True)
class GraphRecord:
    """An enumerated graph: its outputs' patterns and hashes, its counted operators."""

    outputs: tuple[str, ...]
    hashes: tuple[int, ...]
    op_keys: tuple[str, ...]
    n_ops: int
    domain: str

    @property
    def fingerprint(self) -> tuple[int, ...]:
        """Output-order independent fingerprint."""
        return tuple(sorted(self.hashes))


@dataclass
class _Op:
    key: str
    ins: tuple[int, ...]  # tensor indices
    outs: tuple[int, ...]


class Enumerator:
    """Depth-first enumeration of graphs in one domain."""

    def __init__(self, domain: Domain, max_ops: int, seed: int = 0) -> None:
        self.domain = domain
        self.max_ops = max_ops
        self.ev = Evaluator(seed)
        self.tpl = Templates(self.ev, domain)
        self.vars: list[Tensor] = []
        for vt in domain.types:
            if vt.param:
                continue
            for k in range(1, vt.count + 1):
                t = self.ev.variable(f"?{vt.prefix}{k}", vt.shapes[0])
                if vt.kernel:
                    t.bias = self.ev.variable(f"?b{vt.prefix}{k}", (vt.shapes[0][0],))
                self.vars.append(t)
        self.var_hashes = {t.h for t in self.vars}
        self.graphs: dict[tuple[str, ...], GraphRecord] = {}
        self.visited = 0

    def candidates(self, tensors: list[Tensor], dead: set[int]) -> Iterable[tuple[str, tuple[int, ...]]]:
        """Every (template, operand indices) applicable to the available tensors."""
        avail = [i for i in range(len(tensors)) if i not in dead]
        for name in self.domain.templates:
            if self.tpl.arity(name) == 1:
                for i in avail:
                    yield name, (i,)
            else:
                for i in avail:  # ordered pairs, so that commutativity itself is found
                    for j in avail:
                        yield name, (i, j)

    def first_ops(self) -> list[tuple[str, tuple[int, ...]]]:
        """The applicable first operators, in a deterministic order (the work units)."""
        out = []
        for name, args in self.candidates(self.vars, set()):
            if self.tpl.apply(name, [self.vars[i] for i in args]) is not None:
                out.append((name, args))
        return out

    def run(self, first: int) -> list[GraphRecord]:
        """Enumerate all graphs whose canonical first operator is ``first`` (-1: just the variables)."""
        if first < 0:
            for v in self.vars:
                self.graphs[(v.key,)] = GraphRecord((v.key,), (v.h,), (), 0, self.domain.name)
            return list(self.graphs.values())
        name, args = self.first_ops()[first]
        state = self._extend(list(self.vars), [], set(), set(self.var_hashes), name, args)
        if state is not None:
            self._dfs(*state)
        return list(self.graphs.values())

    def _extend(self, tensors: list[Tensor], opl: list[_Op], dead: set[int], hashes: set[int], name: str,
                args: tuple[int, ...]) -> tuple[list[Tensor], list[_Op], set[int], set[int]] | None:
        outs = self.tpl.apply(name, [tensors[i] for i in args])
        if outs is None:
            return None
        new_dead = set(dead)
        new_hashes = set(hashes)
        base = len(tensors)
        for k, t in enumerate(outs):
            if t.h in new_hashes:
                if t.h not in self.var_hashes:
                    return None  # duplicated computation
                new_dead.add(base + k)  # equal to an input: may only be an output
            new_hashes.add(t.h)
        key = f"{name}:{outs[0].key}" if len(outs) == 1 else f"{name}:{unparse(outs[0].pat[-1])}"
        return tensors + outs, opl + [_Op(key, args, tuple(range(base, base + len(outs))))], new_dead, new_hashes

    def _dfs(self, tensors: list[Tensor], opl: list[_Op], dead: set[int], hashes: set[int]) -> None:
        self.visited += 1
        self._record(tensors, opl)
        if len(opl) >= self.max_ops:
            return
        last = opl[-1]
        for name, args in self.candidates(tensors, dead):
            new = self._extend(tensors, opl, dead, hashes, name, args)
            if new is None:
                continue
            op = new[1][-1]
            if op.key <= last.key and not any(a in last.outs for a in args):
                continue  # not the canonical order of this graph
            if op.key in {o.key for o in opl}:
                continue
            self._dfs(*new)

    def _record(self, tensors: list[Tensor], opl: list[_Op]) -> None:
        consumed = {i for o in opl for i in o.ins}
        # per op: the output choices (a split piece nobody consumes may be dropped)
        choices: list[list[tuple[int, ...]]] = []
        for o in opl:
            free = [i for i in o.outs if i not in consumed]
            if len(o.outs) == 1:
                choices.append([tuple(free)])
            elif len(free) == 2:
                choices.append([tuple(free), (free[0],), (free[1],)])
            elif len(free) == 1:
                choices.append([tuple(free), ()])
            else:
                choices.append([()])
        op_keys = tuple(sorted(o.key for o in opl))
        combos: list[tuple[int, ...]] = [()]
        for ch in choices:
            combos = [c + x for c in combos for x in ch if len(c) + len(x) <= 2]
        for outs in combos:
            if not outs:
                continue
            keys = tuple(tensors[i].key for i in outs)
            skey = tuple(sorted(keys))
            if skey in self.graphs:
                continue
            self.graphs[skey] = GraphRecord(keys, tuple(tensors[i].h for i in outs), op_keys, len(opl),
                                            self.domain.name)


def run_unit(unit: WorkUnit) -> tuple[list[GraphRecord], int]:
    """Run one work unit; returns its graphs and the number of search states visited."""
    en = Enumerator(DOMAINS[unit.domain], unit.max_ops, unit.seed)
    graphs = en.run(unit.first)
    return graphs, en.visited


def _record_order(g: GraphRecord) -> tuple[Any, ...]:
    return (g.n_ops, g.op_keys, g.outputs)


def merge_unit_results(results: Iterable[tuple[list[GraphRecord], int]]
                       ) -> tuple[dict[tuple[str, tuple[str, ...]], GraphRecord], int]:
    """Merge the graphs of work units, independently of the order in which the units finish.

    Different units (and different output orders within a unit) may record the same set of outputs; the
    record kept is the least under a total order, with its outputs in sorted order, so that the bucket
    representatives chosen later, and hence the candidate rules, do not depend on worker scheduling.
    """
    graphs: dict[tuple[str, tuple[str, ...]], GraphRecord] = {}
    states = 0
    for recs, visited in results:
        states += visited
        least_records(recs, graphs)
    return graphs, states


def least_records(records: Iterable[GraphRecord], graphs: dict[tuple[str, tuple[str, ...]], GraphRecord]) -> None:
    """Fold records into ``graphs``: outputs in sorted order, the least record kept per (domain, outputs)."""
    for g in records:
        order = sorted(range(len(g.outputs)), key=lambda i: g.outputs[i])
        g = GraphRecord(tuple(g.outputs[i] for i in order), tuple(g.hashes[i] for i in order), g.op_keys,
                        g.n_ops, g.domain)
        key = (g.domain, g.outputs)
        old = graphs.get(key)
        if old is None or _record_order(g) < _record_order(old):
            graphs[key] = g


def work_units(max_ops: int, domains: Sequence[str] = tuple(DOMAINS), seed: int = 0) -> list[WorkUnit]:
    """All independent units of an enumeration."""
    units = []
    for d in domains:
        n = len(Enumerator(DOMAINS[d], max_ops, seed).first_ops())
        units.append(WorkUnit(d, -1, max_ops, seed))
        units += [WorkUnit(d, i, max_ops, seed) for i in range(n)]
    return units
