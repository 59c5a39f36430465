"""Cost models: analytic properties, onnxruntime measurements, the persistent cache, GPU skip path."""

from __future__ import annotations

import math

import pytest

from eqsat import ops
from eqsat.costs import AnalyticCostModel, CachedCostModel, CostCache, CostModel, OnnxRuntimeCostModel, get_cost_model
from eqsat.ops import CostKey


def _mm(a: tuple[int, ...], b: tuple[int, ...]) -> CostKey:
    return ops.get("matmul").cost_key({}, [a, b], a[:-1] + b[-1:])


def _conv(act: int) -> CostKey:
    spec = ops.get("conv2d")
    p = spec.normalize({"pads": (1, 1, 1, 1), "act": act})
    return spec.cost_key(p, [(1, 16, 32, 32), (16, 16, 3, 3), (16,)], (1, 16, 32, 32))


def test_analytic_is_deterministic_and_positive() -> None:
    m = AnalyticCostModel()
    k = _mm((64, 256), (256, 256))
    assert m.cost(k) == m.cost(k) > 0
    assert m.cost(ops.get("reshape").cost_key({"shape": (256, 64)}, [(64, 256)], (256, 64))) == 0


def test_analytic_prefers_fused_kernels() -> None:
    m = AnalyticCostModel()
    two = 2 * m.cost(_mm((64, 256), (256, 256)))
    fused = m.cost(_mm((64, 256), (256, 512)))
    assert fused < two
    # a conv with fused relu is written back as Conv + Relu: the analytic model, which models no runtime
    # fusion, prices it as the pair (measured models time the pair as the runtime runs it)
    relu = ops.get("relu").cost_key({}, [(1, 16, 32, 32)], (1, 16, 32, 32))
    assert m.cost(_conv(1)) == pytest.approx(m.cost(_conv(0)) + m.cost(relu))


def test_onnxruntime_model_measures_positive_times() -> None:
    m = OnnxRuntimeCostModel(warmup=1, repeats=3)
    costs = m.costs([_mm((8, 16), (16, 8)), _conv(1)])
    assert all(math.isfinite(v) and v > 0 for v in costs.values())
    assert m.device_identity()["onnxruntime"]


class _Counting(CostModel):
    name = "counting"

    def __init__(self, ident: str = "dev-a") -> None:
        self.calls = 0
        self.ident = ident

    def cost(self, key: CostKey) -> float:
        self.calls += 1
        return 1.5

    def device_identity(self) -> dict[str, str]:
        return {"model": self.name, "device": self.ident}


def test_cache_hit_does_not_measure_again(tmp_path) -> None:
    inner = _Counting()
    cached = CachedCostModel(inner, CostCache(tmp_path))
    keys = [_mm((4, 4), (4, 4)), _mm((4, 8), (8, 4))]
    assert cached.costs(keys) == {k: 1.5 for k in keys}
    assert inner.calls == 2
    cached.costs(keys)
    assert inner.calls == 2 and cached.hits == 2
    # persistent: a new process-level object over the same directory hits too
    other = _Counting()
    assert CachedCostModel(other, CostCache(tmp_path)).cost(keys[0]) == 1.5
    assert other.calls == 0


def test_device_identity_change_invalidates(tmp_path) -> None:
    CachedCostModel(_Counting("dev-a"), CostCache(tmp_path)).cost(_mm((4, 4), (4, 4)))
    b = _Counting("dev-b")
    CachedCostModel(b, CostCache(tmp_path)).cost(_mm((4, 4), (4, 4)))
    assert b.calls == 1
    devices = {e[0] for e in CostCache(tmp_path).entries()}
    assert len(devices) == 2


