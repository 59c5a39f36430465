"""Models with operators of other domains (onnxruntime's com.microsoft fused kernels): optimized around them,
their outputs typed by running the model once, with or without dynamic axes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat.errors import DynamicShapeError
from eqsat.onnx_io import load_model, opaque_reasons, run_onnxruntime


def _model(batch: int | str, op: str = "QuickGelu", domain: str = "com.microsoft") -> onnx.ModelProto:
    """Two matmuls that merge, around a kernel eqsat does not import (onnxruntime's x * sigmoid(1.702 x))."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
         for n, s in (("W1", (64, 128)), ("W2", (128, 64)), ("W3", (128, 64)))]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node(op, ["h"], ["g"], domain=domain),
             helper.make_node("MatMul", ["g", "W2"], ["a"]), helper.make_node("MatMul", ["g", "W3"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    g = helper.make_graph(nodes, "contrib", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 64])], w)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])


@pytest.mark.parametrize("batch", [4, "batch"])
def test_a_fused_kernel_is_typed_by_running_and_optimized_around(batch: int | str) -> None:
    g = load_model(_model(batch), symbolic=True)
    assert [op for op, _, _ in opaque_reasons(g)] == ["com.microsoft:QuickGelu"]
    res = eqsat.optimize(_model(batch), time_limit=10)
    assert not res.kept_original and res.cost_after < res.cost_before  # the two matmuls merged around it
    assert "QuickGelu" in {n.op_type for n in res.model.graph.node}
    assert [d.dim_param or d.dim_value for d in res.model.graph.output[0].type.tensor_type.shape.dim] == [batch, 64]
    assert res.numeric is not None and res.numeric.ok


def test_an_operator_onnxruntime_cannot_run_is_a_clear_error() -> None:
    with pytest.raises(DynamicShapeError, match="no static shape for 'g'"):
        load_model(_model(4, op="Mystery", domain="example.custom"))


# -- onnxruntime's fused kernels imported as the operators they fuse (eqsat.ops.contrib) -------------------

MS = "com.microsoft"


