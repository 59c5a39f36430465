"""The choices an optimization run makes once, as objects: the extraction :class:`Solver`, the :class:`Target` the
model is written for and the named rule sets (:data:`RULE_SETS`). ``OptimizeOptions`` validates its names
against these tables, the run reads the objects, and the command line takes its choices and their help from
them, so each choice is described here only."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eqsat import onnx_io
from eqsat.costs import CostModel, InPrecision
from eqsat.extract import (
    EXACT_SOLVERS,
    Extraction,
    ParallelCost,
    SerializedEGraph,
    extract,
    extract_cpsat_parallel,
    extract_top_k,
)
from eqsat.extract import SOLVERS as EXTRACTORS
from eqsat.ir.rule import Rule
from eqsat.rules import corpus_or_starter, starter_rules
from eqsat.rules.layout import LAYOUT_RULES
from eqsat.rules.onnxruntime import ORT_KERNEL_RULES
from eqsat.rules.starter import IMPORT_FOLD_RULES


@dataclass(frozen=True)
class Solver:
    """An extraction solver as a run uses it. An ``exact`` one (CP-SAT) works to a time limit: each snapshot of
    the e-graph gets a short exact pass, the final e-graph a greedy answer first, and it can extract several
    near-optimal graphs for the end-to-end timings; a heuristic one (greedy) answers at once."""

    name: str
    help: str
    exact: bool
    #: an exact solver minimizes this mixed critical-path cost instead of the sum (None: the sum)
    parallel: ParallelCost | None = None

    def extract(self, egraph: SerializedEGraph, *, start: Mapping[str, str] | None, seconds: float,
                progress: Callable[[str], None] | None) -> Extraction:
        """The cheapest graph it finds, never costlier than ``start``; ``seconds`` bounds an exact solver."""
        if self.exact and self.parallel is not None:
            return extract_cpsat_parallel(egraph, self.parallel, time_limit=seconds, start=start, progress=progress)
        limit = {"time_limit": seconds} if self.exact else {}
        return extract(egraph, solver=self.name, start=start, progress=progress, **limit)

    def extract_several(self, egraph: SerializedEGraph, count: int, *, start: Mapping[str, str] | None,
                        seconds: float, progress: Callable[[str], None] | None) -> list[Extraction]:
        """Up to ``count`` distinct near-optimal graphs, the cheapest first (an exact solver only; a heuristic
        one gives its one answer)."""
        if not self.exact or count <= 1 or self.parallel is not None:  # top-k is under the sum only
            return [self.extract(egraph, start=start, seconds=seconds, progress=progress)]
        return extract_top_k(egraph, count, time_limit=seconds, start=start, progress=progress)


#: The extraction solvers, by the name ``OptimizeOptions.solver`` takes: eqsat.extract's, as a run uses them
SOLVERS: dict[str, Solver] = {name: Solver(name, text, exact=name in EXACT_SOLVERS)
                              for name, text in EXTRACTORS.items()}


@dataclass(frozen=True)
class Target:
    """What an optimized model is written for, and the rules that brings to any rule set."""

    name: str
    help: str
    rules: Callable[[], Sequence[Rule]]


#: The targets, by the name ``OptimizeOptions.target`` takes
TARGETS: dict[str, Target] = {
    "onnx": Target("onnx", "standard ONNX, any runtime", lambda: ()),
    "onnxruntime": Target(
        "onnxruntime", "its fused com.microsoft kernels SkipLayerNormalization, SkipSimplifiedLayerNormalization, "
        "BiasGelu, FastGelu and MultiHeadAttention are alternatives, taken where the costs find them cheaper: "
        "with --costs measured; the analytic model keeps the portable form",
        lambda: ORT_KERNEL_RULES),
}


def choose(table: Mapping[str, Any], name: str, what: str) -> Any:
    """``table[name]``, or ValueError naming the choices."""
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}; choose one of {', '.join(table)}")
    return table[name]


def default_rules(layouts: bool = True, max_ops: int = 3) -> list[Rule]:
    """The rules :func:`eqsat.optimize` (and the CLI) use by default: the verified corpus and the hand-written
    extra rules, plus the data-layout rules unless ``layouts`` is False. ``max_ops=4`` adds the proved rules of
    four operators the corpus cannot derive (``optimize(model, rules=default_rules(max_ops=4))``, or
    ``eqsat optimize --rules size4``). The target's rules (:class:`Target`) come on top of these."""
    return corpus_or_starter(max_ops) + (list(LAYOUT_RULES) if layouts else [])


def target_rules(target: str) -> list[Rule]:
    """The rules a target adds to any rule set: for ``"onnxruntime"``, the equalities of its fused kernels with
    their decompositions (:mod:`eqsat.rules.onnxruntime`); none for portable ONNX."""
    return list(choose(TARGETS, target, "target").rules())


def with_fold_rules(rules: Sequence[Rule]) -> list[Rule]:
    """``rules`` and, where it lacks one by name, each rule relating a fold of the default import to the nodes it
    folds (:data:`eqsat.rules.starter.IMPORT_FOLD_RULES`: conv + batch norm, conv + residual add, conv (+ add) +
    relu): the rules of a model imported as written (``optimize(as_written=True)``, ``eqsat compare
    --as-written``), whose search then makes those folds where they pay."""
    names = {r.name for r in rules}
    return list(rules) + [r for r in IMPORT_FOLD_RULES if r.name not in names]


@dataclass(frozen=True)
class RuleSet:
    """A rule set by name (``eqsat optimize --rules NAME``); ``rules`` None is optimize's own default; ``pet``: PET's
    corrected mutants join the e-graph too (``optimize(pet=True)``)."""

    name: str
    help: str
    rules: Callable[[], Sequence[Rule] | None]
    pet: bool = False


#: The named rule sets of the command line
RULE_SETS: dict[str, RuleSet] = {
    "default": RuleSet("default", "the verified corpus of rules of up to three operators, the extra and layout rules",
                       lambda: None),
    "size4": RuleSet("size4", "also the rules of four operators it cannot derive",
                     lambda: default_rules(max_ops=4)),
    "starter": RuleSet("starter", "hand-written", starter_rules),
    "pet": RuleSet("pet", "the default rules and PET's corrected mutants of the convolutions (as --pet)",
                   lambda: None, pet=True),
}


def in_model_precision(cost_model: CostModel, meta: Mapping[str, Any]) -> tuple[CostModel, str]:
    """The cost model a model imported with graph metadata ``meta`` is priced by, and what to say of it: a
    uniformly half-precision model's computed costs in its precision; a mixed-precision one's keys are each in
    their operator's precision already, which a measured model times as float32 (``""``: a float32 model)."""
    precision = meta.get(onnx_io.PRECISION_KEY, "")
    if precision:
        if cost_model.is_measured:  # it times what its runtime runs
            return cost_model, ""
        return InPrecision(cost_model, precision), (f"a {precision} model: optimized as its float32 copy, priced "
                                                    f"and written in {precision}")
    half = onnx_io.half_type(meta)
    if not half:
        return cost_model, ""
    if cost_model.is_measured:
        cost_model = InPrecision(cost_model, "float32", source=half)
    return cost_model, (f"a model in float32 and {half}: optimized as its float32 copy, each cast between them kept "
                        f"as a change of precision, {'timed in float32' if cost_model.is_measured else 'priced'} "
                        "and written in each operator's own precision")
