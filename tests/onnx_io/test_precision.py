"""Models in half precision (eqsat.onnx_io.precision): a uniformly float16 model imports with nothing opaque
that its float32 copy imports, is priced in float16, written back in float16 and checked at a tolerance fit for
it; a mixed-precision model is not taken for a uniform one (tests/onnx_io/test_mixed_precision.py has those)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat import onnx_io
from eqsat.costs import AnalyticCostModel, InPrecision
from eqsat.models.registry import builtin_models
from eqsat.ops import get as op
from eqsat.pipeline.check import NumericCheckUnavailable

F16, BF16, F32 = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT


def _half(name: str, to: int = F16) -> onnx.ModelProto:
    return onnx_io.convert_floats(builtin_models()[name](), F32, to)


def _float_types(model: onnx.ModelProto) -> set[int]:
    g = model.graph
    types = {vi.type.tensor_type.elem_type for vi in (*g.input, *g.output)} | {t.data_type for t in g.initializer}
    return types & {F16, BF16, F32, TensorProto.DOUBLE}


def test_a_model_in_one_half_precision_is_recognised_and_no_other() -> None:
    assert onnx_io.uniform_half(_half("small_cnn")) == "float16"
    assert onnx_io.uniform_half(_half("small_cnn", BF16)) == "bfloat16"
    assert onnx_io.uniform_half(builtin_models()["small_cnn"]()) == ""
    # a float32 island behind casts: mixed precision, not uniform
    nodes = [helper.make_node("Cast", ["x"], ["x32"], to=F32), helper.make_node("Relu", ["x32"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=F16)]
    mixed = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F16, [2, 3])],
                                                [helper.make_tensor_value_info("y", F16, [2, 3])]))
    assert onnx_io.uniform_half(mixed) == "" and onnx_io.mixed_half(mixed) == "float16"


def test_converting_between_precisions_keeps_every_value_and_rewrites_casts_and_constants() -> None:
    w = np.array([[0.5, -1.25], [3.0, 1e-3]], dtype=np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Constant", [], ["c"], value_float=2.0),
             helper.make_node("Mul", ["m", "c"], ["y0"]), helper.make_node("Cast", ["y0"], ["y"], to=F32)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [1, 2])],
                          [helper.make_tensor_value_info("y", F32, [1, 2])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    half = onnx_io.convert_floats(model, F32, F16)
    assert onnx_io.uniform_half(half) == "float16"
    constant = half.graph.node[1].attribute[0]  # value_float became a float16 tensor
    assert constant.name == "value" and constant.t.data_type == F16
    assert [a.i for a in half.graph.node[3].attribute] == [F16]
    onnx.checker.check_model(half, full_check=True)
    wide = onnx_io.convert_floats(half, F16, F32)
    assert np.array_equal(numpy_helper.to_array(wide.graph.initializer[0]),
                          w.astype(np.float16).astype(np.float32))  # float16 to float32 is exact
    feeds = {"x": np.array([[1.0, 2.0]], dtype=np.float16)}
    got = onnx_io.run_onnxruntime(half, feeds)[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, onnx_io.run_onnxruntime(model, {"x": feeds["x"].astype(np.float32)})[0],
                               rtol=1e-2)


@pytest.mark.parametrize("name", ["bert_attention_block",
                                  pytest.param("nasrnn_cell", marks=pytest.mark.slow)])  # about 5 s
def test_a_float16_model_is_optimized_priced_and_written_in_float16(name: str) -> None:
    half = _half(name)
    graph = onnx_io.load_model(half)
    single = onnx_io.load_model(builtin_models()[name]())
    assert sum(n.is_opaque for n in graph.nodes) == sum(n.is_opaque for n in single.nodes)
    assert graph.meta[onnx_io.PRECISION_KEY] == "float16"
    res = eqsat.optimize(half, time_limit=20, cache=False)
    full = eqsat.optimize(builtin_models()[name](), time_limit=20, cache=False)
    assert not res.kept_original and res.cost_after < res.cost_before
    assert "float16" in res.cost_model and res.cost_before < full.cost_before  # half the bytes moved
    assert _float_types(res.model) == {F16} and onnx_io.uniform_half(res.model) == "float16"
    assert [i.name for i in res.model.graph.input] == [i.name for i in half.graph.input]
    assert res.numeric is not None and res.numeric.ok and "tolerance 0.01" in res.numeric.summary()
    feeds = onnx_io.random_feeds(half, seed=5)
    for a, b in zip(onnx_io.run_onnxruntime(res.model, feeds), onnx_io.run_onnxruntime(half, feeds), strict=True):
        assert a.dtype == np.float16
        assert np.abs(a.astype(np.float32) - b.astype(np.float32)).max() <= 1e-2 * max(1.0, np.abs(b).max())


def test_pricing_in_half_precision_moves_half_the_bytes() -> None:
    add = op("ewadd")  # memory-bound: its time is the bytes it moves
    key = add.cost_key(add.normalize({}), [(1024, 1024), (1024, 1024)], (1024, 1024))
    analytic = AnalyticCostModel()
    half = InPrecision(analytic, "float16")
    assert half.cost(key) < analytic.cost(key)
    assert half.costs([key]) == {key: half.cost(key)}
    assert half.device_identity()["dtype"] == "float16" and half.name.endswith("in float16")
    assert isinstance(half.in_context(1 << 20), InPrecision)


def test_bfloat16_that_onnxruntime_cannot_run_is_refused_with_the_reason() -> None:
    with pytest.raises(NumericCheckUnavailable, match="onnxruntime cannot run the original"):
        eqsat.optimize(_half("bert_attention_block", BF16), time_limit=10, cache=False)


def test_a_float16_gelu_whose_constants_are_rounded_collapses_as_in_float32() -> None:
    # sqrt(2) in float16 is 1.4140625: the GELU spelling (Div, Erf, Add, Mul, Mul) still collapses to one gelu
    from eqsat.models.hf_bert import hf_bert
    single = hf_bert(seq=8, hidden=32, heads=2, vocab=50, gelu="erf", opset=17)
    half = onnx_io.convert_floats(single, F32, F16)
    graphs = [onnx_io.load_model(m) for m in (single, half)]
    for g in graphs:
        assert sum(n.op == "gelu" for n in g.nodes) == 1
    assert [sum(n.is_opaque for n in g.nodes) for g in graphs][0] == sum(n.is_opaque for n in graphs[1].nodes)
