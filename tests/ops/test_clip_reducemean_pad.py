"""Clip (ReLU6), ReduceMean and constant Pad through ONNX import and export at several opsets, the refusals
that keep them opaque, the decomposed LayerNorm that exporters write below opset 17 collapsing into one
``layernorm``, and an end-to-end optimize."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from _onnx_checks import assert_same_outputs, ops_of
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat import ops
from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.onnx_io import load_model, random_feeds, run_onnxruntime, to_onnx
from eqsat.onnx_io.collapse import collapse_fusions as collapse_gelu
from eqsat.ops import shapes as S
from eqsat.ops.reduce import DROP_MAX_RANK
from eqsat.testing.onnx_builders import make_model

RNG = np.random.default_rng(0)
INF = math.inf


def _w(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inputs, outputs, inits=None, opset: int = 13, declared=None,
           out_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """A checked model; ``inputs`` are (name, shape) floats or (name, shape, elem type); the outputs (of
    ``out_type``) have the shapes ``declared`` (name -> shape) gives, or else shape inference's."""
    declared = declared or {}
    return make_model(nodes, inputs, [(n, declared.get(n), out_type) for n in outputs], inits, opset,
                      ir_version=8 if opset < 21 else 10, infer_shapes=True, check=True)


def _round_trip(model: onnx.ModelProto, opsets=(None,)) -> Graph:
    """Import, check the IR's numpy semantics against onnxruntime, export at each opset and compare."""
    g = load_model(model)
    if "opaque" not in ops_of(g):
        feeds = random_feeds(model, 0)
        for r, o in zip(run_onnxruntime(model, feeds), g.evaluate(feeds), strict=True):
            np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4)
    for opset in opsets:
        assert_same_outputs(model, to_onnx(g, opset=opset))
    return g


def _reason(g: Graph, op_type: str) -> str:
    return " ".join(g.meta["opaque_reasons"][op_type])


ALL_OPSETS = (7, 9, 11, 13, 17, 18, 20, 21)


# -- Clip ----------------------------------------------------------------------------------------------------

def _clip_model(opset: int, low: float | None, high: float | None) -> onnx.ModelProto:
    if opset < 11:
        attrs = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
        node = helper.make_node("Clip", ["x"], ["y"], **attrs)
        inits = {}
    else:
        inits = {k: np.array(v, np.float32) for k, v in (("lo", low), ("hi", high)) if v is not None}
        node = helper.make_node("Clip", ["x", "lo" if low is not None else "", "hi" if high is not None else ""],
                                ["y"])
    return _model([node], [("x", [2, 3, 5])], ["y"], inits, opset)


# min > max only from opset 11: onnxruntime's Clip-6 refuses it
@pytest.mark.parametrize("opset,low,high", [
    (opset, low, high) for opset in (7, 9, 11, 13, 17, 20)
    for low, high in ((0.0, 6.0), (-0.25, None), (None, 0.5), (None, None), (1.0, -1.0))
    if opset >= 11 or low is None or high is None or low <= high])
def test_clip_imports_and_exports_at_each_opset(opset: int, low, high) -> None:
    model = _clip_model(opset, low, high)
    g = _round_trip(model, opsets=ALL_OPSETS)
    assert ops_of(g) == ["clip"]
    expect = (-INF if low is None else low, INF if high is None else high)
    if low is not None and high is not None and low > high:  # every entry is high: clip(high, high)
        expect = (high, high)
    assert (g.nodes[0].p["low"], g.nodes[0].p["high"]) == expect
    # attributes below opset 11, inputs from 11
    for opset_out in (9, 13):
        (node,) = to_onnx(g, opset=opset_out).graph.node
        assert node.op_type == "Clip" and (len(node.input) == 1) == (opset_out < 11)


@pytest.mark.parametrize("opset", [9, 13])
def test_clip_zero_without_max_is_a_relu(opset: int) -> None:
    g = _round_trip(_clip_model(opset, 0.0, None))
    assert ops_of(g) == ["relu"]


