"""Rewrite rules over registry operators: the pattern language, its parser and a numpy interpreter.

A pattern is an S-expression ``(op :param VALUE ... INPUT...)``: parameters by name (those left out take the
registry's default), then tensor inputs (``concat`` takes exactly two here), as in
``(conv2d :pads [1 1 1 1] :act 1 ?x ?w ?b)``. The positional form ``(op PARAM... INPUT...)``, every
parameter in the registry's order, is what :func:`parse` returns and :func:`unparse` writes; :func:`pretty`
writes the named form, which the committed corpus uses. Leaves are tensor variables ``?x``; parameter
positions hold integer or float literals (``1e-05``, ``-inf``), tuple literals ``[1 1]``, parameter variables
``?k`` or (on a right-hand side) parameter expressions built from ``(dim ?x AXIS)``, ``(rank ?x)``,
``(+ e e)``, ``(- e e)``, ``(* e e)``, ``(/ e e)`` and ``(% e e)`` (integer division and remainder, of
non-negative sizes and counts: a rule that divides states the condition under which the division is exact,
e.g. ``(= (% ?g 2) 0)``) and ``(compose p q)`` (the permutation of a transpose by ``p`` followed by one by
``q``); in ``(dim ?s AXIS)`` ``?s`` may also be a shape parameter (a reshape's or an expand's ``:shape ?s``), read
at that position. Conditions use the same language:
``(= e e)``, ``(!= e e)``, ``(< e e)``, ``(<= e e)``, ``(= (shape ?a) (shape ?b))`` and a shape parameter
compared with a tuple of expressions, ``(= ?s [(dim ?x 0) 1])``.

A :class:`Rule` has one or two (two-output rule) left-hand sides with as many right-hand sides. Soundness of
shapes is not the rule's job: the e-graph engine only merges a right-hand side after checking it is
well-shaped and has the left-hand side's shape.

The language sits in the IR, below the engine that compiles it (:mod:`eqsat.engine.compile`); the tools that
generate, prove and select rules (:mod:`eqsat.rules`) sit above the engine and use both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from eqsat import ops
from eqsat.ir.graph import Graph, TensorInfo, make_node

Sexp = Any  # str | int | tuple[int, ...] literal | list[Sexp]

#: The arithmetic of parameter expressions (``/`` and ``%`` are integer division and remainder).
ARITHMETIC = ("+", "-", "*", "/", "%")
_ARITHMETIC_FNS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
                   "/": lambda a, b: a // b, "%": lambda a, b: a % b}

_TOKEN = re.compile(r"\(|\)|\[|\]|[^\s()\[\]]+")
_FLOAT = re.compile(r"-?((\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?|inf)")


class RuleError(ValueError):
    """A rule or pattern is malformed."""


@dataclass(frozen=True)
class Vec:
    """A tuple literal ``[a b ...]`` in a pattern (its items may be expressions)."""

    items: tuple[Sexp, ...]


def parse(text: str) -> Sexp:
    """Parse one pattern S-expression."""
    tokens = _TOKEN.findall(text)
    pos = 0

    def expr() -> Sexp:
        nonlocal pos
        if pos >= len(tokens):
            raise RuleError(f"unexpected end of pattern: {text!r}")
        tok = tokens[pos]
        pos += 1
        if tok in "([":
            close = ")" if tok == "(" else "]"
            items = []
            while pos < len(tokens) and tokens[pos] != close:
                items.append(expr())
            if pos >= len(tokens):
                raise RuleError(f"missing {close!r} in {text!r}")
            pos += 1
            return _positional(items, text) if tok == "(" else Vec(tuple(items))
        if tok in ")]":
            raise RuleError(f"unexpected {tok!r} in {text!r}")
        if re.fullmatch(r"-?\d+", tok):
            return int(tok)
        if _FLOAT.fullmatch(tok):  # a float parameter (an epsilon, a clip bound): 1e-05, 0.5, -inf
            return float(tok)
        return tok

    out = expr()
    if pos != len(tokens):
        raise RuleError(f"trailing tokens in pattern {text!r}")
    return out


def _positional(items: list[Sexp], text: str) -> list[Sexp]:
    """An application with named parameters (``:name value``) in the registry's positional order."""
    if not any(isinstance(i, str) and i.startswith(":") for i in items[1:]):
        return items
    if not (isinstance(items[0], str) and items[0] in ops.REGISTRY):
        raise RuleError(f"named parameters on {items[0]!r}, which is not an operator, in {text!r}")
    spec = ops.get(items[0])
    named: dict[str, Sexp] = {}
    inputs: list[Sexp] = []
    k = 1
    while k < len(items):
        it = items[k]
        if isinstance(it, str) and it.startswith(":"):
            if k + 1 >= len(items) or inputs:
                raise RuleError(f"{items[0]}: parameter {it} needs a value, before the inputs, in {text!r}")
            if it[1:] not in spec.param_names() or it[1:] in named:
                raise RuleError(f"{items[0]}: unknown or repeated parameter {it} in {text!r}; its parameters: "
                                f"{', '.join(spec.param_names())}")
            named[it[1:]] = items[k + 1]
            k += 2
        else:
            inputs.append(it)
            k += 1
    params: list[Sexp] = []
    for name in spec.param_names():
        if name in named:
            params.append(named[name])
        elif name in spec.defaults:
            d = spec.defaults[name]
            params.append(Vec(tuple(int(v) for v in d)) if isinstance(d, tuple) else d)
        else:
            raise RuleError(f"{items[0]}: parameter :{name} has no default and is missing in {text!r}")
    return [items[0], *params, *inputs]


