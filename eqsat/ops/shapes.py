"""Shape rules as data: what an operator's output shape is, in a form both Python and the e-graph engine read.

An operator declares ``shape_rules``: a tuple of :class:`ShapeRule` (conditions on its inputs' shapes and its
parameters, and the resulting shape). Each rule is an expression tree built from the helpers below; the
e-graph engine (:mod:`eqsat.engine.compile`) renders the trees as egglog shape rules, and :func:`evaluate` reads them
on shapes, which is how the tests hold the trees to the operator's Python shape function. Several rules may
apply to one operator (one per rank, for instance); they must agree wherever more than one holds.

:func:`evaluate` also reads shapes and parameters holding symbolic sizes (:class:`eqsat.ops.dims.Sym`): a
condition holds only where it holds for every value of the symbols (``=`` is identity of polynomials, an
ordering is decided for all values), and arithmetic is exact, so a shape it gives is the concrete one at any
values; where that would depend on the values it raises :class:`~eqsat.ops.dims.UndecidedDim`.

Expressions: :func:`shape` (an input's shape), :func:`param` (a parameter: an int, or a tuple read like a
shape), :func:`rank`, :func:`dim`, :func:`vec`, :func:`set_dim`, :func:`drop_last`, integer literals and
``+ - * // %`` on them, :func:`maximum`. Conditions: :func:`eq`, :func:`ge`, :func:`gt`, :func:`lt`, :func:`le`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any, Union

from eqsat.ops.dims import Dim, Sym, UndecidedDim, sym_max
from eqsat.ops.dims import dim as _as_dim  # dim() below builds a rule expression

Operand = Union["Expr", int]


@dataclass(frozen=True)
class Expr:
    """One node of a shape expression: ``head`` names the operation, ``args`` its operands."""

    head: str
    args: tuple[Any, ...]

    def __add__(self, other: Operand) -> Expr:
        return Expr("+", (self, other))

    def __radd__(self, other: Operand) -> Expr:
        return Expr("+", (other, self))

    def __sub__(self, other: Operand) -> Expr:
        return Expr("-", (self, other))

    def __rsub__(self, other: Operand) -> Expr:
        return Expr("-", (other, self))

    def __mul__(self, other: Operand) -> Expr:
        return Expr("*", (self, other))

    def __rmul__(self, other: Operand) -> Expr:
        return Expr("*", (other, self))

    def __floordiv__(self, other: Operand) -> Expr:
        return Expr("/", (self, other))  # operands are non-negative where rules divide: floor = truncation

    def __mod__(self, other: Operand) -> Expr:
        return Expr("%", (self, other))


@dataclass(frozen=True)
class ShapeRule:
    """Where every condition in ``when`` holds, the output shape is ``result``."""

    when: tuple[Expr, ...]
    result: Expr


def rule(result: Expr, *when: Expr) -> ShapeRule:
    """A shape rule: ``result`` under the conditions ``when``."""
    return ShapeRule(tuple(when), result)


def shape(name: str) -> Expr:
    """The shape of the input called ``name``."""
    return Expr("shape", (name,))


def param(name: str) -> Expr:
    """The parameter called ``name`` (an int, or a tuple of ints read like a shape)."""
    return Expr("param", (name,))


def rank(s: Expr) -> Expr:
    """The length of a shape (or of a tuple parameter)."""
    return Expr("rank", (s,))


def dim(s: Expr, i: Operand) -> Expr:
    """Entry ``i`` of a shape or tuple parameter (``i`` may itself be an expression)."""
    return Expr("dim", (s, i))


def vec(*items: Operand) -> Expr:
    """A shape listing ``items``."""
    return Expr("vec", tuple(items))


def set_dim(s: Expr, i: Operand, v: Operand) -> Expr:
    """``s`` with entry ``i`` replaced by ``v``."""
    return Expr("set", (s, i, v))


def drop_last(s: Expr, n: int = 1) -> Expr:
    """``s`` without its last ``n`` entries."""
    for _ in range(n):
        s = Expr("pop", (s,))
    return s


def maximum(a: Operand, b: Operand) -> Expr:
    """The larger of two integers."""
    return Expr("max", (a, b))


def eq(a: Operand, b: Operand) -> Expr:
    """Condition ``a == b`` (integers or whole shapes)."""
    return Expr("=", (a, b))


def ge(a: Operand, b: Operand) -> Expr:
    """Condition ``a >= b``."""
    return Expr(">=", (a, b))


def gt(a: Operand, b: Operand) -> Expr:
    """Condition ``a > b``."""
    return Expr(">", (a, b))


def lt(a: Operand, b: Operand) -> Expr:
    """Condition ``a < b``."""
    return Expr("<", (a, b))


def le(a: Operand, b: Operand) -> Expr:
    """Condition ``a <= b``."""
    return Expr("<=", (a, b))


def same_as(name: str) -> tuple[ShapeRule, ...]:
    """The rules of an operator whose output has the shape of its input ``name``."""
    return (rule(shape(name)),)


# ---------------------------------------------------------------------------------------------------------
# reading rules on shapes: ints, and symbolic sizes (eqsat.ops.dims.Sym)


def max_dim(a: Dim, b: Dim) -> Dim:
    """The larger of two sizes, decided for every value of the symbols in whichever order they come
    (:class:`~eqsat.ops.dims.UndecidedDim` where it depends on them); ``max`` on ints."""
    if a == b:
        return a
    try:
        return sym_max(a, b)
    except UndecidedDim:
        # sym_max decides a >= b only: max(1, batch) is batch although 1 >= batch holds at batch = 1 alone
        return sym_max(b, a)


def _trunc_div(a: Dim, b: Dim) -> Dim:
    """``a / b`` truncated, as egglog's i64 division: on a symbolic operand only an exact quotient (where
    truncation and floor agree, whatever the signs), else :class:`~eqsat.ops.dims.UndecidedDim`."""
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return int(a / b)
    if isinstance(b, int) and b < 0:  # Sym divides by positive ints only
        return -_trunc_div(a, -b)
    return a // b


def _trunc_mod(a: Dim, b: Dim) -> Dim:
    """The remainder that goes with :func:`_trunc_div` (the dividend's sign)."""
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return a - b * int(a / b)
    if isinstance(b, int) and b < 0:  # the truncated remainder does not depend on the divisor's sign
        b = -b
    r = a % b  # Sym's floor remainder, where it is the same for every value
    if r == 0:
        return 0
    # floor and truncation differ on a negative dividend: decided for every value, or UndecidedDim
    return r if a >= 0 else r - b


_COMPARE = {"=": lambda a, b: a == b, ">=": lambda a, b: a >= b, ">": lambda a, b: a > b,
            "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}


class _Undefined(Exception):
    """A rule read outside its domain (an index past a shape's end): the rule does not apply."""


def _value(e: Operand, shapes: Mapping[str, Sequence[Dim]], params: Mapping[str, Any]) -> Any:
    if isinstance(e, int):
        return e
    h, a = e.head, e.args
    if h == "shape":
        return tuple(shapes[a[0]])
    if h == "param":
        v = params[a[0]]
        return tuple(v) if isinstance(v, (tuple, list)) else _as_dim(v)  # a size parameter may be symbolic
    vals = [_value(x, shapes, params) for x in a]
    if h in ("dim", "set"):
        s, i = vals[0], vals[1]
        if not 0 <= i < len(s):
            raise _Undefined
        return s[i] if h == "dim" else s[:i] + (vals[2],) + s[i + 1:]
    if h == "pop":
        if not vals[0]:
            raise _Undefined
        return vals[0][:-1]
    if h == "rank":
        return len(vals[0])
    if h == "vec":
        return tuple(vals)
    if h == "max":
        return reduce(max_dim, vals)
    if h in ("+", "-", "*"):
        x, y = vals
        return x + y if h == "+" else x - y if h == "-" else x * y
    if h == "/":
        if vals[1] == 0:
            raise _Undefined
        return _trunc_div(vals[0], vals[1])  # egglog's i64 division truncates
    if h == "%":
        if vals[1] == 0:
            raise _Undefined
        return _trunc_mod(vals[0], vals[1])  # the remainder that goes with truncation
    if h in _COMPARE:
        return _COMPARE[h](*vals)
    raise ValueError(f"unknown shape-expression head {h!r}")


def evaluate(rules: Sequence[ShapeRule], shapes: Mapping[str, Sequence[Dim]],
             params: Mapping[str, Any]) -> tuple[Dim, ...] | None:
    """The output shape the rules give for input ``shapes`` and ``params`` (``None``: no rule applies). Raises
    ``ValueError`` if two applicable rules disagree, and :class:`~eqsat.ops.dims.UndecidedDim` where a symbolic
    size leaves a condition or a size depending on the symbols' values."""
    found: tuple[Dim, ...] | None = None
    for r in rules:
        try:
            if not all(_value(c, shapes, params) for c in r.when):
                continue
            out = _value(r.result, shapes, params)
        except _Undefined:
            continue
        if found is not None and tuple(out) != found:
            raise ValueError(f"shape rules disagree: {found} vs {tuple(out)}")
        found = tuple(out)
    return found