def test_corrupt_cache_is_recovered_with_a_warning(tmp_path) -> None:
    (tmp_path / "costs.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.warns(RuntimeWarning, match="unreadable"):
        cache = CostCache(tmp_path)
    inner = _Counting()
    assert CachedCostModel(inner, cache).cost(_mm((4, 4), (4, 4))) == 1.5
    assert list(tmp_path.glob("costs.corrupt-*.sqlite"))


def test_unknown_cost_model_name() -> None:
    with pytest.raises(ValueError, match="unknown cost model"):
        get_cost_model("abacus")


def test_the_gpu_models_are_found_through_their_entry_points_and_time_alike_but_for_the_launch() -> None:
    from eqsat.costs import _plugin
    from eqsat.gpu import CupyCostModel, CupyGraphCostModel

    assert _plugin("gpu") is CupyCostModel and _plugin("gpu-graph") is CupyGraphCostModel
    # another name: a cached cost of one is never read as the other's
    assert issubclass(CupyGraphCostModel, CupyCostModel) and CupyGraphCostModel.name != CupyCostModel.name


@pytest.mark.gpu
@pytest.mark.slow
def test_a_kernel_timed_in_a_cuda_graph_costs_less_than_launched_from_python() -> None:
    from eqsat.gpu import CupyCostModel, CupyGraphCostModel

    try:
        launched, replayed = CupyCostModel(warmup=1, repeats=5), CupyGraphCostModel(warmup=1, repeats=5)
    except RuntimeError as e:
        pytest.skip(f"CUDA/CuPy not available: {e}")
    small = _mm((16, 16), (16, 16))  # a launch's time, nearly all of it
    assert replayed.calibration.launch_ms < launched.calibration.launch_ms
    failed = replayed.capture_failures  # the calibration's large product (CuPy's cuBLAS) is timed as launched
    assert 0 < replayed.cost(small) < launched.cost(small) and replayed.capture_failures == failed
    spec = ops.get("gemm")  # a product and its bias, one cuBLAS call in the graph
    p = spec.normalize({"trans_a": 0, "trans_b": 1})
    gemm = spec.cost_key(p, [(16, 32), (8, 32), (1, 8)], spec.shape(p, [(16, 32), (8, 32), (1, 8)]))
    assert 0 < replayed.cost(gemm) < launched.cost(gemm) and replayed.capture_failures == failed


@pytest.mark.gpu
@pytest.mark.slow  # 7.6 s on an H200: the roofline's calibration and cuDNN's autotuning
def test_cupy_model_on_a_gpu() -> None:
    from eqsat.gpu import CupyCostModel

    try:
        m = CupyCostModel(warmup=1, repeats=3)
    except RuntimeError as e:
        pytest.skip(f"CUDA/CuPy not available: {e}")
    assert m.cost(_mm((64, 64), (64, 64))) > 0
    assert m.cost(_conv(1)) > 0
    # convolutions run through cuDNN where CuPy (up to 13) or PyTorch offers it
    assert (m._kernel(_conv(1)) is not None) == bool(m.cudnn_backend)
    if m.cudnn_backend == "torch":  # a residual add after the convolution, with the key's output shape
        spec = ops.get("conv2d_add")
        out = (1, 8, 16, 16)
        key = spec.cost_key(spec.normalize({"pads": (1, 1, 1, 1), "strides": (2, 2)}),
                            [(1, 16, 32, 32), (8, 16, 3, 3), (8,), out], out)
        fn = m._kernel(key)
        assert fn is not None and tuple(fn().shape) == out and m.cost(key) > 0
    # an operator with no kernel here is priced by this GPU's calibrated roofline, on the scale of the measured
    # ones (the CPU analytic model it replaced priced such operators tens to hundreds of times above them)
    c = m.calibration
    assert 100 < c.gflops < 1e6 and 50 < c.bandwidth_gbs < 1e5 and 0 < c.launch_ms < 1 and c.resident_threads > 0
    spec = ops.get("layernorm")
    ln = spec.cost_key(spec.normalize({"axis": 2}), [(8, 128, 768), (768,), (768,)], (8, 128, 768))
    assert m._kernel(ln) is None  # its reference converts to float64 through numpy
    add = ops.get("ewadd").cost_key({}, [(8, 128, 768)] * 2, (8, 128, 768))
    assert m.cost(ln) < 20 * m.cost(add)
    mt = ops.get("matmul_t").cost_key({"trans_a": 1, "trans_b": 1}, [(64, 32), (16, 64)], (32, 16))
    assert m.cost(mt) > 0
    for op, extra in (("maxpool", {}), ("avgpool", {"count_include_pad": 0})):
        spec = ops.get(op)
        p = spec.normalize({"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 0, 0), **extra})
        assert m.cost(spec.cost_key(p, [(1, 8, 16, 16)], (1, 8, 15, 15))) > 0
    assert m.device_identity()["gpu"]


def test_weight_operands_are_part_of_the_key_and_measured_as_initializers() -> None:
    from eqsat.costs.measured_cpu import one_node_model

    spec = ops.get("matmul")
    plain = spec.cost_key({}, [(4, 16), (16, 8)], (4, 8))
    weighted = spec.cost_key({}, [(4, 16), (16, 8)], (4, 8), weights=[1])
    assert plain != weighted and plain.as_str() != weighted.as_str() and weighted.as_str().endswith(":w=1")
    m = one_node_model(weighted, replicas=3)
    assert [i.name for i in m.graph.input] == ["in0"]  # the weight is no graph input
    assert len(m.graph.initializer) == 3 and len(m.graph.output) == 3  # one weight of its own per copy
    cm = OnnxRuntimeCostModel(warmup=1, repeats=3, working_set_mb=1)
    assert cm.replicas(plain) == 1 and 1 < cm.replicas(weighted) <= 512
    assert cm.cost(weighted) > 0


def test_cost_keys_mark_weight_inputs() -> None:
    from eqsat import models
    from eqsat.costs import graph_cost_keys
    from eqsat.onnx_io import load_model

    g = load_model(models.two_matmul_shared_input())
    keys = [k for ks in graph_cost_keys(g) for k in ks if k.op == "matmul"]
    assert keys and all(k.weights == (1,) for k in keys)


def test_working_set_follows_the_model_being_optimized(tmp_path) -> None:
    from eqsat.costs import get_cost_model

    auto = OnnxRuntimeCostModel()
    assert auto.working_set_mb == 64 and auto.in_context(3 * 2**20).working_set_mb == 4  # rounded up
    assert auto.in_context(100 * 2**20).working_set_mb == 128 and auto.in_context(10).working_set_mb == 1
    assert auto.in_context(64 * 2**20) is auto  # already that size
    fixed = OnnxRuntimeCostModel(working_set_mb=8)
    assert fixed.in_context(100 * 2**20) is fixed  # an explicit working set stays
    small = auto.in_context(4 * 2**20)
    weighted = ops.get("matmul").cost_key({}, [(1, 256), (256, 256)], (1, 256), weights=[1])
    assert small.replicas(weighted) == 16
    # a 1 GB working set would take 4096 copies: capped by the time the copies take (analytic estimate)
    from eqsat.costs.measured_cpu import MAX_RUN_MS
    assert auto.in_context(2**30).replicas(weighted) == int(MAX_RUN_MS / AnalyticCostModel().cost(weighted)) < 512
    conv = ops.get("conv2d")
    big = conv.cost_key(conv.normalize({"pads": (1, 1, 1, 1)}), [(1, 64, 56, 56), (64, 64, 3, 3), (64,)],
                        (1, 64, 56, 56), weights=[1, 2])
    assert auto.in_context(2**30).replicas(big) <= 3  # compute-bound: a few copies, not hundreds
    assert small.device_identity()["method"] != auto.device_identity()["method"]  # its own cache entries
    cached = get_cost_model("measured", cache_dir=tmp_path)
    inner_ctx = cached.in_context(4 * 2**20)
    assert inner_ctx is not cached and inner_ctx.inner.working_set_mb == 4 and inner_ctx.cache is cached.cache
    relu = ops.get("relu").cost_key({}, [(4, 4)], (4, 4))
    inner_ctx.costs([relu])
    assert inner_ctx.misses == cached.misses == 1  # the caller's model counts what its copy measured
    assert AnalyticCostModel().in_context(10**9).name == "analytic"


def test_a_split_piece_costs_its_share_of_one_split(monkeypatch) -> None:
    # export writes the pieces that tile a tensor as one Split node: n pieces cost one Split, shared by size
    timed = []

    def fake_run(self, model, feeds):
        timed.append(model)
        return 1.0 if model.graph.node[0].op_type == "Split" else 0.2  # the Split model, the overhead model
    monkeypatch.setattr(OnnxRuntimeCostModel, "_median_run_ms", fake_run)
    cm = OnnxRuntimeCostModel(threads=1)
    sp = ops.get("split")
    pieces = [(0, 256), (256, 512), (768, 1280)]
    costs = [cm.cost(sp.cost_key(sp.normalize({"axis": 1, "start": a, "size": n}), [(2, 2048)], (2, n)))
             for a, n in pieces]
    assert costs == pytest.approx([0.8 * n / 2048 for _, n in pieces])
    assert sum(costs) == pytest.approx(0.8)  # the three tile the tensor: one Split's time, net of overhead
    splits = [m for m in timed if m.graph.node[0].op_type == "Split"]
    assert [len(m.graph.node) for m in splits] == [1, 1, 1]
    assert [len(m.graph.node[0].output) for m in splits] == [2, 3, 2]  # cut at each piece's bounds


def test_end_to_end_timing_fits_its_budget_with_a_floor_of_rounds(monkeypatch) -> None:
    import types

    from eqsat import models
    from eqsat.costs import measured_cpu
    from eqsat.costs.measured_cpu import end_to_end_latency
    from eqsat.onnx_io import random_feeds

    # a clock that moves 2**-10 s (about 1 ms, exact in binary) a reading: a run "takes" that long, so each batch
    # is 5 runs whatever the machine's load (the batch size comes from one timed run, and a hiccup in it on a
    # loaded machine once changed the counts below)
    clock = {"t": 0.0}

    def tick() -> float:
        clock["t"] += 2.0 ** -10
        return clock["t"]
    monkeypatch.setattr(measured_cpu, "time", types.SimpleNamespace(perf_counter=tick))
    model = models.builtin_models()["two_matmul_shared_input"]()
    feeds = random_feeds(model, seed=0)
    calls = {"n": 0}
    import onnxruntime as ort

    real_run = ort.InferenceSession.run

    def counting_run(self, *a, **k):
        calls["n"] += 1
        return real_run(self, *a, **k)
    monkeypatch.setattr(ort.InferenceSession, "run", counting_run)
    times = end_to_end_latency([model, model], [feeds, feeds], rounds=15, budget_s=1e-9)
    assert len(times) == 2 and all(t > 0 for t in times)
    few = calls["n"]
    calls["n"] = 0
    end_to_end_latency([model, model], [feeds, feeds], rounds=15)
    assert calls["n"] > few  # a tiny budget: 7 rounds and 2 warm-up runs instead of 15 and 5
    # per model: 2 untimed runs, the warm-up, and the rounds of 5-run batches
    assert (few, calls["n"]) == (2 * (2 + 2 + 7 * 5), 2 * (2 + 5 + 15 * 5))



def test_bound_runs_compute_what_a_plain_run_does() -> None:
    # measurements run with inputs and outputs bound in place: each call runs on its own feed copy and writes
    # into the same output buffers
    import numpy as np
    import onnxruntime as ort

    from eqsat.costs.measured_cpu import _bound_runs, one_node_model

    model = one_node_model(_mm((4, 8), (8, 5)), 1)  # both operands are activations here
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    copies = [{"in0": rng.standard_normal((4, 8)).astype(np.float32),
               "in1": rng.standard_normal((8, 5)).astype(np.float32)} for _ in range(3)]
    runs, outputs = _bound_runs(sess, copies)
    assert len(runs) == 3 and len(outputs) == 1
    for run, feeds in reversed(list(zip(runs, copies, strict=True))):
        run()
        np.testing.assert_allclose(outputs[0].numpy(), feeds["in0"] @ feeds["in1"], rtol=1e-5, atol=1e-5)


def _opaque_graph():
    from eqsat.onnx_io import load_model
    from eqsat.testing.onnx_builders import make_model, node

    lp = node("LpNormalization", ["x"], ["y"], axis=1, p=2)  # no registry operator
    return load_model(make_model([lp], [("x", [1, 16, 9, 9])], [("y", [1, 16, 9, 9])], ir_version=8))


def test_a_graphs_opaque_node_is_keyed_by_content_and_timed_as_itself(monkeypatch) -> None:
    import numpy as np
    import onnxruntime as ort

    from eqsat.costs import graph_cost_keys
    from eqsat.costs.measured_cpu import _opaque_model
    from eqsat.onnx_io import onnx_opaque_evaluator

    graph = _opaque_graph()
    assert [n.op for n in graph.nodes] == ["opaque"]
    (key,) = graph_cost_keys(graph)[0]
    p = dict(key.params)
    assert p["op_type"] == "LpNormalization" and key.input_shapes == ((1, 16, 9, 9),) and key.dtype == "float32"
    assert "key" not in p  # by content: the same node in another model shares its measurement
    model = _opaque_model(key)
    assert [n.op_type for n in model.graph.node] == ["LpNormalization"]
    x = np.random.default_rng(0).standard_normal((1, 16, 9, 9)).astype(np.float32)
    want = graph.evaluate({"x": x}, opaque=onnx_opaque_evaluator(graph))
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"in0": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)  # the model runs the node as the graph does
    timed = []

    def fake_run(self, model, feeds, optimize=True, rotate=True):
        timed.append(model.graph.node[0].op_type)
        return 0.1 if model.graph.node[0].op_type in ("Identity", "Sum") else 3.0
    monkeypatch.setattr(OnnxRuntimeCostModel, "_median_run_ms", fake_run)
    assert OnnxRuntimeCostModel(threads=1).cost(key) == pytest.approx(2.9) and "LpNormalization" in timed


def test_an_opaque_gather_of_token_ids_is_timed_with_integer_indices(monkeypatch) -> None:
    import numpy as np
    import onnxruntime as ort

    from eqsat.costs import graph_cost_keys
    from eqsat.costs.measured_cpu import _opaque_model
    from eqsat.onnx_io import load_model
    from eqsat.testing.onnx_builders import INT64, make_model, node

    table = np.random.default_rng(1).standard_normal((1000, 64)).astype(np.float32)
    m = make_model([node("Gather", ["table", "ids"], ["y"], axis=0)], [("ids", [1, 8], INT64)], [("y", [1, 8, 64])],
                   {"table": table}, ir_version=8)
    graph = load_model(m)
    (key,) = graph_cost_keys(graph)[0]
    assert dict(key.params)["op_type"] == "Gather" and key.weights == (0,) and key.dtype == "float32"
    model = _opaque_model(key, frozenset({1}))
    ids = np.array([[0, 5, 999, 3, 3, 7, 1, 2]], np.int64)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"in1": ids})
    assert got[0].shape == (1, 8, 64)  # runs with int64 ids (the key's float32 would be refused)
    timed = []

    def fake_run(self, model, feeds, optimize=True, rotate=True):  # refuses what onnxruntime refuses
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        if model.graph.node[0].op_type == "Gather":
            timed.append(feeds["in1"].dtype)
        return 0.1 if model.graph.node[0].op_type in ("Identity", "Sum") else 0.3
    monkeypatch.setattr(OnnxRuntimeCostModel, "_median_run_ms", fake_run)
    cost = OnnxRuntimeCostModel(threads=1).cost(key)
    assert timed and timed[-1] == np.int64  # timed, not priced by the analytic fallback
    assert cost == pytest.approx(0.2)


