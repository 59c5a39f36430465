"""A layer norm timed in its context: measured behind the residual add that precedes it in a transformer, and
offered as a layer norm over the rows of a 2-D view (`layout-layernorm-rows`), which runtimes may run
differently (onnxruntime fuses the add into a 3-D layer norm only)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from eqsat import models, ops
from eqsat.costs import AnalyticCostModel
from eqsat.costs.measured_cpu import one_node_model
from eqsat.onnx_io import random_feeds, run_onnxruntime
from eqsat.pipeline import optimize


def _ln_key(shape: tuple[int, ...]):
    spec = ops.get("layernorm")
    p = spec.normalize({"axis": len(shape) - 1, "epsilon": 1e-12})
    return spec.cost_key(p, [shape, shape[-1:], shape[-1:]], shape, weights=(1, 2))


def test_layernorm_cost_key_names_its_context() -> None:
    key = _ln_key((1, 8, 16))
    assert key.after == "ewadd" and key.as_str().endswith(":after=ewadd")
    assert ops.get("matmul").cost_key({}, [(2, 3), (3, 4)], (2, 4)).after == ""


def test_the_context_model_computes_the_input_with_the_producer() -> None:
    key = _ln_key((1, 8, 16))
    m = one_node_model(key, after=True)
    assert [n.op_type for n in m.graph.node] == ["Add", "LayerNormalization"]
    assert {i.name for i in m.graph.input} == {"in0", "in0_b"}
    feeds = random_feeds(m)
    out = run_onnxruntime(m, feeds)[0]
    x = feeds["in0"] + feeds["in0_b"]
    w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    scale, bias = (w[n] for n in m.graph.node[1].input[1:])
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12) * scale + bias
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


class _SlowFusedLayerNorm(AnalyticCostModel):
    """A runtime on which a 3-D layer norm behind an add is ten times dearer than one over 2-D rows."""

    def cost(self, key):
        c = super().cost(key)
        return c * 10 if key.op == "layernorm" and len(key.input_shapes[0]) == 3 else c


def test_extraction_takes_the_rows_form_where_it_is_cheaper_and_stays_equal() -> None:
    model = models.hf_bert(seq=8, hidden=16, heads=2, intermediate=32, vocab=50)
    res = optimize(model, cost_model=_SlowFusedLayerNorm(), time_limit=60)
    assert res.numeric is not None and res.numeric.ok
    norms = [n for n in res.graph.nodes if n.op == "layernorm"]
    assert norms and all(len(res.graph.shapes[n.inputs[0]]) == 2 for n in norms)
    assert "layout-layernorm-rows" in res.rules_fired


@pytest.mark.slow  # optimize of a (small) BERT layer; the rows form's test below runs in the fast lane
def test_plain_costs_keep_the_layer_norms_as_they_are() -> None:
    model = models.hf_bert(seq=8, hidden=16, heads=2, intermediate=32, vocab=50)
    res = optimize(model, time_limit=60)
    assert res.numeric is not None and res.numeric.ok
    assert res.cost_after <= res.cost_before
