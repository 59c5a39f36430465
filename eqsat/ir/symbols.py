"""Symbolic dimensions of an IR graph: a graph imported from a model with dynamic axes (``batch``, ``seq``) is
built at a *generic point*, each symbol standing at a distinct prime no static size of the model is a
multiple of, and this module reads its sizes back as polynomials in the symbols.

Why a generic point: the engine, the rules and the extraction then work on integers as they do for a static
model, and a shape guard that holds at the generic point holds for every value of the symbols (two different
polynomials of small degree agree at such a point only by a coincidence the choice of primes rules out for the
model's own sizes). A guard that holds only for some values (``batch == 1``, ``seq`` even) fails there, so
the rewrite does not fire. What the generic values stand for is read back when it matters: the cost of an
operator at the representative sizes the user chose (``--dim batch=8``), the output's symbolic signature, and
the computed sizes (reshape targets) an exported model must compute from its inputs' shapes at run time.

``graph.meta["symbols"]`` maps each symbol to its generic value; a graph without symbols is static.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from eqsat.errors import DynamicShapeError
from eqsat.ops import CostKey, OpError
from eqsat.ops.dims import Dim, Sym, UndecidedDim, concrete, dim

#: graph.meta key of a graph's symbols (name -> generic value)
META_KEY = "symbols"
#: graph.meta key of the sizes its symbols are checked and timed at (name -> size; 1 where absent), and costed at
#: unless the graph has price points
VALUES_KEY = "symbol_values"
#: graph.meta key of the points its costs are priced at, where the user gave no size for some symbol: (label,
#: name -> size) pairs (:mod:`eqsat.ir.price_points`); a node costs the sum of its costs at each
POINTS_KEY = "price_points"
#: graph.meta key of the integer graph inputs whose value is a symbol's size (a Loop's trip count: its symbol
#: counts the iterations), name -> symbol: a run feeds them that size
SIZE_INPUTS_KEY = "size_inputs"
#: generic values are primes from here up (above any realistic kernel, stride or head count)
_FIRST_PRIME = 10_007
#: a value within this of a small multiple of a generic value reads as that multiple plus the offset
_MAX_OFFSET = 8
_MAX_MULTIPLE = 4


def _is_prime(n: int) -> bool:
    if n < 2 or n % 2 == 0:
        return n == 2
    k = 3
    while k * k <= n:
        if n % k == 0:
            return False
        k += 2
    return True


@dataclass(frozen=True)
class Symbols:
    """The symbols of a graph and the generic value each stands at."""

    generic: Mapping[str, int]

    @staticmethod
    def choose(names: Sequence[str], static: Iterable[int]) -> Symbols:
        """Generic values for ``names``: distinct primes none of the model's ``static`` sizes is a multiple of
        or lies near a small multiple of (so a size reads back as one polynomial only)."""
        static = {abs(int(v)) for v in static if v}
        out: dict[str, int] = {}
        p = _FIRST_PRIME
        for name in names:
            while not _is_prime(p) or any(_near_multiple(v, p) for v in static) or any(
                    abs(c * p - d * q) <= 2 * _MAX_OFFSET for q in out.values()
                    for c in range(1, _MAX_MULTIPLE + 1) for d in range(1, _MAX_MULTIPLE + 1)) \
                    or not _sums_apart({**out, name: p}, static):
                p += 2
            out[name] = p
            p += 1000  # apart, so that a size near one symbol's multiple is near no other's
        return Symbols(out)

    def __bool__(self) -> bool:
        return bool(self.generic)

    def decode(self, v: int, known: Mapping[int, Dim] | None = None) -> Dim:
        """The polynomial a size ``v`` of the graph stands for: one of ``known`` (generic value -> size), a
        monomial ``c * s1^k1 * ...`` (``c`` not a multiple of a generic value), or a small multiple of one
        symbol plus a small offset; else ``v`` itself (a static size)."""
        v = int(v)
        if known and v in known:
            return known[v]
        if v == 0:
            return 0
        rest, terms = abs(v), 1
        for s, p in self.generic.items():
            while rest % p == 0:
                rest //= p
                terms = terms * Sym.var(s)
        if terms != 1:
            return dim(terms * (rest if v > 0 else -rest))
        for s, p in self.generic.items():
            q, r = divmod(v, p)
            for c, off in ((q, r), (q + 1, r - p)):
                if 1 <= c <= _MAX_MULTIPLE and 0 < abs(off) <= _MAX_OFFSET:
                    return dim(c * Sym.var(s) + off)
        sums = _sums(self.generic)
        for off in sorted(range(-_MAX_OFFSET, _MAX_OFFSET + 1), key=abs):  # a sum: a cache's past + new length
            coeffs = sums.get(v - off)
            if coeffs:
                return dim(sum((c * Sym.var(s) for s, c in coeffs), start=Sym({})) + off)
        return v

    def decode_shape(self, shape: Sequence[int], known: Mapping[int, Dim] | None = None) -> tuple[Dim, ...]:
        """Every size of ``shape`` decoded (:meth:`decode`)."""
        return tuple(self.decode(d, known) for d in shape)

    def at(self, shape: Sequence[int], values: Mapping[str, int]) -> tuple[int, ...]:
        """A shape of the graph at the symbol values ``values``."""
        return concrete(self.decode_shape(shape), values)

    def value_at(self, v: int, values: Mapping[str, int]) -> int:
        """One size of the graph at ``values``."""
        d = self.decode(v)
        return d if isinstance(d, int) else concrete((d,), values)[0]

    def key_at(self, key: CostKey, values: Mapping[str, int]) -> CostKey:
        """A cost key of the graph with every size at ``values`` (what the operator costs at those sizes)."""
        def param(v: object) -> object:
            if isinstance(v, int) and not isinstance(v, bool):
                return self.value_at(v, values)
            if isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                return tuple(self.value_at(x, values) for x in v)
            return v
        return CostKey(key.op, tuple((k, param(v)) for k, v in key.params),
                       tuple(self.at(s, values) for s in key.input_shapes), self.at(key.output_shape, values),
                       key.dtype, key.layout, key.weights, key.after)


#: a sum of several symbols reads back with each coefficient up to this (``past + sequence``, ``2 * past + 1``),
#: of at most _MAX_SUM_TERMS symbols
_MAX_SUM_COEFF = 2
_MAX_SUM_TERMS = 3
#: sums are read back only in graphs of at most this many symbols (batch, sequence, past and one more): with more,
#: the sums crowd the range and generic values that keep them apart would take long to find
_MAX_SUM_SYMBOLS = 4


def _sums(generic: Mapping[str, int]) -> dict[int, tuple[tuple[str, int], ...] | None]:
    """Every sum of two to _MAX_SUM_TERMS symbols, each with a coefficient 1 .. _MAX_SUM_COEFF, by its generic
    value (none in a graph of more than _MAX_SUM_SYMBOLS symbols)."""
    if not 1 < len(generic) <= _MAX_SUM_SYMBOLS:
        return {}
    return _sums_of(tuple(sorted(generic.items())))


@functools.lru_cache(maxsize=64)
def _sums_of(items: tuple[tuple[str, int], ...]) -> dict[int, tuple[tuple[str, int], ...] | None]:
    out: dict[int, tuple[tuple[str, int], ...] | None] = {}
    for k in range(2, min(_MAX_SUM_TERMS, len(items)) + 1):
        for chosen in itertools.combinations(items, k):
            for coeffs in itertools.product(range(1, _MAX_SUM_COEFF + 1), repeat=k):
                total = sum(c * p for c, (_, p) in zip(coeffs, chosen, strict=True))
                # two sums of one value read back as neither (Symbols.choose avoids it)
                out[total] = None if total in out else tuple((s, c) for c, (s, _) in zip(coeffs, chosen, strict=True))
    return out


def _sums_apart(generic: Mapping[str, int], static: set[int]) -> bool:
    """Whether every sum of symbols (:func:`_sums`) reads back as itself: near no static size, no small
    multiple of one symbol and no other sum."""
    sums = _sums(generic)
    if not sums:
        return True
    values = sorted([*sums] + [c * p for p in generic.values() for c in range(1, _MAX_MULTIPLE + 1)])
    if None in sums.values() or any(b - a <= 2 * _MAX_OFFSET for a, b in itertools.pairwise(values)):
        return False
    return not any(v + off in sums for v in static for off in range(-_MAX_OFFSET, _MAX_OFFSET + 1))


def _near_multiple(v: int, p: int) -> bool:
    if v % p == 0:
        return True
    q, r = divmod(v, p)
    return any(1 <= c <= _MAX_MULTIPLE and abs(off) <= _MAX_OFFSET for c, off in ((q, r), (q + 1, r - p)))


def graph_symbols(graph: object) -> Symbols:
    """The symbols of an IR graph (empty for a static graph)."""
    meta = getattr(graph, "meta", {}) or {}
    return Symbols(dict(meta.get(META_KEY) or {}))


def representative(graph: object) -> dict[str, int]:
    """The sizes a graph's symbols are costed and timed at: ``graph.meta["symbol_values"]``, and 1 for any other
    symbol."""
    given = dict((getattr(graph, "meta", {}) or {}).get(VALUES_KEY) or {})
    return {s: int(given.get(s, 1)) for s in graph_symbols(graph).generic}


def price_points(graph: object) -> list[tuple[str, dict[str, int]]]:
    """The points (a label, a size per symbol) a graph's costs are priced at: ``graph.meta["price_points"]``,
    else its representative sizes alone (label "")."""
    points = (getattr(graph, "meta", {}) or {}).get(POINTS_KEY)
    if points:
        return [(str(label), dict(sizes)) for label, sizes in points]
    return [("", representative(graph))]


def graph_size_inputs(graph: object) -> dict[str, str]:
    """The graph inputs whose value is a symbol's size, with the symbol (``graph.meta["size_inputs"]``)."""
    return dict((getattr(graph, "meta", {}) or {}).get(SIZE_INPUTS_KEY) or {})