def test_opaque_nodes_fall_back_to_the_analytic_estimate_where_they_cannot_be_timed() -> None:
    analytic = AnalyticCostModel()
    cm = OnnxRuntimeCostModel(threads=1)
    # an e-graph's opaque node names only the node it stands for
    by_name = ops.get("opaque").cost_keys({"key": "n3", "index": 0}, [], (4, 4))[0]
    assert cm.cost(by_name) == pytest.approx(analytic.cost(by_name))
    # an operator onnxruntime does not have
    spec = ops.get("opaque")
    p = {"key": "n0", "index": 0, "op_type": "NoSuchOp", "domain": "", "attrs": (), "shape": (2, 3),
         "dtype": "float32", "n_outputs": 1, "slots": ""}
    (key,) = spec.cost_keys(spec.normalize(p), [(2, 3)], (2, 3))
    assert dict(key.params)["op_type"] == "NoSuchOp"
    assert cm.cost(key) == pytest.approx(analytic.cost(key))


def test_the_gpu_fallback_is_a_roofline_at_the_calibrated_figures() -> None:
    from eqsat.gpu.cupy_measure import Calibration, _cudnn

    c = Calibration(gflops=50_000.0, bandwidth_gbs=2_000.0, launch_ms=0.02, resident_threads=100_000)
    roof = c.roofline()
    add = ops.get("ewadd").cost_key({}, [(1000, 1000)] * 2, (1000, 1000))
    # memory-bound: 12 MB at 2 TB/s, plus one launch
    assert roof.cost(add) == pytest.approx(12e6 / 2_000e9 * 1e3 + 0.02)
    mm = _mm((4096, 4096), (4096, 4096))  # compute-bound, at the calibrated rate and the product's efficiency
    assert roof.cost(mm) == pytest.approx(2 * 4096**3 / (50_000e6 * 0.9) + 0.02, rel=1e-6)
    try:  # CuPy 14 has no cuDNN wrapper: no error, the caller takes PyTorch's or the roofline
        import cupy  # noqa: F401
    except ImportError:
        assert _cudnn() is None