def test_relu6_after_a_convolution_imports_as_clip_0_6() -> None:
    """MobileNet's ReLU6, as torch writes it (Clip with constant min and max from Constant nodes)."""
    n = helper.make_node
    nodes = [n("Constant", [], ["six"], value=numpy_helper.from_array(np.array(6.0, np.float32))),
             n("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0.0, np.float32))),
             n("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), n("Clip", ["c", "zero", "six"], ["y"])]
    model = _model(nodes, [("x", [1, 3, 6, 6])], ["y"], {"w": _w(4, 3, 3, 3, scale=2.0), "b": _w(4)}, opset=13)
    g = _round_trip(model, opsets=(9, 13, 17))
    assert ops_of(g) == ["conv2d", "clip"]
    assert g.nodes[1].p == {"low": 0.0, "high": 6.0}
    y = g.evaluate(random_feeds(model, 0))[0]
    assert y.min() == 0.0 and y.max() == 6.0  # both bounds bite on this input


def test_clip_refusals_keep_it_opaque_with_a_reason() -> None:
    n = helper.make_node
    model = _model([n("Clip", ["x", "lo", "hi"], ["y"])], [("x", [2, 3]), ("hi", [])], ["y"],
                   {"lo": np.array(0.0, np.float32)})
    g = load_model(model)
    assert ops_of(g) == ["opaque"] and "not a constant" in _reason(g, "Clip")
    model = _model([n("Clip", ["x", "lo", "hi"], ["y"])], [("x", [2, 3], TensorProto.INT32)], ["y"],
                   {"lo": np.array(0, np.int32), "hi": np.array(6, np.int32)}, out_type=TensorProto.INT32)
    g = load_model(model)
    assert ops_of(g) == ["opaque"] and "non-float" in _reason(g, "Clip")
    model = _clip_model(13, float("nan"), 1.0)
    g = load_model(model)
    assert ops_of(g) == ["opaque"] and "NaN" in _reason(g, "Clip")


def test_clip_spec() -> None:
    spec = ops.get("clip")
    x = np.linspace(-3, 9, 13).astype(np.float32)
    np.testing.assert_array_equal(spec.evaluate({"low": 0.0, "high": 6.0}, [x]), np.clip(x, 0, 6))
    assert spec.normalize({}) == {"low": -INF, "high": INF}
    ints = np.arange(6)
    # clip(0, inf) is relu and fingerprints as relu; different bounds fingerprint differently
    np.testing.assert_array_equal(spec.evaluate_mod({"low": 0.0, "high": INF}, [ints]),
                                  ops.get("relu").evaluate_mod({}, [ints]))
    a = spec.evaluate_mod({"low": 0.0, "high": 6.0}, [ints])
    assert (a != spec.evaluate_mod({"low": 0.0, "high": 1.0}, [ints])).any()
    assert spec.uninterpreted is not None and spec.uninterpreted.facts == ()


# -- ReduceMean ----------------------------------------------------------------------------------------------

def _rm_model(opset: int, axes: list[int] | None, keepdims: int | None, noop: int | None = None,
              shape=(2, 3, 4, 5)) -> onnx.ModelProto:
    attrs = {k: v for k, v in (("keepdims", keepdims), ("noop_with_empty_axes", noop)) if v is not None}
    inits = {}
    ins = ["x"]
    if axes is not None:
        if opset >= 18:
            inits["axes"] = np.array(axes, np.int64)
            ins.append("axes")
        else:
            attrs["axes"] = axes
    return _model([helper.make_node("ReduceMean", ins, ["y"], **attrs)], [("x", list(shape))], ["y"], inits, opset)


@pytest.mark.parametrize("opset", [7, 13, 17, 18, 20])
@pytest.mark.parametrize("axes,keepdims,expect", [
    ([-1], None, ((3,), 1)),
    ([2, 3], 1, ((2, 3), 1)),  # a global average pool
    ([3, 0], 0, ((0, 3), 0)),
    ([1, -2], 0, ((1, 2), 0)),
    (None, 0, ((0, 1, 2, 3), 0)),  # no axes: every axis
    (None, None, ((0, 1, 2, 3), 1)),
])
def test_reduce_mean_imports_and_exports_at_each_opset(opset: int, axes, keepdims, expect) -> None:
    g = _round_trip(_rm_model(opset, axes, keepdims), opsets=ALL_OPSETS)
    assert ops_of(g) == ["reduce_mean"]
    assert (g.nodes[0].p["axes"], g.nodes[0].p["keepdims"]) == expect
    # axes an attribute below opset 18, an input from 18
    for opset_out in (17, 18):
        (node,) = to_onnx(g, opset=opset_out).graph.node
        assert (len(node.input) == 2) == (opset_out >= 18)


@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_mean_dropping_axes_above_rank_4_keeps_them_and_reshapes(opset: int) -> None:
    g = _round_trip(_rm_model(opset, [1, -1], 0, shape=(2, 3, 2, 4, 2)), opsets=(13, 18))
    assert ops_of(g) == ["reduce_mean", "reshape"] and g.nodes[0].p == {"axes": (1, 4), "keepdims": 1}
    assert g.shapes[g.outputs[0]] == (2, 2, 4)


def test_reduce_mean_with_empty_axes_and_noop_is_an_identity() -> None:
    g = _round_trip(_rm_model(18, [], 1, noop=1), opsets=(13, 18))
    assert ops_of(g) == ["reshape"]
    g = _round_trip(_rm_model(18, None, 0, noop=1), opsets=(13, 18))
    assert ops_of(g) == ["reshape"]
    g = _round_trip(_rm_model(18, [], 0, noop=0), opsets=(13, 18))  # without noop: every axis
    assert ops_of(g) == ["reduce_mean"] and g.nodes[0].p["axes"] == (0, 1, 2, 3)


def test_reduce_mean_refusals_keep_it_opaque_with_a_reason() -> None:
    model = _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"])],
                   [("x", [2, 3]), ("axes", [1], TensorProto.INT64)], ["y"], opset=18, declared={"y": [2, 1]})
    g = load_model(model)
    assert ops_of(g) == ["opaque"] and "not a constant" in _reason(g, "ReduceMean")
    model = _model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[1])], [("x", [2, 3], TensorProto.INT32)],
                   ["y"], opset=13, out_type=TensorProto.INT32)
    g = load_model(model)
    assert ops_of(g) == ["opaque"] and "non-float" in _reason(g, "ReduceMean")


