"""Symbolic dimensions: a size written as a polynomial in named symbols (``batch``, ``seq``), each a positive
integer the model is not specialised to.

A :class:`Sym` supports what shape functions do with sizes: ``+ - *``, floor division and remainder by an
integer where the result is a polynomial again, ``max`` and ordering comparisons. Equality (``==``) is
identity of polynomials: true only where the sizes are equal for every value of the symbols, which is what a
shape guard may rely on. An ordering comparison answers only where the answer is the same for every value of
the symbols (each at least 1), and raises :class:`UndecidedDim` otherwise, so a guard that holds only for some
batch sizes does not pass. :func:`dim` turns a constant polynomial back into an ``int``: a shape holds ints and
:class:`Sym` entries, never a constant ``Sym``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Union

from eqsat.ops.failures import OpError

Monomial = tuple[tuple[str, int], ...]  # ((symbol, power), ...) sorted by symbol; () is the constant term
Dim = Union[int, "Sym"]


class UndecidedDim(OpError):
    """A comparison of symbolic sizes whose answer depends on the symbols' values."""


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    powers = dict(a)
    for s, k in b:
        powers[s] = powers.get(s, 0) + k
    return tuple(sorted(powers.items()))


class Sym:
    """An integer polynomial in named symbols (immutable, hashable)."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: Mapping[Monomial, int]) -> None:
        self.terms: tuple[tuple[Monomial, int], ...] = tuple(sorted((m, c) for m, c in terms.items() if c))
        self._hash = hash(self.terms)

    @staticmethod
    def var(name: str) -> Sym:
        """The symbol ``name``."""
        return Sym({((name, 1),): 1})

    # -- structure ------------------------------------------------------------------------------------
    @property
    def symbols(self) -> frozenset[str]:
        """The symbols this polynomial mentions."""
        return frozenset(s for m, _ in self.terms for s, _ in m)

    def constant(self) -> int | None:
        """The value if no symbol occurs, else ``None``."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    def subs(self, values: Mapping[str, Dim]) -> Dim:
        """The polynomial with symbols replaced (by ints, or by other polynomials); symbols not in ``values``
        stay."""
        total: Dim = 0
        for mono, coef in self.terms:
            term: Dim = coef
            for s, k in mono:
                v = values.get(s, Sym.var(s))
                for _ in range(k):
                    term = term * v
            total = total + term
        return dim(total)

    # -- arithmetic -----------------------------------------------------------------------------------
    def __add__(self, other: Dim) -> Dim:
        o = _sym(other)
        if o is None:
            return NotImplemented
        terms = dict(self.terms)
        for m, c in o.terms:
            terms[m] = terms.get(m, 0) + c
        return dim(Sym(terms))

    __radd__ = __add__

    def __neg__(self) -> Sym:
        return Sym({m: -c for m, c in self.terms})

    def __sub__(self, other: Dim) -> Dim:
        o = _sym(other)
        return NotImplemented if o is None else self + (-o)

    def __rsub__(self, other: Dim) -> Dim:
        o = _sym(other)
        return NotImplemented if o is None else o + (-self)

    def __mul__(self, other: Dim) -> Dim:
        o = _sym(other)
        if o is None:
            return NotImplemented
        terms: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in o.terms:
                m = _mono_mul(m1, m2)
                terms[m] = terms.get(m, 0) + c1 * c2
        return dim(Sym(terms))

    __rmul__ = __mul__

    def __floordiv__(self, other: Dim) -> Dim:
        if isinstance(other, Sym):
            q = _exact_quotient(self, other)
            if q is None:
                raise UndecidedDim(f"{self} // {other} is not a polynomial in the symbols")
            return q
        if not isinstance(other, int) or other <= 0:
            return NotImplemented
        if all(c % other == 0 for _, c in self.terms):
            return dim(Sym({m: c // other for m, c in self.terms}))
        raise UndecidedDim(f"({self}) // {other} depends on the symbols' values (not every coefficient divides)")

    def __rfloordiv__(self, other: Dim) -> Dim:
        raise UndecidedDim(f"{other} // ({self}) depends on the symbols' values")

    def __mod__(self, other: Dim) -> Dim:
        if isinstance(other, Sym):
            if _exact_quotient(self, other) is not None:
                return 0
            raise UndecidedDim(f"({self}) % ({other}) depends on the symbols' values")
        if not isinstance(other, int) or other <= 0:
            return NotImplemented
        if all(c % other == 0 for m, c in self.terms if m):
            return dict(self.terms).get((), 0) % other
        raise UndecidedDim(f"({self}) % {other} depends on the symbols' values")

    def __rmod__(self, other: Dim) -> Dim:
        raise UndecidedDim(f"{other} % ({self}) depends on the symbols' values")

    # -- comparisons ----------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        o = _sym(other)  # type: ignore[arg-type]
        return o is not None and o.terms == self.terms

    def __hash__(self) -> int:
        return self._hash

    def __ge__(self, other: Dim) -> bool:
        return _decide_nonneg(self - other, f"{self} >= {other}")

    def __gt__(self, other: Dim) -> bool:
        return _decide_nonneg(self - other - 1, f"{self} > {other}")

    def __le__(self, other: Dim) -> bool:
        return _decide_nonneg(_sym(other) - self, f"{self} <= {other}")  # type: ignore[operator]

    def __lt__(self, other: Dim) -> bool:
        return _decide_nonneg(_sym(other) - self - 1, f"{self} < {other}")  # type: ignore[operator]

    def __bool__(self) -> bool:
        # non-zero for every value of the symbols (seq - 1 is 0 at seq = 1: undecided)
        if _nonneg_everywhere(self - 1) or _nonneg_everywhere(-self - 1):  # type: ignore[operator]
            return True
        raise UndecidedDim(f"whether {self} is 0 depends on the symbols' values")

    def __int__(self) -> int:
        raise UndecidedDim(f"{self} is a symbolic size, not an integer")

    def __index__(self) -> int:
        raise UndecidedDim(f"{self} is a symbolic size, not an integer")

    # -- text -----------------------------------------------------------------------------------------
    def __str__(self) -> str:
        parts = []
        for mono, coef in sorted(self.terms, key=lambda t: (-sum(k for _, k in t[0]), t[0])):
            factors = [s for s, k in mono for _ in range(k)]
            if not factors:
                parts.append(str(coef))
                continue
            head = "" if coef == 1 else "-" if coef == -1 else f"{coef}*"
            parts.append(head + "*".join(factors))
        text = "+".join(parts).replace("+-", "-")
        return text

    def __repr__(self) -> str:
        return f"Sym({str(self)!r})"


def _sym(x: Dim) -> Sym | None:
    if isinstance(x, Sym):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return Sym({(): x})
    return None


def dim(x: Dim) -> Dim:
    """``x`` as a shape entry: an ``int`` where it does not depend on the symbols, else the :class:`Sym`."""
    if isinstance(x, Sym):
        c = x.constant()
        return x if c is None else c
    return int(x)


def symbol_of(x: Dim) -> str | None:
    """The symbol a size is, alone (``batch``, not ``2 * batch`` or ``past + sequence``); None for any other."""
    if isinstance(x, Sym) and len(x.symbols) == 1:
        (s,) = x.symbols
        return s if x == Sym.var(s) else None
    return None




def concrete(shape: Iterable[Dim], values: Mapping[str, int]) -> tuple[int, ...]:
    """``shape`` at the given symbol values (every symbol it mentions must have one)."""
    out = []
    for d in shape:
        v = d.subs(values) if isinstance(d, Sym) else d
        if isinstance(v, Sym):
            raise KeyError(f"no value for the symbols {sorted(v.symbols)} of {d}")
        out.append(int(v))
    return tuple(out)


def _decide_nonneg(p: Dim, what: str) -> bool:
    """Whether ``p >= 0`` for every value (>= 1) of its symbols: True or False where that is the same for all
    of them, else :class:`UndecidedDim`."""
    if isinstance(p, int):
        return p >= 0
    if _nonneg_everywhere(p):
        return True
    neg = -p - 1
    if isinstance(neg, int) and neg >= 0 or isinstance(neg, Sym) and _nonneg_everywhere(neg):
        return False
    raise UndecidedDim(f"{what} holds for some values of {', '.join(sorted(p.symbols))} but not all")


def _nonneg_everywhere(p: Sym) -> bool:
    # with every symbol s = 1 + t (t >= 0), non-negative coefficients prove p >= 0 (sufficient, not necessary)
    shifted = p.subs({s: Sym.var(s) + 1 for s in p.symbols})
    return isinstance(shifted, int) and shifted >= 0 or \
        isinstance(shifted, Sym) and all(c >= 0 for _, c in shifted.terms)


def _exact_quotient(a: Sym, b: Sym) -> Dim | None:
    """``a / b`` where ``b`` is a single term dividing every term of ``a``, else ``None``."""
    if len(b.terms) != 1:
        return None
    (bm, bc), = b.terms
    out: dict[Monomial, int] = {}
    bpow = dict(bm)
    for m, c in a.terms:
        p = dict(m)
        if c % bc or any(p.get(s, 0) < k for s, k in bpow.items()):
            return None
        rest = tuple(sorted((s, p[s] - bpow.get(s, 0)) for s in p if p[s] - bpow.get(s, 0)))
        out[rest] = c // bc
    return dim(Sym(out))


def sym_max(a: Dim, b: Dim) -> Dim:
    """The larger of two sizes (decided for every value of the symbols, else :class:`UndecidedDim`)."""
    try:
        return a if a >= b else b
    except UndecidedDim:  # max(1, batch): "1 >= batch" is undecided, "batch >= 1" is not
        return b if b >= a else a
