"""A small ONNX model builder with seeded weights, shared by the built-in models, the tests and the benchmarks."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# ---------------------------------------------------------------------------------------------------------
# built-in models


class ModelBuilder:
    """Builds an ONNX model node by node: seeded random weights (scaled by fan-in), constants, nodes with
    counted names, and a checked ``ModelProto`` at the end."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, shape: tuple[int, ...], scale: float | None = None, name: str = "w") -> str:
        self.count += 1
        nm = f"{name}{self.count}"
        fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:])) if len(shape) == 4 else 1
        sd = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        self.inits.append(numpy_helper.from_array(self.rng.normal(0, sd, shape).astype(np.float32), nm))
        return nm

    def const(self, value: np.ndarray, name: str) -> str:
        self.count += 1
        nm = f"{name}{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), nm))
        return nm

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        self.count += 1
        out = out or f"{op_type.lower()}{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self.count}", **attrs))
        return out

    def model(self, name: str, inputs: list[tuple[str, tuple[int, ...]]], outputs: list[tuple[str, tuple[int, ...]]],
              opset: int = 17) -> onnx.ModelProto:
        g = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="eqsat.models")
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        return m