def test_reduce_mean_modular_semantics_are_the_exact_mean() -> None:
    spec = ops.get("reduce_mean")
    for axes, keep in (((1,), 1), ((0, 2), 0), ((0, 1, 2), 0)):
        p = spec.normalize({"axes": axes, "keepdims": keep})
        count = math.prod((2, 3, 4)[a] for a in axes)
        ints = RNG.integers(0, 7, (2, 3, 4)) * count  # every mean an integer
        exact = spec.evaluate(p, [ints.astype(np.float64)])
        mod = spec.evaluate_mod(p, [ints])
        assert np.shape(mod) == np.shape(exact)
        np.testing.assert_array_equal(np.asarray(mod, dtype=np.int64), np.rint(exact).astype(np.int64))
    # a mean that is not an integer: the sum times the inverse of the count
    (v,) = spec.evaluate_mod(spec.normalize({"axes": (0,)}), [np.array([1, 2])]).reshape(-1)
    assert v * 2 % ops.PRIME == 3


# -- Pad -----------------------------------------------------------------------------------------------------

def _pad_model(opset: int, pads: list[int], value: float | None = None, mode: str | None = None,
               axes: list[int] | None = None, shape=(2, 3, 4)) -> onnx.ModelProto:
    attrs = {"mode": mode} if mode is not None else {}
    inits = {}
    if opset < 11:
        attrs["pads"] = pads
        if value is not None:
            attrs["value"] = value
        ins = ["x"]
    else:
        inits["pads"] = np.array(pads, np.int64)
        ins = ["x", "pads"]
        if value is not None or axes is not None:
            ins.append("value" if value is not None else "")
            if value is not None:
                inits["value"] = np.array(value, np.float32)
        if axes is not None:
            ins.append("axes")
            inits["axes"] = np.array(axes, np.int64)
    return _model([helper.make_node("Pad", ins, ["y"], **attrs)], [("x", list(shape))], ["y"], inits, opset)


@pytest.mark.parametrize("opset", [7, 9, 11, 13, 18, 19, 21])
@pytest.mark.parametrize("pads,value", [([0, 1, 2, 1, 0, 0], None), ([1, 0, 0, 0, 2, 3], -2.5),
                                        ([0, 0, 1, 0, 0, 1], float("-inf"))])
