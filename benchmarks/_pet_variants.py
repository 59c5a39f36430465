"""PET's corrected mutants as small models of their own, for timing them on a GPU beside what they replace.

For each subprogram of a model that PET's search rewrites (a convolution, or a chain of two ending at one), the
subprogram alone and its corrected mutant that ``cost_model`` prices cheapest, each written as an ONNX model of
the subprogram's inputs and output (``benchmarks/gpu_e2e.py prepare --pet``). Whether a mutant pays is a question
of the kernels it runs (a dilated convolution against plain ones over phase images, and the moves and corrections
around them), which the subprogram alone answers; its weights are the model's own.
"""

from __future__ import annotations

import math
import time
from typing import Any

#: the search for rewrites begins no subprogram past this many seconds
SEARCH_SECONDS = 120.0


def pet_variants(path: str, cost_model: Any, limit: int = 8) -> list[tuple[str, list[Any], list[str]]]:
    """(tensor, [the subprogram, its cheapest corrected mutant] as ONNX models, their roles) for at most
    ``limit`` of the subprograms PET rewrites in the model at ``path``: those with a dilated convolution first
    (where PET's gains were reported), then the largest outputs."""
    from eqsat.costs import graph_cost
    from eqsat.ir.graph import Graph
    from eqsat.onnx_io import load_model, to_onnx
    from eqsat.rules.pet import find_rewrites
    from eqsat.rules.pet.program import chain_of

    graph = load_model(path)
    found = find_rewrites(graph, deadline=time.perf_counter() + SEARCH_SECONDS)
    subs = []
    for tensor, length in dict.fromkeys((r.tensor, len(r.windows)) for r in found):
        sub = chain_of(graph, graph.producers[tensor], length)
        assert sub is not None  # find_rewrites found it
        dilated = any(max(n.p.get("dilations", (1,))) > 1 for n in sub.graph.nodes)
        subs.append((not dilated, -math.prod(graph.shapes[tensor][1:]), tensor, length, sub.graph))
    out = []
    for *_, tensor, length, g in sorted(subs, key=lambda t: t[:4])[:limit]:
        priced = sorted((graph_cost(Graph(g.inputs, g.weights, r.nodes, g.outputs), cost_model), r.name, k)
                        for k, r in enumerate(found) if (r.tensor, len(r.windows)) == (tensor, length))
        best = found[priced[0][2]]
        mutant = Graph(g.inputs, g.weights, best.nodes, g.outputs)
        out.append((f"{tensor}_x{length}", [_readable(to_onnx(g)), _readable(to_onnx(mutant))],
                    [f"{length} convolution{'s' if length > 1 else ''}", f"mutant {best.name}"]))
    return out


def _readable(model: Any) -> Any:
    """``model`` marked with the lowest IR version its opsets allow, so that an older onnxruntime (the GPU
    machine's) reads it too."""
    from onnx import helper

    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    return model
