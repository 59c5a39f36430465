"""Element-wise operators over the pieces of a split, as one operator before the split (TASO's NasRNN gain).

Where a matrix product's weights are concatenated (one kernel for several), the element-wise operators that
followed each product apply to pieces of one split: ``tanh(split(P))``, ``add(split(P), split(Q))``. The
corpus can bring the products together but not what follows them, since the generator splits only the
concatenations it builds itself. Each rule here moves one element-wise operator before a split of any axis,
start and size: ``op(x[s:s+n]) => op(x)[s:s+n]`` and, for a binary operator of equal operand shapes,
``op(x[s:s+n], y[s:s+n]) => op(x, y)[s:s+n]``. Applied to every piece, one operator over the whole tensor
computes what the pieces' operators did; the extraction keeps it only where one kernel over the whole is
cheaper than one per piece (it computes the pieces nobody reads as well).

The rules are read from the registry, not written here: one per operator that declares a split axiom
(:func:`eqsat.ops.families.split_axiom`: every unary element-wise operator, ``ewadd`` and ``ewmul``), the axiom's
left-to-right direction. Each axiom is validated symbolically like every other, each rule is proved by Z3 from
it and tested numerically on random tensors of several shapes (tests/rules/test_over_split_rules.py). One way
only: the other direction splits an operator over a whole tensor into one per piece, which the engine has no
use for and which multiplies the e-graph by the number of splits.
"""

from __future__ import annotations

from collections.abc import Iterable

from eqsat import ops
from eqsat.ir.rule import Rule
from eqsat.rules.axioms import declared_axioms


def _over_split_rules() -> tuple[Rule, ...]:
    return tuple(Rule(f"{spec.name}-over-split", (a.lhs,), (a.rhs,), conditions=a.conditions)
                 for spec in ops.REGISTRY.values() for a in declared_axioms({spec.name})
                 if a.name == f"{spec.name}-split")


#: One rule per element-wise operator with a split axiom, in registry order.
OVER_SPLIT_RULES: tuple[Rule, ...] = _over_split_rules()


def without_over_split(rules: Iterable[Rule]) -> list[Rule]:
    """``rules`` less :data:`OVER_SPLIT_RULES` (where a model's e-graph should stay as it was without them)."""
    names = {r.name for r in OVER_SPLIT_RULES}
    return [r for r in rules if r.name not in names]