def test_pad_imports_and_exports_at_each_opset(opset: int, pads, value) -> None:
    g = _round_trip(_pad_model(opset, pads, value, mode="constant" if opset == 9 else None), opsets=ALL_OPSETS)
    assert ops_of(g) == ["pad"]
    assert g.nodes[0].p == {"pads": tuple(pads), "value": 0.0 if value is None else value}
    for opset_out in (9, 11):
        (node,) = to_onnx(g, opset=opset_out).graph.node
        assert (len(node.input) == 1) == (opset_out < 11)


@pytest.mark.parametrize("opset", [18, 21])
def test_pad_with_an_axes_input_spreads_the_pads(opset: int) -> None:
    g = _round_trip(_pad_model(opset, [1, 2, 0, 3], 1.5, axes=[-1, 0]), opsets=(9, 13, 18))
    assert ops_of(g) == ["pad"] and g.nodes[0].p["pads"] == (2, 0, 1, 3, 0, 0)
    g = _round_trip(_pad_model(opset, [1, 2], axes=[1]))  # no constant_value: zeros
    assert g.nodes[0].p == {"pads": (0, 1, 0, 0, 2, 0), "value": 0.0}


def test_pad_of_nothing_is_an_identity() -> None:
    g = _round_trip(_pad_model(13, [0] * 6))
    assert ops_of(g) == ["reshape"]


@pytest.mark.parametrize("opset,kwargs,reason", [
    (13, {"pads": [0, 1, 0, 0, 1, 0], "mode": "reflect"}, "mode 'reflect'"),
    (13, {"pads": [0, 1, 0, 0, 1, 0], "mode": "edge"}, "mode 'edge'"),
    (9, {"pads": [0, 1, 0, 0, 1, 0], "mode": "edge"}, "mode 'edge'"),
    (19, {"pads": [0, 1, 0, 0, 1, 0], "mode": "wrap"}, "mode 'wrap'"),
    (13, {"pads": [0, -1, 0, 0, 1, 0]}, "negative pads"),
    (9, {"pads": [0, 0, -1, 0, 0, 2]}, "negative pads"),
])
def test_pad_refusals_keep_it_opaque_with_a_reason(opset: int, kwargs, reason: str) -> None:
    g = _round_trip(_pad_model(opset, **kwargs))
    assert ops_of(g) == ["opaque"] and reason in _reason(g, "Pad")


def test_pad_with_dynamic_pads_stays_opaque_with_a_reason() -> None:
    model = _model([helper.make_node("Pad", ["x", "pads"], ["y"])], [("x", [2, 3]), ("pads", [4], TensorProto.INT64)],
                   ["y"], opset=13, declared={"y": [3, 4]})
    g = load_model(model)
    assert ops_of(g) == ["opaque"] and "pads that are not a constant" in _reason(g, "Pad")


def test_pad_modular_semantics_fill_with_the_value_modulo_the_prime() -> None:
    spec = ops.get("pad")
    out = spec.evaluate_mod(spec.normalize({"pads": (1, 0), "value": 0.5}), [np.array([3, 4])])
    assert out[0] * 2 % ops.PRIME == 1 and list(out[1:]) == [3, 4]
    out = spec.evaluate_mod(spec.normalize({"pads": (0, 1), "value": -2.0}), [np.array([3])])
    assert list(out) == [3, ops.PRIME - 2]


# -- shape rules as data -------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,params,shapes", [
    ("reduce_mean", {"axes": (1, 0)}, [(2, 3, 4)]),  # not ascending
    ("reduce_mean", {"axes": (1, 1)}, [(2, 3, 4)]),
    ("reduce_mean", {"axes": (3,)}, [(2, 3, 4)]),
    ("reduce_mean", {"axes": (-1,)}, [(2, 3, 4)]),
    ("reduce_mean", {"axes": ()}, [(2, 3, 4)]),
    ("reduce_mean", {"axes": (0,), "keepdims": 2}, [(2, 3, 4)]),
    ("reduce_mean", {"axes": (2, 3), "keepdims": 0}, [(2, 3, 4)]),
    ("reduce_mean", {"axes": (0,), "keepdims": 0}, [(2, 3, 4, 5, 6)]),  # keepdims=0 above rank 4
    ("pad", {"pads": (1, 1, 1)}, [(2, 3)]),
    ("pad", {"pads": (1, -1, 1, 1)}, [(2, 3)]),
    ("pad", {"pads": ()}, [()]),
])
def test_shape_rules_reject_what_the_registry_rejects(op: str, params: dict, shapes: list) -> None:
    spec = ops.get(op)
    p = spec.normalize(params)
    with pytest.raises(ops.OpError):
        spec.shape(p, shapes)
    assert S.evaluate(spec.shape_rules, dict(zip(spec.inputs, shapes, strict=True)), p) is None


