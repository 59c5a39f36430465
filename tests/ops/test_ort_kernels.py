"""Target onnxruntime: its fused kernels as alternatives in the e-graph. Every equality holds numerically in both
directions (the kernels' own semantics against onnxruntime are in tests/ops/test_ops.py's cases), a model is written
with the kernels where the costs favour them and without them otherwise, and the default target never writes
them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _onnx_checks import assert_rule_holds
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat import ops
from eqsat.cli.app import build_parser
from eqsat.costs import AnalyticCostModel
from eqsat.costs.measured_cpu import one_node_model
from eqsat.ir.rule import check_condition
from eqsat.onnx_io import run_onnxruntime
from eqsat.ops import ort_kernels
from eqsat.pipeline.choices import target_rules
from eqsat.pipeline.options import OptimizeOptions
from eqsat.rules.onnxruntime import ORT_KERNEL_RULES

MS = "com.microsoft"
PARAMS = {"?eps", "?sp"}
_SKIP = [{"?eps": 1e-5, "?x": (2, 3, 8), "?c": (2, 3, 8), "?g": (8,), "?b": (8,)},
         {"?eps": 1e-12, "?x": (1, 5, 16), "?c": (1, 5, 16), "?g": (16,), "?b": (16,)},
         {"?eps": 0.1, "?x": (3, 1, 1), "?c": (3, 1, 1), "?g": (1,), "?b": (1,)}]
_GELU = {2: [{"?x": (4, 8), "?c": (1, 8)}, {"?x": (1, 3), "?c": (1, 3)}, {"?x": (5, 1), "?c": (1, 1)}],
         3: [{"?x": (2, 3, 8), "?c": (1, 1, 8)}, {"?x": (1, 4, 6), "?c": (1, 1, 6)},
             {"?x": (3, 1, 2), "?c": (1, 1, 2)}]}
_MHA = [{"?sp": (2, 5, 4, 8), "?q": (2, 5, 32), "?k": (2, 5, 32), "?v": (2, 5, 32), "?s": (), "?m": (2, 1, 5, 5)},
        {"?sp": (1, 7, 2, 3), "?q": (1, 7, 6), "?k": (1, 7, 6), "?v": (1, 7, 6), "?s": (), "?m": (1, 2, 7, 7)},
        {"?sp": (3, 1, 1, 4), "?q": (3, 1, 4), "?k": (3, 1, 4), "?v": (3, 1, 4), "?s": (), "?m": (1, 1, 1, 1)}]
SHAPES = {
    **{f"ort-skip-layernorm{side}": _SKIP for side in ("", "-left")},
    **{f"ort-skip-rmsnorm{side}": [{k: v for k, v in s.items() if k != "?b"} for s in _SKIP]
       for side in ("", "-left")},
    **{f"ort-{kind}-gelu-rank{rank}{side}": _GELU[rank]
       for kind in ("bias", "fast") for rank in (2, 3) for side in ("", "-left")},
    "ort-mha": [{k: v for k, v in s.items() if k != "?m"} for s in _MHA],
    "ort-mha-bias": _MHA, "ort-mha-bias-left": _MHA,
}


def test_every_kernel_rule_has_shape_sets_and_only_the_onnxruntime_target_adds_them() -> None:
    assert {r.name for r in ORT_KERNEL_RULES} == set(SHAPES)
    assert target_rules("onnx") == [] and target_rules("onnxruntime") == list(ORT_KERNEL_RULES)
    assert set(ort_kernels._TYPES) == {n for n, s in ops.REGISTRY.items() if s.runtime}  # each knows its type
    made = {op for r in ORT_KERNEL_RULES for op in ops.REGISTRY if f"({op} " in r.rhs[0]}
    assert {op for op in made if ops.REGISTRY[op].runtime} == \
        {n for n, s in ops.REGISTRY.items() if s.runtime == "onnxruntime"}


@pytest.mark.parametrize("rule", ORT_KERNEL_RULES, ids=lambda r: r.name)
def test_kernel_equality_holds(rule) -> None:
    # the decomposition computes what the kernel does (the kernel's own semantics against onnxruntime's are in
    # tests/ops/test_ops.py's cases)
    assert_rule_holds(rule, SHAPES[rule.name], PARAMS)


def test_a_kernels_rule_does_not_fire_outside_its_contract() -> None:
    # a skip broadcast over the batch, a bias that is not a row: the conditions refuse them
    skip = next(r for r in ORT_KERNEL_RULES if r.name == "ort-skip-layernorm")
    env = {"?x": np.zeros((2, 3, 8)), "?c": np.zeros((1, 3, 8))}
    assert not all(check_condition(c, env) for c in skip.conditions)
    gelu = next(r for r in ORT_KERNEL_RULES if r.name == "ort-bias-gelu-rank3")
    env = {"?x": np.zeros((2, 3, 8)), "?c": np.zeros((2, 1, 8))}
    assert not all(check_condition(c, env) for c in gelu.conditions)


class _CheapKernels(AnalyticCostModel):
    """A runtime whose fused kernels are much faster than their parts (as onnxruntime's are on some GPUs)."""

    name = "cheap-kernels"

    def cost(self, key):
        c = super().cost(key)
        return c * 0.1 if key.op.startswith("ort_") else c


def _block(batch: int | str = 2, h: int = 16) -> onnx.ModelProto:
    """A transformer block's float work as an exporter writes it: a residual add and a layer norm, a biased
    projection, GELU (erf), another projection whose bias feeds a tanh GELU, a residual add and an RMS norm."""
    rng = np.random.default_rng(3)
    w = {n: rng.standard_normal(s).astype(np.float32) * 0.3 for n, s in
         (("g", (h,)), ("b", (h,)), ("W1", (h, h)), ("B1", (h,)), ("W2", (h, h)), ("B2", (h,)), ("g2", (h,)))}
    nodes = [helper.make_node("Add", ["x", "r"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["n", "W1"], ["p"]), helper.make_node("Add", ["p", "B1"], ["pb"]),
             helper.make_node("Gelu", ["pb"], ["a"]),
             helper.make_node("MatMul", ["a", "W2"], ["q"]), helper.make_node("Add", ["B2", "q"], ["qb"]),
             helper.make_node("Gelu", ["qb"], ["t"], approximate="tanh"),
             helper.make_node("Add", ["t", "n"], ["u"]),
             helper.make_node("RMSNormalization", ["u", "g2"], ["y"], axis=-1, epsilon=1e-6)]
    io = [batch, 5, h]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info(n, TensorProto.FLOAT, io) for n in "xr"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, io)],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])


