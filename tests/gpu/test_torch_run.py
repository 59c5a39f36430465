"""eqsat.gpu.torch_run runs ONNX models as whole models in PyTorch: on the CPU here, every operator and every
built-in model (before and after optimizing) computes what onnxruntime computes, a planned run reads nothing
back from the device, and what it cannot run is said, not guessed. CUDA graphs need a GPU (the last test)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from eqsat.gpu.torch_run import OPS, TorchModel, UnsupportedModel, relative_error, time_calls, unsupported_ops
from eqsat.models.registry import builtin_models
from eqsat.onnx_io import random_feeds


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tol: float = 1e-5) -> TorchModel:
    ref = _ort(model, feeds)
    tm = TorchModel(model)
    first = tm.plan(tm.feeds(feeds))
    again = tm.run(tm.feeds(feeds))  # the planned run: only what depends on the inputs' data
    assert relative_error(first, ref) < tol
    assert relative_error(again, ref) < tol
    for a, b in zip(first, ref, strict=True):
        assert a.dtype == torch.from_numpy(np.asarray(b)).dtype
    assert tm.host_reads == 0
    return tm


#: a second or more each (the fast lane runs the others; the operator cases below cover what these use)
SLOW = {"taso_inception_v3", "taso_resnext50", "taso_bert", "taso_nasrnn", "hf_bert"}
#: not run here: VGG-19 (17 s on the CPU) and NASNet-A (6 s) use only convolutions, pools, sums and concatenations,
#: which the others and the operator cases cover
LEFT_OUT = {"taso_vgg19", "taso_nasnet_a"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
                                  for n in sorted(builtin_models()) if n not in LEFT_OUT])
def test_every_builtin_model_runs_as_onnxruntime_runs_it(name: str) -> None:
    model = builtin_models()[name]()
    _check(model, random_feeds(model, seed=1))


def test_an_optimized_model_runs_as_onnxruntime_runs_it() -> None:
    import eqsat

    res = eqsat.optimize(builtin_models()["bert_attention_block"](), time_limit=30, cache=False)
    assert not res.kept_original  # the merged products, as export writes them
    _check(res.model, random_feeds(res.model, seed=2))


# -- single operators, each against onnxruntime on random tensors ---------------------------------------------------

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int, list[Any]]], outputs: list[str],
           inits: dict[str, np.ndarray] | None = None, opset: int = 20) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _i64(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


RNG = np.random.default_rng(0)
X4 = RNG.standard_normal((2, 3, 9, 8)).astype(np.float32)
X3 = RNG.standard_normal((2, 5, 6)).astype(np.float32)

CASES: dict[str, tuple[list[onnx.NodeProto], dict[str, np.ndarray], dict[str, np.ndarray]]] = {
    "slice negative steps and clamped bounds": (
        [helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], {"x": X3},
        {"s": _i64(-1, 1), "e": _i64(-100, 2**62), "a": _i64(2, 1), "t": _i64(-2, 2)}),
    "split into equal pieces (num_outputs)": (
        [helper.make_node("Split", ["x"], ["y", "z"], axis=2, num_outputs=2)], {"x": X3}, {}),
    "split by sizes": ([helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1)], {"x": X3}, {"s": _i64(2, 3)}),
    "reshape with 0 and -1": ([helper.make_node("Reshape", ["x", "s"], ["y"])], {"x": X3}, {"s": _i64(0, -1, 3)}),
    "expand broadcasting both ways": ([helper.make_node("Expand", ["x", "s"], ["y"])],
                                      {"x": RNG.standard_normal((3, 1)).astype(np.float32)}, {"s": _i64(2, 1, 4)}),
    "gather with negative indices": ([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], {"x": X3},
                                     {"i": np.array([[-1, 0], [2, -5]], dtype=np.int64)}),
    "gather a scalar index": ([helper.make_node("Gather", ["x", "i"], ["y"], axis=2)], {"x": X3},
                              {"i": np.array(-2, dtype=np.int64)}),
    "gather nd": ([helper.make_node("GatherND", ["x", "i"], ["y"])], {"x": X3},
                  {"i": np.array([[1, 4], [0, 2]], dtype=np.int64)}),
    "gather elements": ([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)], {"x": X3},
                        {"i": RNG.integers(-5, 5, (2, 3, 6)).astype(np.int64)}),
    "conv with uneven pads, stride, groups": (
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[0, 1, 2, 1], strides=[2, 1], group=3)], {"x": X4},
        {"w": RNG.standard_normal((6, 1, 3, 3)).astype(np.float32), "b": RNG.standard_normal(6).astype(np.float32)}),
    "max pool with uneven pads and ceil": (
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], pads=[1, 0, 0, 1], strides=[2, 2],
                          ceil_mode=1)], {"x": X4}, {}),
    "average pool, padding not counted": (
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], {"x": X4}, {}),
    "average pool, uneven padding counted": (
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 3], pads=[0, 2, 1, 0],
                          count_include_pad=1)], {"x": X4}, {}),
    "global pools": ([helper.make_node("GlobalAveragePool", ["x"], ["y"]),
                      helper.make_node("GlobalMaxPool", ["x"], ["z"])], {"x": X4}, {}),
    "gemm transposed, scaled": (
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1, alpha=0.5, beta=2.0)],
        {"a": RNG.standard_normal((4, 3)).astype(np.float32)},
        {"b": RNG.standard_normal((5, 4)).astype(np.float32), "c": RNG.standard_normal(5).astype(np.float32)}),
    "squeeze and unsqueeze by axes inputs": (
        [helper.make_node("Unsqueeze", ["x", "a"], ["u"]), helper.make_node("Squeeze", ["u", "a"], ["y"])],
        {"x": X3}, {"a": _i64(-1, 0)}),
    "reductions over axes inputs": (
        [helper.make_node("ReduceMean", ["x", "a"], ["y"], keepdims=0),
         helper.make_node("ReduceSum", ["x", "a"], ["z"])], {"x": X3}, {"a": _i64(-1)}),
    "layer norm over the last two axes": (
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-2, epsilon=1e-3)], {"x": X3},
        {"s": RNG.standard_normal((5, 6)).astype(np.float32), "b": RNG.standard_normal((5, 6)).astype(np.float32)}),
    "clip by tensors": ([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": X3},
                        {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}),
    "integer division truncates": ([helper.make_node("Div", ["a", "b"], ["y"])],
                                   {"a": np.array([7, -7, 9], dtype=np.int64)}, {"b": _i64(2, 2, -4)}),
    "masks: where, equal, and, not": (
        [helper.make_node("Greater", ["x", "z"], ["p"]), helper.make_node("Not", ["p"], ["q"]),
         helper.make_node("Equal", ["p", "q"], ["e"]), helper.make_node("And", ["p", "e"], ["m"]),
         helper.make_node("Where", ["m", "x", "z"], ["y"])], {"x": X3}, {"z": np.zeros((6,), np.float32)}),
    "shape arithmetic into a constant": (
        [helper.make_node("Shape", ["x"], ["s"], start=1), helper.make_node("ConstantOfShape", ["s"], ["c"],
                                                                         value=helper.make_tensor("v", F, [1], [2.5])),
         helper.make_node("Range", ["r0", "r1", "r2"], ["r"]), helper.make_node("Cast", ["r"], ["rf"], to=F),
         helper.make_node("Mul", ["c", "rf"], ["y"]), helper.make_node("Add", ["x", "y"], ["z"])],
        {"x": X3}, {"r0": np.array(0, np.int64), "r1": np.array(6, np.int64), "r2": np.array(1, np.int64)}),
    "triangle and cumulative sum": (
        [helper.make_node("Trilu", ["x", "k"], ["t"], upper=0), helper.make_node("CumSum", ["t", "a"], ["y"])],
        {"x": X3}, {"k": np.array(1, np.int64), "a": np.array(2, np.int64)}),
    "unary functions": ([helper.make_node(op, ["x"], [f"y{k}"]) for k, op in
                         enumerate(["Relu", "Sigmoid", "Tanh", "Erf", "Neg", "Abs", "Cos", "Sin"])], {"x": X3}, {}),
    "gelu, tanh approximation": ([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], {"x": X3}, {}),
    "softmax, concat, transpose, flatten": (
        [helper.make_node("Softmax", ["x"], ["s"], axis=1), helper.make_node("Concat", ["s", "x"], ["c"], axis=-1),
         helper.make_node("Transpose", ["c"], ["t"], perm=[2, 0, 1]), helper.make_node("Flatten", ["t"], ["y"],
                                                                                        axis=2)], {"x": X3}, {}),
    "batch norm": ([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)],
                   {"x": X4}, {"s": RNG.random(3, np.float32), "b": RNG.random(3, np.float32),
                               "m": RNG.random(3, np.float32), "v": RNG.random(3, np.float32) + 0.5}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_operator_computes_what_onnxruntime_computes(case: str) -> None:
    nodes, feeds, inits = CASES[case]
    outputs = [o for n in nodes[-1:] for o in n.output]
    if case in ("unary functions", "global pools", "reductions over axes inputs"):
        outputs = [o for n in nodes for o in n.output]
    types = {np.dtype(np.float32): F, np.dtype(np.int64): I64}
    model = _model(nodes, [(k, types[v.dtype], list(v.shape)) for k, v in feeds.items()], outputs, inits)
    _check(model, feeds)


def test_half_precision_runs_in_float16_close_to_float32() -> None:
    model = builtin_models()["small_cnn"]()
    feeds = random_feeds(model, seed=3)
    tm = TorchModel(model, half=True)
    out = tm.plan(tm.feeds(feeds))
    assert all(o.dtype == torch.float16 for o in out)
    assert relative_error(out, _ort(model, feeds)) < 1e-2


def test_what_it_cannot_run_is_named_before_anything_runs() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonMaxSuppression", ["r"], ["y"]),
                    helper.make_node("FusedMatMul", ["r", "r"], ["z"], domain="com.microsoft")],
                   [("x", F, [2, 2])], ["y", "z"])
    assert unsupported_ops(model) == ["NonMaxSuppression", "com.microsoft:FusedMatMul"]
    with pytest.raises(UnsupportedModel, match="NonMaxSuppression, com.microsoft:FusedMatMul"):
        TorchModel(model)
    assert "Relu" in OPS and "NonMaxSuppression" not in OPS


def test_a_size_read_from_the_inputs_data_is_counted_and_blocks_capture() -> None:
    # a reshape whose shape comes from an input's values, not its shape: the run must read it back
    model = _model([helper.make_node("Reshape", ["x", "s"], ["y"])], [("x", F, [2, 6]), ("s", I64, [2])], ["y"])
    feeds = {"x": X3[0, :2, :6].copy(), "s": _i64(3, 4)}
    tm = TorchModel(model)
    assert relative_error(tm.plan(tm.feeds(feeds)), _ort(model, feeds)) < 1e-6
    assert tm.host_reads == 1


def test_relative_error_sees_shapes_and_nans() -> None:
    a = torch.ones(2, 3)
    assert relative_error([a], [np.ones((2, 3))]) == 0
    assert relative_error([a], [np.ones((3, 2))]) == float("inf")
    assert relative_error([a * float("nan")], [np.ones((2, 3))]) == float("inf")
    assert relative_error([a * 1.01], [np.ones((2, 3))]) == pytest.approx(0.01, rel=1e-3)


def test_timing_on_the_cpu_counts_its_runs() -> None:
    calls = []
    t = time_calls(lambda: calls.append(1), "cpu", budget_s=0.01, min_runs=5, max_runs=50)
    assert 5 <= t.runs <= 50 and len(calls) == t.runs + 4  # three warm-ups and one to size the runs
    assert t.low_ms <= t.median_ms <= t.high_ms


@pytest.mark.gpu
def test_a_cuda_graph_replays_the_model() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: the CUDA graph is not captured")
    model = builtin_models()["small_cnn"]()
    feeds = random_feeds(model, seed=4)
    tm = TorchModel(model, device="cuda")
    inputs = tm.feeds(feeds)
    replay = tm.captured(inputs)
    assert relative_error(replay(), _ort(model, feeds)) < 1e-4