def test_reduce_mean_shape_rules_cover_every_axis_set() -> None:
    import itertools

    spec = ops.get("reduce_mean")
    for rank in range(1, ops.MAX_RANK + 1):
        x = tuple(range(2, 2 + rank))
        for k in range(1, rank + 1):
            for axes in itertools.combinations(range(rank), k):
                for keep in (0, 1) if rank <= DROP_MAX_RANK else (1,):
                    p = spec.normalize({"axes": axes, "keepdims": keep})
                    assert S.evaluate(spec.shape_rules, {"x": x}, p) == spec.shape(p, [x]), (x, axes, keep)


def test_egraph_shape_rules_give_the_new_operators_their_shapes() -> None:
    from eqsat.engine.limits import Limits
    from eqsat.engine.readback import tensor_names_by_class
    from eqsat.engine.saturation import saturate
    nodes = (make_node("pad", {"pads": (0, 0, 1, 2, 0, 0, 3, 0), "value": -1.0}, ["x"], "p"),  # (2, 3, 8, 7)
             make_node("clip", {"low": 0.0, "high": 6.0}, ["p"], "c"),
             make_node("clip", {"low": -INF, "high": 1.5}, ["c"], "c2"),
             make_node("reduce_mean", {"axes": (2, 3), "keepdims": 1}, ["c2"], "m1"),  # (2, 3, 1, 1)
             make_node("reduce_mean", {"axes": (0, 2), "keepdims": 0}, ["c2"], "m0"),  # (3, 7)
             make_node("reduce_mean", {"axes": (1,), "keepdims": 0}, ["m0"], "m00"),  # (3,)
             make_node("reduce_mean", {"axes": (0, 1, 2, 3), "keepdims": 0}, ["c2"], "all"))  # ()
    g = Graph((TensorInfo("x", (2, 3, 4, 5)),), {}, nodes, ("m1", "m00", "all")).validate()
    res = saturate(g, [], Limits(iter_limit=0), in_process=True)
    by_name = tensor_names_by_class(res)
    shaped = {tensor: res.egraph.shape(cls) for cls, tensor in by_name.items()}
    for n in nodes:
        assert shaped[n.output] == g.shapes[n.output], n.output


# -- the decomposed LayerNorm --------------------------------------------------------------------------------

D = 8


def _decomposed_ln(opset: int = 14, *, square: str = "pow", scale: str | None = "after", bias: str | None = "after",
                   extra_output: str | None = None, eps: float = 1e-5, exponent: float = 2.0,
                   axes: tuple[list[int], list[int]] = ([-1], [-1]), scale_value: np.ndarray | None = None,
                   shape=(2, 3, D)) -> onnx.ModelProto:
    """LayerNorm as torch exports it below opset 17: ReduceMean -> Sub -> Pow -> ReduceMean -> Add eps -> Sqrt
    -> Div -> Mul scale -> Add bias (``scale``/``bias``: "after" x-first, "before" constant-first, None absent),
    between two Relus."""
    n = helper.make_node
    inits: dict[str, np.ndarray] = {"two": np.array(exponent, np.float32), "eps": np.array(eps, np.float32)}

    def mean(src: str, dst: str, k: int) -> onnx.NodeProto:
        if opset >= 18:
            inits[f"axes{k}"] = np.array(axes[k], np.int64)
            return n("ReduceMean", [src, f"axes{k}"], [dst])
        return n("ReduceMean", [src], [dst], axes=axes[k])

    nodes = [n("Relu", ["x0"], ["x"]), mean("x", "m", 0), n("Sub", ["x", "m"], ["d"]),
             n("Pow", ["d", "two"], ["sq"]) if square == "pow" else n("Mul", ["d", "d"], ["sq"]),
             mean("sq", "v", 1), n("Add", ["v", "eps"], ["ve"]), n("Sqrt", ["ve"], ["s"]),
             n("Div", ["d", "s"], ["z"])]
    last = "z"
    if scale:
        inits["gamma"] = 1 + _w(D) if scale_value is None else scale_value
        nodes.append(n("Mul", [last, "gamma"] if scale == "after" else ["gamma", last], ["zs"]))
        last = "zs"
    if bias:
        inits["beta"] = _w(D)
        nodes.append(n("Add", [last, "beta"] if bias == "after" else ["beta", last], ["zb"]))
        last = "zb"
    nodes.append(n("Relu", [last], ["y"]))
    outs = ["y"] + ([extra_output] if extra_output else [])
    return _model(nodes, [("x0", list(shape))], outs, inits, opset)


