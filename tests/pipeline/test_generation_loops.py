"""Generation loops: a ``Loop`` whose scan outputs stack one token and one state per iteration, as many as it
runs (a trip count given as an input, or a condition its body computes), imports with that count as a symbol of
its own; the graph around it is optimized, its body too, the written model keeps the original's signature, and it
computes what the original computes at several trip counts."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.errors import DynamicShapeError
from eqsat.ir.symbols import graph_size_inputs, representative, symbolic_shapes
from eqsat.onnx_io import load_model, load_with_axes, opaque_reasons, to_onnx
from eqsat.onnx_io.signature import signature_changes
from eqsat.ops.dims import Sym
from eqsat.pipeline import optimize
from eqsat.pipeline.check import sizes_to_check, trial_feeds

D = 64
VOCAB = 4


def generation_model(trips: int | None = None, stop: str = "", reshape: list[int] | None = None,
                     batch: bool = False) -> onnx.ModelProto:
    """A greedy generation loop. ``h = x @ w1``; then each iteration ``h = tanh(relu(h @ wa) + relu(h @ wb))`` (two
    products of one input: the body's optimizer merges them), ``token = argmax(h @ wv)``; the Loop stacks the
    tokens (``tokens``, [T]) and the states (``states``, [T, 1, D]), and ``y`` is the states through two
    transposes that cancel and a product (``y``, [T, 1, D]). ``trips``: a constant trip count (None: the graph
    input ``M``); ``stop``: "eos" ends the loop at token 0, "nan" at a NaN state (never, for finite inputs), ""
    never. ``reshape``: ``z``, the states reshaped to that constant target (a size the model bakes in: 6 rows).
    ``batch``: ``x`` is [B, D] (the states [T, B, D] and the tokens [T, B]; no "eos")."""
    rng = np.random.default_rng(7)

    def W(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)

    body_nodes = [helper.make_node("MatMul", ["h_in", "wa"], ["p"]), helper.make_node("MatMul", ["h_in", "wb"], ["q"]),
                  helper.make_node("Relu", ["p"], ["rp"]), helper.make_node("Relu", ["q"], ["rq"]),
                  helper.make_node("Add", ["rp", "rq"], ["s"]),
                  helper.make_node("Tanh", ["s"], ["h_out"]), helper.make_node("Identity", ["h_out"], ["state"]),
                  helper.make_node("MatMul", ["h_out", "wv"], ["logits"]),
                  helper.make_node("ArgMax", ["logits"], ["tok1"], axis=1, keepdims=0),
                  helper.make_node("Identity" if batch else "Squeeze", ["tok1"] if batch else ["tok1", "axis0"],
                                   ["tok"])]
    rows: str | int = "B" if batch else 1
    if stop == "eos":
        body_nodes += [helper.make_node("Equal", ["tok", "eos"], ["at_eos"]),
                       helper.make_node("Not", ["at_eos"], ["cond_out"])]
    elif stop == "nan":
        body_nodes += [helper.make_node("ReduceSum", ["h_out"], ["total"], keepdims=0),
                       helper.make_node("IsNaN", ["total"], ["is_nan"]),
                       helper.make_node("Not", ["is_nan"], ["cond_out"])]
    else:
        body_nodes += [helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [rows, D])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [rows, D]),
         helper.make_tensor_value_info("tok", TensorProto.INT64, ["B"] if batch else []),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [rows, D])],
        [W("wa", (D, D)), W("wb", (D, D)), W("wv", (D, VOCAB)),
         numpy_helper.from_array(np.array([0], np.int64), "axis0"),
         numpy_helper.from_array(np.array(0, np.int64), "eos")])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Loop", ["M", "true", "h"], ["h_last", "tokens", "states"], body=body, name="generate"),
             helper.make_node("Transpose", ["states"], ["t1"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0, 2]),
             helper.make_node("MatMul", ["t2", "w2"], ["y"])]
    inits = [W("w1", (D, D)), W("w2", (D, D)), numpy_helper.from_array(np.array(True), "true")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, D])]
    if trips is None:
        inputs.append(helper.make_tensor_value_info("M", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "M"))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", rows, D]),
               helper.make_tensor_value_info("tokens", TensorProto.INT64, ["T", "B"] if batch else ["T"]),
               helper.make_tensor_value_info("h_last", TensorProto.FLOAT, [rows, D])]
    if reshape is not None:
        inits.append(numpy_helper.from_array(np.array(reshape, np.int64), "target"))
        nodes += [helper.make_node("Reshape", ["states", "target"], ["flat"]),
                  helper.make_node("Relu", ["flat"], ["z"])]
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [6, D]))
    g = helper.make_graph(nodes, "generation", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString()).run(None, feeds)


def _same_outputs(a: onnx.ModelProto, b: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs of ``a``, having checked that ``b`` computes the same (shapes, token ids, values)."""
    want = _run(a, feeds)
    for have, ref in zip(_run(b, feeds), want, strict=True):
        assert have.shape == ref.shape and have.dtype == ref.dtype
        np.testing.assert_allclose(have, ref, rtol=1e-5, atol=1e-5)
    return want


def _x(seed: int, rows: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, D)).astype(np.float32)


