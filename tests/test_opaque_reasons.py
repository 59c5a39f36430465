"""Why a node stays opaque: recorded at import, shown by ``eqsat inspect`` and the optimize report."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat import onnx_io
from eqsat.cli import main


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),  # 4-D @ 2-D: a broadcast-batch matmul
        helper.make_node("Softmax", ["m"], ["s"], axis=-1),  # no registry operator
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Gemm", ["x2", "w", "c"], ["g"], beta=0.5),  # beta != 1 is not mapped
        helper.make_node("Relu", ["g"], ["y2"]),
    ]
    g = helper.make_graph(nodes, "reasons", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4]),
                                             helper.make_tensor_value_info("x2", TensorProto.FLOAT, [3, 4]),
                                             helper.make_tensor_value_info("c", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 2, 3, 4]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [3, 4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_each_opaque_type_has_its_reason() -> None:
    reasons = {op: why for op, _, why in onnx_io.opaque_reasons(onnx_io.load_model(_model()))}
    assert reasons["MatMul"].startswith("unsupported: a 1-D or broadcast-batch matmul")
    assert reasons["Softmax"] == "eqsat has no operator for Softmax"
    assert reasons["Gemm"] == "unsupported: a Gemm with beta != 1"
    assert "Relu" not in reasons  # imported as registry operators


def test_inspect_and_the_report_print_the_reasons(tmp_path, capsys) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "eqsat has no operator for Softmax" in out and "beta != 1" in out
    assert main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "-q"]) == 0
    report = capsys.readouterr().out
    assert "Softmax x1: eqsat has no operator for Softmax" in report


def test_a_graph_without_opaque_nodes_has_no_reasons() -> None:
    from eqsat import zoo

    assert onnx_io.opaque_reasons(onnx_io.load_model(zoo.nasrnn_cell(hidden=8))) == []