def costed_at(graph: object) -> Callable[[CostKey], tuple[CostKey, ...]]:
    """What a cost key of ``graph`` (or of an e-graph of it) is priced as: itself for a static graph, else
    the key at each of its price points (:func:`price_points`; the node costs the sum), so every cost model sees
    concrete sizes and never the generic values."""
    syms = graph_symbols(graph)
    if not syms:
        return lambda key: (key,)
    points = [values for _, values in price_points(graph)]
    cache: dict[CostKey, tuple[CostKey, ...]] = {}

    def at(key: CostKey) -> tuple[CostKey, ...]:
        if key not in cache:
            cache[key] = tuple(syms.key_at(key, values) for values in points)
        return cache[key]

    return at


class SymbolicShapeError(DynamicShapeError):
    """A size of the graph does not read back as a polynomial in its symbols."""


def symbolic_shapes(graph: object) -> dict[str, tuple[Dim, ...]]:
    """Every tensor's shape as sizes in the graph's symbols, derived through the registry's shape functions from
    the inputs' shapes (an opaque node's from the shape ONNX inference gave it), with the sizes in each node's
    parameters decoded. Raises :class:`SymbolicShapeError` where a derived shape is not the graph's at the
    generic point (a size read back as the wrong polynomial) or a shape function cannot decide a guard for every
    value of the symbols."""
    syms = graph_symbols(graph)
    known: dict[int, Dim] = {}
    out: dict[str, tuple[Dim, ...]] = {}

    def note(name: str, shape: tuple[Dim, ...]) -> None:
        out[name] = shape
        for d in shape:
            if isinstance(d, Sym):
                known.setdefault(concrete((d,), syms.generic)[0], d)

    for i in graph.inputs:  # type: ignore[attr-defined]
        note(i.name, syms.decode_shape(i.shape))
    for name, w in graph.weights.items():  # type: ignore[attr-defined]
        out[name] = tuple(int(d) for d in w.shape)
    shapes = graph.shapes  # type: ignore[attr-defined]
    for n in graph.nodes:  # type: ignore[attr-defined]
        if n.is_opaque:
            shape = syms.decode_shape(n.p["shape"], known)
        else:
            params = decode_params(syms, n.p, known)
            try:
                shape = n.spec.shape(params, [out[i] for i in n.inputs])
            except UndecidedDim as e:
                raise SymbolicShapeError(f"{n.output} ({n.op}): {e}") from None
            except OpError as e:
                raise SymbolicShapeError(f"{n.output} ({n.op}): its shape does not hold for every value of "
                                         f"{', '.join(syms.generic)} ({e})") from None
        if concrete(shape, syms.generic) != tuple(shapes[n.output]):
            raise SymbolicShapeError(f"the size of {n.output!r} ({n.op}) {tuple(shapes[n.output])} does not read back "
                                     f"as sizes in {', '.join(syms.generic)} (read as {format_shape(shape)})")
        note(n.output, shape)
    return out


def decode_params(syms: Symbols, params: Mapping[str, object], known: Mapping[int, Dim]) -> dict[str, object]:
    """A node's parameters with every size decoded (ints and int tuples; others as they are)."""
    out: dict[str, object] = {}
    for k, v in params.items():
        if isinstance(v, int) and not isinstance(v, bool):
            out[k] = syms.decode(v, known)
        elif isinstance(v, tuple) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            out[k] = tuple(syms.decode(x, known) for x in v)
        else:
            out[k] = v
    return out


def format_shape(shape: Sequence[Dim]) -> str:
    """A shape as text: ``[batch, seq, 768]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"
