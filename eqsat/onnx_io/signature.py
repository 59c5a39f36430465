"""What a model says about itself, carried from the original onto its optimized export: the IR keeps the graph's
computation, names and types, not the file's description of itself (producer, version, doc strings, metadata,
the shapes it declares for intermediate tensors), and a drop-in replacement keeps those too; and whether a model
file keeps its weights as external data, so that its optimized copy can be written the same way."""

from __future__ import annotations

import onnx

from eqsat.ir.graph import Graph
from eqsat.onnx_io.protos import elem_type

__all__ = ["carry_signature", "signature_changes"]


def signature_changes(original: onnx.ModelProto, written: onnx.ModelProto) -> list[str]:
    """How ``written``'s inputs and outputs differ from ``original``'s, one line each (empty: a drop-in: the same
    names in the same order, dtypes and dimensions, a dynamic one by its name, an unnamed one unnamed)."""
    out = []
    for kind, ours, theirs in (("input", written.graph.input, original.graph.input),
                               ("output", written.graph.output, original.graph.output)):
        if [v.name for v in ours] != [v.name for v in theirs]:
            out.append(f"{kind}s {[v.name for v in theirs]} -> {[v.name for v in ours]}")
            continue
        for mine, was in zip(ours, theirs, strict=True):
            if _type_text(mine) != _type_text(was):
                out.append(f"{kind} {was.name}: {_type_text(was)} -> {_type_text(mine)}")
    return out


def _type_text(vi: onnx.ValueInfoProto) -> str:
    """A tensor type as ``float[batch, 1, ?]`` (``?``: an unnamed dynamic dimension; no brackets: no shape)."""
    if not vi.type.HasField("tensor_type"):
        return vi.type.WhichOneof("value") or "?"
    t = vi.type.tensor_type
    name = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "?"
    if not t.HasField("shape"):
        return name
    dims = [str(d.dim_value) if d.HasField("dim_value") else d.dim_param or "?" for d in t.shape.dim]
    return f"{name}[{', '.join(dims)}]"


def carry_signature(original: onnx.ModelProto, optimized: onnx.ModelProto, written: Graph | None = None,
                    dims: bool = True) -> onnx.ModelProto:
    """``optimized`` (changed in place, and returned) with the original's producer name and version, domain,
    model version, doc strings (model, graph, inputs, outputs), metadata properties and graph name, and the
    original's ``value_info`` entries for the tensors the optimized graph still computes where they agree with
    ``written`` (the IR graph ``optimized`` was exported from; an entry is kept where its dtype is the tensor's
    and each dimension is the tensor's size or a symbol; none without it). With ``dims`` (a model that kept its
    dynamic axes), the inputs and outputs also get the dimensions the original declares where they fit: its
    names for the dynamic axes. The optimized export's opset, IR version, names and types are its own already."""
    types = {} if written is None else {t: (written.dtypes[t], shape) for t, shape in written.shapes.items()
                                        if t in written.dtypes}
    for field in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(optimized, field, getattr(original, field))
    del optimized.metadata_props[:]
    optimized.metadata_props.extend(original.metadata_props)
    g, og = optimized.graph, original.graph
    g.name, g.doc_string = og.name, og.doc_string
    for mine, theirs in ((g.input, og.input), (g.output, og.output)):
        docs = {vi.name: vi.doc_string for vi in theirs}
        declared = {vi.name: vi for vi in theirs}
        for vi in mine:
            vi.doc_string = docs.get(vi.name, vi.doc_string)
            if dims and vi.name in declared:
                _carry_dims(vi, declared[vi.name])
    computed = {o for n in g.node for o in n.output} - {o.name for o in g.output}
    have = {vi.name for vi in g.value_info}
    for vi in og.value_info:
        if vi.name in computed and vi.name not in have and _agrees(vi, types.get(vi.name)):
            g.value_info.append(vi)
    return optimized


def _carry_dims(mine: onnx.ValueInfoProto, theirs: onnx.ValueInfoProto) -> None:
    """Give ``mine`` the dimensions ``theirs`` declares (the original's names for its dynamic axes, an unnamed
    one left unnamed) where they fit the tensor: each static size of ``theirs`` is ``mine``'s, and a dynamic one
    may stand for any size (an exporter may declare a size it could not work out, 768 as ``dim_2``)."""
    if not (mine.type.HasField("tensor_type") and theirs.type.HasField("tensor_type")
            and theirs.type.tensor_type.HasField("shape")):
        return
    a, b = mine.type.tensor_type.shape.dim, theirs.type.tensor_type.shape.dim
    if len(a) != len(b):
        return
    if any(y.HasField("dim_value") and (not x.HasField("dim_value") or x.dim_value != y.dim_value)
           for x, y in zip(a, b, strict=True)):
        return
    for x, y in zip(a, b, strict=True):
        x.CopyFrom(y)


def _agrees(vi: onnx.ValueInfoProto, known: tuple[str, tuple[int, ...]] | None) -> bool:
    """Whether a declared tensor type fits the tensor as the optimized graph computes it (None: unknown, so no)."""
    if known is None or not vi.type.HasField("tensor_type"):
        return False
    t = vi.type.tensor_type
    dtype, shape = known
    if t.elem_type != elem_type(dtype):
        return False
    if not t.HasField("shape"):
        return True
    dims = t.shape.dim
    return len(dims) == len(shape) and all(not d.HasField("dim_value") or d.dim_value == s
                                           for d, s in zip(dims, shape, strict=True))