def _kernel(op: str, ins: list[str], outs: list[str], attrs: dict, inputs: dict[str, list[int]],
            weights: dict[str, np.ndarray], domain: str = MS) -> onnx.ModelProto:
    """One kernel whose named outputs are the graph's outputs (an empty name: an output not computed)."""
    node = helper.make_node(op, ins, outs, domain=domain, **attrs)
    g = helper.make_graph([node], op,
                          [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o],
                          [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _kernels(shape: tuple[int, ...]) -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    """Each imported kernel in its configurations, on inputs of ``shape`` (the last axis the hidden one)."""
    rng = np.random.default_rng(len(shape))
    h = shape[-1]
    gamma, beta, bias = (rng.standard_normal(h).astype(np.float32) for _ in range(3))
    x, skip = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    io = {"x": list(shape), "s": list(shape)}
    both = {"x": x, "s": skip}
    eps = {"epsilon": 1e-5}
    trailing = {"x": list(shape), "t": list(shape[1:])}
    a = rng.standard_normal((*shape[:-1], 8)).astype(np.float32)
    b = rng.standard_normal((*shape[:-2], 6, 8)).astype(np.float32)
    kernels = {
        "SkipLayerNormalization": (_kernel("SkipLayerNormalization", ["x", "s", "g", "b"], ["y"], eps, io,
                                           {"g": gamma, "b": beta}), both),
        "SkipLayerNormalization, bias, sum read": (
            _kernel("SkipLayerNormalization", ["x", "s", "g", "b", "c"], ["y", "", "", "sum"], eps, io,
                    {"g": gamma, "b": beta, "c": bias}), both),
        "SkipSimplifiedLayerNormalization, bias, sum read": (
            _kernel("SkipSimplifiedLayerNormalization", ["x", "s", "g", "c"], ["y", "", "", "sum"], eps, io,
                    {"g": gamma, "c": bias}), both),
        "SimplifiedLayerNormalization": (
            _kernel("SimplifiedLayerNormalization", ["x", "g"], ["y"], {"epsilon": 1e-6, "axis": -1},
                    {"x": list(shape)}, {"g": gamma}, domain=""), {"x": x}),
        "BiasGelu": (_kernel("BiasGelu", ["x", "c"], ["y"], {}, {"x": list(shape)}, {"c": bias}), {"x": x}),
        "FastGelu, bias": (_kernel("FastGelu", ["x", "c"], ["y"], {}, {"x": list(shape)}, {"c": bias}), {"x": x}),
        "FastGelu": (_kernel("FastGelu", ["x"], ["y"], {}, {"x": list(shape)}, {}), {"x": x}),
        "Gelu": (_kernel("Gelu", ["x"], ["y"], {}, {"x": list(shape)}, {}), {"x": x}),
        "FusedMatMul, transB, alpha": (
            _kernel("FusedMatMul", ["a", "b"], ["y"], {"transB": 1, "alpha": 0.125},
                    {"a": list(a.shape), "b": list(b.shape)}, {}), {"a": a, "b": b}),
        "FusedMatMul, transA, a weight": (
            _kernel("FusedMatMul", ["a", "w"], ["y"], {"transA": 1}, {"a": list(a.shape)},
                    {"w": rng.standard_normal((*shape[:-2], shape[-2], 5)).astype(np.float32)}), {"a": a}),
    }
    if len(shape) == 3:  # a skip of the input's trailing shape, or one batch of it (2-D and 3-D skips)
        kernels["SkipLayerNormalization, no beta, a skip of the trailing shape"] = (
            _kernel("SkipLayerNormalization", ["x", "t", "g", "", "c"], ["y"], eps, trailing,
                    {"g": gamma, "c": bias}), {"x": x, "t": skip[0]})
        kernels["SkipLayerNormalization, a skip of one batch"] = (
            _kernel("SkipLayerNormalization", ["x", "t", "g", "b"], ["y"], eps,
                    {"x": list(shape), "t": [1, *shape[1:]]}, {"g": gamma, "b": beta}), {"x": x, "t": skip[:1]})
        qkv = {n: list(shape) for n in "qkv"}
        feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in "qkv"}
        mask = np.where(rng.random((1, 4, shape[1], shape[1])) < 0.3, -1e4, 0).astype(np.float32)
        kernels["MultiHeadAttention, default scale"] = (
            _kernel("MultiHeadAttention", ["q", "k", "v"], ["y"], {"num_heads": 4}, qkv, {}), feeds)
        kernels["MultiHeadAttention, scale, attention bias"] = (
            _kernel("MultiHeadAttention", ["q", "k", "v", "", "", "m"], ["y"], {"num_heads": 4, "scale": 0.3},
                    {**qkv, "m": list(mask.shape)}, {}), {**feeds, "m": mask})
    return kernels


@pytest.mark.parametrize("shape", [(6, 16), (2, 5, 32), (1, 7, 48)])
def test_fused_kernels_import_as_what_they_fuse_and_compute_what_onnxruntime_does(shape: tuple[int, ...]) -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for name, (model, feeds) in _kernels(shape).items():
        g = load_model(model)
        assert not any(n.op == "opaque" for n in g.nodes), name
        want = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
        for got, ref in zip(g.evaluate(feeds), want, strict=True):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5, err_msg=name)


