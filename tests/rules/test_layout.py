"""Layout variants: every layout rule holds numerically, and extraction picks a layout when it is cheaper."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from _onnx_checks import assert_rule_holds

from eqsat import models, onnx_io
from eqsat.costs import AnalyticCostModel
from eqsat.pipeline import OptimizeResult, optimize
from eqsat.rules.layout import LAYOUT_RULES

CONV = {"?st": (1, 1), "?pd": (1, 1, 1, 1), "?dl": (1, 1), "?g": 1, "?act": 0}
LRN = {"?size": 5, "?alpha": 0.5, "?beta": 0.75, "?shift": 1.0}
PARAMS = {*CONV, *LRN, "?eps", "?s", "?ta", "?tb", "?e", "?m"}  # parameter variables; the others are tensors


def _grouped(a: tuple[int, ...], x: tuple[int, ...], repeats: int) -> dict[str, tuple[int, ...]]:
    """A binding of the grouped-heads rules: ``?x`` (batch, groups, 1, length, head) expanded ``repeats``
    times along its third axis and viewed as (batch, groups * repeats, length, head)."""
    b, g, _, t, d = x
    return {"?a": a, "?x": x, "?e": (b, g, repeats, t, d), "?m": (b, g * repeats, t, d)}


SHAPES = {
    "layout-matmul-ta": [{"?a": (4, 3), "?b": (4, 5)}, {"?a": (1, 6), "?b": (1, 2)}, {"?a": (7, 7), "?b": (7, 7)}],
    "layout-matmul-tb": [{"?a": (3, 4), "?b": (5, 4)}, {"?a": (6, 1), "?b": (2, 1)}, {"?a": (7, 7), "?b": (7, 7)}],
    "layout-matmul-tab": [{"?a": (4, 3), "?b": (5, 4)}, {"?a": (1, 6), "?b": (2, 1)}, {"?a": (7, 7), "?b": (7, 7)}],
    "layout-matmul-transposed-product": [{"?a": (3, 4), "?b": (4, 5)}, {"?a": (1, 6), "?b": (6, 2)},
                                         {"?a": (8, 8), "?b": (8, 8)}],
    "transpose-transpose-2d": [{"?x": (3, 4)}, {"?x": (1, 5)}, {"?x": (6, 6)}],
    "transpose-transpose-key": [{"?x": (2, 3, 4, 5)}, {"?x": (1, 1, 2, 1)}, {"?x": (3, 3, 3, 3)}],
    "layout-conv-nhwc": [{**CONV, "?x": (1, 3, 6, 6), "?w": (4, 3, 3, 3), "?b": (4,)},
                         {**CONV, "?act": 1, "?st": (2, 2), "?x": (2, 4, 7, 5), "?w": (2, 4, 3, 3), "?b": (2,)},
                         {**CONV, "?g": 2, "?pd": (0, 0, 0, 0), "?x": (1, 4, 5, 5), "?w": (6, 2, 1, 1), "?b": (6,)}],
    "layout-nhwc-nchw-cancel": [{"?x": (1, 4, 5, 3)}, {"?x": (2, 1, 1, 1)}, {"?x": (1, 2, 3, 4)}],
    "layout-nchw-nhwc-cancel": [{"?x": (1, 3, 4, 5)}, {"?x": (2, 1, 1, 1)}, {"?x": (1, 2, 3, 4)}],
    "layout-relu-nchw": [{"?x": (1, 4, 5, 3)}, {"?x": (2, 1, 1, 1)}, {"?x": (1, 2, 3, 4)}],
    "layout-layernorm-rows": [{"?eps": 1e-5, "?x": (2, 3, 4), "?scale": (4,), "?bias": (4,)},
                              {"?eps": 1e-12, "?x": (1, 5, 8), "?scale": (8,), "?bias": (8,)},
                              {"?eps": 0.1, "?x": (3, 1, 1), "?scale": (1,), "?bias": (1,)}],
    **{f"lrn-form-{f}": [{**LRN, "?x": (1, 6, 3, 3)}, {**LRN, "?size": 2, "?beta": 0.6, "?x": (2, 3, 4)},
                          {**LRN, "?size": 7, "?beta": 1.0, "?x": (1, 4, 2, 2, 2)}] for f in (1, 2)},
    **{f"layout-bias-rows{side}": [{"?s": (2, 3, 4), "?x": (6, 4), "?c": (1, 1, 4)},
                                     {"?s": (1, 5, 8), "?x": (5, 8), "?c": (1, 1, 8)},
                                     {"?s": (3, 1, 2), "?x": (3, 2), "?c": (1, 1, 2)}] for side in ("", "-left")},
    **{f"layout-gemm-bias{side}": [{"?ta": 0, "?tb": 1, "?a": (3, 4), "?b": (5, 4), "?c": (1, 5)},
                                   {"?ta": 1, "?tb": 0, "?a": (4, 3), "?b": (4, 5), "?c": (3, 5)},
                                   {"?ta": 1, "?tb": 1, "?a": (4, 1), "?b": (1, 4), "?c": (1, 1)}]
       for side in ("", "-left")},
    **{f"layout-gemm-bias-matmul{side}": [{"?a": (3, 4), "?b": (4, 5), "?c": (1, 5)},
                                          {"?a": (3, 4), "?b": (4, 5), "?c": (3, 5)},
                                          {"?a": (1, 6), "?b": (6, 2), "?c": (1, 2)}] for side in ("", "-left")},
    # query heads (batch, heads, sequence, head) against the keys; scores (batch, heads, sequence, length)
    # against the values: grouped-query (2 groups of 4), multi-query (1 group of 3) and plain (repeats 1)
    "grouped-heads-scores": [_grouped((2, 8, 3, 5), (2, 2, 1, 7, 5), 4), _grouped((1, 3, 1, 4), (1, 1, 1, 6, 4), 3),
                             _grouped((3, 2, 4, 2), (3, 2, 1, 1, 2), 1)],
    "grouped-heads-values": [_grouped((2, 8, 3, 7), (2, 2, 1, 7, 5), 4), _grouped((1, 3, 1, 6), (1, 1, 1, 6, 4), 3),
                             _grouped((3, 2, 4, 1), (3, 2, 1, 1, 2), 1)],
    "layout-ewadd-nchw": [{"?a": (1, 4, 5, 3), "?b": (1, 4, 5, 3)}, {"?a": (2, 1, 1, 1), "?b": (2, 1, 1, 1)},
                          {"?a": (1, 2, 3, 4), "?b": (1, 2, 3, 4)}],
}


def test_every_layout_rule_has_shape_sets() -> None:
    assert {r.name for r in LAYOUT_RULES} == set(SHAPES)


@pytest.mark.parametrize("rule", LAYOUT_RULES, ids=lambda r: r.name)
def test_layout_rule_numerically(rule) -> None:
    assert_rule_holds(rule, SHAPES[rule.name], PARAMS)


class _PreferVariants(AnalyticCostModel):
    """A device on which the layout variants are much faster (as on a GPU with NHWC tensor cores)."""

    def cost(self, key):
        c = super().cost(key)
        return c * 0.1 if key.op in ("conv2d_nhwc", "matmul_t") else c


def test_extraction_picks_cheaper_layouts_and_export_stays_equal() -> None:
    model = models.small_cnn()
    res = optimize(model, cost_model=_PreferVariants(), time_limit=30)
    ops_used = {n.op for n in res.graph.nodes}
    assert "conv2d_nhwc" in ops_used
    assert res.numeric.ok
    # back in standard ONNX: only standard ops, and Transposes around the convolutions
    types = [n.op_type for n in res.model.graph.node]
    assert "Transpose" in types and "Conv" in types


def test_plain_cost_model_keeps_nchw(optimized: Callable[[str], OptimizeResult]) -> None:
    res = optimized("small_cnn")  # optimize(models.small_cnn(), time_limit=30), shared
    assert "conv2d_nhwc" not in {n.op for n in res.graph.nodes}
    assert res.cost_after <= res.cost_before


@pytest.mark.slow  # optimize of the BERT attention block
def test_transposed_operand_matmul_exports_as_gemm() -> None:
    res = optimize(models.bert_attention_block(), cost_model=_PreferVariants(), time_limit=30)
    assert "matmul_t" in {n.op for n in res.graph.nodes}
    assert res.numeric.ok
    feeds = onnx_io.random_feeds(res.model, seed=5)
    a = onnx_io.run_onnxruntime(models.bert_attention_block(), feeds)[0]
    b = onnx_io.run_onnxruntime(res.model, feeds)[0]
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_a_linear_layers_bias_is_added_in_its_gemm() -> None:
    """A projection of (batch, seq, hidden) activations with a bias, as exporters write it (MatMul, then Add):
    the bias goes into Gemm's C on the product's rows, and the model computes what it did."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["b", "m"], ["y"])]
    g = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 8])], inits)
    res = optimize(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), time_limit=20)
    assert not res.kept_original and res.cost_after < res.cost_before
    gemms = [n for n in res.model.graph.node if n.op_type == "Gemm"]
    assert len(gemms) == 1 and len(gemms[0].input) == 3 and "Add" not in {n.op_type for n in res.model.graph.node}
    assert res.numeric is not None and res.numeric.ok
    onnx.checker.check_model(res.model, full_check=True)