@pytest.mark.parametrize("opset", [11, 14, 16, 18])
@pytest.mark.parametrize("variant", [
    {}, {"square": "mul"}, {"scale": "before", "bias": "before"}, {"bias": None}, {"scale": None},
    {"scale": None, "bias": None},
])
def test_decomposed_layernorm_collapses_into_one_layernorm(opset: int, variant: dict) -> None:
    model = _decomposed_ln(opset, **variant)
    g = _round_trip(model, opsets=(opset, 17))
    assert ops_of(g) == ["relu", "layernorm", "relu"], ops_of(g)
    ln = g.nodes[1]
    assert ln.p == {"axis": 2, "epsilon": pytest.approx(1e-5)}
    assert g.meta["opaque_reasons"] == {}
    weights = dict(zip(("x", "scale", "bias"), (g.weights.get(i) for i in ln.inputs), strict=True))
    ref = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    np.testing.assert_array_equal(weights["scale"], ref["gamma"] if variant.get("scale", "after") else np.ones(D))
    np.testing.assert_array_equal(weights["bias"], ref["beta"] if variant.get("bias", "after") else np.zeros(D))
    # written back as one LayerNormalization from opset 17, as the decomposition below
    types = {n.op_type for n in to_onnx(g, opset=17).graph.node}
    assert "LayerNormalization" in types and "ReduceMean" not in types
    assert "LayerNormalization" not in {n.op_type for n in to_onnx(g, opset=opset if opset < 17 else 13).graph.node}


def test_decomposed_layernorm_over_two_axes_and_a_broadcast_scale() -> None:
    model = _decomposed_ln(14, axes=([-2, -1], [1, 2]), scale=None, bias=None)
    g = _round_trip(model, opsets=(14, 17))
    assert ops_of(g) == ["relu", "layernorm", "relu"] and g.nodes[1].p["axis"] == 1
    # a (1, 1, D) scale is stored over the normalized dimensions (D,)
    gamma = (1 + _w(D)).reshape(1, 1, D)
    g = _round_trip(_decomposed_ln(14, scale_value=gamma), opsets=(14, 17))
    assert ops_of(g) == ["relu", "layernorm", "relu"]
    np.testing.assert_array_equal(g.weights[g.nodes[1].inputs[1]], gamma.reshape(D))


def test_a_scale_that_varies_off_the_normalized_axes_stays_outside() -> None:
    g = _round_trip(_decomposed_ln(14, scale_value=1 + _w(3, D), bias=None), opsets=(14, 17))
    assert ops_of(g) == ["relu", "layernorm", "ewmul", "relu"]


@pytest.mark.parametrize("inner", ["m", "d", "sq", "v", "ve", "s"])
def test_decomposed_layernorm_with_an_intermediate_graph_output_does_not_collapse(inner: str) -> None:
    g = _round_trip(_decomposed_ln(14, extra_output=inner), opsets=(14,))
    assert "layernorm" not in ops_of(g)
    if inner in ("m", "d"):  # the rest, d / sqrt(mean(d^2) + eps), is an RMS norm of the centered values
        assert "rmsnorm" in g.op_histogram()
    else:
        assert "ewsqrt" in g.op_histogram() and "Div" in g.op_histogram()  # d / std stays an opaque node


def test_a_read_normalized_value_ends_the_pattern_before_the_scale() -> None:
    g = _round_trip(_decomposed_ln(14, extra_output="z"), opsets=(14,))
    assert ops_of(g) == ["relu", "layernorm", "ewmul", "ewadd", "relu"]
    assert not np.any(g.weights[g.nodes[1].inputs[2]]) and np.all(g.weights[g.nodes[1].inputs[1]] == 1)