def _kernels_written(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node if n.domain == MS}


@pytest.mark.parametrize("batch", [2, "batch"])
def test_kernels_are_written_where_cheaper_and_the_model_stays_equal(batch: int | str) -> None:
    res = eqsat.optimize(_block(batch), target="onnxruntime", cost_model=_CheapKernels(), time_limit=30,
                         dims={"batch": 2} if batch == "batch" else None)
    assert _kernels_written(res.model) == {"SkipLayerNormalization", "BiasGelu", "FastGelu",
                                           "SkipSimplifiedLayerNormalization"}
    assert any(o.domain == MS and o.version == 1 for o in res.model.opset_import)
    assert res.kernels == dict.fromkeys(_kernels_written(res.model), 1) and res.to_dict()["target"] == "onnxruntime"
    assert "target                   onnxruntime: wrote BiasGelu x1, FastGelu x1," in res.summary()
    assert res.numeric is not None and res.numeric.ok
    onnx.checker.check_model(res.model)
    # the written kernels compute what the original does, run by onnxruntime
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal((3, 5, 16)).astype(np.float32) for n in "xr"} if batch == "batch" else \
        {n: rng.standard_normal((2, 5, 16)).astype(np.float32) for n in "xr"}
    np.testing.assert_allclose(run_onnxruntime(res.model, feeds)[0], run_onnxruntime(_block(batch), feeds)[0],
                               rtol=1e-4, atol=1e-5)