def pretty(e: Sexp, omit_defaults: bool = True) -> str:
    """The named form of a pattern (parameters as ``:name value``; those equal to the registry's default left
    out unless ``omit_defaults`` is false); :func:`parse` reads it back to the same positional pattern. The
    corpus file spells every parameter, so a changed default cannot change its rules."""
    if isinstance(e, list) and e and isinstance(e[0], str) and e[0] in ops.REGISTRY:
        spec, params, ins = split_args(e)
        parts = [e[0]]
        for (name, _), v in zip(spec.params, params, strict=True):
            d = spec.defaults.get(name)
            if omit_defaults and d is not None and (v == d or (isinstance(v, Vec) and v.items == d)):
                continue
            parts += [f":{name}", pretty(v, omit_defaults)]
        return "(" + " ".join(parts + [pretty(x, omit_defaults) for x in ins]) + ")"
    if isinstance(e, list):
        return "(" + " ".join(pretty(x, omit_defaults) for x in e) + ")"
    if isinstance(e, Vec):
        return "[" + " ".join(pretty(x, omit_defaults) for x in e.items) + "]"
    return str(e)


def unparse(e: Sexp) -> str:
    """Inverse of :func:`parse`."""
    if isinstance(e, list):
        return "(" + " ".join(unparse(x) for x in e) + ")"
    if isinstance(e, Vec):
        return "[" + " ".join(unparse(x) for x in e.items) + "]"
    return str(e)


def is_var(e: Sexp) -> bool:
    """True for a variable ``?name``."""
    return isinstance(e, str) and e.startswith("?")


def split_args(e: list) -> tuple[ops.OpSpec, list[Sexp], list[Sexp]]:
    """Split an operator application into (spec, parameter args, tensor args), checking arity."""
    spec = ops.get(e[0])
    n_params = len(spec.params)
    n_inputs = 2 if spec.variadic else len(spec.inputs)
    if len(e) - 1 != n_params + n_inputs:
        raise RuleError(f"{e[0]} takes {n_params} parameters and {n_inputs} inputs in patterns: {unparse(e)}")
    params = [float(v) if kind == "float" and isinstance(v, int) else v  # 6 and 6.0 are one clip bound
              for v, (_, kind) in zip(e[1:1 + n_params], spec.params, strict=True)]
    return spec, params, e[1 + n_params:]