def _fused_conv_kernels() -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray]]]:
    """onnxruntime's convolution and Gemm with an activation fused in (a session's saved graph at the extended
    level), in each form imported."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    z = rng.standard_normal((2, 4, 9, 9)).astype(np.float32)
    w = {"W": rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "B": rng.standard_normal(4).astype(np.float32)}
    conv = {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    xs, zs = {"x": list(x.shape)}, {"x": list(x.shape), "z": list(z.shape)}
    a = rng.standard_normal((5, 8)).astype(np.float32)
    g = {"G": rng.standard_normal((6, 8)).astype(np.float32), "C": rng.standard_normal(6).astype(np.float32)}
    return {
        "FusedConv, Relu": (_kernel("FusedConv", ["x", "W", "B"], ["y"], {**conv, "activation": "Relu"}, xs, w),
                            {"x": x}),
        "FusedConv, Z, Relu": (_kernel("FusedConv", ["x", "W", "B", "z"], ["y"], {**conv, "activation": "Relu"},
                                       zs, w), {"x": x, "z": z}),
        "FusedConv, Clip": (_kernel("FusedConv", ["x", "W", "B"], ["y"],
                                    {**conv, "activation": "Clip", "activation_params": [0.0, 0.5]}, xs, w),
                            {"x": x}),
        "FusedConv, Sigmoid": (_kernel("FusedConv", ["x", "W"], ["y"], {**conv, "activation": "Sigmoid"}, xs, w),
                               {"x": x}),
        "FusedGemm, transB, Tanh": (_kernel("FusedGemm", ["a", "G", "C"], ["y"],
                                            {"transB": 1, "alpha": 0.5, "activation": "Tanh"}, {"a": [5, 8]}, g),
                                    {"a": a}),
    }


def test_fused_convolutions_and_gemms_import_and_compute_what_onnxruntime_does() -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    for name, (model, feeds) in _fused_conv_kernels().items():
        g = load_model(model)
        assert not any(n.op == "opaque" for n in g.nodes), name
        want = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
        np.testing.assert_allclose(g.evaluate(feeds)[0], want[0], rtol=1e-4, atol=1e-4, err_msg=name)
    leaky = _kernel("FusedConv", ["x", "W"], ["y"], {"kernel_shape": [3, 3], "activation": "LeakyRelu",
                                                     "activation_params": [0.1]}, {"x": [1, 3, 5, 5]},
                    {"W": np.ones((2, 3, 3, 3), np.float32)})
    ((key, _, reason),) = opaque_reasons(load_model(leaky))
    assert key == f"{MS}:FusedConv" and "activation 'LeakyRelu'" in reason


@pytest.mark.parametrize(("op", "outs", "attrs", "why"), [
    ("SkipLayerNormalization", ["y", "mean"], {"epsilon": 1e-5}, "statistics output (mean or inverse deviation)"),
    ("SkipLayerNormalization", ["y"], {}, "no epsilon attribute"),
    ("SkipSimplifiedLayerNormalization", ["y", "", "inv_std"], {"epsilon": 1e-5}, "statistics output"),
])
def test_a_fused_kernel_outside_what_is_imported_stays_opaque_with_the_reason(op: str, outs: list[str],
                                                                             attrs: dict, why: str) -> None:
    h = 16
    g = load_model(_kernel(op, ["x", "s", "g", "b"][:4 if op == "SkipLayerNormalization" else 3], outs, attrs,
                           {"x": [4, h], "s": [4, h]}, {"g": np.ones(h, np.float32), "b": np.zeros(h, np.float32)}))
    ((key, count, reason),) = opaque_reasons(g)
    assert key == f"{MS}:{op}" and why in reason and count == 1


@pytest.mark.parametrize(("ins", "kv", "why"), [
    (["q", "k", "v", "b"], 5, "a projection bias"),
    (["q", "k", "v"], 7, "got (2, 5, 16) with 4 heads"),  # cross-attention: 7 keys for 5 queries
])
def test_attention_outside_what_is_imported_stays_opaque_with_the_reason(ins: list[str], kv: int, why: str) -> None:
    # (configurations onnxruntime runs, which types the kernel's output)
    inputs = {"q": [2, 5, 16], "k": [2, kv, 16], "v": [2, kv, 16]}
    g = load_model(_kernel("MultiHeadAttention", ins, ["y"], {"num_heads": 4}, inputs,
                           {"b": np.zeros(48, np.float32)} if "b" in ins else {}))
    ((key, count, reason),) = opaque_reasons(g)
    assert key == f"{MS}:MultiHeadAttention" and why in reason and count == 1


def _attention_beside_products(qkv: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
                               y: list[int | str | None]) -> onnx.ModelProto:
    """MultiHeadAttention (one head, the default scale) on the q, k and v that ``qkv`` computes from ``inputs``
    (output ``y`` of dimensions ``y``), beside two products sharing x: a rewrite worth writing."""
    rng = np.random.default_rng(9)
    w = {n: rng.standard_normal((16, 16)).astype(np.float32) for n in ("W1", "W2")}
    nodes = [*qkv, helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain=MS, num_heads=1),
             helper.make_node("MatMul", ["x", "W1"], ["a"]), helper.make_node("MatMul", ["x", "W2"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["z"])]
    g = helper.make_graph(nodes, "attention", [*inputs, helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 16])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])


def _assert_same_attention(model: onnx.ModelProto, optimized: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    feeds = {**feeds, "x": np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)}
    np.testing.assert_allclose(run_onnxruntime(optimized, feeds)[0], run_onnxruntime(model, feeds)[0], rtol=1e-5,
                               atol=1e-6)


def test_attention_of_a_dynamic_hidden_size_stays_opaque_and_the_model_computes_what_it_did() -> None:
    """The default scale is 1/sqrt(head size): of a dynamic hidden size it is known only at run time, so the
    node is not imported (once it was, with the scale of the symbol's generic value baked in)."""
    model = _attention_beside_products([], [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 5, "d"])
                                            for n in "qkv"], [2, 5, "d"])
    ((key, _, reason),) = opaque_reasons(load_model(model, symbolic=True))
    assert key == f"{MS}:MultiHeadAttention" and "a fixed hidden size" in reason
    rng = np.random.default_rng(9)
    for target in ("onnx", "onnxruntime"):
        res = eqsat.optimize(model, target=target, dims={"d": 16}, time_limit=30)
        assert res.numeric.ok
        for d in (16, 24):
            _assert_same_attention(model, res.model,
                                   {n: rng.standard_normal((2, 5, d)).astype(np.float32) for n in "qkv"})


