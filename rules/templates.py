"""The generator's templates: how operators are applied to candidate tensors, as the registry declares them.

Every operator's ``OpSpec.generator_forms`` declares templates (``eqsat.ops.core.GeneratorForm``) and the domains
they run in. :class:`Templates` runs a domain's; :class:`Context` is the ``GenContext`` the forms build their
outputs through. Nothing here names an operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eqsat import ops
from eqsat.ir.rule import Sexp, unparse
from eqsat.ops.core import GeneratorForm, SymDim
from eqsat.rules.domains import Domain, evaluate_sym, var_prefix, var_type
from eqsat.rules.fingerprints import Evaluator, Tensor


def _templates() -> dict[str, GeneratorForm]:
    table: dict[str, GeneratorForm] = {}
    for spec in ops.REGISTRY.values():
        for name, form in spec.templates().items():
            assert name not in table, f"template {name!r} declared twice"
            table[name] = form
    return table


#: Template name -> form, from every operator's declaration.
TEMPLATES: dict[str, GeneratorForm] = _templates()


def _sym_key(e: Sexp) -> str:
    return unparse(e) if isinstance(e, list) else str(e)


class Templates:
    """The templates of a domain, each applied to tuples of available tensors."""

    def __init__(self, ev: Evaluator, domain: Domain) -> None:
        unknown = [n for n in domain.templates if n not in TEMPLATES]
        if unknown:
            raise ValueError(f"domain {domain.name}: no operator declares the templates {unknown}")
        self.ev = ev
        self.domain = domain
        self.context = Context(ev, domain)

    def arity(self, name: str) -> int:
        """Number of tensor operands a template takes."""
        return TEMPLATES[name].arity

    def apply(self, name: str, args: Sequence[Tensor]) -> list[Tensor] | None:
        """Apply template ``name``; returns its output tensors (two for a split) or None if not applicable."""
        return TEMPLATES[name].apply(self.context, args)  # type: ignore[arg-type, return-value]


class Context:
    """What the operators' generator forms build their outputs through (``eqsat.ops.core.GenContext``)."""

    def __init__(self, ev: Evaluator, domain: Domain) -> None:
        self.ev = ev
        self.domain = domain

    def apply(self, op: str, params: dict[str, Any], ins: Sequence[Tensor], *,
              pattern: dict[str, Any] | None = None) -> Tensor | None:
        """One operator application (memoised by the evaluator); None where it is ill-shaped."""
        return self.ev.apply(op, params, ins, pattern)

    def common_bounds(self, a: Tensor, b: Tensor) -> dict[int, SymDim]:
        """The split boundaries two tensors share."""
        return {ax: e for ax, e in a.bounds.items() if ax in b.bounds and _sym_key(b.bounds[ax]) == _sym_key(e)}

    def dim_value(self, e: SymDim) -> int:
        """A dimension expression's value on shape set A."""
        return int(evaluate_sym(e, 0))

    def shape_parameter(self, x: Tensor) -> tuple[str, tuple[int, ...]] | None:
        """The domain's target-shape parameter variable for ``x`` (a matrix of its ``of`` type), or None."""
        target = next((vt for vt in self.domain.types if vt.param), None)
        if target is None:
            return None
        of = var_type(target.of)
        if of is None or x.shape != of.shapes[0] or (x.is_var and var_prefix(x.key) != target.of):
            return None
        return f"?{target.prefix}1", tuple(target.shapes[0])
