"""The precisions of a mixed-precision graph: which of its float tensors the model as given holds in a half type.

A mixed-precision model is imported as its float32 copy (:mod:`eqsat.onnx_io.precision`), each ``Cast`` between
float types a ``cast`` node (:mod:`eqsat.ops.cast`). Its graph's metadata keeps the precision of each float tensor
as given; every other tensor takes it from how it is computed: a cast's is its target, any other operator's is
that of its inputs (the rules keep each e-class in one precision). A cost model that computes costs prices each
operator in that precision; export writes it so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from eqsat import ops
from eqsat.ir.graph import Graph
from eqsat.ops import CostKey

__all__ = ["MIXED_KEY", "given_precisions", "in_precision", "node_precision", "tensor_precisions"]

#: graph.meta key of a mixed-precision model's half type and the precision of each of its float tensors as given,
#: ``{"half": "float16", "types": {name: dtype}}``
MIXED_KEY = "mixed_precision"


def given_precisions(graph: Graph) -> Mapping[str, str]:
    """The precision of each float tensor of a mixed-precision graph as given, by name; empty for any other."""
    return (graph.meta.get(MIXED_KEY) or {}).get("types", {})


def node_precision(op: str, params: Mapping[str, object], inputs: Sequence[str | None]) -> str | None:
    """The precision an operator's output is in, from its inputs' (``None`` where unknown: a constant, whose
    precision is that of what reads it)."""
    changes = ops.get(op).precision_param
    if changes:
        return str(params[changes])
    return next((p for p in inputs if p), None)


def tensor_precisions(graph: Graph) -> dict[str, str]:
    """The precision of every tensor of a mixed-precision graph computed at run time (weights and work on them
    only excepted); empty for any other graph."""
    given = given_precisions(graph)
    if not given:
        return {}
    prec: dict[str, str] = {i.name: given.get(i.name, "float32") for i in graph.inputs}
    for n in graph.nodes:
        p = given.get(n.output) if n.is_opaque else node_precision(n.op, n.p, [prec.get(i) for i in n.inputs])
        if p:
            prec[n.output] = p
    return prec


def in_precision(keys: Iterable[CostKey], precision: str | None) -> tuple[CostKey, ...]:
    """``keys`` of an operator computing in ``precision``: a float32 configuration priced as that precision's."""
    if not precision or precision == "float32":
        return tuple(keys)
    return tuple(dataclasses.replace(k, dtype=precision) if k.dtype == "float32" else k for k in keys)