def tensor_vars(e: Sexp) -> set[str]:
    """Tensor variables of a pattern."""
    if is_var(e):
        return {e}
    if isinstance(e, list):
        _, _, ins = split_args(e)
        return set().union(*(tensor_vars(x) for x in ins)) if ins else set()
    return set()


def param_vars(e: Sexp) -> set[str]:
    """Parameter variables bound in parameter positions of a pattern."""
    out: set[str] = set()
    if isinstance(e, list):
        _, params, ins = split_args(e)
        for p in params:
            out |= _expr_vars(p)
        for x in ins:
            out |= param_vars(x)
    return out


def _expr_vars(e: Sexp) -> set[str]:
    if is_var(e):
        return {e}
    if isinstance(e, Vec):
        return set().union(*(_expr_vars(x) for x in e.items)) if e.items else set()
    if isinstance(e, list) and e and e[0] in (*ARITHMETIC, "compose"):
        return set().union(*(_expr_vars(x) for x in e[1:]))
    return set()


def has_expressions(e: Sexp) -> bool:
    """True when a parameter position holds a computed expression (so it cannot be a match pattern)."""
    if isinstance(e, list):
        _, params, ins = split_args(e)
        return any(isinstance(p, list) or (isinstance(p, Vec) and any(isinstance(i, list) for i in p.items))
                   for p in params) or any(has_expressions(x) for x in ins)
    return False


@dataclass(frozen=True)
class Rule:
    """A rewrite ``lhs => rhs`` (or a two-output rule with two of each)."""

    name: str
    lhs: tuple[str, ...]
    rhs: tuple[str, ...]
    conditions: tuple[str, ...] = ()
    bidirectional: bool = False
    origin: str = "starter"
    status: str = "proved"
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.lhs) != len(self.rhs) or not 1 <= len(self.lhs) <= 2:
            raise RuleError(f"{self.name}: needs one or two left and right sides of equal count")
        lv = set().union(*(tensor_vars(parse(s)) for s in self.lhs))
        rv = set().union(*(tensor_vars(parse(s)) for s in self.rhs))
        if not rv <= lv:
            raise RuleError(f"{self.name}: right-hand side uses unbound variables {sorted(rv - lv)}")
        if any(has_expressions(parse(s)) for s in self.lhs):
            raise RuleError(f"{self.name}: a left-hand side may not compute parameters")

    @property
    def multi(self) -> bool:
        """True for a two-output rule."""
        return len(self.lhs) == 2

    def directions(self) -> list[Rule]:
        """The one-way rules this rule stands for (the reverse only where it is a valid pattern)."""
        return list(self._directions)

    @cached_property
    def _directions(self) -> tuple[Rule, ...]:
        # made once per rule: each direction re-parses and checks its patterns, and compiling a program asks for
        # them several times (a third of the compile time before this was cached)
        if not self.bidirectional:
            return (self,)
        out = [Rule(self.name, self.lhs, self.rhs, self.conditions, False, self.origin, self.status, self.meta)]
        rev = Rule.__new__(Rule)
        try:
            rev.__init__(self.name + "-rev", self.rhs, self.lhs, self.conditions, False, self.origin,
                         self.status, self.meta)
        except RuleError:
            return tuple(out)
        out.append(rev)
        return tuple(out)


# ---------------------------------------------------------------------------------------------------------
# numpy interpretation (for testing rules on random tensors)


def eval_param(e: Sexp, env: Mapping[str, Any]) -> Any:
    """Evaluate a parameter expression given bound tensors/parameters."""
    if is_var(e):
        v = env[e]
        return tuple(int(i) for i in v) if isinstance(v, tuple) else v
    if isinstance(e, int | float):
        return e
    if isinstance(e, Vec):
        return tuple(int(eval_param(i, env)) for i in e.items)
    if isinstance(e, str):  # a name (a cast's precision)
        return e
    if isinstance(e, list):
        head = e[0]
        if head == "dim":  # of a tensor, or of a shape parameter (a tuple)
            v = env[e[1]]
            return int((v if isinstance(v, tuple) else np.shape(v))[int(eval_param(e[2], env))])
        if head == "rank":
            return int(np.ndim(env[e[1]]))
        if head == "shape":
            return tuple(np.shape(env[e[1]]))
        a, b = (eval_param(x, env) for x in e[1:3])
        if head == "compose":
            return compose_perms(a, b)
        if head in ("/", "%") and b == 0:
            raise RuleError(f"division by zero in {unparse(e)}")
        return _ARITHMETIC_FNS[head](a, b)
    raise RuleError(f"cannot evaluate parameter {unparse(e)}")


