"""The fuzzing loop: :func:`run_fuzz` packs several random graphs into one model per optimize call, compares
every optimized model with its original, re-runs the graphs of a failing pack one by one to pin the guilty one
and shrinks it to a small reproducer (:class:`Finding`); :class:`FuzzReport` totals the run."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from eqsat.rules import corpus_or_starter
from eqsat.rules.layout import LAYOUT_RULES
from eqsat.testing.fuzz.check import CaseResult, InvalidModel, check_model
from eqsat.testing.fuzz.choices import RandomChoices, ReplayChoices
from eqsat.testing.fuzz.generate import generate_graph
from eqsat.testing.fuzz.graph import FuzzGraph, to_model
from eqsat.testing.fuzz.shrink import shrink


@dataclass
class Finding:
    """A mismatch or a crash, pinned to one graph and shrunk."""

    kind: str  # "mismatch" or "error"
    detail: str
    graph_seed: int
    record: list[int]
    onnx_text: str
    rules_fired: dict[str, int]
    count: int = 1  # how many graphs failed the same way (same error signature; each mismatch counts alone)

    @property
    def signature(self) -> str:
        """The error's type and message without names and numbers (one bug, one signature)."""
        return _signature_of(self.kind, self.detail)


def _signature_of(kind: str, detail: str) -> str:
    if not kind.startswith("error"):
        return f"{kind}:{id(detail)}"
    first = detail.strip().splitlines()[0] if detail.strip() else ""
    return kind + ":" + re.sub(r"'[^']*'|\d+", "#", first)


@dataclass
class FuzzReport:
    """Totals of a fuzzing run."""

    graphs: int = 0
    calls: int = 0
    nodes: int = 0
    changed_models: int = 0
    mismatches: int = 0
    errors: int = 0
    invalid: int = 0  # graphs skipped because the generated model itself did not run (generator bugs)
    rules_fired: Counter = field(default_factory=Counter)
    rule_calls: Counter = field(default_factory=Counter)  # rule -> packed optimize calls it fired in
    extra_calls: int = 0  # optimize calls spent re-running graphs of failing packs alone and shrinking
    motifs: Counter = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    optimize_seconds: float = 0.0


def _graph_of(name: str) -> int | None:
    head = name.split("_", 1)[0]
    return int(head[1:]) if head[:1] == "g" and head[1:].isdigit() else None


def run_fuzz(graphs: int, *, seed: int = 0, per_model: int = 8, max_motifs: int = 6, time_limit: float = 10.0,
             avoid: Collection[str] = (), rules: Sequence[Any] | None = None, shrink_budget: int = 120,
             progress: Callable[[FuzzReport], None] | None = None, deadline: float | None = None) -> FuzzReport:
    """Generate ``graphs`` random graphs (graph ``i`` from seed ``seed * 1_000_003 + i``), ``per_model`` to an
    optimize call, and compare every optimized model with its original.

    A failing pack is re-run graph by graph (so the other graphs of a crashed pack are still checked); a graph
    that fails alone is shrunk to a small reproducer. Stops early at ``deadline`` (``time.time()``); the
    report counts what actually ran.
    """
    rep = FuzzReport()
    t0 = time.perf_counter()

    def build(rec: list[int]) -> onnx.ModelProto:
        return to_model([generate_graph(ReplayChoices(rec), max_motifs=max_motifs, avoid=avoid)])

    def outcome(rec: list[int]) -> CaseResult:
        rep.extra_calls += 1
        return check_model(build(rec), time_limit=time_limit, rules=rules)

    i = 0
    while i < graphs and (deadline is None or time.time() < deadline):
        batch = []
        for k in range(min(per_model, graphs - i)):
            gseed = seed * 1_000_003 + i + k
            c = RandomChoices(gseed)
            g = generate_graph(c, max_motifs=max_motifs, prefix=f"g{k}_", avoid=avoid)
            batch.append((gseed, g, c.record))
        model = to_model([g for _, g, _ in batch])
        i += len(batch)
        try:
            res = check_model(model, time_limit=time_limit, rules=rules)
        except InvalidModel as e:  # skip the batch, but say so: the generator must be fixed
            rep.invalid += len(batch)
            rep.findings.append(Finding("invalid original", str(e)[:2000], batch[0][0], [], "", {}))
            continue
        rep.calls += 1
        rep.graphs += len(batch)
        rep.nodes += len(model.graph.node)
        rep.optimize_seconds += res.seconds
        rep.changed_models += res.changed
        rep.rules_fired.update(res.rules_fired)
        rep.rule_calls.update(res.rules_fired.keys())
        for _, g, _ in batch:
            rep.motifs.update(g.motifs)
        if not res.ok:
            owners = {_graph_of(n) for n in res.problems}
            suspects = sorted(k for k in owners if k is not None)
            if None in owners or not suspects:
                suspects = list(range(len(batch)))
            if not any([_pin(rep, batch[k], build, outcome, shrink_budget) for k in suspects]):
                # no graph fails alone: the pack is the reproducer (an interaction between graphs)
                kind = "error" if res.error else "mismatch"
                rep.errors += kind == "error"
                rep.mismatches += kind == "mismatch"
                detail = res.error or "; ".join(f"{k}: {v}" for k, v in res.problems.items())
                rep.findings.append(Finding(kind + " (pack only)", detail, batch[0][0], [],
                                            onnx.printer.to_text(model.graph), res.rules_fired))
        if progress:
            rep.seconds = time.perf_counter() - t0
            progress(rep)
    rep.seconds = time.perf_counter() - t0
    return rep


def _pin(rep: FuzzReport, item: tuple[int, FuzzGraph, list[int]], build: Callable[[list[int]], onnx.ModelProto],
         outcome: Callable[[list[int]], CaseResult], budget: int) -> bool:
    """Re-run one graph of a failing pack alone; if it fails alone, shrink it, record a finding, return True."""
    gseed, graph, record = item
    single = outcome(record)
    if single.ok:
        return False
    kind = "error" if single.error else "mismatch"
    if kind == "error":
        rep.errors += 1
        sig = _signature_of(kind, single.error or "")
        known = next((f for f in rep.findings if f.signature == sig), None)
        if known is not None:  # a bug already found and shrunk: count it, do not shrink it again
            known.count += 1
            return True
    else:
        rep.mismatches += 1

    def fails(rec: list[int]) -> bool:
        try:
            r = outcome(rec)
        except Exception:  # a replayed list that breaks the generator is not this failure
            return False
        return (r.error is not None) if kind == "error" else bool(r.problems)

    small = shrink(record, fails, budget=budget, marks=graph.marks)
    final = outcome(small)
    detail = final.error if kind == "error" else "; ".join(f"{k}: {v}" for k, v in final.problems.items())
    rep.findings.append(Finding(kind, detail or "", gseed, small, onnx.printer.to_text(build(small).graph),
                                final.rules_fired))
    return True


def default_rule_names() -> list[str]:
    """Names of the one-way rules ``optimize`` runs by default (corpus + layout rules; reverses as ``-rev``),
    the denominator of rule coverage."""

    return [d.name for r in [*corpus_or_starter(), *LAYOUT_RULES] for d in r.directions()]