def _ops(g: onnx.GraphProto) -> list[str]:
    return [n.op_type for n in g.node]


def _body(model: onnx.ModelProto) -> onnx.GraphProto:
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    return next(a.g for a in loop.attribute if a.name == "body")


def test_the_count_of_iterations_is_a_symbol_of_its_own() -> None:
    graph = load_model(generation_model())  # no dynamic input: the Loop's count is the only symbol
    shapes = symbolic_shapes(graph)
    # named as the file names the tokens' length, shared by the Loop's scan outputs, followed downstream
    assert shapes["tokens"] == (Sym.var("T"),) and shapes["states"] == (Sym.var("T"), 1, D)
    assert shapes["t1"] == (1, Sym.var("T"), D) and shapes["h_last"] == (1, D)
    assert graph_size_inputs(graph) == {"M": "T"}  # the trip count, fed the symbol's size
    assert representative(graph) == {"T": 1}
    loop = [n for n in graph.nodes if n.is_opaque]
    assert {n.p["op_type"] for n in loop} == {"Loop"} and {n.output for n in loop} == {"h_last", "tokens", "states"}
    # a constant bound on a loop its condition ends: costed at that bound, still a symbol
    bounded = load_model(generation_model(trips=8, stop="eos"))
    assert representative(bounded) == {"T": 8} and graph_size_inputs(bounded) == {}


def test_a_size_the_file_declares_for_a_scan_output_is_not_believed() -> None:
    model = generation_model()  # declared as one run's length (a traced export's), where M is an input
    model.graph.value_info.append(helper.make_tensor_value_info("states", TensorProto.FLOAT, [4, 1, D]))
    assert symbolic_shapes(load_model(model))["states"] == (Sym.var("T"), 1, D)


def test_a_loop_the_file_fixes_is_static() -> None:
    # a constant trip count and a condition passed through: the scan outputs are that long, and a size baked in
    # downstream (the reshape to 6 rows) imports like any other
    graph = load_model(generation_model(trips=6, reshape=[6, D]))
    assert not graph.meta.get("symbols") and graph.shapes["states"] == (6, 1, D)
    assert {n.p["op_type"] for n in graph.nodes if n.is_opaque} == {"Loop"}


@pytest.mark.parametrize("dynamic", [True, False])
def test_dims_give_a_count_the_size_it_is_costed_and_checked_at(dynamic: bool) -> None:
    # with the inputs fixed (dynamic=False) the count stays a symbol, and takes its size from --dim all the same
    graph, reason = load_with_axes(generation_model(), label="m", dims={"T": 7}, dynamic=dynamic)
    assert not reason and representative(graph) == {"T": 7}
    sizes, _ = sizes_to_check(graph)
    assert [s["T"] for s in sizes] == [7, 3]


def test_trial_feeds_give_a_trip_count_its_symbols_size() -> None:
    model = generation_model()
    for size in (2, 5):
        feeds = trial_feeds(model, 0, sizes={"T": size}, size_inputs={"M": "T"})
        assert feeds["M"].shape == () and int(feeds["M"]) == size


def test_export_computes_a_size_from_the_loops_output() -> None:
    model = generation_model(trips=None, stop="eos")
    g = model.graph  # a constant of the loop's length: Expand to the states' shape
    g.node.extend([helper.make_node("Shape", ["states"], ["states_shape"]),
                   helper.make_node("Expand", ["one", "states_shape"], ["ones_like"])])
    g.initializer.append(numpy_helper.from_array(np.ones((1, 1, D), np.float32), "one"))
    g.output.append(helper.make_tensor_value_info("ones_like", TensorProto.FLOAT, None))
    out = to_onnx(load_model(model))
    onnx.checker.check_model(out, full_check=True)
    ops = _ops(out.graph)
    assert ops.index("Shape") > ops.index("Loop")  # the size is read from the Loop's output, after it
    declared = [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in out.graph.output]
    assert declared[-1] == ["T", 1, D]
    for trips in (0, 3, 6):
        _same_outputs(model, out, {"x": _x(1), "M": np.array(trips, np.int64)})


