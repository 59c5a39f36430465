"""TASO's seven benchmark graphs (eqsat.models.taso_*): names, structure, import without opaque nodes, round trips."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import helper

from eqsat import models, onnx_io
from eqsat.pipeline.check import check_equal

# small versions of every model, cheap enough to import, run and round-trip
SMALL: dict[str, Callable[[], onnx.ModelProto]] = {
    "taso_bert": lambda: models.taso_bert(seq=16, hidden=64, heads=4, layers=2),
    "taso_nasrnn": lambda: models.taso_nasrnn(hidden=32, steps=5),
    "taso_resnext50": lambda: models.taso_resnext50(image=64, widths=(32, 64, 64, 64), depths=(2, 1, 1, 1), stem=16),
    "taso_nasnet_a": lambda: models.taso_nasnet_a(image=32, channels=8, cells=2, stages=2, stem=8),
    "taso_inception_v3": lambda: models.taso_inception_v3(image=75, width_div=16),
    "taso_squeezenet": lambda: models.taso_squeezenet(image=64, num_classes=10, width_div=4),
    "taso_vgg19": lambda: models.taso_vgg19(image=32, num_classes=10, fc=32, width_div=8),
}


#: the structure tests build TASO's full-size graphs (the small versions above run in the fast lane)
FULL_SIZE = pytest.mark.slow


def _ops(m: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in m.graph.node)


def _attr(n: onnx.NodeProto, name: str, default: object = None) -> object:
    a = next((a for a in n.attribute if a.name == name), None)
    return default if a is None else helper.get_attribute_value(a)


def _out_shape(m: onnx.ModelProto, i: int = 0) -> tuple[int, ...]:
    return tuple(d.dim_value for d in m.graph.output[i].type.tensor_type.shape.dim)


def _check_conventions(m: onnx.ModelProto) -> None:
    """TASO's conventions: bias-free convs, explicit pads, pools without auto_pad, avg pools excluding pads."""
    for n in m.graph.node:
        assert _attr(n, "auto_pad") is None, n.name
        if n.op_type == "Conv":
            assert len(n.input) == 2 and _attr(n, "pads") is not None
        if n.op_type in ("MaxPool", "AveragePool"):
            assert _attr(n, "pads") is not None
        if n.op_type == "AveragePool":
            assert _attr(n, "count_include_pad") == 0


def test_suite_names() -> None:
    assert models.TASO_SUITE == ("taso_bert", "taso_nasrnn", "taso_resnext50", "taso_nasnet_a", "taso_inception_v3",
                              "taso_squeezenet", "taso_vgg19")
    assert list(models.taso_suite()) == list(models.TASO_SUITE)
    builtins = models.builtin_models()
    assert all(name in builtins for name in models.TASO_SUITE)
    assert "bert_attention_block" in builtins and "nasrnn_cell" in builtins
    assert set(SMALL) == set(models.TASO_SUITE)


@FULL_SIZE
def test_bert_structure() -> None:
    m = models.taso_bert(softmax=False)  # TASO's graph exactly
    ops = _ops(m)
    assert ops == Counter({"MatMul": 48, "Reshape": 32, "Transpose": 32, "Relu": 1})  # 8 layers x (6, 4, 4)
    assert _ops(models.taso_bert()) == ops + Counter({"Softmax": 8})  # the default: a softmax per layer
    perms = Counter(tuple(_attr(n, "perm")) for n in m.graph.node if n.op_type == "Transpose")
    assert perms == Counter({(1, 0, 2): 24, (1, 2, 0): 8})
    assert _out_shape(m) == (64, 1024) and m.graph.node[0].op_type == "Relu"
    out = onnx_io.run_onnxruntime(m, onnx_io.random_feeds(m))[0]
    assert np.all(np.isfinite(out)) and 0.1 < out.std() < 10  # calibrated on random_feeds' default input


@FULL_SIZE
def test_nasrnn_structure() -> None:
    m = models.taso_nasrnn()
    assert [i.name for i in m.graph.input] == [f"x{i}" for i in range(5)]
    assert all(tuple(d.dim_value for d in i.type.tensor_type.shape.dim) == (1, 512) for i in m.graph.input)
    ops = _ops(m)
    assert ops["MatMul"] == 5 * 16 and ops["Tanh"] == 5 * 8 and ops["Sigmoid"] == 5 * 5 and ops["Relu"] == 5 * 2
    assert _out_shape(m) == (1, 512)
    # the initial state is a (1, 512) weight
    inits = {i.name: tuple(i.dims) for i in m.graph.initializer}
    first = next(n for n in m.graph.node if n.op_type == "MatMul" and n.input[0] in inits)
    assert inits[first.input[0]] == (1, 512)