def test_attention_of_a_hidden_size_computed_from_a_symbol_is_not_imported() -> None:
    """A hidden size of d + 16 (each input a dynamic part and a fixed one, concatenated) reads back as no
    symbol at the generic point; the model states no such size, so it is not taken as fixed either. The node
    stays opaque, its output then has no shape import can follow, and optimize keeps the original (a drop-in is
    never traded for fixed sizes) unless it is asked for a static model."""
    model = _attention_beside_products(
        [helper.make_node("Concat", [f"{t}a", f"{t}e"], [t], axis=-1) for t in "qkv"],
        [*(helper.make_tensor_value_info(f"{t}a", TensorProto.FLOAT, [2, 5, "d"]) for t in "qkv"),
         *(helper.make_tensor_value_info(f"{t}e", TensorProto.FLOAT, [2, 5, 16]) for t in "qkv")], [2, 5, None])
    with pytest.raises(DynamicShapeError, match="output of a MultiHeadAttention node"):
        load_model(model, symbolic=True)
    res = eqsat.optimize(model, dims={"d": 16}, time_limit=30)
    assert res.static_reason and res.numeric.ok and not res.signature_changes
    assert res.kept_original and "dynamic axes cannot be kept" in res.kept_reason and "--static" in res.kept_reason
    assert res.model is not None and [v.name for v in res.model.graph.input] == [v.name for v in model.graph.input]
    fixed = eqsat.optimize(model, dims={"d": 16}, dynamic=False, time_limit=30)  # asked for: said on line one
    assert fixed.signature_changes and fixed.summary().startswith("SIGNATURE CHANGED")
    assert fixed.to_dict()["signature_changes"] == fixed.signature_changes
    rng = np.random.default_rng(10)
    for written in (res.model, fixed.model):
        _assert_same_attention(model, written, {f"{t}{s}": rng.standard_normal((2, 5, 16)).astype(np.float32)
                                                for t in "qkv" for s in "ae"})


def test_a_model_holding_attention_is_written_portable_or_with_the_kernel() -> None:
    from test_ort_kernels import _CheapKernels

    rng = np.random.default_rng(4)
    w = {n: (rng.standard_normal((32, 32)) * 0.3).astype(np.float32) for n in ("Wq", "Wk", "Wv")}
    nodes = [helper.make_node("MatMul", ["x", f"W{n}"], [n]) for n in "qkv"]
    nodes.append(helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "m"], ["y"], domain=MS,
                                  num_heads=4))
    g = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 32]),
                                               helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 1, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 32])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    portable = eqsat.optimize(model, cost_model=_CheapKernels(), time_limit=30)
    assert not any(n.domain == MS for n in portable.model.graph.node) and portable.numeric.ok
    fused = eqsat.optimize(model, target="onnxruntime", cost_model=_CheapKernels(), time_limit=30)
    assert fused.kernels == {"MultiHeadAttention": 1} and fused.numeric.ok