def test_a_trip_count_input_loop_is_optimized_around_and_inside() -> None:
    model = generation_model()
    res = optimize(model, time_limit=30)
    assert not res.kept_original and res.numeric is not None and res.numeric.ok
    # checked at two trip counts, the input M fed each
    assert [s["T"] for s in res.numeric.sizes] == [1, 3]
    ops = _ops(res.model.graph)
    assert ops.count("Loop") == 1 and "Transpose" not in ops  # the transposes around it cancel
    assert len(res.bodies) == 1 and "Split" in _ops(_body(res.model))  # the body's two products merged
    assert signature_changes(model, res.model) == []  # y and tokens still [T, ...]
    onnx.checker.check_model(res.model, full_check=True)
    for trips in (0, 2, 5):
        y, tokens, _ = _same_outputs(model, res.model, {"x": _x(trips), "M": np.array(trips, np.int64)})
        assert y.shape == (trips, 1, D) and tokens.shape == (trips,)


def test_a_loop_its_condition_ends_is_optimized_and_equal_whenever_it_stops() -> None:
    model = generation_model(trips=8, stop="eos")
    res = optimize(model, time_limit=30)
    assert not res.kept_original and res.numeric is not None and res.numeric.ok
    assert "Transpose" not in _ops(res.model.graph) and signature_changes(model, res.model) == []
    lengths = {_same_outputs(model, res.model, {"x": _x(seed)})[1].shape[0] for seed in range(8)}
    assert len(lengths) > 1 and max(lengths) <= 8  # it stopped after different numbers of tokens


def test_a_size_baked_in_after_a_loop_that_may_stop_stays_opaque() -> None:
    model = generation_model(trips=6, stop="nan", reshape=[6, D])
    graph = load_model(model)
    assert graph.meta["symbols"].keys() == {"T"}
    reasons = {op: why for op, _, why in opaque_reasons(graph)}
    assert reasons["Reshape"].startswith("unsupported: a target shape")  # 6 rows is no size in T
    assert graph.shapes["z"] == (6, D)
    res = optimize(model, time_limit=30)
    assert not res.kept_original and res.numeric is not None and res.numeric.ok
    assert "Transpose" not in _ops(res.model.graph) and "Reshape" in _ops(res.model.graph)
    _same_outputs(model, res.model, {"x": _x(3)})


def test_a_size_computed_from_a_baked_one_is_refused_clearly() -> None:
    with pytest.raises(DynamicShapeError, match=r"'flat'.*how many times a Loop runs \(T\)"):
        load_model(generation_model(trips=6, stop="nan", reshape=[6, -1]))


def test_a_batch_symbol_and_a_loop_count_together() -> None:
    model = generation_model(trips=5, stop="nan", batch=True)  # runs at least once: the states are [T, B, D]
    graph = load_model(model, symbolic=True)
    assert symbolic_shapes(graph)["states"] == (Sym.var("T"), Sym.var("B"), D)
    res = optimize(model, time_limit=30)
    assert not res.kept_original and res.numeric is not None and res.numeric.ok
    assert [s["B"] for s in res.numeric.sizes] == [1, 3] and signature_changes(model, res.model) == []
    assert "Transpose" not in _ops(res.model.graph)
    for rows in (1, 4):
        y, tokens, _ = _same_outputs(model, res.model, {"x": _x(rows, rows)})
        assert y.shape == (5, rows, D) and tokens.shape == (5, rows)


def test_a_loop_that_may_run_zero_times_fixes_a_dynamic_size_it_stacks() -> None:
    # after no iteration onnxruntime gives the states [0, 0, D], not [0, B, D]: no symbolic shape holds, so the
    # run fixes the batch (and keeps the original, unless asked for fixed sizes)
    model = generation_model(batch=True)
    with pytest.raises(DynamicShapeError, match="'tokens'.*may run zero times"):
        load_model(model, symbolic=True)
    graph, reason = load_with_axes(model, label="m")
    assert "may run zero times" in reason and graph.meta["symbols"].keys() == {"T"}
    assert graph.shapes["states"][1:] == (1, D)
