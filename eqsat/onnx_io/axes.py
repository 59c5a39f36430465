"""The import an optimization run makes: the model's dynamic axes kept as symbols where they can be, costed at
the sizes the user gives them (typical ones for the others), else fixed at those sizes, with the reason (what
``eqsat optimize`` and ``eqsat costs measure`` share, so that both price the same configurations)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx

from eqsat.errors import DynamicShapeError, InputShapeError
from eqsat.ir.graph import Graph
from eqsat.ir.price_points import default_price_points
from eqsat.ir.symbols import POINTS_KEY, VALUES_KEY, graph_symbols
from eqsat.onnx_io.dynamic import fixed_input_shapes
from eqsat.onnx_io.load import load_model


def load_with_axes(model: onnx.ModelProto, *, label: str, input_shapes: Mapping[str, Sequence[int]] | None = None,
                   dims: Mapping[str, int] | None = None, dynamic: bool = True,
                   as_written: bool = False) -> tuple[Graph, str]:
    """The graph of ``model`` and why its dynamic axes were fixed ("" where they were kept, or there are none).

    With ``dynamic``, each dynamic dimension is a symbol (:func:`eqsat.onnx_io.load_model` with ``symbolic``),
    checked and timed at its size in ``dims``, or in the shape ``input_shapes`` gives its input (1 otherwise), and
    costed there too where every symbol has one (else at the price points of :mod:`eqsat.ir.price_points`); a model
    whose sizes the symbols cannot follow (:class:`~eqsat.errors.DynamicShapeError`: a reshape to batch 1, a
    floor division) is imported with them fixed at those sizes instead. Without ``dynamic`` they are fixed.
    ``as_written``: without the import's fusions (:func:`eqsat.onnx_io.load_model`).
    Raises :class:`InputShapeError` for a ``dims`` entry that names no symbol of the model."""
    shapes = dict(input_shapes) if input_shapes else None
    reason = ""
    if dynamic:
        try:
            graph = load_model(model, input_shapes=shapes, label=label, symbolic=True, as_written=as_written)
        except DynamicShapeError as e:
            reason = str(e)
        else:
            syms = graph_symbols(graph)
            unknown = sorted(set(dims or {}) - set(syms.generic))
            if unknown:
                raise InputShapeError(f"{label}: --dim names {', '.join(unknown)}, which the model does not have; "
                                      f"its symbolic dimensions are {', '.join(syms.generic) or 'none'}")
            if not syms:
                return graph, ""
            values = {**graph.meta.get(VALUES_KEY, {}), **dict(dims or {})}
            points = default_price_points(graph, values)
            checked_at = {s: int(values.get(s, 1)) for s in syms.generic}
            # priced apart from the checked sizes only where that differs (a batch alone is priced at 1 both ways)
            apart = len(points) > 1 or points[0][1] != checked_at
            meta = {**graph.meta, VALUES_KEY: values, **({POINTS_KEY: points} if apart else {})}
            return Graph(graph.inputs, graph.weights, graph.nodes, graph.outputs, graph.name, meta), ""
    fixed = fixed_input_shapes(model, dict(dims or {}), shapes)
    graph = load_model(model, input_shapes=fixed or None, label=label, as_written=as_written)
    counts = {k: v for k, v in (dims or {}).items() if k in graph_symbols(graph).generic}
    if counts:  # a Loop's count stays a symbol with the inputs fixed: costed at the size given
        graph = Graph(graph.inputs, graph.weights, graph.nodes, graph.outputs, graph.name,
                      {**graph.meta, VALUES_KEY: {**graph.meta.get(VALUES_KEY, {}), **counts}})
    return graph, reason
