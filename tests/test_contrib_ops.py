"""Models with operators of other domains (onnxruntime's com.microsoft fused kernels): optimized around them,
their outputs typed by running the model once, with or without dynamic axes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat.errors import DynamicShapeError
from eqsat.onnx_io import load_model, opaque_reasons


def _model(batch: int | str, op: str = "FastGelu", domain: str = "com.microsoft") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
         for n, s in (("W1", (64, 128)), ("B1", (128,)), ("W2", (128, 64)), ("W3", (128, 64)))]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node(op, ["h", "B1"], ["g"], domain=domain),
             helper.make_node("MatMul", ["g", "W2"], ["a"]), helper.make_node("MatMul", ["g", "W3"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    g = helper.make_graph(nodes, "contrib", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 64])], w)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])


@pytest.mark.parametrize("batch", [4, "batch"])
def test_a_fused_kernel_is_typed_by_running_and_optimized_around(batch: int | str) -> None:
    g = load_model(_model(batch), symbolic=True)
    assert [op for op, _, _ in opaque_reasons(g)] == ["com.microsoft:FastGelu"]
    res = eqsat.optimize(_model(batch), time_limit=10)
    assert not res.kept_original and res.cost_after < res.cost_before  # the two matmuls merged around it
    assert "FastGelu" in {n.op_type for n in res.model.graph.node}
    assert [d.dim_param or d.dim_value for d in res.model.graph.output[0].type.tensor_type.shape.dim] == [batch, 64]
    assert res.numeric is not None and res.numeric.ok


def test_an_operator_onnxruntime_cannot_run_is_a_clear_error() -> None:
    with pytest.raises(DynamicShapeError, match="no static shape for 'g'"):
        load_model(_model(4, op="Mystery", domain="example.custom"))