@FULL_SIZE
def test_resnext50_structure() -> None:
    m = models.taso_resnext50()
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    assert sum(_attr(n, "group", 1) == 32 for n in convs) == 16  # one grouped 3x3 per block, [3, 4, 6, 3]
    assert len(convs) == 1 + 16 * 3 + 4  # stem, three per block, four projection shortcuts
    assert _ops(m)["Add"] == 16 and _ops(m)["MaxPool"] == 1
    assert _out_shape(m) == (1, 2048, 7, 7)
    _check_conventions(m)


@FULL_SIZE
def test_nasnet_a_structure() -> None:
    m = models.taso_nasnet_a()
    concats = [n for n in m.graph.node if n.op_type == "Concat"]
    assert len(concats) == 3 * (5 + 1) and all(len(n.input) == 5 for n in concats)  # normal and reduction cells
    shapes = {i.name: tuple(i.dims) for i in m.graph.initializer}
    depthwise = [n for n in m.graph.node if n.op_type == "Conv" and _attr(n, "group", 1) > 1]
    assert depthwise and all(shapes[n.input[1]][1] == 1 for n in depthwise)
    assert sum(_attr(n, "strides") == [2, 2] for n in depthwise) == 3 * 4  # four strided sep convs per reduction
    assert _ops(m)["MaxPool"] == 1 + 3 * 2 and _ops(m)["AveragePool"] == 3 * (5 * 3 + 2)
    assert _out_shape(m) == (1, 5120, 7, 7)
    _check_conventions(m)


@FULL_SIZE
def test_inception_v3_structure() -> None:
    m = models.taso_inception_v3()
    arity = Counter(len(n.input) for n in m.graph.node if n.op_type == "Concat")
    assert arity == Counter({4: 3 + 4, 3: 2, 6: 2})  # A x3, C x4 / B, D / E x2
    ops = _ops(m)
    assert ops["Conv"] == ops["Relu"] == 94 and ops["GlobalAveragePool"] == 1
    assert _out_shape(m) == (1, 2048, 1, 1)
    assert tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim) == (1, 3, 299, 299)
    _check_conventions(m)


@FULL_SIZE
def test_squeezenet_and_vgg19_structure() -> None:
    sq = models.taso_squeezenet()
    assert _ops(sq)["Conv"] == 26 and _ops(sq)["Concat"] == 8 and _out_shape(sq) == (1, 1000)
    _check_conventions(sq)
    vgg = models.taso_vgg19(classifier=False)  # the full classifier holds 124M parameters: checked small below
    assert _ops(vgg) == Counter({"Conv": 16, "Relu": 16, "MaxPool": 5}) and _out_shape(vgg) == (1, 512, 7, 7)
    _check_conventions(vgg)
    small = SMALL["taso_vgg19"]()
    assert _ops(small)["MatMul"] == 3 and _out_shape(small) == (1, 10)


def test_builders_are_seeded() -> None:
    a, b, c = (models.taso_nasrnn(hidden=16, steps=2, seed=s) for s in (0, 0, 1))
    assert a.SerializeToString() == b.SerializeToString() != c.SerializeToString()


@pytest.mark.parametrize("name", models.TASO_SUITE)
def test_small_versions_import_run_and_round_trip(name: str) -> None:
    model = SMALL[name]()
    onnx.checker.check_model(model, full_check=True)
    graph = onnx_io.load_model(model)
    opaque = {n.p["op_type"] for n in graph.nodes if n.op == "opaque"}
    assert opaque <= ({"Softmax"} if name == "taso_bert" else set()), graph.op_histogram()  # Softmax: issue 10
    outs = onnx_io.run_onnxruntime(model, onnx_io.random_feeds(model))
    assert all(np.all(np.isfinite(o)) and o.std() > 0 for o in outs)
    out = onnx_io.to_onnx(graph)
    report = check_equal(model, out)
    assert report.ok, report.summary()


def test_demo_help_names_the_suite(capsys) -> None:
    from eqsat.cli.app import main

    assert main(["demo", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert all(name in out for name in models.TASO_SUITE)
