"""Per operator: registry shape = onnx shape inference, numpy reference = onnxruntime, modular = float mod p."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper, shape_inference

from eqsat import ops
from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.onnx_io import run_onnxruntime, to_onnx
from eqsat.ops import shapes as S

# (op, params, input shapes); every registry op but opaque/enlarge (weight-only) appears.
CASES = [
    ("relu", {}, [(2, 3, 4)]),
    ("cast", {"source": "float32", "target": "float16"}, [(2, 3, 4)]),
    ("cast", {"source": "float16", "target": "float32"}, [(4,)]),
    ("softmax", {"axis": 2}, [(2, 3, 4)]),
    ("softmax", {"axis": 0}, [(3, 5)]),
    ("sigmoid", {}, [(5, 7)]),
    ("tanh", {}, [(1, 3, 4, 4)]),
    ("ewsqrt", {}, [(2, 3, 4)]),
    ("ewrecip", {}, [(3, 5)]),
    ("ewcos", {}, [(4, 6)]),
    ("ewsin", {}, [(2, 7)]),
    ("ewadd", {}, [(2, 3), (2, 3)]),
    ("ewadd", {}, [(2, 3, 4), (1, 3, 1)]),
    ("ewmul", {}, [(4, 5), (1, 5)]),
    ("smul", {}, [(3, 4), ()]),
    ("matmul", {}, [(3, 4), (4, 5)]),
    ("matmul", {}, [(2, 3, 4), (2, 4, 6)]),
    ("matmul", {}, [(2, 2, 3, 4), (2, 2, 4, 5)]),
    ("matmul", {}, [(1, 4, 8, 6), (1, 4, 6, 8)]),  # attention scores: (batch, heads, seq, dk) @ (.., dk, seq)
    ("matmul", {}, [(2, 1, 3, 4), (1, 5, 4, 6)]),  # broadcast batch dims (ONNX (2,1,3,4) @ (5,4,6), ranks aligned)
    ("matmul", {}, [(3, 1, 2, 3, 4), (1, 2, 1, 4, 2)]),
    ("gelu", {"approximate": 0}, [(2, 3, 8)]),
    ("gelu", {"approximate": 1}, [(4, 6)]),
    ("layernorm", {"axis": 2, "epsilon": 1e-12}, [(2, 5, 8), (8,), (8,)]),
    ("layernorm", {"axis": 1, "epsilon": 1e-5}, [(2, 3, 4), (3, 4), (3, 4)]),
    ("layernorm", {"axis": 0}, [(6,), (6,), (6,)]),
    ("rmsnorm", {"axis": 2, "epsilon": 1e-6}, [(2, 5, 8), (8,)]),
    ("rmsnorm", {"axis": 1}, [(3, 4, 6), (4, 6)]),
    # onnxruntime's fused kernels (target onnxruntime): their numpy semantics against the kernels themselves
    ("ort_skip_layernorm", {"epsilon": 1e-5}, [(2, 5, 8), (2, 5, 8), (8,), (8,)]),
    ("ort_skip_layernorm", {"epsilon": 1e-12}, [(1, 3, 32), (1, 3, 32), (32,), (32,)]),
    ("ort_skip_rmsnorm", {"epsilon": 1e-6}, [(2, 5, 8), (2, 5, 8), (8,)]),
    ("ort_skip_rmsnorm", {"epsilon": 1e-5}, [(3, 1, 16), (3, 1, 16), (16,)]),
    ("ort_bias_gelu", {}, [(2, 5, 8), (8,)]),
    ("ort_bias_gelu", {}, [(6, 12), (12,)]),
    ("ort_fast_gelu", {}, [(2, 5, 8), (8,)]),
    ("ort_fast_gelu", {}, [(4, 1, 3, 6), (6,)]),
    ("ort_mha", {"split": (2, 5, 4, 8)}, [(2, 5, 32)] * 3 + [()]),
    ("ort_mha", {"split": (1, 3, 2, 3)}, [(1, 3, 6)] * 3 + [()]),
    ("ort_mha_bias", {"split": (2, 5, 4, 8)}, [(2, 5, 32)] * 3 + [(), (2, 1, 5, 5)]),
    ("ort_mha_bias", {"split": (1, 4, 2, 3)}, [(1, 4, 6)] * 3 + [(), (1, 2, 4, 4)]),
    ("ort_mha_bias", {"split": (2, 5, 4, 8)}, [(2, 5, 32)] * 3 + [(), (1, 4, 5, 5)]),  # one mask for the batch
    ("ort_mha_bias", {"split": (3, 2, 2, 2)}, [(3, 2, 4)] * 3 + [(), (1, 1, 2, 2)]),
    ("conv2d", {"pads": (1, 1, 1, 1)}, [(1, 3, 8, 8), (4, 3, 3, 3), (4,)]),
    ("conv2d", {"strides": (2, 2), "act": 1}, [(2, 4, 9, 9), (6, 4, 3, 3), (6,)]),
    ("conv2d", {"dilations": (2, 2), "pads": (2, 2, 2, 2), "groups": 2}, [(1, 4, 8, 8), (6, 2, 3, 3), (6,)]),
    ("conv2d", {}, [(1, 8, 5, 5), (4, 8, 1, 1), (4,)]),
    ("conv2d", {"groups": 4, "pads": (1, 0, 1, 0)}, [(1, 4, 6, 6), (4, 1, 3, 3), (4,)]),
    ("conv2d_add", {"pads": (1, 1, 1, 1)}, [(1, 3, 8, 8), (4, 3, 3, 3), (4,), (1, 4, 8, 8)]),
    ("conv2d_add", {"strides": (2, 2), "act": 1, "groups": 2}, [(2, 4, 9, 9), (6, 2, 3, 3), (6,), (2, 6, 4, 4)]),
    ("transpose", {"perm": (1, 0)}, [(3, 4)]),
    ("transpose", {"perm": (0, 2, 3, 1)}, [(1, 2, 3, 4)]),
    ("reshape", {"shape": (6, 4)}, [(2, 3, 4)]),
    ("expand", {"shape": (2, 3, 4, 5)}, [(2, 3, 1, 5)]),  # grouped-query attention's key/value repeat
    ("expand", {"shape": (3, 4, 6)}, [(3, 1, 6)]),
    ("expand", {"shape": (5, 1, 6)}, [(1, 1, 6)]),  # a class token, one per batch row
    ("concat", {"axis": 1}, [(2, 3), (2, 5), (2, 1)]),
    ("concat", {"axis": 0}, [(1, 3, 2, 2), (2, 3, 2, 2)]),
    ("split", {"axis": 1, "start": 2, "size": 3}, [(4, 6)]),
    ("maxpool", {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1)}, [(1, 2, 6, 6)]),
    ("maxpool", {"kernel": (2, 2), "strides": (2, 2)}, [(1, 3, 8, 8)]),
    ("avgpool", {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1)}, [(1, 2, 5, 5)]),
    ("avgpool", {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1), "count_include_pad": 1}, [(1, 2, 7, 7)]),
    ("batchnorm", {"epsilon": 1e-3}, [(2, 3, 4, 4), (3,), (3,), (3,), (3,)]),
    ("bnfold_w", {"epsilon": 1e-5}, [(4, 3, 3, 3), (4,), (4,)]),
    ("merge_gconv", {"groups": 2, "count": 2}, [(8, 3, 3, 3)]),
    ("merge_gconv", {"groups": 1, "count": 3}, [(6, 2, 1, 3)]),
    ("matmul_t", {"trans_a": 1, "trans_b": 0}, [(4, 3), (4, 5)]),
    ("matmul_t", {"trans_a": 1, "trans_b": 1}, [(4, 3), (5, 4)]),
    ("matmul_t", {"trans_a": 0, "trans_b": 1}, [(3, 4), (5, 4)]),
    ("gemm", {"trans_a": 0, "trans_b": 1}, [(3, 4), (5, 4), (1, 5)]),
    ("gemm", {"trans_a": 1, "trans_b": 0}, [(4, 3), (4, 5), (3, 5)]),
    ("conv2d_nhwc", {"pads": (1, 1, 1, 1), "act": 1}, [(1, 8, 8, 3), (4, 3, 3, 3), (4,)]),
    ("conv2d_nhwc", {"strides": (2, 2), "groups": 2}, [(2, 9, 7, 4), (6, 2, 3, 3), (6,)]),
    ("bnfold_b", {"epsilon": 1e-5}, [(4,), (4,), (4,), (4,), (4,)]),
    ("clip", {"low": 0.0, "high": 6.0}, [(2, 3, 4)]),  # ReLU6
    ("clip", {"low": -0.5, "high": float("inf")}, [(3, 5)]),
    ("clip", {"low": 0.5, "high": -0.5}, [(4, 2)]),  # low > high: every entry is high
    ("reduce_mean", {"axes": (2,), "keepdims": 1}, [(2, 3, 4)]),
    ("reduce_mean", {"axes": (2, 3), "keepdims": 1}, [(1, 4, 5, 5)]),  # global average pooling
    ("reduce_mean", {"axes": (0, 2), "keepdims": 0}, [(2, 3, 4)]),
    ("reduce_mean", {"axes": (1, 3), "keepdims": 0}, [(2, 3, 2, 4)]),
    ("reduce_mean", {"axes": (1, 3, 4), "keepdims": 1}, [(2, 3, 2, 4, 2)]),
    ("reduce_mean", {"axes": (0, 1), "keepdims": 0}, [(3, 4)]),  # everything: a rank-0 mean
    ("pad", {"pads": (0, 1, 0, 2)}, [(3, 4)]),
    ("pad", {"pads": (0, 0, 1, 1, 0, 0, 1, 2), "value": -1.5}, [(1, 2, 3, 3)]),
    ("pad", {"pads": (2, 0), "value": float("-inf")}, [(5,)]),
    ("lrn", {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0, "form": 0}, [(1, 6, 4, 4)]),
    ("lrn", {"size": 5, "alpha": 0.5, "beta": 0.75, "bias": 1.0, "form": 1}, [(1, 6, 4, 4)]),
    ("lrn", {"size": 5, "alpha": 0.5, "beta": 0.75, "bias": 1.0, "form": 2}, [(2, 7, 3, 5)]),
    ("lrn", {"size": 4, "alpha": 0.3, "beta": 0.5, "bias": 2.0, "form": 1}, [(2, 5, 3)]),  # even window, rank 3
    ("lrn", {"size": 3, "alpha": 0.2, "beta": 0.6, "bias": 1.5, "form": 2}, [(1, 2, 3, 2, 2)]),  # Pow, rank 5
    ("lrn", {"size": 1, "alpha": 1.0, "beta": 1.0, "bias": 1.0, "form": 2}, [(1, 3, 2, 2)]),
    ("lrn", {"size": 9, "alpha": 0.1, "beta": 0.75, "bias": 1.0, "form": 1}, [(1, 3, 2, 2)]),  # window > C
]


def _one_node(op: str, params: dict, shapes: list[tuple[int, ...]], seed: int = 0):
    rng = np.random.default_rng(seed)
    names = [f"x{k}" for k in range(len(shapes))]
    inputs = tuple(TensorInfo(n, s) for n, s in zip(names, shapes, strict=True))
    g = Graph(inputs, {}, (make_node(op, params, names, "y"),), ("y",)).validate()
    feeds = {}
    for n, s in zip(names, shapes, strict=True):
        v = rng.standard_normal(s).astype(np.float32)
        feeds[n] = np.abs(v) + 0.5 if op.startswith(("batchnorm", "bnfold")) and n == names[-1] else v
    return g, feeds


def test_every_operator_is_covered() -> None:
    covered = {c[0] for c in CASES}
    assert covered == set(ops.REGISTRY) - {"opaque", "enlarge"} - _generator_constants()


def _generator_constants() -> set[str]:
    # constant leaves of the rule generator (no tensor inputs) are exercised by the rule tests
    return {n for n, s in ops.REGISTRY.items() if not s.inputs and not s.variadic and n != "opaque"}


@pytest.mark.parametrize("op,params,shapes", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_shape_and_numpy_match_onnx(op: str, params: dict, shapes: list) -> None:
    g, feeds = _one_node(op, params, shapes)
    model = to_onnx(g)
    inferred = shape_inference.infer_shapes(model, strict_mode=True)
    out = inferred.graph.output[0].type.tensor_type.shape
    assert tuple(d.dim_value for d in out.dim) == g.shapes["y"]
    ref = run_onnxruntime(model, feeds)[0]
    got = g.evaluate(feeds)[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def _rule_shape(op: str, params: dict, shapes: list) -> tuple[int, ...] | None:
    spec = ops.get(op)
    names = spec.inputs if not spec.variadic else ("a", "b")
    if spec.variadic:  # the e-graph sees a left-nested chain of binary applications
        acc = shapes[0]
        for nxt in shapes[1:]:
            acc = S.evaluate(spec.shape_rules, {"a": acc, "b": nxt}, spec.normalize(params))
        return acc
    return S.evaluate(spec.shape_rules, dict(zip(names, shapes, strict=True)), spec.normalize(params))


@pytest.mark.parametrize("op,params,shapes", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_shape_rules_as_data_give_the_registry_shape(op: str, params: dict, shapes: list) -> None:
    spec = ops.get(op)
    assert _rule_shape(op, params, shapes) == spec.shape(spec.normalize(params), shapes)


@pytest.mark.parametrize("op,params,shapes", [
    ("ewadd", {}, [(2, 3), (3, 3)]),
    ("matmul", {}, [(3, 4), (5, 6)]),
    ("conv2d", {}, [(1, 3, 8, 8), (4, 2, 3, 3), (4,)]),
    ("transpose", {"perm": (1, 0)}, [(2, 3, 4)]),
    ("concat", {"axis": 1}, [(2, 3), (3, 3)]),
    ("split", {"axis": 1, "start": 2, "size": 5}, [(4, 6)]),
    ("smul", {}, [(3, 4), (1,)]),
    ("ort_mha", {"split": (5, 2, 4, 8)}, [(2, 5, 32)] * 3 + [()]),  # batch and sequence swapped
    ("ort_mha", {"split": (2, 5, 4, 8)}, [(2, 5, 32), (2, 5, 32), (2, 5, 16), ()]),
    ("ort_mha", {"split": (2, 5, 4, 8)}, [(2, 5, 32)] * 3 + [(1,)]),
    ("ort_mha_bias", {"split": (2, 5, 4, 8)}, [(2, 5, 32)] * 3 + [(), (2, 4, 1, 5)]),  # a row for all queries
    ("ort_mha_bias", {"split": (2, 5, 4, 8)}, [(2, 5, 32)] * 3 + [(), (2, 2, 5, 5)]),
])
def test_shape_rules_reject_what_the_registry_rejects(op: str, params: dict, shapes: list) -> None:
    spec = ops.get(op)
    with pytest.raises(ops.OpError):
        spec.shape(spec.normalize(params), shapes)
    assert _rule_shape(op, params, shapes) is None


LINEAR = [c for c in CASES if c[0] in ("matmul", "ewadd", "concat", "split", "transpose", "reshape")
          or (c[0] == "conv2d" and not c[1].get("act"))
          or (c[0] == "pad" and float(c[1].get("value", 0.0)).is_integer())]


@pytest.mark.parametrize("op,params,shapes", LINEAR, ids=[f"{c[0]}-{i}" for i, c in enumerate(LINEAR)])
def test_modular_semantics_agree_with_float_on_integers(op: str, params: dict, shapes: list) -> None:
    spec = ops.get(op)
    p = spec.normalize(params)
    rng = np.random.default_rng(0)
    ints = [rng.integers(0, 5, s) for s in shapes]
    exact = spec.evaluate(p, [x.astype(np.float64) for x in ints])
    mod = spec.evaluate_mod(p, ints)
    np.testing.assert_array_equal(np.asarray(mod, dtype=np.int64), np.asarray(exact).astype(np.int64) % ops.PRIME)


#: Constants the rule generator builds, with a configuration each (they have no CASES: no tensor inputs).
CONST_CASES = [("const_pool", {"kernel": (3, 3), "channels": 2}, [])]
Z3_CASES = [c for c in CASES + CONST_CASES if ops.get(c[0]).z3_fn is not None]


def test_every_z3_semantics_is_covered() -> None:
    assert {c[0] for c in Z3_CASES} == {n for n, s in ops.REGISTRY.items() if s.z3_fn is not None}


@pytest.mark.parametrize("op,params,shapes", Z3_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(Z3_CASES)])
def test_z3_semantics_agree_with_numpy(op: str, params: dict, shapes: list) -> None:
    # the verifier's model of an operator (OpSpec.z3_fn) on Z3 numbers is its float reference
    z3 = pytest.importorskip("z3")
    from eqsat.rules.validation import Symbolic

    spec = ops.get(op)
    p = spec.normalize(params)
    rng = np.random.default_rng(0)
    ints = [rng.integers(-4, 5, s) for s in shapes]
    sym = Symbolic()
    got = spec.z3_fn(sym, p, *[sym.reals(x) for x in ints])
    np.testing.assert_allclose(_z3_values(z3, got), spec.evaluate(p, [x.astype(np.float64) for x in ints]),
                               rtol=1e-6)


def _z3_values(z3: Any, terms: np.ndarray) -> np.ndarray:
    """An array of Z3 terms on numbers, as the floats they simplify to."""
    return np.vectorize(lambda e: float(z3.simplify(e).as_fraction()), otypes=[np.float64])(terms)


CHAIN_CASES = [c for c in CASES if (spec := ops.get(c[0])).runs_as and spec.runs_as(spec.normalize(c[1]))]


@pytest.mark.parametrize("op,params,shapes", CHAIN_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CHAIN_CASES)])
def test_a_fused_form_computes_what_its_runs_as_chain_does(op: str, params: dict, shapes: list) -> None:
    # the chain's operand positions are what export writes, costs price and the verifier evaluates
    spec = ops.get(op)
    p = spec.normalize(params)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(s) for s in shapes]
    names = [f"in{i}" for i in range(len(xs))]
    fresh = iter(range(100))
    nodes = [make_node(o, q, i, out[0])
             for o, q, i, out in ops.runs_as_nodes(op, p, names, "y", lambda h: f"{h}_{next(fresh)}")]
    g = Graph(tuple(TensorInfo(n, s, "float64") for n, s in zip(names, shapes, strict=True)), {}, tuple(nodes),
              ("y",))
    np.testing.assert_allclose(g.evaluate(dict(zip(names, xs, strict=True)))[0], spec.evaluate(p, xs), rtol=1e-9)


def test_the_verifier_evaluates_a_conv_with_a_residual_as_its_parts() -> None:
    z3 = pytest.importorskip("z3")
    from eqsat.ir.rule import parse
    from eqsat.rules.validation import Symbolic

    rng = np.random.default_rng(0)
    ints = [rng.integers(-3, 4, s) for s in ((1, 2, 4, 4), (3, 2, 3, 3), (3,), (1, 3, 4, 4))]
    sym = Symbolic()
    got = sym.eval(parse("(conv2d_add [1 1] [1 1 1 1] [1 1] 1 0 ?x ?w ?b ?r)"),
                   {f"?{n}": sym.reals(x) for n, x in zip("xwbr", ints, strict=True)})
    spec = ops.get("conv2d_add")
    np.testing.assert_array_equal(_z3_values(z3, got), spec.evaluate(spec.normalize({"pads": (1, 1, 1, 1)}),
                                                        [x.astype(np.float64) for x in ints]))


def test_enlarge_pads_the_kernel_and_export_folds_it() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    spec = ops.get("enlarge")
    big = spec.evaluate({"kernel": (3, 3)}, [w])
    np.testing.assert_array_equal(big, np.pad(w, ((0, 0), (0, 0), (1, 1), (1, 1))))
    nodes = (make_node("enlarge", {"kernel": (3, 3)}, ["w"], "w3"),
             make_node("conv2d", {"pads": (1, 1, 1, 1)}, ["x", "w3", "b"], "y"))
    g = Graph((TensorInfo("x", (1, 3, 5, 5)),), {"w": w, "b": np.zeros(4, np.float32)}, nodes, ("y",)).validate()
    model = to_onnx(g)
    assert [n.op_type for n in model.graph.node] == ["Conv"]
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(run_onnxruntime(model, {"x": x})[0], g.evaluate({"x": x})[0], rtol=1e-5, atol=1e-5)


def test_merge_gconv_is_block_diagonal_and_export_precomputes_it() -> None:
    # a kernel of 4 groups of 2 rows over 3 channels, as one of 2 groups: rows 0-1 read channels 0-2 of their
    # merged group, rows 2-3 channels 3-5, zero elsewhere; a conv of the merged kernel is the grouped one
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    merged = ops.get("merge_gconv").evaluate({"groups": 2, "count": 2}, [w])
    assert merged.shape == (8, 6, 3, 3)
    for o in range(8):
        slot = (o // 2) % 2
        np.testing.assert_array_equal(merged[o, 3 * slot:3 * slot + 3], w[o])
        assert not merged[o, 3 * (1 - slot):3 * (1 - slot) + 3].any()
    nodes = (make_node("merge_gconv", {"groups": 2, "count": 2}, ["w"], "w2"),
             make_node("conv2d", {"pads": (1, 1, 1, 1), "groups": 2}, ["x", "w2", "b"], "y"))
    b = rng.standard_normal(8).astype(np.float32)
    g = Graph((TensorInfo("x", (1, 12, 5, 5)),), {"w": w, "b": b}, nodes, ("y",)).validate()
    model = to_onnx(g)
    assert [n.op_type for n in model.graph.node] == ["Conv"]  # the kernel is precomputed: weight-only work
    x = rng.standard_normal((1, 12, 5, 5)).astype(np.float32)
    conv = ops.get("conv2d")
    grouped = conv.evaluate(conv.normalize({"pads": (1, 1, 1, 1), "groups": 4}), [x, w, b])
    np.testing.assert_allclose(run_onnxruntime(model, {"x": x})[0], grouped, rtol=1e-5, atol=1e-5)


def test_bad_parameters_raise_clear_errors() -> None:
    with pytest.raises(ops.OpError, match="inner dimensions"):
        ops.get("matmul").shape({}, [(2, 3), (4, 5)])
    with pytest.raises(ops.OpError, match="unknown parameter"):
        ops.get("relu").normalize({"axis": 1})
    with pytest.raises(ops.OpError, match="unknown operator"):
        ops.get("no_such_op")


def test_opaque_node_round_trips_through_onnx() -> None:
    from eqsat.onnx_io import load_model
    from eqsat.testing.onnx_builders import make_model

    node = helper.make_node("Hardmax", ["x"], ["s"], axis=1)
    relu = helper.make_node("Relu", ["s"], ["y"])
    model = make_model([node, relu], [("x", [2, 5])], [("y", [2, 5])], opset=13)

    g = load_model(model)
    assert [n.op for n in g.nodes] == ["opaque", "relu"]
    back = to_onnx(g)
    assert [n.op_type for n in back.graph.node] == ["Hardmax", "Relu"]
