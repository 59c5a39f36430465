"""A graph's structure apart from its tensor names and its weights' values: what a cached transformation is keyed
by, and how a graph found for one model is written in terms of its structure and replayed on another model of
the same structure (a re-export, a fine-tune: other names, other weights).

Each tensor of a graph has a place: ``i3`` (its fourth input), ``w5`` (the sixth weight, in the order the nodes
first read them), ``n12`` (what its thirteenth node computes). :func:`structure_key` hashes the graph written in
places (operators, parameters, edges, dtypes, shapes, symbols), so two graphs with one key differ only in names
and weight values. :func:`encode` writes another graph (the optimized one) over the places of the graph it was
found for, naming its own new tensors ``t0``, ``t1``...; :func:`decode` writes it back over the places of a graph
of the same key. Parameter values round-trip exactly (floats as hexadecimal, bytes as base64).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from eqsat.ir.graph import Graph, GraphError, Node, TensorInfo
from eqsat.ir.names import NameAllocator

__all__ = ["StructureError", "places", "structure_key", "encode", "decode"]


class StructureError(ValueError):
    """A graph cannot be written over another's places (it reads a weight the other has not), or an encoded graph
    is malformed."""


def places(graph: Graph) -> dict[str, str]:
    """Each tensor name of ``graph`` -> its place (``i0``, ``w0``, ``n0``)."""
    out = {t.name: f"i{k}" for k, t in enumerate(graph.inputs)}
    weights = [w for n in graph.nodes for w in n.inputs if w in graph.weights]
    weights += [w for w in graph.weights if w not in weights]  # read by no node (an output, say)
    out.update({w: f"w{k}" for k, w in enumerate(dict.fromkeys(weights))})
    out.update({n.output: f"n{k}" for k, n in enumerate(graph.nodes)})
    return out


def structure_key(graph: Graph) -> str:
    """A hash of ``graph`` written over its places: equal for graphs that differ only in tensor names and weight
    values (the inputs' and weights' dtypes and shapes, and the symbols of dynamic axes, count)."""
    where = places(graph)
    shapes, dtypes = graph.shapes, graph.dtypes
    weights = sorted((where[w], dtypes[w], list(shapes[w])) for w in graph.weights)
    form = {
        "inputs": [[t.dtype, list(t.shape)] for t in graph.inputs],
        "weights": weights,
        "nodes": [[n.op, _value(n.params), [where[i] for i in n.inputs]] for n in graph.nodes],
        "outputs": [where[o] for o in graph.outputs],
        "meta": _value(sorted((k, v) for k, v in graph.meta.items() if k in _STRUCTURAL_META)),
    }
    return hashlib.sha256(json.dumps(form, sort_keys=True).encode()).hexdigest()


#: what of a graph's ``meta`` is structure: its opset and the symbols of its dynamic axes (with the sizes they are
#: checked and costed at); the opaque nodes' protos and other notes follow from the nodes
_STRUCTURAL_META = ("opset", "symbols", "symbol_values", "price_points")


def encode(found: Graph, base: Graph) -> dict[str, Any]:
    """``found`` (a graph computing what ``base`` computes, from its inputs and weights) written over ``base``'s
    places, as JSON-ready data; its tensors that are not ``base``'s get new places ``t0``, ``t1``..."""
    where = places(base)
    extra = [w for w in found.weights if w not in base.weights]
    if extra:
        raise StructureError(f"the graph reads weights its base has not ({', '.join(extra[:3])})")
    if [t.name for t in found.inputs] != [t.name for t in base.inputs]:
        raise StructureError("the graph's inputs are not its base's")
    fresh: dict[str, str] = {}

    def place(name: str) -> str:
        if name in where:
            return where[name]
        return fresh.setdefault(name, f"t{len(fresh)}")

    nodes = [[n.op, _value(n.params), [place(i) for i in n.inputs], place(n.output)] for n in found.nodes]
    return {"weights": [where[w] for w in found.weights], "nodes": nodes, "outputs": [place(o) for o in found.outputs]}


def decode(data: dict[str, Any], base: Graph) -> Graph:
    """The graph ``data`` encodes (:func:`encode`) written over ``base``'s places: ``base``'s inputs, weights,
    names and meta, the new tensors given fresh names. Raises :class:`StructureError` for a malformed or
    inconsistent encoding (a place ``base`` has not, a shape the registry refuses)."""
    names = {p: name for name, p in places(base).items()}
    taken = NameAllocator(set(names.values()))
    fresh: dict[str, str] = {}

    def name(p: str) -> str:
        if not isinstance(p, str) or not p:
            raise StructureError(f"not a place: {p!r}")
        if p[0] == "t":
            if p not in fresh:
                fresh[p] = taken.fresh("t")
            return fresh[p]
        if p not in names:
            raise StructureError(f"the encoding names a place its base has not: {p}")
        return names[p]

    try:
        nodes = [Node(op, _params(params), tuple(name(i) for i in ins), name(out))
                 for op, params, ins, out in data["nodes"]]
        outputs = tuple(name(o) for o in data["outputs"])
        weights = {names[p]: base.weights[names[p]] for p in data["weights"]}
        graph = Graph(tuple(TensorInfo(t.name, t.shape, t.dtype) for t in base.inputs), weights,
                      tuple(nodes), outputs, base.name, dict(base.meta))
        graph.validate()
    except (KeyError, TypeError, ValueError, GraphError) as e:
        raise StructureError(f"the encoded graph does not fit its base: {e}") from e
    if outputs != base.outputs:
        raise StructureError("the encoded graph's outputs are not its base's")
    return graph


def _value(v: Any) -> Any:
    """A parameter value (or a tuple of them) as JSON-ready data that :func:`_unvalue` reads back exactly."""
    if isinstance(v, bool) or v is None or isinstance(v, int | str):
        return v
    if isinstance(v, float):
        return {"f": v.hex()}
    if isinstance(v, bytes):
        return {"b": base64.b64encode(v).decode()}
    if isinstance(v, tuple | list):
        return {"t": [_value(x) for x in v]}
    if isinstance(v, dict):  # in a graph's meta (its symbols), for the key only
        return {"d": [[str(k), _value(x)] for k, x in sorted(v.items())]}
    raise StructureError(f"a parameter value of type {type(v).__name__} cannot be cached")


def _unvalue(v: Any) -> Any:
    if isinstance(v, dict):
        if "f" in v:
            return float.fromhex(v["f"])
        if "b" in v:
            return base64.b64decode(v["b"])
        if "t" in v:
            return tuple(_unvalue(x) for x in v["t"])
        raise StructureError(f"not a parameter value: {v!r}")
    return v


def _params(data: Any) -> tuple[tuple[str, Any], ...]:
    """A node's parameters, read back from :func:`_value` of their tuple."""
    params = _unvalue(data)
    if not isinstance(params, tuple) or not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                                for p in params):
        raise StructureError(f"not a node's parameters: {data!r}")
    return params