def test_a_model_from_onnxruntimes_optimizer_is_written_as_standard_onnx() -> None:
    """A residual block as onnxruntime's transformer optimizer leaves it (SkipLayerNormalization reading a bias,
    its sum read by the next one, FastGelu with a bias, an RMS norm in the default domain): every kernel is
    imported, the two projections merge, and the written model has no onnxruntime operator."""
    rng = np.random.default_rng(5)
    h = 32
    w = {n: rng.standard_normal(s).astype(np.float32) * 0.2 for n, s in
         (("W1", (h, h)), ("W2", (h, h)), ("B1", (h,)), ("g1", (h,)), ("b1", (h,)), ("g2", (h,)), ("g3", (h,)))}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["p"]), helper.make_node("MatMul", ["x", "W2"], ["q"]),
             helper.make_node("SkipLayerNormalization", ["p", "x", "g1", "b1", "B1"], ["n1", "", "", "sum1"],
                              domain=MS, epsilon=1e-5),
             helper.make_node("FastGelu", ["n1", "B1"], ["a"], domain=MS),
             helper.make_node("SkipSimplifiedLayerNormalization", ["a", "sum1", "g2"], ["n2"], domain=MS,
                              epsilon=1e-6),
             helper.make_node("Add", ["n2", "q"], ["r"]),
             helper.make_node("SimplifiedLayerNormalization", ["r", "g3"], ["y"], epsilon=1e-6, axis=-1)]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6, h])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6, h])],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    res = eqsat.optimize(model, time_limit=20)
    assert not any(n.op == "opaque" for n in res.original.nodes)
    assert not res.kept_original and res.cost_after < res.cost_before
    assert res.numeric is not None and res.numeric.ok
    assert not [n for n in res.model.graph.node if n.domain not in ("", "ai.onnx") or not onnx.defs.has(n.op_type)]


def test_a_default_domain_kernel_onnx_does_not_know_is_written_back_and_checked_around() -> None:
    """onnxruntime's SimplifiedLayerNormalization with its second output read stays opaque; the ONNX checker,
    which has no schema for it, checks the written graph around it."""
    model = _model(4)
    g = model.graph
    g.node[1].CopyFrom(helper.make_node("SimplifiedLayerNormalization", ["h", "G"], ["g", "inv_std"], axis=-1,
                                        epsilon=1e-6))
    g.initializer.append(numpy_helper.from_array(np.ones(128, np.float32), "G"))
    g.output.append(helper.make_tensor_value_info("inv_std", TensorProto.FLOAT, None))
    res = eqsat.optimize(model, time_limit=10)
    assert not res.kept_original and res.cost_after < res.cost_before  # the matmuls after it merged
    assert "SimplifiedLayerNormalization" in {n.op_type for n in res.model.graph.node}
    assert res.numeric is not None and res.numeric.ok


def test_a_kernel_output_declared_with_symbolic_sizes_is_typed_by_running() -> None:
    """The dynamo exporter declares intermediate tensors with symbolic sizes ("batch"), and onnxruntime's
    optimizer keeps the declarations: such a declaration types nothing, so the kernel's output is typed by
    running the model, as an undeclared one is (it was refused as having no static shape)."""
    model = _model("batch")
    model.graph.value_info.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, ["batch", 128]))
    g = load_model(model, symbolic=True)
    assert [op for op, _, _ in opaque_reasons(g)] == ["com.microsoft:QuickGelu"]
    res = eqsat.optimize(model, time_limit=10)
    assert not res.kept_original and res.numeric is not None and res.numeric.ok
    assert [d.dim_param or d.dim_value for d in res.model.graph.output[0].type.tensor_type.shape.dim] == ["batch", 64]


def test_bert_as_an_onnxruntime_session_saves_it_is_modelled_and_written_as_standard_onnx(tmp_path) -> None:
    """onnxruntime's own fusions (a session's optimized graph at the extended level: FusedMatMul, BiasGelu,
    FusedGemm on this BERT), not hand-built kernels: every one imports, and the written model is standard ONNX."""
    import onnxruntime as ort

    from eqsat.models.hf_bert import hf_bert

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "saved.onnx")
    so.log_severity_level = 3
    original = hf_bert(transformers="4", dynamic=True, seq=16, hidden=64, heads=4, vocab=100)
    ort.InferenceSession(original.SerializeToString(), so, providers=["CPUExecutionProvider"])
    saved = onnx.load(so.optimized_model_filepath)
    assert {n.domain for n in saved.graph.node} >= {MS}
    res = eqsat.optimize(saved, time_limit=20, dims={"sequence": 8})
    assert not [k for k, _, _ in opaque_reasons(res.original) if ":" in k]
    assert res.numeric is not None and res.numeric.ok
    assert {n.domain for n in res.model.graph.node} <= {"", "ai.onnx"}
