"""Why a node stays opaque: recorded at import, shown by ``eqsat inspect`` and the optimize report."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat import onnx_io
from eqsat.cli.app import main
from eqsat.testing.onnx_builders import make_model


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    wb = numpy_helper.from_array(np.ones((4,), np.float32), "wb")
    nodes = [
        helper.make_node("MatMul", ["x", "wb"], ["m"]),  # a 1-D operand
        helper.make_node("Hardmax", ["m"], ["s"], axis=-1),  # no registry operator
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Gemm", ["x2", "w", "c"], ["g"], beta=0.5),  # beta != 1 is not mapped
        helper.make_node("Relu", ["g"], ["y2"]),
    ]
    return make_model(nodes, [("x", [1, 2, 3, 4]), ("x2", [3, 4]), ("c", [3, 4])], [("r", [1, 2, 3]), ("y2", [3, 4])],
                      [w, wb], name="reasons")


def test_each_opaque_type_has_its_reason() -> None:
    reasons = {op: why for op, _, why in onnx_io.opaque_reasons(onnx_io.load_model(_model()))}
    assert reasons["MatMul"].startswith("unsupported: a 1-D operand")
    assert reasons["Hardmax"] == "eqsat has no operator for Hardmax"
    assert reasons["Gemm"] == "unsupported: a Gemm with beta != 1"
    assert "Relu" not in reasons  # imported as registry operators


def test_inspect_and_the_report_print_the_reasons(tmp_path, capsys) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "eqsat has no operator for Hardmax" in out and "beta != 1" in out
    assert main(["optimize", str(path), "-o", str(tmp_path / "o.onnx"), "-q"]) == 0
    report = capsys.readouterr().out
    assert "Hardmax x1: eqsat has no operator for Hardmax" in report


def test_a_graph_without_opaque_nodes_has_no_reasons() -> None:
    from eqsat import models
    assert onnx_io.opaque_reasons(onnx_io.load_model(models.nasrnn_cell(hidden=8))) == []


def test_activations_times_a_matrix_import_as_a_matrix_product() -> None:
    """(batch, seq, hidden) @ (hidden, out), every transformer projection: a 2-D matmul between reshapes,
    numerically the same, so the matrix rules (merges of Q/K/V projections) apply."""
    from eqsat.pipeline.check import check_equal

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"]) for i in range(3)]
    model = make_model(nodes, [("x", [2, 5, 8])], [(f"y{i}", [2, 5, 8]) for i in range(3)], inits, name="proj")
    graph = onnx_io.load_model(model)
    assert graph.op_histogram() == {"reshape": 6, "matmul": 3}
    assert all(graph.shapes[n.output] == (10, 8) for n in graph.nodes if n.op == "matmul")
    assert check_equal(model, onnx_io.to_onnx(graph)).ok

    import eqsat

    res = eqsat.optimize(model, time_limit=30)  # the three projections share their (reshaped) input
    assert sum(1 for n in res.graph.nodes if n.op in ("matmul", "matmul_t")) == 1
    assert res.numeric is not None and res.numeric.ok
