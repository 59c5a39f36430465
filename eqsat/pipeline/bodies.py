"""Control-flow bodies optimized as graphs of their own.

The main graph keeps an ``If``, ``Loop`` or ``Scan`` node as it is (an opaque node, see
:mod:`eqsat.onnx_io.load`); its bodies are ONNX graphs too. Each body of the model's own control-flow nodes is
made a model of its own (its inputs, and the tensors it reads from around it as further inputs), optimized by the
run's own :func:`eqsat.pipeline.optimize` (which the load stage passes in) under its options with a share of its
time, and put back in a copy of the model: the model the main graph is then imported from. A body that cannot be
optimized (a dynamic shape, an error) is kept as it is. The run's numeric check compares the whole written model
with the original as given, so a body's rewrite is checked through the model, on the inputs that reach it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import onnx
from onnx import helper, shape_inference

from eqsat.errors import EqsatError
from eqsat.onnx_io.protos import graph_outer_names, rename_outer
from eqsat.pipeline.options import OptimizeOptions
from eqsat.pipeline.result import OptimizeResult

__all__ = ["BodyResult", "optimize_bodies"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BodyResult:
    """One control-flow body optimized: its node and attribute (``"If 'choose'": then_branch``), and its cost
    under the run's cost model before and after (ms, one run of the body)."""

    node: str
    attr: str
    cost_before: float
    cost_after: float
    #: the runtime kernels written in it, by type (``optimize(target="onnxruntime")``)
    kernels: dict[str, int] = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.node} {self.attr} {self.cost_before:.6g} -> {self.cost_after:.6g} ms"


def _types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every tensor of the main graph that ONNX shape inference types, by name."""
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # onnx's errors share no base class: no types, so no body is optimized
        return {}
    g = inferred.graph
    out = {vi.name: vi for vi in [*g.input, *g.value_info, *g.output] if vi.type.HasField("tensor_type")}
    for t in g.initializer:
        out.setdefault(t.name, helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return out


def _standalone(body: onnx.GraphProto, types: dict[str, onnx.ValueInfoProto], model: onnx.ModelProto
                ) -> onnx.ModelProto | None:
    """``body`` as a model of its own: the tensors it reads from around it become further graph inputs (None
    where one of them has no known type)."""
    outer = graph_outer_names(body)
    if any(name not in types for name in outer):
        return None
    g = onnx.GraphProto()
    g.CopyFrom(body)
    g.input.extend(types[name] for name in outer)
    m = helper.make_model(g, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    return m


def _prefix_defined(g: onnx.GraphProto, prefix: str) -> None:
    """Rename, in place, what a body defines (node outputs, initializers; its inputs keep their names) to
    ``prefix + name``: an optimized body's new names (``t_T-12``) could be the names the main graph's export
    gives too, and a name may be defined once across a graph and its subgraphs."""
    mine = {i.name for i in g.input}
    mapping = {o: prefix + o for n in g.node for o in n.output if o and o not in mine}
    mapping |= {t.name: prefix + t.name for t in g.initializer if t.name not in mine}
    for t in g.initializer:
        t.name = mapping.get(t.name, t.name)
    for n in g.node:
        for k, i in enumerate(n.input):
            n.input[k] = mapping.get(i, i)
        for k, o in enumerate(n.output):
            n.output[k] = mapping.get(o, o)
        rename_outer(n.attribute, mapping)
    for vi in [*g.output, *g.value_info]:
        vi.name = mapping.get(vi.name, vi.name)


def optimize_bodies(model: onnx.ModelProto, options: OptimizeOptions, seconds: float,
                    optimize: Callable[..., OptimizeResult]) -> tuple[onnx.ModelProto, list[BodyResult]]:
    """A copy of ``model`` whose control-flow nodes' bodies are each optimized by ``optimize`` (the run's own:
    :func:`eqsat.pipeline.optimize`; see the module docstring) in about ``seconds`` together, and what was
    optimized; ``model`` itself when no body was."""
    spots = [(k, j) for k, n in enumerate(model.graph.node) for j, a in enumerate(n.attribute)
             if a.type == onnx.AttributeProto.GRAPH]
    if not spots or seconds <= 0:
        return model, []
    types = _types(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    done: list[BodyResult] = []
    deadline = time.perf_counter() + seconds
    for i, (k, j) in enumerate(spots):
        node, attr = out.graph.node[k], out.graph.node[k].attribute[j]
        what = f"{node.op_type} {node.name!r}" if node.name else node.op_type
        left = (deadline - time.perf_counter()) / (len(spots) - i)
        if left < 0.5:  # too little to saturate and extract anything
            continue
        standalone = _standalone(attr.g, types, model)
        if standalone is None:
            continue
        opts = dataclasses.replace(options, time_limit=left, verify_latency=False, candidates=None,
                                   dump_egraph=None, provenance=False, progress=None, input_shapes=None)
        try:
            res = optimize(standalone, options=opts)
        except EqsatError as e:  # a body eqsat cannot optimize (e.g. a dynamic shape) stays as it is
            log.info("control-flow body %s %s kept as it is: %s", what, attr.name, e)
            continue
        except Exception as e:  # a bug on a body must not cost the main graph its optimization: said, and kept
            log.warning("control-flow body %s %s kept as it is: optimizing it failed (%s: %s)", what, attr.name,
                        type(e).__name__, e)
            continue
        if res.kept_original:
            continue
        body = onnx.GraphProto()
        body.CopyFrom(res.model.graph)
        n_own = len(attr.g.input)  # the inputs added for the tensors it reads from around it go again
        del body.input[n_own:]
        body.name = attr.g.name
        _prefix_defined(body, f"{attr.name}{k}/")
        attr.g.CopyFrom(body)
        # a kernel of another domain written in the body (target onnxruntime) needs its opset in the model
        have = {o.domain for o in out.opset_import}
        out.opset_import.extend(o for o in res.model.opset_import if o.domain not in have)
        done.append(BodyResult(what, attr.name, res.cost_before, res.cost_after, dict(res.kernels)))
    return (out, done) if done else (model, [])