@pytest.mark.parametrize("rule", [r for r in LAYOUT_RULES if r.name.startswith("grouped-heads")], ids=lambda r: r.name)
def test_grouped_heads_rules_refuse_other_broadcasts_and_views(rule) -> None:
    """The conditions hold only where the expand copies the key along its third axis and the view merges the
    groups with their repeats: an expand of the batch, or a view that keeps the groups apart, is not matched."""
    from eqsat.ir.rule import check_condition

    rng = np.random.default_rng(1)
    good = _grouped((2, 8, 3, 5), (2, 2, 1, 7, 5), 4)
    wrong = [{**good, "?x": (1, 2, 1, 7, 5), "?e": (2, 2, 4, 7, 5)},  # the batch broadcast too
             {**good, "?m": (4, 4, 7, 5), "?a": (4, 4, 3, 5)},  # (batch * groups, repeats, ...)
             {**good, "?x": (2, 2, 2, 7, 5), "?e": (2, 2, 2, 7, 5), "?m": (2, 4, 7, 5)}]  # nothing to broadcast
    for binding in (good, *wrong):
        env = {k: (v if k in PARAMS else rng.standard_normal(v)) for k, v in binding.items()}
        holds = all(check_condition(c, env) for c in rule.conditions)
        assert holds == (binding is good), binding


