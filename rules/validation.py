"""Validation of axioms by symbolic execution (TASO §3): both sides run on small tensors of Z3 reals.

Each axiom is executed with the registry's reference implementations on small tensors of Z3 reals, for every
parameter combination and several small shape assignments, and both sides must be equal. An operator the
registry declares uninterpreted (``OpSpec.uninterpreted``: relu, softmax...) is a Z3 function of each element
or row (with its known values, relu(0) = 0); one whose numpy reference does not run on Z3 reals declares its Z3
semantics (``OpSpec.z3_fn``: a max pool through ``If``). Shapes are drawn at ranks the operators imply
(``OpSpec.ranks``).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from eqsat import ops
from eqsat.ir.rule import Sexp, Vec, eval_param, is_var, parse, shape_equality, split_args, tensor_vars
from eqsat.rules.axioms import AXIOMS, Axiom


def _tensor_vars(text: str) -> list[str]:
    return sorted(tensor_vars(parse(text)))


def param_combos(params: Mapping[str, tuple], skip: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every combination of the listed values of parameter variables (those in ``skip`` left out)."""
    names = sorted(n for n in params if n not in skip)
    return [dict(zip(names, vals, strict=True)) for vals in itertools.product(*(params[n] for n in names))]


class Symbolic:
    """Evaluates patterns on object arrays of Z3 reals with the registry's reference implementations (and is the
    ``eqsat.ops.core.Z3Context`` the operators' ``z3_fn`` receive)."""

    def __init__(self) -> None:
        self._functions: dict[tuple[str, int, int], z3.FuncDeclRef] = {}

    def _function(self, op: str, arity: int, position: int) -> z3.FuncDeclRef:
        key = (op, arity, position)
        if key not in self._functions:
            name = op if arity == 1 else f"{op}_{arity}_{position}"
            self._functions[key] = z3.Function(name, *([z3.RealSort()] * (arity + 1)))
        return self._functions[key]

    @staticmethod
    def _instance(spec: ops.OpSpec, p: Mapping[str, Any]) -> str:
        """The function's name for one parameter setting (clip(0, 6) and clip(0, 1) are different functions);
        the axis an along-axis operator reads is not part of it (the rows are)."""
        u = spec.uninterpreted
        rest = [f"{k}={v}" for k, v in sorted(p.items()) if not (u and u.kind == "along_axis" and k == u.axis_param)]
        return spec.name + (f"[{','.join(rest)}]" if rest else "")

    def uninterpreted(self, spec: ops.OpSpec, p: Mapping[str, Any], x: np.ndarray) -> np.ndarray:
        """An operator the registry declares uninterpreted (:class:`eqsat.ops.Uninterpreted`), applied to
        an array of reals: per element, or per row along its axis (one function per row length and position)."""
        u = spec.uninterpreted
        assert u is not None, spec.name
        out = np.empty(x.shape, dtype=object)
        if u.kind == "elementwise":
            f = self._function(self._instance(spec, p), 1, 0)
            facts = {a: b for a, b in u.facts}
            for idx, v in np.ndenumerate(x):
                c = z3.simplify(self.real(v))
                known = z3.is_rational_value(c) and c.as_fraction().denominator == 1 and int(c.as_long()) in facts
                out[idx] = self.real(facts[int(c.as_long())]) if known else f(self.real(v))
            return out
        assert u.kind == "along_axis", u.kind
        ax = p[u.axis_param]
        rows, outs = np.moveaxis(x, ax, -1), np.moveaxis(out, ax, -1)  # views: writing outs fills out
        n = rows.shape[-1]
        for idx in np.ndindex(*rows.shape[:-1]):
            args = [self.real(v) for v in rows[idx]]
            for i in range(n):
                outs[idx + (i,)] = self._function(self._instance(spec, p), n, i)(*args)
        return out

    # -- eqsat.ops.core.Z3Context, for the operators' z3_fn
    def real(self, v: Any) -> Any:
        """A number as a Z3 real (a float as a close fraction); a Z3 term as it is."""
        if isinstance(v, z3.ExprRef):
            return v
        if isinstance(v, float | np.floating):
            f = Fraction(float(v)).limit_denominator(10_000)
            return z3.RealVal(f.numerator) / f.denominator
        return z3.RealVal(int(v))

    def reals(self, a: np.ndarray) -> np.ndarray:
        """Every entry of an array as a Z3 real."""
        out = np.empty(np.shape(a), dtype=object)
        out.flat[:] = [self.real(v) for v in np.asarray(a, dtype=object).flat] if out.size else []
        return out

    def if_then_else(self, cond: Any, a: Any, b: Any) -> Any:
        """``a`` where ``cond`` holds, else ``b``."""
        return z3.If(cond, a, b)

    def eval(self, e: Sexp, env: Mapping[str, Any]) -> np.ndarray:
        """The value of a pattern on arrays of Z3 reals bound in ``env``."""
        if is_var(e):
            return env[e]
        spec, params, ins = split_args(e)
        args = [self.eval(x, env) for x in ins]
        p = spec.normalize({n: eval_param(v, env) for (n, _), v in zip(spec.params, params, strict=True)})
        spec.shape(p, [np.shape(a) for a in args])
        chain = spec.runs_as(p) if spec.runs_as else None
        if chain:  # a fused form (conv2d with relu): its operators in turn, as the registry declares
            outs: list[np.ndarray] = []
            for k, (op, q, positions) in enumerate(chain):
                part_args = ops.runs_as_operands(positions, k, args, outs)
                outs.append(self._apply(ops.get(op), ops.get(op).normalize(q), part_args))
            return outs[-1]
        return self._apply(spec, p, args)

    def _apply(self, spec: ops.OpSpec, p: Mapping[str, Any], args: list[np.ndarray]) -> np.ndarray:
        if spec.uninterpreted is not None:
            return self.uninterpreted(spec, p, args[0])
        if spec.z3_fn is not None:
            return spec.z3_fn(self, p, *args)
        return self.reals(spec.numpy_fn(p, *args))


