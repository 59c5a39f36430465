"""What a model declares, before any import: inputs, outputs, operator counts (``eqsat inspect``)."""


from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from eqsat.onnx_io.protos import (
    declared_dims,
    format_dims,
    has_subgraph,
    input_shape_hint,
    nodes_within,
    np_dtype,
)
from eqsat.onnx_io.stored import read_model


@dataclass(frozen=True)
class TensorSummary:
    """A graph input or output as the ONNX file declares it."""

    name: str
    dims: tuple[int | str, ...] | None  # ints, symbolic names, "?" for unnamed unknowns; None: rank unknown
    dtype: str

    @property
    def dynamic(self) -> list[str]:
        """The dimensions that are not fixed sizes (all of them, as ``"?"``, when the rank is unknown)."""
        return ["?"] if self.dims is None else [str(d) for d in self.dims if not isinstance(d, int)]

    def shape_text(self) -> str:
        """``[batch, 3, 224, 224]``."""
        return format_dims(self.dims)


@dataclass
class ModelSummary:
    """What an ONNX file contains, read from the file alone (no shape inference, no import): it describes
    models that eqsat cannot import, such as models with dynamic shapes or control flow."""

    label: str
    ir_version: int
    opset: int | None
    producer: str
    inputs: list[TensorSummary]
    outputs: list[TensorSummary]
    initializers: int
    op_histogram: Counter[str]  # top-level nodes per op type ("domain:Op" outside the default domain)
    subgraph_op_histogram: Counter[str]  # nodes inside If/Loop/Scan bodies
    control_flow: list[str] = field(default_factory=list)  # "Loop 'loop1'" for each node holding a subgraph

    @property
    def nodes(self) -> int:
        """Top-level ONNX nodes."""
        return sum(self.op_histogram.values())

    def dynamic_inputs(self) -> list[TensorSummary]:
        """Inputs with a dimension that is not a fixed size."""
        return [i for i in self.inputs if i.dynamic]

    def input_shape_hint(self) -> str:
        """The ``--input-shape`` options that would fix every dynamic input ("" when none is dynamic)."""
        dyn = self.dynamic_inputs()
        return input_shape_hint([(i.name, i.dims) for i in dyn]) if dyn else ""


def _op_key(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def _tensor_summary(vi: onnx.ValueInfoProto) -> TensorSummary:
    if not vi.type.HasField("tensor_type"):
        return TensorSummary(vi.name, None, vi.type.WhichOneof("value") or "unknown type")
    try:
        dtype = np_dtype(vi.type.tensor_type.elem_type)
    except Exception:  # undefined or exotic element type
        dtype = onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()
    return TensorSummary(vi.name, declared_dims(vi), dtype)


def summarize_model(src: str | Path | bytes | onnx.ModelProto, *, label: str | None = None) -> ModelSummary:
    """Describe an ONNX model from the file alone: declared input/output shapes (symbolic dimensions kept),
    operator histogram, control-flow nodes. ``label`` names the model (default: the path). Raises
    :class:`ModelReadError` only for unreadable files."""
    model, default_label = read_model(src)
    label = label or default_label
    g = model.graph
    inits = {i.name for i in g.initializer}
    hist: Counter[str] = Counter(_op_key(n) for n in g.node)
    sub: Counter[str] = Counter()
    flow: list[str] = []
    for n in g.node:
        inner = nodes_within(n)
        if inner or has_subgraph(n):
            flow.append(f"{n.op_type} {n.name!r} ({len(inner)} nodes inside)" if n.name
                        else f"{n.op_type} ({len(inner)} nodes inside)")
            sub.update(_op_key(m) for m in inner)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return ModelSummary(label, model.ir_version, opset, model.producer_name,
                        [_tensor_summary(vi) for vi in g.input if vi.name not in inits],
                        [_tensor_summary(vi) for vi in g.output], len(inits), hist, sub, flow)


# ---------------------------------------------------------------------------------------------------------
# export