def test_the_gpu_model_picks_each_operators_kernel_from_its_table() -> None:
    """The GPU model's kernels by operator (``KERNELS``), run with numpy standing in for CuPy (no GPU here): each
    computes its operator's output; a pool or a convolution without cuDNN, and a reference that cannot run on
    CuPy arrays, have none (the roofline prices them)."""
    import numpy as np

    from eqsat.gpu.cupy_measure import KERNELS, CupyCostModel

    m = object.__new__(CupyCostModel)
    m.cp, m._cudnn, m._torch, m.replayed = np, None, None, 0

    def key(op: str, params: dict, shapes: list) -> CostKey:
        spec = ops.get(op)
        p = spec.normalize(params)
        return spec.cost_key(p, shapes, spec.shape(p, shapes))

    cases = [key("matmul", {}, [(4, 8), (8, 3)]), key("matmul_t", {"trans_a": 1, "trans_b": 0}, [(8, 4), (8, 3)]),
             key("matmul_t", {"trans_a": 0, "trans_b": 1}, [(4, 8), (3, 8)]),
             key("gemm", {"trans_a": 0, "trans_b": 1}, [(4, 8), (3, 8), (1, 3)]),
             key("ewadd", {}, [(2, 5), (2, 5)]), key("relu", {}, [(2, 5)]), key("sigmoid", {}, [(2, 5)]),
             key("transpose", {"perm": (1, 0)}, [(2, 5)]), key("concat", {"axis": 1}, [(2, 5), (2, 3)]),
             key("split", {"axis": 1, "start": 1, "size": 3}, [(2, 5)]), key("avgpool", {"kernel": (2, 2),
             "strides": (1, 1), "count_include_pad": 1}, [(1, 2, 4, 4)])]
    ran = {}
    for k in cases:
        fn = m._kernel(k)
        ran[k] = fn is not None and np.shape(fn()) == k.output_shape
    # a gemm launched from Python runs its registry reference, which is CuPy's only on CuPy arrays
    assert ran == {k: k.op not in ("avgpool", "gemm") for k in cases}
    assert {"conv2d", "conv2d_add", "maxpool", "avgpool", "split"} <= KERNELS.keys() <= ops.REGISTRY.keys()


