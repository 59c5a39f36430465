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
PARAMS = {*CONV, *LRN, "?eps", "?s", "?ta", "?tb"}  # parameter variables; the others are tensors
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
