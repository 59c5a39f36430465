"""Fingerprints of enumerated tensors: each one evaluated exactly modulo a prime with the registry's semantics.

A :class:`Tensor` is a tensor of a graph the generator builds: its pattern, its shape (concrete and over the
variables' dimensions) and its value modulo ``ops.PRIME``, hashed. Two graphs whose outputs hash alike are
candidates for a rule. :class:`Evaluator` applies registry operators, memoising tensors by pattern text so
that a subterm shared by many graphs is computed once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eqsat import ops
from eqsat.ir.rule import Sexp, Vec, unparse
from eqsat.ops import shapes as S
from eqsat.ops.core import SymDim, SymShape

PRIME = ops.PRIME


@dataclass(eq=False)
class Tensor:
    """A tensor of a graph under construction: its pattern, concrete (set A) shape, symbolic shape, value.

    It is what ``eqsat.ops.core.GenTensor`` describes to the operators' generator forms."""

    pat: Sexp
    key: str
    shape: tuple[int, ...]
    sym: SymShape
    val: np.ndarray
    h: int
    is_var: bool = False
    bias: Tensor | None = None  # kernels only: the bias that travels with them
    bounds: dict[int, SymDim] = field(default_factory=dict)  # split boundaries (TASO's SplitInfo)


def value_hash(val: np.ndarray) -> int:
    """The hash of a value modulo the prime (its shape and entries)."""
    return hash((val.shape, tuple(int(v) for v in val.flat)))


def _exact(val: np.ndarray) -> np.ndarray:
    """Make every element a Python int (numpy helpers such as np.pad insert fixed-width zeros)."""
    out = np.empty(val.shape, dtype=object)
    out.flat[:] = [int(v) for v in val.flat] if val.size else []
    return out


def pattern_literal(v: Any) -> Sexp:
    """A parameter value as the rules write it: a tuple as a ``[...]`` literal, anything else as it is."""
    return Vec(tuple(v)) if isinstance(v, tuple) else v


class Evaluator:
    """Builds tensors from operator applications, memoising them by pattern text."""

    def __init__(self, seed: int = 0) -> None:
        self.memo: dict[str, Tensor] = {}
        self.rng = np.random.default_rng(seed)

    def variable(self, name: str, shape: tuple[int, ...]) -> Tensor:
        """A fresh input variable with random residues."""
        val = np.empty(shape, dtype=object)
        flat = [int(v) for v in self.rng.integers(0, PRIME, size=max(1, int(np.prod(shape))))]
        if shape:
            val.flat[:] = flat[:val.size]
        else:
            val[()] = flat[0]
        sym = tuple(["dim", name, k] for k in range(len(shape)))
        return Tensor(name, name, shape, sym, val, value_hash(val), is_var=True)

    def apply(self, op: str, params: dict[str, Any], ins: Sequence[Tensor],
              pattern: dict[str, Any] | None = None) -> Tensor | None:
        """Apply a registry operator with ``params`` (the values; ``pattern``: those the rule writes otherwise,
        as dimension expressions or parameter variables); None where it is ill-shaped."""
        spec = ops.get(op)
        written = {**spec.defaults, **params, **(pattern or {})}
        pat = [op, *[pattern_literal(written[n]) for n in spec.param_names()], *[t.pat for t in ins]]
        key = unparse(pat)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        try:
            p = spec.normalize(params)
            shape = spec.shape(p, [t.shape for t in ins])
        except ops.OpError:
            return None
        val = _exact(spec.evaluate_mod(p, [t.val for t in ins], PRIME))
        sym = symbolic_shape(spec, written, ins)
        t = Tensor(pat, key, shape, tuple(shape) if sym is None else sym, val, value_hash(val))
        self.memo[key] = t
        return t


def symbolic_shape(spec: ops.OpSpec, written: dict[str, Any], ins: Sequence[Tensor]) -> SymShape | None:
    """The output's shape over the variables' dimensions, as the operator declares it (``OpSpec.sym_shape``);
    undeclared, its first input's where its shape rules say it has that shape. None: not expressible."""
    if spec.sym_shape is not None:
        return spec.sym_shape(written, ins)
    if spec.inputs and spec.shape_rules == S.same_as(spec.inputs[0]):
        return ins[0].sym
    return None
