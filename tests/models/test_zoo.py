"""The onnx package's light zoo: import -> export round trips, numerically equal under onnxruntime."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest

from eqsat import models, onnx_io
from eqsat.pipeline.check import check_equal

#: zoo models with over 100 MB of weights (their round trips take minutes together) and the two other ones whose
#: round trip takes over a second; squeezenet, shufflenet and inception_v1 stay in the fast lane
FULL_SIZE = {"alexnet", "resnet50", "vgg19", "zfnet512", "densenet121", "inception_v2"}
#: the three largest (250-575 MB of weights, a few GB while both models run) one after the other on one worker
LARGEST = {"alexnet", "vgg19", "zfnet512"}


def _marks(name: str) -> list[pytest.MarkDecorator]:
    return ([pytest.mark.slow] if name in FULL_SIZE else []) + \
        ([pytest.mark.xdist_group("largest_zoo_models")] if name in LARGEST else [])


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(n)) for n in models.zoo_names()])
def test_zoo_round_trip(name: str) -> None:
    model = models.load_zoo_model(name, seed=0)  # loaded here, not kept for the session: up to 575 MB
    graph = onnx_io.load_model(model)
    assert graph.op_histogram()["conv2d"] >= 5
    out = onnx_io.to_onnx(graph)
    onnx.checker.check_model(out, full_check=True)
    assert [o.name for o in out.graph.output] == [o.name for o in model.graph.output]
    assert [i.name for i in out.graph.input] == [i.name for i in model.graph.input]
    report = check_equal(model, out)
    assert report.ok, report.summary()


def test_zoo_weights_are_seeded_and_finite() -> None:
    a, b, c = (models.load_zoo_model("squeezenet", seed=s) for s in (0, 0, 1))
    wa, wb, wc = ({t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer} for m in (a, b, c))
    name = next(k for k, v in wa.items() if v.ndim == 4)
    np.testing.assert_array_equal(wa[name], wb[name])
    assert not np.array_equal(wa[name], wc[name])
    out = onnx_io.run_onnxruntime(a, onnx_io.random_feeds(a))[0]
    assert np.all(np.isfinite(out)) and out.std() > 0


def test_numpy_evaluation_matches_onnxruntime_on_squeezenet(zoo_model: Callable[[str], onnx.ModelProto]) -> None:
    model = zoo_model("squeezenet")
    graph = onnx_io.load_model(model)
    feeds = onnx_io.random_feeds(graph, seed=3)
    ours = graph.evaluate(feeds, onnx_io.onnx_opaque_evaluator(graph))[0]
    ref = onnx_io.run_onnxruntime(model, feeds)[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


# TASO's models: test_taso_suite
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "hf_bert" else n  # BERT-base size
                                  for n in sorted(set(models.builtin_models()) - set(models.TASO_SUITE))])
def test_builtin_models_round_trip(name: str) -> None:
    model = models.builtin_models()[name]()
    out = onnx_io.to_onnx(onnx_io.load_model(model))
    assert check_equal(model, out).ok


#: torchvision's ``mobilenet_v2().parameters()`` count; exported in eval mode, each BatchNorm's scale and shift
#: fold into one bias per channel (17,056 channels), so the ONNX model holds 3,487,816
TORCHVISION_MOBILENET_V2_PARAMS = 3_504_872


def test_mobilenet_v2_is_torchvisions_architecture(builtin_model: Callable[..., onnx.ModelProto]) -> None:
    model = builtin_model("mobilenet_v2")
    onnx.checker.check_model(model, full_check=True)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert abs(params / TORCHVISION_MOBILENET_V2_PARAMS - 1) < 0.05, params
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1) for n in convs]
    assert (len(convs), sum(g > 1 for g in groups)) == (52, 17)  # 17 blocks, each with one depthwise conv
    histogram = onnx_io.load_model(model).op_histogram()
    assert histogram["opaque"] == 0, histogram
    assert (histogram["clip"], histogram["conv2d_add"]) == (35, 10)  # ReLU6s; residual Adds fused into a conv
    y = onnx_io.run_onnxruntime(model, onnx_io.random_feeds(model))[0]
    assert y.shape == (1, 1000) and np.all(np.isfinite(y)) and y.std() > 0.1  # not saturated to a constant


def test_mobilenet_v2_optimizes_with_the_starter_rules(builtin_model: Callable[..., onnx.ModelProto]) -> None:
    from eqsat import optimize
    from eqsat.rules import starter_rules

    res = optimize(builtin_model("mobilenet_v2"), time_limit=10, rules=starter_rules())
    assert res.numeric is not None and res.numeric.ok
    assert res.cost_after <= res.cost_before + 1e-12