def test_grouped_query_attention_reads_shared_heads_without_copying_them() -> None:
    """Grouped-query attention as exporters write it (each key and value head expanded to the query heads it
    serves): the optimized model multiplies with the shared heads by broadcasting, with no Expand left, and
    computes what the original does."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name: str, value: list[int]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value, np.int64), name)

    def shared(x: str) -> list[onnx.NodeProto]:  # (1, 2, 5, 8) -> (1, 4, 5, 8), each head twice
        return [helper.make_node("Unsqueeze", [x, "axis2"], [f"{x}_5d"]),
                helper.make_node("Expand", [f"{x}_5d", "repeat"], [f"{x}_wide"]),
                helper.make_node("Reshape", [f"{x}_wide", "heads"], [f"{x}_heads"])]

    nodes = [*shared("k"), *shared("v"), helper.make_node("Transpose", ["k_heads"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v_heads"], ["y"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
          for n, s in (("q", [1, 4, 3, 8]), ("k", [1, 2, 5, 8]), ("v", [1, 2, 5, 8]))]
    g = helper.make_graph(nodes, "gqa", io, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 8])],
                          [const("axis2", [2]), const("repeat", [1, 1, 2, 1, 1]), const("heads", [1, 4, 5, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    res = optimize(model, time_limit=20, cache=False)
    assert not res.kept_original and res.cost_after < res.cost_before
    assert "Expand" not in {n.op_type for n in res.model.graph.node}
    assert res.numeric is not None and res.numeric.ok