def _attention(batch: int | str = 2, seq: int = 5, heads: int = 4, size: int = 8, mask: str = "right",
               cast: bool = False, key_twice: bool = False) -> onnx.ModelProto:
    """Self-attention as the exporters write it: three projections, each reshaped to heads and transposed (the
    key to (batch, heads, size, sequence)), scores scaled by a scalar constant, an additive mask input on the
    ``mask`` side of the add (or none), softmax, optionally the legacy exporter's float-to-float Cast, the product
    with the values, the heads merged back, an output projection. ``key_twice``: the key moved to heads first
    like the others, then its last two axes swapped (two transposes, as PyTorch code writes it)."""
    d = heads * size
    rng = np.random.default_rng(7)
    w = {n: rng.standard_normal((d, d)).astype(np.float32) * 0.3 for n in ("Wq", "Wk", "Wv", "Wo")}
    w |= {"bq": rng.standard_normal(d).astype(np.float32), "scale": np.array(size ** -0.5, np.float32),
          "split": np.array([0, 0, heads, size], np.int64), "merge": np.array([0, 0, d], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "Wq"], ["q0"]), helper.make_node("Add", ["q0", "bq"], ["q"]),
             helper.make_node("MatMul", ["x", "Wk"], ["k"]), helper.make_node("MatMul", ["x", "Wv"], ["v"])]
    for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("Reshape", [t, "split"], [t + "4"])]
        if t == "k" and key_twice:
            nodes += [helper.make_node("Transpose", ["k4"], ["k4t"], perm=[0, 2, 1, 3]),
                      helper.make_node("Transpose", ["k4t"], ["kh"], perm=[0, 1, 3, 2])]
        else:
            nodes.append(helper.make_node("Transpose", [t + "4"], [t + "h"], perm=perm))
    nodes += [helper.make_node("MatMul", ["qh", "kh"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s"])]
    if mask != "none":
        nodes.append(helper.make_node("Add", ["s", "m"] if mask == "right" else ["m", "s"], ["sm"]))
    nodes.append(helper.make_node("Softmax", ["sm" if mask != "none" else "s"], ["p"], axis=-1))
    if cast:
        nodes.append(helper.make_node("Cast", ["p"], ["pc"], to=TensorProto.FLOAT))
    nodes += [helper.make_node("MatMul", ["pc" if cast else "p", "vh"], ["o"]),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merge"], ["om"]), helper.make_node("MatMul", ["om", "Wo"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, d])]
    if mask != "none":
        inputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [batch, 1, seq, seq]))
    g = helper.make_graph(nodes, "attention", inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, d])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("form", [{}, {"mask": "left"}, {"mask": "none", "cast": True}, {"batch": "batch"},
                                  {"key_twice": True}],
                         ids=["mask", "mask-left", "no-mask-cast", "dynamic-batch", "key-transposed-twice"])
def test_attention_is_written_as_multi_head_attention_where_cheaper(form: dict) -> None:
    model = _attention(**form)
    dims = {"batch": 2} if form.get("batch") else None
    res = eqsat.optimize(model, target="onnxruntime", cost_model=_CheapKernels(), time_limit=30, dims=dims)
    (node,) = [n for n in res.model.graph.node if n.domain == MS]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert node.op_type == "MultiHeadAttention" and attrs == {"num_heads": 4, "scale": 1.0}
    # the mask is the kernel's attention_bias (input 5)
    assert len(node.input) == (3 if form.get("mask") == "none" else 6) and res.kernels == {"MultiHeadAttention": 1}
    assert res.numeric is not None and res.numeric.ok
    # onnxruntime runs the kernel to what the original computes, a fully masked row (NaN) included
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((3, 5, 32)).astype(np.float32)}
    if form.get("mask") != "none":
        m = np.where(rng.random((3, 1, 5, 5)) < 0.3, -np.inf, 0).astype(np.float32)
        m[0, 0, 1] = -np.inf
        feeds["m"] = m
    if not form.get("batch"):
        feeds = {k: v[:2] for k, v in feeds.items()}
    got, want = run_onnxruntime(res.model, feeds)[0], run_onnxruntime(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # a row whose keys are all masked is NaN in both (onnxruntime's softmax of -inf); the kernel returning zeros
    # there would be a different result, so the NaN positions are part of the check
    assert np.isnan(want).any() == (form.get("mask") != "none")


def test_attention_priced_as_its_parts_is_never_written_as_the_kernel() -> None:
    # what a cost model that cannot time the kernel does with any form of attention (the costs, not the form)
    assert not eqsat.optimize(_attention(), target="onnxruntime", time_limit=30).kernels


def test_attention_outside_the_kernels_contract_is_left_alone() -> None:
    # a padding mask of one row per sequence, (batch, 1, 1, keys), broadcast over the queries: the kernel's
    # attention_bias has a row per query, (batch or 1, heads or 1, queries, keys)
    model = _attention()
    model.graph.input[1].type.tensor_type.shape.dim[2].dim_value = 1
    res = eqsat.optimize(model, target="onnxruntime", cost_model=_CheapKernels(), time_limit=30)
    assert "MultiHeadAttention" not in res.kernels and res.numeric is not None and res.numeric.ok


def test_the_portable_form_is_kept_by_the_default_target_and_by_costs_that_cannot_see_the_kernels() -> None:
    portable = eqsat.optimize(_block(), cost_model=_CheapKernels(), time_limit=30)  # target onnx: no kernel rules
    assert not _kernels_written(portable.model) and not any(o.domain == MS for o in portable.model.opset_import)
    analytic = eqsat.optimize(_block(), target="onnxruntime", time_limit=30)
    assert not _kernels_written(analytic.model)  # priced as their parts and a hair more
    assert analytic.target_note == ("onnxruntime: no fused kernel written (none cheaper than its decomposition "
                                    "under analytic)") and portable.target_note == ""
    key = ops.get("ort_skip_layernorm").cost_keys({"epsilon": 1e-5}, [(2, 5, 16)] * 2 + [(16,)] * 2, (2, 5, 16),
                                                  weights=(2, 3))[0]
    parts = ops.runs_as_keys(key)
    assert [k.op for k in parts] == ["ewadd", "layernorm"]
    assert parts[1].input_shapes == ((2, 5, 16), (16,), (16,)) and parts[1].weights == (1, 2)
    model = AnalyticCostModel()
    assert model.cost(key) > sum(model.cost(k) for k in parts)
    assert round((model.cost(key) - sum(model.cost(k) for k in parts)) * 1e6) > 0  # seen by extraction


def test_a_model_holding_kernels_comes_back_portable_or_with_the_kernels() -> None:
    """The other direction: the kernels of a model from onnxruntime's optimizer import as their decompositions
    (tests/ops/test_contrib_ops.py writes such a model as standard ONNX where that gains), and come back for onnxruntime
    where they pay. For the default target there is nothing cheaper here: the model is kept as given."""
    rng = np.random.default_rng(5)
    h = 16
    w = {n: rng.standard_normal(s).astype(np.float32) * 0.3 for n, s in (("g", (h,)), ("b", (h,)), ("c", (h,)))}
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "r", "g", "b"], ["n"], domain=MS, epsilon=1e-5),
             helper.make_node("BiasGelu", ["n", "c"], ["y"], domain=MS)]
    g = helper.make_graph(nodes, "k", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4, h]) for n in "xr"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, h])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid(MS, 1)])
    portable = eqsat.optimize(model, cost_model=_CheapKernels(), time_limit=30)
    assert portable.kept_original and portable.cost_after == pytest.approx(portable.cost_before)
    again = eqsat.optimize(model, target="onnxruntime", cost_model=_CheapKernels(), time_limit=30)
    assert not again.kept_original and again.cost_after < again.cost_before
    assert _kernels_written(again.model) == {"SkipLayerNormalization", "BiasGelu"} and again.numeric.ok