def _shape_of(e: Sexp, shapes: Mapping[str, tuple[int, ...]], params: Mapping[str, Any]) -> tuple[int, ...]:
    if is_var(e):
        return tuple(shapes[e])
    spec, pars, ins = split_args(e)
    arg_shapes = [_shape_of(x, shapes, params) for x in ins]
    if spec.axioms_equal_shapes and len(set(arg_shapes)) > 1:
        raise ops.OpError(f"axioms are stated for {spec.name} operands of equal shapes")
    env = {**{k: np.empty(v) for k, v in shapes.items()}, **params}
    p = spec.normalize({n: eval_param(v, env) for (n, _), v in zip(spec.params, pars, strict=True)})
    return spec.shape(p, arg_shapes)


def _ranks(text: str, ranks: dict[str, int], params: Mapping[str, Any]) -> None:
    """Ranks of tensor variables implied by the operators that use them (``OpSpec.ranks``: a transpose's
    permutation fixes the rank of what it reaches through rank-preserving operators)."""
    def walk(e: Sexp, rank: int | None) -> None:
        if not isinstance(e, list):
            return
        spec, pars, ins = split_args(e)
        r = spec.ranks
        if r is not None and r.param:
            v = dict(zip(spec.param_names(), pars, strict=True))[r.param]
            v = params.get(v) if is_var(v) else v.items if isinstance(v, Vec) else None
            rank = len(v) if isinstance(v, tuple) else rank
        for pos, x in enumerate(ins):
            fixed = r.inputs[pos] if r is not None and pos < len(r.inputs) else None
            if is_var(x) and x not in ranks:
                if fixed is not None:
                    ranks[x] = fixed
                elif rank is not None and r is not None and r.same:
                    ranks[x] = rank
            walk(x, rank if r is not None and r.same and fixed is None else None)

    walk(parse(text), None)


def _axis_rank(text: str) -> int:
    """The least rank the literal axes in a pattern need (a concat or softmax along axis 2 needs rank 3)."""
    need = 0

    def walk(e: Sexp) -> None:
        nonlocal need
        if isinstance(e, list) and e and isinstance(e[0], str) and e[0] in ops.REGISTRY:
            spec, pars, ins = split_args(e)
            axis = dict(zip(spec.param_names(), pars, strict=True)).get("axis")
            if isinstance(axis, int):
                need = max(need, axis + 1)
            for x in ins:
                walk(x)

    walk(parse(text))
    return need


