"""Models with dynamic axes: optimized without fixing them, written with the same symbolic signature, checked at
several sizes; a rewrite right only at one size does not fire."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat.errors import InputShapeError
from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.ir.rule import Rule
from eqsat.ir.symbols import META_KEY, SymbolicShapeError, Symbols, symbolic_shapes
from eqsat.models.hf_bert import hf_bert
from eqsat.onnx_io import load_model, run_onnxruntime, to_onnx
from eqsat.ops.dims import Sym

BATCH, SEQ = Sym.var("batch"), Sym.var("seq")


def _dims(vi: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def _mlp(batch: int | str = "batch") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), f"W{k}")
         for k, s in enumerate([(64, 128), (128, 64), (128, 64)])]
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "W1"], ["a"]), helper.make_node("MatMul", ["r", "W2"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 64])], w)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_generic_values_read_back_as_polynomials() -> None:
    syms = Symbols.choose(["batch", "seq"], static=[768, 12, 64, 50257])
    b, s = syms.generic["batch"], syms.generic["seq"]
    assert b != s and all(v % b and v % s for v in (768, 12, 64, 50257))
    assert syms.decode(b * s * 768) == BATCH * SEQ * 768
    assert syms.decode(s - 1) == SEQ - 1
    assert syms.decode(768) == 768
    assert syms.at((b, s * 12, 64), {"batch": 2, "seq": 5}) == (2, 60, 64)


def test_a_dynamic_model_keeps_its_axes_and_is_checked_at_two_sizes() -> None:
    res = eqsat.optimize(_mlp(), time_limit=10)
    assert not res.kept_original and res.cost_after < res.cost_before
    assert _dims(res.model.graph.input[0]) == ["batch", 64] and _dims(res.model.graph.output[0]) == ["batch", 64]
    assert res.numeric is not None and res.numeric.ok and len(res.numeric.sizes) == 2
    assert res.dims == {"batch": 1} and "kept: batch" in res.summary()
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)  # a batch it was not checked at
    np.testing.assert_allclose(run_onnxruntime(res.model, {"x": x})[0], run_onnxruntime(_mlp(), {"x": x})[0],
                               rtol=1e-4, atol=1e-4)


def test_dims_and_input_shapes_set_the_costed_sizes_only() -> None:
    by_dim = eqsat.optimize(_mlp(), time_limit=10, dims={"batch": 8})
    by_shape = eqsat.optimize(_mlp(), time_limit=10, input_shapes={"x": (8, 64)})
    one = eqsat.optimize(_mlp(), time_limit=10)
    assert by_dim.dims == by_shape.dims == {"batch": 8}
    assert by_dim.cost_before == pytest.approx(by_shape.cost_before) and by_dim.cost_before > one.cost_before
    assert _dims(by_shape.model.graph.input[0]) == ["batch", 64]
    with pytest.raises(InputShapeError, match="does not have"):
        eqsat.optimize(_mlp(), time_limit=10, dims={"seq": 8})


def test_static_fixes_the_axes() -> None:
    res = eqsat.optimize(_mlp(), time_limit=10, dynamic=False, dims={"batch": 4})
    assert _dims(res.model.graph.input[0]) == [4, 64] and not res.dims


def test_a_rewrite_right_only_at_batch_1_fires_on_a_static_graph_not_on_a_symbolic_one() -> None:
    # transpose of a (1, 64) matrix = reshape to (64, 1); for (batch, 64) it is not
    only_batch_1 = Rule("transpose-as-reshape", ("(transpose [1 0] ?x)",), ("(reshape [64 1] ?x)",))

    def model(batch: int | str) -> onnx.ModelProto:
        g = helper.make_graph([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
                               helper.make_node("Relu", ["t"], ["y"])], "t",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, batch])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    static = eqsat.optimize(model(1), rules=[only_batch_1], time_limit=10)
    assert "Transpose" not in {n.op_type for n in static.model.graph.node}  # fired: a free reshape instead
    dynamic = eqsat.optimize(model("batch"), rules=[only_batch_1], time_limit=10)
    assert dynamic.kept_original and "Transpose" in {n.op_type for n in dynamic.model.graph.node}
    assert _dims(dynamic.model.graph.output[0]) == [64, "batch"]


def test_sizes_read_back_through_the_registry_or_the_graph_is_refused() -> None:
    syms = Symbols.choose(["batch", "h"], [64, 3, 4, 2])
    b, h = syms.generic["batch"], syms.generic["h"]
    ok = Graph((TensorInfo("x", (b, 64)),), {}, (make_node("reshape", {"shape": (64, b)}, ["x"], "y"),), ("y",),
               meta={META_KEY: syms.generic})
    assert symbolic_shapes(ok)["y"] == (64, BATCH)
    # a stride-2 convolution over a symbolic size: (h - 3) // 2 + 1 is no polynomial in h
    w = np.zeros((4, 3, 3, 3), dtype=np.float32)
    conv = Graph((TensorInfo("x", (1, 3, h, h)),), {"w": w, "bias": np.zeros(4, np.float32)},
                 (make_node("conv2d", {"strides": (2, 2)}, ["x", "w", "bias"], "y"),), ("y",),
                 meta={META_KEY: syms.generic})
    with pytest.raises(SymbolicShapeError, match="y"):
        symbolic_shapes(conv)


def test_dynamic_bert_keeps_batch_and_sequence() -> None:
    original = hf_bert(transformers="4", dynamic=True, seq=16, hidden=64, heads=4, vocab=100)
    res = eqsat.optimize(original, time_limit=20, dims={"sequence": 8})
    m = res.model
    assert [_dims(vi) for vi in m.graph.input] == [["batch", "sequence"]] * 2
    assert _dims(m.graph.output[0]) == ["batch", "sequence", 64] and _dims(m.graph.output[1]) == ["batch", 64]
    assert res.numeric is not None and res.numeric.ok and res.numeric.sizes == [{"batch": 1, "sequence": 8},
                                                                                {"batch": 3, "sequence": 17}]
    g = load_model(original, symbolic=True)
    generic = set(g.meta[META_KEY].values())
    for t in m.graph.initializer:  # no size is written at the generic point
        a = numpy_helper.to_array(t)
        if a.dtype.kind in "iu" and a.size < 64:
            assert not any(int(v) % p == 0 for v in a.ravel() if v for p in generic), t.name
    rng = np.random.default_rng(2)
    feeds = {"input_ids": rng.integers(0, 100, (2, 11)), "attention_mask": np.ones((2, 11), dtype=np.int64)}
    for got, want in zip(run_onnxruntime(m, feeds), run_onnxruntime(original, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_export_writes_symbolic_signature_and_run_time_sizes() -> None:
    g = load_model(hf_bert(transformers="4", dynamic=True, seq=16, hidden=64, heads=4, vocab=100), symbolic=True)
    m = to_onnx(g)
    assert _dims(m.graph.output[0]) == ["batch", "sequence", 64]
    assert "Shape" in {n.op_type for n in m.graph.node}  # the sizes come from the inputs at run time


def test_an_unnamed_dynamic_axis_comes_back_unnamed() -> None:
    m = _mlp()
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].Clear()  # an unknown size, no name
    res = eqsat.optimize(m, time_limit=10)
    assert not res.kept_original
    for vi in (res.model.graph.input[0], res.model.graph.output[0]):
        d = vi.type.tensor_type.shape.dim[0]
        assert not d.HasField("dim_value") and not d.dim_param
    assert res.numeric is not None and res.numeric.ok and res.numeric.sizes == [{"x_0": 1}, {"x_0": 3}]


def test_the_check_catches_a_model_right_only_at_batch_1() -> None:
    from eqsat.pipeline.check import check_equal

    original = _mlp()
    wrong = _mlp()  # sums over the batch axis: the same as the original at batch 1 only
    wrong.graph.node[-1].output[0] = "y_rows"
    wrong.graph.initializer.append(numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"))
    wrong.graph.node.append(helper.make_node("ReduceSum", ["y_rows", "axis0"], ["y"], keepdims=1))
    assert check_equal(original, wrong, sizes=[{"batch": 1}]).ok
    both = check_equal(original, wrong, sizes=[{"batch": 1}, {"batch": 3}])
    assert not both.ok and "shape" in both.summary()


def test_the_egraph_dump_shows_symbolic_shapes_and_exports_with_them(tmp_path, capsys) -> None:
    from eqsat.inspect.dump import EGraphDump

    path = tmp_path / "eg.json"
    res = eqsat.optimize(_mlp(), time_limit=10, dump_egraph=str(path))
    dump = EGraphDump.loads(path.read_text())
    assert set(dump.symbols) == {"batch"} and dump == res.egraph_dump
    y = dump.find_class("y")
    assert dump.shape_text(dump.egraph.eclass(y).shape) == "[batch, 64]"
    src = tmp_path / "m.onnx"
    onnx.save(_mlp(), src)
    from eqsat.cli.app import main
    assert main(["egraph", "stats", str(path)]) == 0
    assert "dynamic axes  batch: built at generic sizes" in capsys.readouterr().out
    assert main(["egraph", "export", str(path), "--model", str(src), "-o", str(tmp_path / "out.onnx")]) == 0
    assert _dims(onnx.load(tmp_path / "out.onnx").graph.input[0]) == ["batch", 64]


def _positions_model() -> onnx.ModelProto:
    """x [batch, seq, 16] + table[Range(0, Cast(Shape(x)[1]), 1)]: positions computed from the sequence length,
    as exporters write them."""
    table = numpy_helper.from_array(np.random.default_rng(3).standard_normal((64, 16)).astype(np.float32), "table")
    consts = [numpy_helper.from_array(np.array(v, dtype=np.int64), n) for n, v in (("one", 1), ("zero", 0))]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["length_raw"], axis=0),
             helper.make_node("Cast", ["length_raw"], ["length"], to=TensorProto.INT64),
             helper.make_node("Range", ["zero", "length", "one"], ["positions"]),
             helper.make_node("Gather", ["table", "positions"], ["embedded"], axis=0),
             helper.make_node("Add", ["x", "embedded"], ["h"]),
             helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "positions",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])],
                          [table, *consts])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_sizes_computed_from_shapes_stay_computed() -> None:
    g = load_model(_positions_model(), symbolic=True)
    shapes = symbolic_shapes(g)
    assert shapes["y"] == (BATCH, SEQ, 16) and shapes["positions"] == (SEQ,)  # Range typed by its length
    res = eqsat.optimize(_positions_model(), time_limit=10, dims={"seq": 8})
    assert res.numeric is not None and res.numeric.ok and res.numeric.sizes[1] == {"batch": 3, "seq": 17}
    x = np.random.default_rng(4).standard_normal((2, 5, 16)).astype(np.float32)  # neither size checked
    np.testing.assert_allclose(run_onnxruntime(res.model, {"x": x})[0],
                               run_onnxruntime(_positions_model(), {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_an_egraph_that_lost_input_terms_keeps_the_original(monkeypatch: pytest.MonkeyPatch) -> None:
    from eqsat.engine import readback
    from eqsat.pipeline import stages

    real = readback.input_terms

    def losing(egraph, graph):  # as egglog's serialization did once (see the issue 28 note): a term missing
        terms = real(egraph, graph)
        return dataclasses.replace(terms, missing=("y",))

    monkeypatch.setattr(stages.engine, "input_terms", losing)
    res = eqsat.optimize(_mlp(), time_limit=10)
    assert res.kept_original and "lost 1 of the input graph's terms" in res.kept_reason
    assert res.numeric is not None and res.numeric.ok