def test_a_measured_model_times_the_kernel_onnxruntime_runs() -> None:
    spec = ops.get("ort_fast_gelu")
    (key,) = spec.cost_keys({}, [(1, 4, 8), (8,)], (1, 4, 8), weights=(1,))
    m = one_node_model(key)
    assert [(n.domain, n.op_type) for n in m.graph.node] == [(MS, "FastGelu")]
    x = np.random.default_rng(0).standard_normal((1, 4, 8)).astype(np.float32)
    bias = numpy_helper.to_array(m.graph.initializer[0])
    np.testing.assert_allclose(run_onnxruntime(m, {"in0": x})[0], spec.evaluate({}, [x, bias]), rtol=1e-4,
                               atol=1e-5)


def test_an_unknown_target_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="unknown target 'tensorrt'; choose one of onnx, onnxruntime"):
        OptimizeOptions(target="tensorrt")
    args = build_parser().parse_args(["optimize", "m.onnx", "-o", "o.onnx", "--target", "onnxruntime"])
    assert args.target == "onnxruntime"
    assert build_parser().parse_args(["optimize", "m.onnx", "-o", "o.onnx"]).target == "onnx"


def test_a_kernel_written_in_a_control_flow_body_is_declared_and_reported() -> None:
    h = 16
    rng = np.random.default_rng(0)
    w = {n: rng.standard_normal(h).astype(np.float32) for n in "gb"}

    def io(n: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 5, h])

    then = helper.make_graph([helper.make_node("Add", ["x", "r"], ["s"]),
                              helper.make_node("LayerNormalization", ["s", "g", "b"], ["t_out"], axis=-1,
                                               epsilon=1e-5)], "then", [], [io("t_out")])
    other = helper.make_graph([helper.make_node("Sub", ["x", "r"], ["e_out"])], "else", [], [io("e_out")])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "m",
                          [io("x"), io("r"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [io("y")],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    res = eqsat.optimize(model, target="onnxruntime", cost_model=_CheapKernels(), time_limit=30)
    body = [n for a in res.model.graph.node[0].attribute if a.name == "then_branch" for n in a.g.node]
    assert [(n.domain, n.op_type) for n in body] == [(MS, "SkipLayerNormalization")]
    assert any(o.domain == MS for o in res.model.opset_import)
    onnx.checker.check_model(res.model)
    assert res.kernels == {"SkipLayerNormalization": 1} and res.numeric.ok