@pytest.mark.parametrize("kwargs", [{"exponent": 3.0}, {"eps": -1e-5}, {"axes": ([1], [1])},
                                    {"axes": ([-1], [-2, -1])}])
def test_decomposed_layernorm_with_a_wrong_constant_does_not_collapse(kwargs: dict) -> None:
    g = _round_trip(_decomposed_ln(14, **kwargs), opsets=(14,))
    assert "layernorm" not in ops_of(g)


def test_a_collapsed_layernorm_that_does_not_import_keeps_its_nodes(monkeypatch) -> None:
    def refuse(ctx, node):
        return ctx.unsupported("refused for the test")

    monkeypatch.setitem(ops.ONNX_IMPORTERS, "LayerNormalization", refuse)
    model = _decomposed_ln(14, scale=None)  # its unit scale is a new constant, dropped with the collapse
    g = _round_trip(model, opsets=(14,))
    assert "layernorm" not in ops_of(g) and ops_of(g).count("reduce_mean") == 2
    assert "LayerNormalization" not in g.meta["opaque_reasons"] and "Div" in g.meta["opaque_reasons"]
    assert not any(k.endswith("unit_scale") for k in g.weights)


def test_collapse_gelu_keeps_its_interface() -> None:
    n = helper.make_node
    nodes = [n("Div", ["x", "sqrt2"], ["d"]), n("Erf", ["d"], ["e"]), n("Add", ["e", "one"], ["a"]),
             n("Mul", ["x", "a"], ["m"]), n("Mul", ["m", "half"], ["y"])]
    consts = {"sqrt2": np.array(math.sqrt(2), np.float32), "one": np.array(1.0, np.float32),
              "half": np.array(0.5, np.float32)}
    out, collapsed = collapse_gelu(nodes, consts, {"y"}, lambda name: (2, 3), lambda name: True)
    assert [m.op_type for m in out] == ["Gelu"] and len(collapsed[id(out[0])].originals) == 5


# -- end to end ----------------------------------------------------------------------------------------------

def test_optimize_a_graph_with_the_new_operators() -> None:
    """Pad -> Conv -> ReLU6 -> a mean over the spatial axes -> MatMul -> torch's LayerNorm, at opset 14."""
    n = helper.make_node
    ln = _decomposed_ln(14, shape=(1, 4, D))
    ln_nodes = [m for m in ln.graph.node if m.op_type != "Relu"]
    for m in ln_nodes:  # the layer norm reads h (instead of x) and writes y
        m.input[:] = ["h" if i == "x" else i for i in m.input]
        m.output[:] = ["y" if o == "zb" else o for o in m.output]
    nodes = [n("Pad", ["x", "pads", "pad_value"], ["xp"]),
             n("Conv", ["xp", "w", "b"], ["c"]), n("Clip", ["c", "zero", "six"], ["r6"]),
             n("ReduceMean", ["r6"], ["pooled"], axes=[2, 3], keepdims=0),  # (1, 4)
             n("Reshape", ["pooled", "rows"], ["p3"]),  # (1, 4, 1)
             n("MatMul", ["p3", "wm"], ["h"]), *ln_nodes]  # (1, 4, D)
    inits = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pad_value": np.array(0.0, np.float32),
             "w": _w(4, 3, 3, 3, scale=1.0), "b": _w(4), "zero": np.array(0.0, np.float32),
             "six": np.array(6.0, np.float32), "rows": np.array([1, 4, 1], np.int64), "wm": _w(1, D),
             **{i.name: numpy_helper.to_array(i) for i in ln.graph.initializer}}
    model = _model(nodes, [("x", [1, 3, 6, 6])], ["y"], inits, opset=14)
    res = eqsat.optimize(model, time_limit=10, iter_limit=2, node_limit=5000)
    onnx.checker.check_model(res.model, full_check=True)
    assert res.numeric is not None and res.numeric.ok
    assert res.cost_after <= res.cost_before
    hist = res.original.op_histogram()
    assert "opaque" not in hist and hist["layernorm"] == 1 and hist["clip"] == 1 and hist["pad"] == 1
    assert hist["reduce_mean"] == 1
    assert_same_outputs(model, res.model)
