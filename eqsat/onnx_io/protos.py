"""Small helpers over ONNX protos shared by import, export and the summary: dtypes, shapes, attributes, copying
fields, evaluating one node, the subgraphs and what they read from around them."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from google.protobuf.message import Message
from onnx import helper, shape_inference
from onnx.reference import ReferenceEvaluator

from eqsat.ops import Shape


def np_dtype(elem_type: int) -> str:
    """The numpy dtype name (``"float32"``) of an ONNX element type."""
    return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))


def elem_type(dtype: str) -> int:
    """The ONNX element type of a numpy dtype name."""
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def static_shape(vi: onnx.ValueInfoProto) -> Shape | None:
    """A tensor's shape when every dimension is a known size, else None."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def attr_dict(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as plain Python values (strings decoded)."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode("utf-8", "replace") for x in v]
        out[a.name] = v
    return out


def eval_node(node: onnx.NodeProto, values: Sequence[np.ndarray | None], opset: list[onnx.OperatorSetIdProto],
               ir_version: int, outer: Mapping[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Evaluate one node on constant inputs with the ONNX reference implementation; ``outer``: the values its
    subgraphs read from around it, by name."""
    outer = dict(outer or {})
    inputs = [helper.make_tensor_value_info(f"i{k}", elem_type(str(v.dtype)), list(v.shape))
              for k, v in enumerate(values) if v is not None]
    inputs += [helper.make_tensor_value_info(k, elem_type(str(v.dtype)), list(v.shape)) for k, v in outer.items()]
    in_names = [f"i{k}" if v is not None else "" for k, v in enumerate(values)]
    outs = [f"o{k}" for k in range(len(node.output))]
    n = helper.make_node(node.op_type, in_names, outs, domain=node.domain)
    n.attribute.extend(node.attribute)
    g = helper.make_graph([n], "fold", inputs, [helper.make_value_info(o, onnx.TypeProto()) for o in outs])
    m = helper.make_model(g, opset_imports=opset, ir_version=ir_version)
    feeds = {f"i{k}": v for k, v in enumerate(values) if v is not None} | outer
    # onnxruntime honours old opset semantics (the reference evaluator runs e.g. Softmax-1 as Softmax-13);
    # the reference evaluator covers what onnxruntime cannot run
    try:
        typed = shape_inference.infer_shapes(m)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(typed.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return [np.asarray(r) for r in sess.run(None, feeds)]
    except Exception:
        return [np.asarray(r) for r in ReferenceEvaluator(m).run(None, feeds)]


def has_subgraph(node: onnx.NodeProto) -> bool:
    """Whether a node carries a graph attribute (control flow: If, Loop, Scan)."""
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _subgraphs(attrs: Sequence[onnx.AttributeProto]) -> list[onnx.GraphProto]:
    out: list[onnx.GraphProto] = []
    for a in attrs:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and the control-flow bodies within it, at any depth."""
    yield graph
    for n in graph.node:
        for body in _subgraphs(n.attribute):
            yield from all_graphs(body)


def nodes_within(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The nodes of ``node``'s control-flow bodies, at any depth (none for a node without a body)."""
    return [m for body in _subgraphs(node.attribute) for g in all_graphs(body) for m in g.node]


def lacks_onnx_schema(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is in the default domain but no ONNX operator: one onnxruntime adds there
    (``SimplifiedLayerNormalization``), which ONNX's checker and shape inference do not know."""
    return node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type)


def _defined(g: onnx.GraphProto) -> set[str]:
    """The names a (sub)graph defines: its inputs, initializers and node outputs."""
    return ({i.name for i in g.input} | {t.name for t in g.initializer} | {t.name for t in g.sparse_initializer}
            | {o for n in g.node for o in n.output if o})


def outer_names(node: onnx.NodeProto) -> list[str]:
    """The names a control-flow node's subgraphs read from the scope around the node (its implicit inputs), in
    the order they are first read; none for a node without subgraphs."""
    found: dict[str, None] = {}
    for sub in _subgraphs(node.attribute):
        found.update(dict.fromkeys(graph_outer_names(sub)))
    return list(found)


def graph_outer_names(graph: onnx.GraphProto) -> list[str]:
    """The names a (sub)graph, its own subgraphs included, reads from the scope around it, in the order they
    are first read."""
    found: dict[str, None] = {}

    def visit(g: onnx.GraphProto, local: set[str]) -> None:
        local = local | _defined(g)
        for n in g.node:
            for i in n.input:
                if i and i not in local:
                    found.setdefault(i)
            for sub in _subgraphs(n.attribute):
                visit(sub, local)
        for o in g.output:
            if o.name not in local:
                found.setdefault(o.name)

    visit(graph, set())
    return list(found)


def rename_outer(attrs: Sequence[onnx.AttributeProto], mapping: Mapping[str, str]) -> None:
    """Rename, in place, the reads of outer-scope names in the subgraphs of ``attrs`` (a control-flow node's
    attributes) by ``mapping``; a name a subgraph defines itself shadows the outer one and is left alone."""
    if not mapping:
        return

    def visit(g: onnx.GraphProto, local: set[str]) -> None:
        local = local | _defined(g)
        for n in g.node:
            for k, i in enumerate(n.input):
                if i and i not in local and i in mapping:
                    n.input[k] = mapping[i]
            for sub in _subgraphs(n.attribute):
                visit(sub, local)
        for o in g.output:  # an output passed straight through from the outer scope
            if o.name not in local and o.name in mapping:
                o.name = mapping[o.name]

    for sub in _subgraphs(attrs):
        visit(sub, set())


def shape_text(name: str, dims: Sequence[int | str]) -> str:
    """An input's shape as ``--input-shape`` takes it: ``name=d0,d1,...``."""
    return f"{name}={','.join(str(d) for d in dims)}"


def declared_dims(vi: onnx.ValueInfoProto) -> tuple[int | str, ...] | None:
    """Declared dimensions of a tensor: ints, symbolic names, ``"?"`` for unnamed unknowns; ``None`` when
    even the rank is unknown."""
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or "?")
                 for d in t.shape.dim)


def format_dims(dims: Sequence[int | str] | None) -> str:
    """Declared dimensions for a message: ``[1, seq, 768]``, ``[?]`` for an unknown rank."""
    return "[?]" if dims is None else "[" + ", ".join(str(d) for d in dims) + "]"


def input_shape_hint(inputs: Sequence[tuple[str, Sequence[int | str] | None]]) -> str:
    """The ``--input-shape`` options that fix the given (name, declared dims) inputs, with each dynamic
    dimension written as its symbolic name (or ``N``) for the user to replace by a size."""
    opts, names = [], []
    for name, dims in inputs:
        if dims is None:
            opts.append(f"--input-shape {name}=d1,d2,...")
            continue
        shown = []
        for d in dims:
            if isinstance(d, int):
                shown.append(str(d))
            else:
                sym = d if d.isidentifier() else "N"
                shown.append(sym)
                if sym not in names:
                    names.append(sym)
        opts.append(f"--input-shape {shape_text(name, shown)}")
    what = f", replacing {', '.join(names)} by the size{'s' if len(names) > 1 else ''} to optimize for" if names \
        else ""
    return " ".join(opts) + what


def copy_fields(src: Message, dst: Message, skip: Collection[str] = ()) -> None:
    """Copy every set field of ``src`` but those named in ``skip`` into ``dst`` (a message of the same type): a
    model without its weights, say, where copying it whole and clearing them would copy every weight's bytes."""
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        if isinstance(value, Message):
            getattr(dst, field.name).CopyFrom(value)
        elif isinstance(value, str | bytes | int | float):
            setattr(dst, field.name, value)
        else:  # a repeated field
            getattr(dst, field.name).extend(value)
