"""ONNX import/export edge cases and bad input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat import onnx_io
from eqsat.errors import ModelLoadError
from eqsat.onnx_io.runtime import run_onnxruntime
from eqsat.pipeline.check import check_equal
from eqsat.testing.onnx_builders import make_model, value_info


def _model(nodes, inputs, outputs, inits=(), opset=17):
    return make_model(nodes, inputs, outputs, inits, opset, ir_version=8 if opset >= 13 else 7)


def test_truncated_file_is_a_clear_error(tmp_path) -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [value_info("x", [2, 3])], [value_info("y", [2, 3])])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString()[:-7])
    with pytest.raises(ModelLoadError, match="m.onnx"):
        onnx_io.load_model(path)


def test_missing_file_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no such model"):
        onnx_io.load_model(tmp_path / "nope.onnx")


def test_empty_graph_is_a_clear_error() -> None:
    with pytest.raises(ModelLoadError, match="empty"):
        onnx_io.load_model(_model([], [], []))


def test_dynamic_dims_name_the_input_and_can_be_fixed() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["batch", 3])], [("y", ["batch", 3])])
    with pytest.raises(ModelLoadError, match=r"'x'.*--input-shape x="):
        onnx_io.load_model(m)
    g = onnx_io.load_model(m, input_shapes={"x": (4, 3)})
    assert g.shapes["y"] == (4, 3)
    with pytest.raises(ModelLoadError, match="unknown inputs"):
        onnx_io.load_model(m, input_shapes={"x": (4, 3), "z": (1,)})


def test_unknown_op_in_custom_domain_is_kept() -> None:
    node = helper.make_node("Mystery", ["x"], ["m"], domain="com.example", alpha=0.5)
    relu = helper.make_node("Relu", ["m"], ["y"])
    vi = value_info("m", [2, 3])
    m = make_model([node, relu], [value_info("x", [2, 3])], [value_info("y", [2, 3])], value_infos=[vi],
                   domains=["com.example"])
    graph = onnx_io.load_model(m)
    assert graph.op_histogram()["Mystery"] == 1
    out = onnx_io.to_onnx(graph)
    kept = [n for n in out.graph.node if n.op_type == "Mystery"]
    assert kept and kept[0].domain == "com.example" and kept[0].attribute[0].f == pytest.approx(0.5)


def test_identical_initializers_are_stored_once() -> None:
    w = np.ones((3, 3), np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("MatMul", ["a", "w2"], ["y"])]
    m = _model(nodes, [value_info("x", [2, 3])], [value_info("y", [2, 3])],
               [numpy_helper.from_array(w, "w1"), numpy_helper.from_array(w.copy(), "w2")])
    out = onnx_io.to_onnx(onnx_io.load_model(m))
    assert len(out.graph.initializer) == 1
    assert check_equal(m, out).ok


@pytest.mark.parametrize("opset", [9, 13, 21])
def test_split_pieces_export_as_one_split(opset: int) -> None:
    split_attr = {"split": [2, 4]} if opset < 13 else {}
    ins = ["x"] if opset < 13 else ["x", "sizes"]
    inits = [] if opset < 13 else [numpy_helper.from_array(np.array([2, 4], np.int64), "sizes")]
    nodes = [helper.make_node("Split", ins, ["a", "b"], axis=1, **split_attr),
             helper.make_node("Relu", ["a"], ["y1"]), helper.make_node("Tanh", ["b"], ["y2"])]
    m = _model(nodes, [("x", [3, 6])], [("y1", [3, 2]), ("y2", [3, 4])], inits, opset=opset)
    g = onnx_io.load_model(m)
    assert g.op_histogram()["split"] == 2
    out = onnx_io.to_onnx(g)
    assert [n.op_type for n in out.graph.node].count("Split") == 1
    assert out.opset_import[0].version == opset
    assert check_equal(m, out).ok


def test_gemm_attributes_round_trip() -> None:
    rng = np.random.default_rng(0)
    a = numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "A")
    c = numpy_helper.from_array(rng.standard_normal((5,)).astype(np.float32), "C")
    node = helper.make_node("Gemm", ["x", "A", "C"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)
    m = _model([node], [value_info("x", [4, 3])], [value_info("y", [3, 5])], [a, c])
    g = onnx_io.load_model(m)
    assert "opaque" not in {n.op for n in g.nodes}
    assert check_equal(m, onnx_io.to_onnx(g)).ok


def test_integer_tensors_stay_opaque_and_graph_is_equal() -> None:
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    m = _model(nodes, [value_info("x", [2, 3])], [value_info("y", [2, 3])])
    g = onnx_io.load_model(m)
    assert check_equal(m, onnx_io.to_onnx(g)).ok
    assert g.op_histogram()["relu"] == 1


def test_shape_of_a_static_tensor_is_folded() -> None:
    """An attention scale computed at run time from Shape (transformers' SDPA export): with static shapes it is
    a constant, so the Mul by it imports as a scalar multiplication instead of staying opaque."""
    from onnx import helper

    from eqsat.onnx_io import load_model, opaque_reasons, to_onnx
    from eqsat.pipeline.check import check_equal

    nodes = [helper.make_node("Shape", ["x"], ["s"], start=-1),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Sqrt", ["sf"], ["r"]),
             helper.make_node("Div", ["one", "r"], ["scale"]),
             helper.make_node("Mul", ["x", "scale"], ["y"])]
    m = make_model(nodes, [("x", [2, 3, 16])], [("y", [2, 3, 16])], {"one": np.array([1.0], np.float32)})
    ir = load_model(m)
    assert opaque_reasons(ir) == []
    assert [n.op for n in ir.nodes] == ["smul"]
    assert check_equal(m, to_onnx(ir)).ok


def test_identity_and_a_float_cast_to_float_are_views() -> None:
    import eqsat

    nodes = [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Identity", ["r"], ["i"]), helper.make_node("Cast", ["i"], ["y"], to=TensorProto.DOUBLE)]
    model = make_model(nodes, [("x", ["batch", 8])], [("y", ["batch", 8], TensorProto.DOUBLE)])
    g = onnx_io.load_model(model, symbolic=True)
    assert [n.op for n in g.nodes] == ["reshape", "relu", "reshape", "opaque"]  # the cast to double stays
    res = eqsat.optimize(model, time_limit=10)
    assert res.numeric is not None and res.numeric.ok


def test_neg_imports_as_a_scaling_by_minus_one() -> None:
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Relu", ["n"], ["y"])]
    model = make_model(nodes, [("x", [3, 5])], [("y", [3, 5])])
    g = onnx_io.load_model(model)
    assert [n.op for n in g.nodes] == ["smul", "relu"]
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(g.evaluate({"x": x})[0], np.maximum(-x, 0))
    assert check_equal(model, onnx_io.to_onnx(g)).ok


def _rmsnorm_model(spelling: str, axes: list[int] = [-1]) -> onnx.ModelProto:  # noqa: B006 (read only)
    """x / sqrt(mean(x^2) + eps) (* scale), as the exporters write a LLaMA RMSNorm: ``ts`` with Pow and Div(1, .)
    and no scale, ``dynamo`` with Reciprocal, a float32 Cast and the scale on the left."""
    consts = {"eps": np.array(1e-6, np.float32), "one": np.array(1.0, np.float32), "two": np.array(2.0, np.float32),
              "scale": np.linspace(0.5, 1.5, 8).astype(np.float32)}
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=axes, keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rt"])]
    if spelling == "ts":
        nodes += [helper.make_node("Div", ["one", "rt"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["y"])]
    else:
        nodes += [helper.make_node("Reciprocal", ["rt"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["n"]),
                  helper.make_node("Cast", ["n"], ["c"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["scale", "c"], ["y"])]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    return make_model(nodes, [("x", [2, 5, 8])], [("y", [2, 5, 8])], inits)


@pytest.mark.parametrize("spelling", ["ts", "dynamo"])
def test_an_rmsnorm_imports_as_one_operator(spelling: str) -> None:
    model = _rmsnorm_model(spelling)
    g = onnx_io.load_model(model)
    assert [n.op for n in g.nodes] == ["rmsnorm"]
    assert check_equal(model, onnx_io.to_onnx(g)).ok
    assert check_equal(model, onnx_io.to_onnx(g, opset=23)).ok  # ONNX's own RMSNormalization
    assert "RMSNormalization" in {n.op_type for n in onnx_io.to_onnx(g, opset=23).graph.node}


def test_rmsnorm_pieces_over_other_axes_import_as_operators() -> None:
    # a mean over the first axis is no RMSNorm: the pieces (Pow, Sqrt, Div(1, .)) import one by one
    model = _rmsnorm_model("ts", axes=[0])
    g = onnx_io.load_model(model)
    assert not [n for n in g.nodes if n.op == "opaque"]
    assert "rmsnorm" not in {n.op for n in g.nodes}
    assert {"ewsqrt", "ewrecip"} <= {n.op for n in g.nodes}
    assert check_equal(model, onnx_io.to_onnx(g)).ok


def test_the_rmsnorm_export_is_the_spelling_onnxruntime_fuses(tmp_path) -> None:
    # the exporters' Reciprocal spelling runs as six kernels; the export's runs as SimplifiedLayerNormalization
    import onnxruntime as ort

    g = onnx_io.load_model(_rmsnorm_model("dynamo"))
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(onnx_io.to_onnx(g).SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert [n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node] == ["SimplifiedLayerNormalization"]


def _gqa_repeat_model() -> onnx.ModelProto:
    # grouped-query attention's key/value head repeat, as the dynamo exporter writes it: [b, kv, s, d] ->
    # Unsqueeze -> Expand to [b, kv, rep, s, d] (the target computed from the input's shape) -> Reshape
    shape_of = [helper.make_node("Shape", ["x"], ["xs"]),
                helper.make_node("Gather", ["xs", "i0"], ["b"], axis=0),
                helper.make_node("Gather", ["xs", "i2"], ["s"], axis=0),
                helper.make_node("Concat", ["b", "kv", "rep", "s", "d"], ["target"], axis=0),
                helper.make_node("Concat", ["b", "heads", "s", "d"], ["merged"], axis=0)]
    nodes = [*shape_of, helper.make_node("Unsqueeze", ["x", "ax2"], ["u"]),
             helper.make_node("Expand", ["u", "target"], ["e"]),
             helper.make_node("Reshape", ["e", "merged"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    consts = {"i0": [0], "i2": [2], "kv": [2], "rep": [3], "d": [4], "heads": [6], "ax2": [2]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in consts.items()]
    return make_model(nodes, [("x", ["batch", 2, "seq", 4])], [("y", ["batch", 6, "seq", 4])], inits, opset=18)


def test_expand_of_an_activation_imports_as_an_operator_with_symbolic_sizes() -> None:
    model = _gqa_repeat_model()
    g = onnx_io.load_model(model, symbolic=True)
    assert "expand" in {n.op for n in g.nodes}
    assert not [n for n in g.nodes if n.op == "opaque" and g.dtypes[n.output] == "float32"]
    res = eqsat.optimize(model, time_limit=10)
    assert res.numeric is not None and res.numeric.ok  # checked at two sets of sizes
    dims = [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in res.model.graph.output]
    assert dims == [["batch", 6, "seq", 4]]


def test_a_weight_expanded_to_the_batch_is_computed_at_run_time() -> None:
    # ViT's class token: a [1, 1, d] weight expanded to [batch, 1, d] and put before the patches; as a weight
    # transform it would be written as a constant at the generic batch size
    nodes = [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Gather", ["xs", "i0"], ["b"], axis=0),
             helper.make_node("Concat", ["b", "one", "d"], ["target"], axis=0),
             helper.make_node("Expand", ["cls", "target"], ["c"]),
             helper.make_node("Concat", ["c", "x"], ["y"], axis=1)]
    cls = numpy_helper.from_array(np.random.default_rng(0).standard_normal((1, 1, 8)).astype(np.float32), "cls")
    inits = [cls, *(numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
                    {"i0": [0], "one": [1], "d": [8]}.items())]
    model = make_model(nodes, [("x", ["batch", 5, 8])], [("y", ["batch", 6, 8])], inits, opset=18)
    g = onnx_io.load_model(model, symbolic=True)
    assert "expand" in {n.op for n in g.nodes}
    out = onnx_io.to_onnx(g)
    assert "Expand" in {n.op_type for n in out.graph.node}
    assert check_equal(model, out).ok
    x = np.ones((3, 5, 8), np.float32)
    np.testing.assert_allclose(run_onnxruntime(out, {"x": x})[0], run_onnxruntime(model, {"x": x})[0])