def test_the_gpu_model_prices_what_export_writes(monkeypatch) -> None:
    """An NHWC convolution as its transposes and NCHW convolution, an onnxruntime kernel as its parts and a hair
    more: checked with every configuration priced by the roofline (no GPU here)."""
    from eqsat.costs.analytic import KERNEL_MARGIN_MS
    from eqsat.gpu.cupy_measure import Calibration, CupyCostModel, nhwc_conv_as_written

    m = object.__new__(CupyCostModel)  # no CuPy here: the model's timing replaced by its roofline
    m._fallback = Calibration(gflops=50_000.0, bandwidth_gbs=2_000.0, launch_ms=0.01, resident_threads=10**5).roofline()
    m._timed = {}
    monkeypatch.setattr(m, "_kernel", lambda key: None)
    nhwc = ops.get("conv2d_nhwc")
    key = nhwc.cost_key(nhwc.normalize({"pads": (1, 1, 1, 1), "strides": (2, 2), "act": 1}),
                        [(2, 32, 32, 16), (8, 16, 3, 3), (8,)], (2, 16, 16, 8), weights=(1, 2))
    into, conv, back = nhwc_conv_as_written(key)
    assert (into.input_shapes, into.output_shape) == (((2, 32, 32, 16),), (2, 16, 32, 32))
    assert conv.op == "conv2d" and conv.input_shapes[0] == (2, 16, 32, 32) and conv.output_shape == (2, 8, 16, 16)
    assert dict(conv.params)["act"] == 1 and conv.weights == (1, 2) and back.output_shape == (2, 16, 16, 8)
    assert m.cost(key) == pytest.approx(sum(m._fallback.cost(k) for k in (into, conv, back)))
    skip = ops.get("ort_skip_layernorm")
    k = skip.cost_key({"epsilon": 1e-5}, [(1, 8, 64), (1, 8, 64), (64,), (64,)], (1, 8, 64), weights=(2, 3))
    assert m.cost(k) == pytest.approx(sum(m._fallback.cost(p) for p in ops.runs_as_keys(k)) + KERNEL_MARGIN_MS)
    # timings are kept: a kernel's parts are priced at the values the graph's own copies of them got, so timing
    # noise cannot make the kernel cheaper than its parts
    noisy = iter([1.0, 5.0, 2.0, 7.0])
    monkeypatch.setattr(m, "_kernel", lambda key: (lambda: None))
    monkeypatch.setattr(m, "_time", lambda fn: next(noisy))
    m._timed = {}
    add, norm = ops.runs_as_keys(k)
    assert (m.cost(add), m.cost(norm)) == (1.0, 5.0)
    assert m.cost(k) == pytest.approx(1.0 + 5.0 + KERNEL_MARGIN_MS) and m.cost(add) == 1.0


def test_every_cost_model_implements_the_protocol(tmp_path) -> None:
    from eqsat.gpu import CupyCostModel

    analytic = AnalyticCostModel()
    ort = OnnxRuntimeCostModel(threads=2)
    cached = get_cost_model("measured", threads=2, cache_dir=tmp_path)
    for m in (analytic, ort, cached):
        assert isinstance(m, CostModel) and isinstance(m.name, str)
    assert (analytic.is_measured, analytic.times_end_to_end, analytic.threads) == (False, False, 0)
    assert (ort.is_measured, ort.times_end_to_end, ort.threads) == (True, True, 2)
    assert (cached.is_measured, cached.times_end_to_end, cached.threads) == (True, True, 2)
    in_context = cached.in_context(2**25)
    assert in_context is not cached and (in_context.is_measured, in_context.threads) == (True, 2)
    assert (CupyCostModel.is_measured, CupyCostModel.times_end_to_end) == (True, False)  # no GPU needed
    assert not isinstance("analytic", CostModel)