def compose_perms(p: tuple[int, ...], q: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation of ``transpose(q, transpose(p, x))`` as one transpose."""
    if len(p) != len(q):
        raise RuleError(f"cannot compose permutations of different ranks: {p} and {q}")
    return tuple(int(p[i]) for i in q)


def evaluate(e: Sexp, env: Mapping[str, Any], modulus: int | None = None) -> np.ndarray:
    """Evaluate a pattern with the registry's semantics (float, or exact modulo ``modulus``)."""
    if is_var(e):
        return env[e]
    if not isinstance(e, list):
        raise RuleError(f"not a tensor expression: {unparse(e)}")
    spec, params, ins = split_args(e)
    args = [evaluate(x, env, modulus) for x in ins]
    # a parameter may refer to the shape of a sub-expression bound only in the env
    p = spec.normalize({name: eval_param(v, env) for (name, _), v in zip(spec.params, params, strict=True)})
    spec.shape(p, [np.shape(a) for a in args])  # raises OpError on ill-shaped application
    return spec.evaluate(p, args) if modulus is None else spec.evaluate_mod(p, args, modulus)


def shape_equality(c: str | Sexp) -> tuple[str, str] | None:
    """The two tensor variables of a condition ``(= (shape ?a) (shape ?b))``, or None for another condition."""
    e = parse(c) if isinstance(c, str) else c
    if (isinstance(e, list) and len(e) == 3 and e[0] == "=" and all(
            isinstance(x, list) and len(x) == 2 and x[0] == "shape" and is_var(x[1]) for x in e[1:])):
        return e[1][1], e[2][1]
    return None


def check_condition(c: str, env: Mapping[str, Any]) -> bool:
    """Evaluate a rule condition under bound values."""
    e = parse(c)
    if e[0] == "!=" and is_var(e[1]) and isinstance(env.get(e[1]), np.ndarray):
        return env[e[1]] is not env[e[2]]  # distinct tensors (e-classes) in the e-graph
    op, a, b = e[0], eval_param(e[1], env), eval_param(e[2], env)
    return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b}[op]


def terms_graph(outputs: Sequence[str], shapes: Mapping[str, tuple[int, ...]]) -> Any:
    """An IR graph computing rule terms (``outputs``, s-expressions) over their variables as graph inputs of
    the given ``shapes`` (``{"?x": (4, 8)}``); a repeated subterm is computed once. For tests and benchmarks
    that saturate rule sides as graphs."""

    nodes: list[Any] = []
    names: dict[str, str] = {}
    env: dict[str, Any] = {v: np.zeros(s) for v, s in shapes.items()}

    def build(e: Sexp) -> str:
        if is_var(e):
            return e[1:]
        key = repr(e)
        if key not in names:
            spec, params, ins = split_args(e)
            args = [build(x) for x in ins]
            p = {n: eval_param(v, env) for (n, _), v in zip(spec.params, params, strict=True)}
            names[key] = f"t{len(nodes)}"
            nodes.append(make_node(spec.name, p, args, names[key]))
        return names[key]

    outs = [build(parse(o)) for o in outputs]
    used = {i for n in nodes for i in n.inputs} | set(outs)
    inputs = tuple(TensorInfo(v[1:], tuple(s)) for v, s in shapes.items() if v[1:] in used)
    return Graph(inputs, {}, tuple(nodes), tuple(outs)).validate()
