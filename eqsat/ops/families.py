"""What families of operators share: the axioms of unary element-wise operators and of those whose output has
their input's shape, and the fingerprint polynomials of operators that are not polynomials."""

from __future__ import annotations

import numpy as np

from eqsat.ops.core import DimAxiom

#: Permutations of rank 2 and 3, and reshape targets of four elements, on which the layout axioms of
#: element-wise operators are validated (they are quantified over every value in Z3).
LAYOUT_PERMS = ((1, 0), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
LAYOUT_TARGETS = ((4,), (2, 2), (1, 4), (2, 1, 2), (1, 2, 2))


def elementwise_axioms(name: str, params: str = "", values: dict[str, tuple] | None = None) -> tuple[tuple, ...]:
    """Axioms of a unary element-wise operator: it commutes with transpose, reshape, concat and split.

    ``params`` is the operator's parameter text in patterns (``":approximate ?g"``) and ``values`` the values its
    variables are validated on; they are quantified in Z3, so the axioms hold for every parameter setting."""
    values = values or {}
    def op(x: str) -> str:
        return f"({name} {params} {x})" if params else f"({name} {x})"
    own = tuple(values)
    return (
        (f"{name}-transpose", f"(transpose :perm ?p {op('?a')})", op("(transpose :perm ?p ?a)"),
         {"params": {"?p": LAYOUT_PERMS, **values}, "quantified": ("?p", *own)}),
        (f"{name}-reshape", f"(reshape :shape ?r {op('?a')})", op("(reshape :shape ?r ?a)"),
         {"params": {"?r": LAYOUT_TARGETS, **values}, "quantified": ("?r", *own)}),
        (f"{name}-concat", op("(concat :axis ?ax ?a ?b)"), f"(concat :axis ?ax {op('?a')} {op('?b')})",
         {"params": {"?ax": (0, 1), **values}, "quantified": own}),
        split_axiom(name, params, values),
    )


#: A split's parameters in axioms: any axis, start and size (quantified in Z3), validated on these values.
SPLIT_PARAMS = {"?ax": (0, 1), "?s": (0, 1), "?n": (1, 2)}


def split_axiom(name: str, params: str = "", values: dict[str, tuple] | None = None,
                binary: bool = False) -> tuple:
    """An element-wise operator of pieces of a split is that piece of the operator over the whole: ``op(x[s:s+n])
    = op(x)[s:s+n]`` (of both operands' pieces for a binary one, of equal shapes). Left to right it is what merges
    the element-wise kernels of a split's pieces into one (TASO's NasRNN)."""
    values = values or {}

    def piece(x: str) -> str:
        return f"(split :axis ?ax :start ?s :size ?n {x})"

    def op(*xs: str) -> str:
        return f"({name} {params} {' '.join(xs)})" if params else f"({name} {' '.join(xs)})"

    lhs = op(piece("?a"), piece("?b")) if binary else op(piece("?a"))
    rhs = piece(op("?a", "?b") if binary else op("?a"))
    extra: dict = {"conditions": ("(= (shape ?a) (shape ?b))",)} if binary else {}
    return (f"{name}-split", lhs, rhs,
            {"params": {**SPLIT_PARAMS, **values}, "quantified": (*SPLIT_PARAMS, *values), **extra})


def same_shape_dim_axioms(name: str, term: str) -> tuple[DimAxiom, ...]:
    """The dimension axiom of an operator whose output has its first input's shape, ``term`` applying it to ``?a``:
    ``dim(term, k) = dim(?a, k)`` for the axes 0 and 1 (the axes split sizes are written on)."""
    return (DimAxiom(f"dim-{name}", term, "?k", "(dim ?a ?k)", {"?k": (0, 1)}),)


# ---------------------------------------------------------------------------------------------------------
# fingerprints of operators that are not polynomials (float and modular share code: object arrays of Python ints
# are exact)


def fingerprint_poly(x: np.ndarray, p: int, a: int, b: int, c: int) -> np.ndarray:
    """``a x^2 + b x + c`` modulo ``p``, entry-wise: the fixed non-linear polynomial that stands, in an operator's
    modular semantics, for a function that is not algebraic (TASO fingerprints relu so); each operator picks
    its own coefficients."""
    x = np.asarray(x, dtype=object)
    return (x * x * a + x * b + c) % p


def relu_mod(x: np.ndarray, p: int) -> np.ndarray:
    """relu's modular semantics (its fingerprint polynomial), shared by the operators that fuse a relu."""
    return fingerprint_poly(x, p, 3, 5, 7)
