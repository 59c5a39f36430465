"""Mixed-precision models (eqsat.onnx_io.precision, eqsat.ops.cast, eqsat.ir.precision): a float16 model with
float32 islands behind casts, as a half-precision LLaMA computes its RMSNorm and softmax, imports with nothing
opaque that its float32 copy imports, keeps its regions, is priced in each operator's precision, and is written
back with every tensor in its precision and its signature unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat import onnx_io
from eqsat.costs import AnalyticCostModel, graph_cost, graph_cost_keys
from eqsat.ir.graph import Graph
from eqsat.ir.precision import MIXED_KEY, tensor_precisions

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
D = 16


def _block(half: int = F16) -> onnx.ModelProto:
    """A decoder block in ``half`` (float32 for the copy): RMSNorm and softmax computed in float32 behind casts
    (none in the float32 copy), three projections of one input, a residual add, and a cast round trip."""
    rng = np.random.default_rng(0)
    dt = onnx.helper.tensor_dtype_to_np_dtype(half)

    def w(name: str, shape: tuple[int, ...], dtype: np.dtype = dt) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(dtype), name)

    cast = half != F32

    def to32(x: str, y: str) -> list[onnx.NodeProto]:
        return [helper.make_node("Cast", [x], [y], to=F32)] if cast else [helper.make_node("Identity", [x], [y])]

    def back(x: str, y: str) -> list[onnx.NodeProto]:
        return [helper.make_node("Cast", [x], [y], to=half)] if cast else [helper.make_node("Identity", [x], [y])]

    nodes = [*to32("x", "h"), helper.make_node("Mul", ["h", "h"], ["sq"]),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"]),
             helper.make_node("Div", ["h", "rms"], ["n"]), helper.make_node("Mul", ["n", "g32"], ["ng"]),
             *back("ng", "n16"), helper.make_node("Mul", ["n16", "g"], ["s"]),
             helper.make_node("MatMul", ["s", "wq"], ["q"]), helper.make_node("MatMul", ["s", "wk"], ["k"]),
             helper.make_node("MatMul", ["s", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["a"]), *to32("a", "a32"),
             helper.make_node("Softmax", ["a32"], ["p"], axis=-1), *back("p", "p16"),
             helper.make_node("MatMul", ["p16", "v"], ["o"]), helper.make_node("Add", ["o", "x"], ["r"]),
             *to32("x", "x32"), *back("x32", "xx"), helper.make_node("Add", ["r", "xx"], ["y"])]
    inits = [w("wq", (D, D)), w("wk", (D, D)), w("wv", (D, D)), w("g", (D,)), w("g32", (D,), np.float32),
             numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes"),
             numpy_helper.from_array(np.array(1e-6, dtype=np.float32), "eps")]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", half, ["batch", 8, D])],
                          [helper.make_tensor_value_info("y", half, ["batch", 8, D])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _types(model: onnx.ModelProto) -> dict[str, int]:
    g = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph
    out = {vi.name: vi.type.tensor_type.elem_type for vi in (*g.input, *g.output, *g.value_info)}
    out.update({t.name: t.data_type for t in g.initializer})
    return out


def test_a_model_in_float32_and_one_half_type_is_mixed() -> None:
    assert onnx_io.mixed_half(_block()) == "float16"
    assert onnx_io.uniform_half(_block()) == ""
    assert onnx_io.mixed_half(_block(F32)) == ""
    assert onnx_io.mixed_half(onnx_io.convert_floats(_block(F32), F32, F16)) == ""


def test_it_imports_with_nothing_opaque_its_float32_copy_imports_and_keeps_its_regions() -> None:
    graph = onnx_io.load_model(_block(), symbolic=True)
    single = onnx_io.load_model(_block(F32), symbolic=True)
    assert sum(n.is_opaque for n in graph.nodes) == sum(n.is_opaque for n in single.nodes) == 0
    casts = [(n.p["source"], n.p["target"]) for n in graph.nodes if n.op == "cast"]
    assert sorted(casts) == sorted([("float16", "float32")] * 3 + [("float32", "float16")] * 3)
    # the RMSNorm's tail sits behind a cast to float16: no fusion swallows that cast
    assert not any(n.op == "cast" and n.inputs[0] == "x" and n.output == "n16" for n in graph.nodes)
    prec = tensor_precisions(graph)
    assert prec["x"] == prec["q"] == prec["y"] == "float16" and prec["a32"] == prec["p"] == "float32"
    keys = dict(zip((n.output for n in graph.nodes), graph_cost_keys(graph), strict=True))
    assert {k.dtype for k in keys["q"]} == {"float16"} and {k.dtype for k in keys["p"]} == {"float32"}


@pytest.fixture(scope="module")
def optimized() -> eqsat.OptimizeResult:
    return eqsat.optimize(_block(), time_limit=20, cache=False)


def test_it_is_optimized_and_written_with_every_tensor_in_its_precision(optimized: eqsat.OptimizeResult) -> None:
    res, original = optimized, _block()
    assert not res.kept_original and res.cost_after < res.cost_before
    model = res.model
    onnx.checker.check_model(model, full_check=True)
    assert [(i.name, i.type) for i in model.graph.input] == [(i.name, i.type) for i in original.graph.input]
    assert [(o.name, o.type) for o in model.graph.output] == [(o.name, o.type) for o in original.graph.output]
    types = _types(model)
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    assert softmax and all(types[n.input[0]] == F32 for n in softmax)  # the island stays in float32
    products = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm")]
    assert products and all(types[n.input[0]] == F16 for n in products)
    # the three projections of one input merged, in float16
    assert len(products) < 5
    assert res.numeric is not None and res.numeric.ok and "tolerance 0.01" in res.numeric.summary()
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 8, D)).astype(np.float16)
        got = onnx_io.run_onnxruntime(model, {"x": x})[0]
        want = onnx_io.run_onnxruntime(original, {"x": x})[0]
        assert got.dtype == np.float16
        assert np.abs(got.astype(np.float32) - want.astype(np.float32)).max() <= 1e-2 * np.abs(want).max()


def test_a_cast_round_trip_goes_and_the_costs_are_in_float16(optimized: eqsat.OptimizeResult) -> None:
    casts = [n for n in optimized.model.graph.node if n.op_type == "Cast"]
    assert len(casts) < 6  # x -> float32 -> float16 is x
    graph = onnx_io.load_model(_block(), symbolic=True)
    meta = {k: v for k, v in graph.meta.items() if k != MIXED_KEY}
    as_float32 = Graph(graph.inputs, graph.weights, graph.nodes, graph.outputs, graph.name, meta)
    analytic = AnalyticCostModel()
    assert graph_cost(graph, analytic) < graph_cost(as_float32, analytic)  # float16 regions move half the bytes


def test_a_weight_read_at_two_precisions_is_written_once_for_each() -> None:
    w = numpy_helper.from_array(np.ones((2, 2), dtype=np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Cast", ["a"], ["a32"], to=F32),
             helper.make_node("Add", ["a32", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [2, 2])],
                          [helper.make_tensor_value_info("y", F32, [2, 2])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    out = onnx_io.restore_precisions(model, {"x": "float16", "a32": "float32", "y": "float32"})
    onnx.checker.check_model(out, full_check=True)
    types = _types(out)
    assert types["a"] == F16 and types["y"] == F32 and out.graph.input[0].type.tensor_type.elem_type == F16
    assert {t.data_type for t in out.graph.initializer} == {F16, F32} and len(out.graph.initializer) == 2
    x = np.full((2, 2), 0.5, dtype=np.float16)
    np.testing.assert_array_equal(onnx_io.run_onnxruntime(out, {"x": x})[0], np.full((2, 2), 2.5, np.float32))


def test_a_node_reading_two_precisions_is_refused() -> None:
    nodes = [helper.make_node("Cast", ["x"], ["x32"], to=F32), helper.make_node("Add", ["x", "x32"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, [2])],
                          [helper.make_tensor_value_info("y", F32, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(onnx_io.PrecisionError, match="Add"):
        onnx_io.restore_precisions(model, {"x": "float16", "x32": "float32"})


def test_a_measured_cost_model_times_a_change_of_precision_as_written() -> None:
    from eqsat.costs.measured_cpu import one_node_model
    from eqsat.ops import get as op

    cast = op("cast")
    key = cast.cost_key(cast.normalize({"source": "float32", "target": "float16"}), [(4, 64)], (4, 64))
    model = one_node_model(key)  # checked by onnx's checker: the output is in float16
    assert model.graph.output[0].type.tensor_type.elem_type == F16
    out = onnx_io.run_onnxruntime(model, {"in0": np.full((4, 64), 1.0 + 2.0 ** -12, dtype=np.float32)})[0]
    assert out.dtype == np.float16 and float(out[0, 0]) == 1.0
