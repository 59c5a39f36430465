"""The sizes a graph with symbols is priced at when the user chose none: a decode step and a typical prefill for
a decoder step with a KV cache, a typical prefill for any other model.

A symbolic graph's costs need concrete sizes. Pricing every symbol at 1 prices a prefill of 128 tokens as if it
were one token, and the rewrites that pay at one size need not pay at another. So a size the user gives
(``--dim``, ``input_shapes``) is used as given, and each other symbol is read by where it appears:

- a *batch* (named so, or only ever the first axis of the inputs): 1;
- a cache's *past length* and the *new tokens* (symbols that the graph's input and output shapes add up, ``past
  + sequence``; the new tokens are the one an integer input such as ``input_ids`` has as an axis of its own):
  priced at a decode step (1 new token, a past of :data:`TYPICAL_LENGTH`) *and* at a prefill
  (:data:`TYPICAL_LENGTH` new tokens, a past of 1), each node's cost the sum of the two, unless the user gave
  either length (then at one point); a model fed embeddings (no integer input tells the new tokens apart) is
  priced at one point, both lengths at :data:`TYPICAL_LENGTH`;
- any other (a sequence, an image side): :data:`TYPICAL_LENGTH`.

Only costs read these points. The numeric check and the end-to-end timings run at the representative sizes
(:func:`eqsat.ir.symbols.representative`: the user's, 1 otherwise), which every model runs at (a longer sequence
may exceed a model's position table).
"""

from __future__ import annotations

from collections.abc import Mapping

from eqsat.ir.graph import Graph
from eqsat.ir.symbols import graph_symbols
from eqsat.ops.dims import Sym, symbol_of

#: the length a sequence, a prefill and a past are priced at when the user gave none
TYPICAL_LENGTH = 128
#: the size a batch is priced at when the user gave none
TYPICAL_BATCH = 1
#: the past a prefill is priced with (a cache of length 0 would price empty tensors that no measured kernel times)
PREFILL_PAST = 1


def summed_symbols(graph: Graph) -> list[str]:
    """The symbols that appear in a sum of several symbols in the graph's input or output shapes (``past +
    sequence``), in the order of the graph's symbols."""
    syms = graph_symbols(graph)
    found: set[str] = set()
    shapes = graph.shapes
    for shape in (*(i.shape for i in graph.inputs), *(shapes[o] for o in graph.outputs)):
        for d in syms.decode_shape(shape):
            if isinstance(d, Sym) and len(d.terms) > 1 and len(d.symbols) > 1:
                found |= d.symbols
    return [s for s in syms.generic if s in found]


def default_price_points(graph: Graph, given: Mapping[str, int]) -> list[tuple[str, dict[str, int]]]:
    """The points (a label, a size per symbol) ``graph`` is priced at, each symbol ``given`` a size at that size
    in every point (see the module docstring); one point, labelled "", when ``given`` names every symbol."""
    syms = graph_symbols(graph)
    names = list(syms.generic)
    if all(s in given for s in names):
        return [("", {s: int(given[s]) for s in names})]
    axes: dict[str, set[int]] = {s: set() for s in names}  # the axes where each symbol is a size of its own
    own_in_ints: set[str] = set()  # a symbol that is an axis of an integer input (token ids, positions)
    for i in graph.inputs:
        for axis, d in enumerate(syms.decode_shape(i.shape)):
            s = symbol_of(d)
            if s is not None:
                axes[s].add(axis)
                if "int" in str(i.dtype):
                    own_in_ints.add(s)
    summed = summed_symbols(graph)
    new = [s for s in summed if s in own_in_ints]
    past = [s for s in summed if s not in own_in_ints]

    def default(s: str) -> int:
        if "batch" in s.lower() or (axes[s] == {0} and s not in summed):
            return TYPICAL_BATCH
        return TYPICAL_LENGTH

    given = {s: int(v) for s, v in given.items() if s in axes}
    base = {s: given.get(s, default(s)) for s in names}
    if not new or not past or any(s in given for s in (*new, *past)):
        # no cache to tell apart from the new tokens, or the user chose the step's lengths: one point
        return [("typical", base)]
    decode = {**base, **{s: 1 for s in new}, **{s: TYPICAL_LENGTH for s in past}}
    prefill = {**base, **{s: TYPICAL_LENGTH for s in new}, **{s: PREFILL_PAST for s in past}}
    return [("decode step", decode), ("prefill", prefill)]
