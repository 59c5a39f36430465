"""Fused forms' chains (``OpSpec.runs_as``): the cost keys, the operands and the IR nodes of the operators an
operator runs as once exported."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from eqsat.ops.core import CostKey, IRNode, OpError, Params, Shape, get


def runs_as_keys(key: CostKey) -> tuple[CostKey, ...]:
    """The keys of the operators a configuration runs as once exported, when nothing fuses them (see
    ``OpSpec.runs_as``: a conv with fused relu is a conv and a relu); ``(key,)`` when it runs as itself. Each
    part's operands are those its entry names (:func:`runs_as_operands`)."""
    spec = get(key.op)
    params = dict(key.params)
    chain = spec.runs_as(params) if spec.runs_as else None
    if not chain:
        return (key,)
    keys: list[CostKey] = []
    outs: list[Shape] = []  # each part's output shape
    for k, (op, p, positions) in enumerate(chain):
        part = get(op)
        p = part.normalize(p)
        shapes = runs_as_operands(positions, k, key.input_shapes, outs)
        weights = [j for j, i in enumerate(positions) if i >= 0 and i in key.weights]
        out = key.output_shape
        if k < len(chain) - 1:
            try:
                out = part.shape(p, shapes)
            except OpError:  # operands ONNX broadcasts but the IR reshapes first (a bias of rank 1)
                out = tuple(np.broadcast_shapes(*shapes))  # raises where they do not broadcast either
        outs.append(out)
        keys.append(part.cost_key(p, shapes, out, key.dtype, key.layout, weights))
    return tuple(keys)


def runs_as_operands(positions: Sequence[int], k: int, inputs: Sequence[Any], outputs: Sequence[Any]) -> list[Any]:
    """The operands of part ``k`` of a ``runs_as`` chain (``OpSpec.runs_as``): for each position ``i``, the
    operator's input ``inputs[i]``, or for ``-j`` the output of the part ``j`` before this one (``outputs``: the
    parts' outputs so far). Inputs and outputs may be shapes, tensors or names."""
    assert all(k + i >= 0 for i in positions), f"part {k} reads a part before the first"
    return [outputs[k + i] if i < 0 else inputs[i] for i in positions]


def runs_as_nodes(name: str, params: Params, inputs: Sequence[str], output: str,
                  fresh: Callable[[str], str]) -> list[IRNode]:
    """The IR nodes operator ``name`` runs as (its ``runs_as`` chain) on the tensors ``inputs``, the last one
    writing ``output``; ``fresh(hint)`` names each tensor between them."""
    spec = get(name)
    chain = spec.runs_as(spec.normalize(params)) if spec.runs_as else None
    assert chain, f"{name}: no runs_as chain"
    nodes: list[IRNode] = []
    outs: list[str] = []
    for k, (op, p, positions) in enumerate(chain):
        out = output if k == len(chain) - 1 else fresh(op)
        nodes.append((op, dict(p), runs_as_operands(positions, k, inputs, outs), [out]))
        outs.append(out)
    return nodes