def shape_assignments(lhs: str, rhs: str, params: Mapping[str, Any], count: int = 3, seed: int = 0,
                      tries: int = 4000, conditions: Sequence[str] = ()) -> list[dict[str, tuple[int, ...]]]:
    """Small random shape assignments where both sides are well-shaped with equal shapes (and the shape
    ``conditions`` hold)."""
    equal = [e for e in map(shape_equality, conditions) if e is not None]
    rng = np.random.default_rng(seed)
    ranks: dict[str, int] = {}
    _ranks(lhs, ranks, params)
    _ranks(rhs, ranks, params)
    variables = sorted(set(_tensor_vars(lhs)) | set(_tensor_vars(rhs)))
    default_rank = max(4 if any(r == 4 for r in ranks.values()) else 2, _axis_rank(lhs), _axis_rank(rhs))
    out: list[dict[str, tuple[int, ...]]] = []
    seen: set[tuple] = set()
    for _ in range(tries):
        shapes: dict[str, Any] = {}
        for v in variables:
            r = ranks.get(v, default_rank)
            dims = [int(rng.integers(1, 3)) for _ in range(r)]
            if r == 4 and int(rng.integers(0, 2)):
                dims[2:] = [int(rng.choice([1, 3]))] * 2
            shapes[v] = tuple(dims)
        try:
            a, b = _shape_of(parse(lhs), shapes, params), _shape_of(parse(rhs), shapes, params)
        except (ops.OpError, IndexError, KeyError, ValueError, TypeError):
            continue
        key = tuple(sorted(shapes.items()))
        if a != b or key in seen or any(shapes[x] != shapes[y] for x, y in equal):
            continue
        seen.add(key)
        out.append(dict(shapes))
        if len(out) >= count:
            break
    return out


@dataclass
class AxiomCheck:
    """The outcome of validating one axiom."""

    name: str
    status: str  # valid | invalid | unknown | untested
    reason: str
    cases: int


def _equal(a: np.ndarray, b: np.ndarray, timeout: float) -> str:
    pending = []
    for x, y in zip(a.flat, b.flat, strict=True):
        d = z3.simplify(z3.ToReal(x) - z3.ToReal(y) if not isinstance(x, z3.ArithRef) else x - y, som=True)
        if not (z3.is_rational_value(d) and d.as_fraction() == 0):
            pending.append(x != y)
    if not pending:
        return "valid"
    s = z3.Solver()
    s.set("timeout", int(timeout * 1000))
    s.add(z3.Or(pending))
    r = s.check()
    return "valid" if r == z3.unsat else ("invalid" if r == z3.sat else "unknown")


def validate_axiom(ax: Axiom, cases: int = 3, timeout: float = 20.0, seed: int = 0) -> AxiomCheck:
    """Symbolically execute both sides on small tensors for every parameter combination."""
    sym = Symbolic()
    n = 0
    for combo in param_combos(ax.params):
        for shapes in shape_assignments(ax.lhs, ax.rhs, combo, cases, seed, conditions=ax.conditions):
            env: dict[str, Any] = dict(combo)
            for v, shp in shapes.items():
                arr = np.empty(shp, dtype=object)
                arr.flat[:] = [z3.Real(f"{v[1:]}_{k}") for k in range(arr.size)] if arr.size else []
                if not shp:
                    arr[()] = z3.Real(f"{v[1:]}_0")
                env[v] = arr
            a, b = sym.eval(ax.terms[0], env), sym.eval(ax.terms[1], env)
            n += 1
            if a.shape != b.shape:
                return AxiomCheck(ax.name, "invalid", f"shapes differ for {shapes} {combo}", n)
            st = _equal(a, b, timeout)
            if st != "valid":
                return AxiomCheck(ax.name, st, f"for shapes {shapes}, parameters {combo}", n)
    if n == 0:
        return AxiomCheck(ax.name, "untested", "no well-shaped small instance found", 0)
    return AxiomCheck(ax.name, "valid", f"{n} symbolic cases", n)


def validate_axioms(axioms: Sequence[Axiom] = AXIOMS, workers: int = 2) -> list[AxiomCheck]:
    """Validate every axiom (one unit per axiom)."""
    if workers <= 1:
        return [validate_axiom(a) for a in axioms]
    with mp.get_context("fork").Pool(workers) as pool:
        return list(pool.map(validate_axiom, axioms))
