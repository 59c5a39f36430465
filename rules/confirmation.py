"""Confirmation of candidate rules in float64: on a second shape set, then on random shapes (generalisation).

A candidate found on the generator's shapes must also hold on shape set B and on random shape assignments
where both sides are well-shaped with equal shapes (this is what checks that generalising concrete shapes to
``(dim ?x k)`` expressions is sound); one true only where same-typed variables have equal shapes is kept with
those shape conditions, the others are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from eqsat import ops
from eqsat.ir.rule import evaluate, parse, shape_equality
from eqsat.rules.candidates import Candidate, parse_vars
from eqsat.rules.domains import KERNELS, SHAPE_SETS, is_param_var, var_prefix, var_shape, var_type


def random_env(variables: Iterable[str], shape_of: Callable[[str], tuple[int, ...]],
               rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random float64 values for variables of the given shapes (a parameter variable's value is its "shape")."""
    return {v: tuple(shape_of(v)) if is_param_var(v) else rng.standard_normal(shape_of(v)) for v in variables}


def _eval_sides(sides: Sequence[str], env: dict[str, Any]) -> list[np.ndarray] | None:
    """The values of rule sides (None where one is ill-shaped)."""
    try:
        return [np.asarray(evaluate(parse(s), env)) for s in sides]
    except (ops.OpError, IndexError, ValueError, KeyError):
        return None


def _holds(conditions: Sequence[str], shapes: dict[str, tuple[int, ...]]) -> bool:
    """Whether the shape conditions hold for these shapes (other conditions are not about shapes)."""
    pairs = [p for p in map(shape_equality, conditions) if p is not None]
    return all(shapes[a] == shapes[b] for a, b in pairs)


def check_numeric(lhs: Sequence[str], rhs: Sequence[str], shape_sets: Sequence[int] = (1,), random_shapes: int = 0,
                  seed: int = 0, rtol: float = 1e-6, atol: float = 1e-8, conditions: Sequence[str] = ()) -> str | None:
    """Check ``lhs == rhs`` in float64; returns None when equal, else the reason it is not.

    On each listed shape set both sides must be well-shaped and equal. On ``random_shapes`` random shape
    assignments (variables' dimensions drawn independently, then kept only where both sides are well-shaped
    with equal shapes, as the e-graph engine requires before merging) they must be equal too.
    """
    rng = np.random.default_rng(seed)
    variables = sorted(set().union(*(parse_vars(s) for s in (*lhs, *rhs))))
    for ss in shape_sets:
        env = random_env(variables, lambda v, ss=ss: var_shape(v, ss), rng)
        a, b = _eval_sides(lhs, env), _eval_sides(rhs, env)
        if a is None or b is None:
            return f"ill-shaped on shape set {ss}"
        for x, y in zip(a, b, strict=True):
            if x.shape != y.shape or not np.allclose(x, y, rtol=rtol, atol=atol):
                return f"values differ on shape set {ss}"
    tried = 0
    for _ in range(random_shapes * 20):
        if tried >= random_shapes:
            break
        shapes = _random_shapes(variables, rng)
        if not _holds(conditions, shapes):
            continue
        env = random_env(variables, shapes.__getitem__, rng)
        a = _eval_sides(lhs, env)
        if a is None:
            continue
        b = _eval_sides(rhs, env)
        if b is None or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
            continue
        tried += 1
        for x, y in zip(a, b, strict=True):
            if not np.allclose(x, y, rtol=rtol, atol=atol):
                return f"values differ for shapes {shapes}"
    return None


def _random_shapes(variables: Sequence[str], rng: np.random.Generator) -> dict[str, tuple[int, ...]]:
    """Shapes near a random base shape set: each base dimension value is split into up to two new values."""
    base = int(rng.integers(0, SHAPE_SETS))
    remap: dict[tuple[int, int], int] = {}
    out = {}
    for v in variables:
        dims = []
        for d in var_shape(v, base):
            if d in (1, 3) and var_prefix(v) in KERNELS and len(dims) >= 2:
                dims.append(d)  # kernel sizes stay: they decide the padding literal
                continue
            color = int(rng.integers(0, 2))
            dims.append(remap.setdefault((d, color), int(rng.integers(1, 6))))
        out[v] = tuple(dims)
    for v in variables:  # a reshape target and the matrix it reshapes: (a, b, c) and (a, b * c)
        vt = var_type(var_prefix(v))
        matrix = f"?{vt.of}{v[1 + len(vt.prefix):]}" if vt is not None and vt.of else None
        if matrix in out:
            out[matrix] = (out[v][0], int(np.prod(out[v][1:])))
    return out



def shape_conditions(c: Candidate) -> tuple[str, ...]:
    """Conditions equating the shapes of same-typed tensor variables (as they were during generation)."""
    vs = sorted({v for v in parse_vars(c.text()) if not var_prefix(v).startswith("b") and var_shape(v, 0)})
    return tuple(f"(= (shape {a}) (shape {b}))" for a, b in zip(vs, vs[1:], strict=False)
                 if var_prefix(a) == var_prefix(b))


def confirm(c: Candidate) -> tuple[str | None, str | None, tuple[str, ...]]:
    """Float confirmation and the generalisation check of one candidate.

    Returns ``(None, None, conditions)`` when it is kept (with the shape conditions it needs, if any), else
    ``(stage, reason, ())`` with stage ``"float"`` (unequal on the second shape set) or ``"general"``
    (unequal on random shapes even when same-typed variables have equal shapes).
    """
    r = check_numeric(c.lhs, c.rhs, shape_sets=(1,), random_shapes=0)
    if r is not None:
        return "float", r, ()
    r = check_numeric(c.lhs, c.rhs, shape_sets=(0, 2), random_shapes=12, seed=1)
    if r is None:
        return None, None, ()
    conds = shape_conditions(c)  # e.g. sound only without broadcasting: keep it with shape conditions
    if conds and check_numeric(c.lhs, c.rhs, shape_sets=(0, 2), random_shapes=12, seed=1, conditions=conds) is None:
        return None, None, conds
    return "general", r, ()
