"""benchmarks/gpu_e2e.py on the CPU: the bundle leaves large weights out and draws them again alike, and the three
steps (prepare, time, report) run end to end on a small model with the same code the GPU machine runs."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _benchmarks import load_benchmark
from onnx import numpy_helper

from eqsat.models.registry import builtin_models
from eqsat.onnx_io import random_feeds

e2e = load_benchmark("gpu_e2e")


def test_large_float_weights_travel_as_their_statistics_and_are_drawn_again() -> None:
    model = builtin_models()["small_cnn"]()
    before = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    stripped = e2e.strip_weights(model, min_elements=100)
    assert len(stripped.SerializeToString()) < len(model.SerializeToString()) / 4
    left_out = {t.name for t in stripped.graph.initializer if t.doc_string.startswith(e2e.DRAWN)}
    kept = set(before) - left_out
    assert left_out and all(before[n].size >= 100 and before[n].dtype == np.float32 for n in left_out)
    assert all(before[n].size < 100 or before[n].dtype != np.float32 for n in kept)
    drawn = e2e.draw_weights(stripped, seed=1)
    again = e2e.draw_weights(e2e.strip_weights(model, min_elements=100), seed=1)
    for t, u in zip(drawn.graph.initializer, again.graph.initializer, strict=True):
        a = numpy_helper.to_array(t)
        assert a.shape == before[t.name].shape and a.dtype == before[t.name].dtype
        assert np.array_equal(a, numpy_helper.to_array(u))  # the same seed draws the same values
        if t.name in kept:
            assert np.array_equal(a, before[t.name])
        else:
            assert not np.array_equal(a, before[t.name])
            assert abs(a.std() - before[t.name].std()) < 0.2 * before[t.name].std() + 1e-6
    feeds = random_feeds(model, seed=0)
    out = ort.InferenceSession(drawn.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert all(np.isfinite(o).all() for o in out)


@pytest.mark.slow  # an optimize run and the timings (about 4 s)
def test_prepare_time_and_report_run_on_the_cpu(tmp_path: Path) -> None:
    calibration = {"gflops": 50_000.0, "bandwidth_gbs": 2_000.0, "launch_ms": 0.01, "resident_threads": 100_000}
    measured = tmp_path / "measured.json"  # no times: everything priced by the roofline
    measured.write_text(json.dumps({"identity": {"gpu": "a GPU"}, "calibration": calibration, "costs": []}))
    bundle, times, out = tmp_path / "bundle", tmp_path / "times.json", tmp_path / "results"
    e2e.prepare(argparse.Namespace(models=["two_matmul_shared_input"], measured=[str(measured)], bundle=str(bundle),
                                   dims="", candidates=3, time_limit=30.0))
    manifest = json.loads((bundle / "manifest.json").read_text())
    entry = manifest["models"][0]
    assert entry["name"] == "two_matmul_shared_input" and entry["numeric_ok"]
    assert entry["graphs"][0]["role"] == "original" and len(entry["graphs"]) >= 2
    assert entry["graphs"][1]["predicted_ms"] < entry["graphs"][0]["predicted_ms"]  # the merged product
    e2e.time_bundle(argparse.Namespace(bundle=str(bundle), out=str(times), device="cpu", models=None,
                                       modes="eager,graph", dtypes="float32,float16", budget=0.02,
                                       half_on_cpu=True))
    timed = json.loads(times.read_text())["models"][0]["graphs"]
    assert [g["file"] for g in timed] == [g["file"] for g in entry["graphs"]]
    for g in timed:
        assert g["error_float32"] < 1e-5 and g["error_float16"] < 1e-2
        assert g["eager_float32"]["median_ms"] > 0 and "graph_float32" not in g  # no CUDA graphs on the CPU
    e2e.report(argparse.Namespace(bundle=str(bundle), times=str(times), out=str(out), stem="e2e"))
    rows = json.loads((out / "e2e.json").read_text())["rows"]
    assert rows[0]["predicted_speedup"] == pytest.approx(
        entry["graphs"][0]["predicted_ms"] / entry["graphs"][1]["predicted_ms"])
    measured_up = timed[0]["eager_float32"]["median_ms"] / timed[1]["eager_float32"]["median_ms"]
    assert rows[0]["eager_float32_speedup"] == pytest.approx(measured_up)
    assert -1 <= rows[0]["eager_float32_spearman"] <= 1 or math.isnan(rows[0]["eager_float32_spearman"])
    text = (out / "e2e.md").read_text()
    assert "| two_matmul_shared_input |" in text and "eager fp32" in text and "eager fp16" in text


def test_a_graph_it_cannot_run_is_recorded_not_fatal(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    bundle = tmp_path / "bundle"
    (bundle / "m").mkdir(parents=True)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Hardmax", ["r"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(bundle / "m" / "0.onnx"))
    np.savez(bundle / "m" / "inputs.npz", x=np.ones((2, 3), np.float32))
    (bundle / "manifest.json").write_text(json.dumps({"models": [{"name": "m", "graphs": [{"file": "0.onnx"}]}]}))
    times = tmp_path / "t.json"
    e2e.time_bundle(argparse.Namespace(bundle=str(bundle), out=str(times), device="cpu", models=None,
                                       modes="eager", dtypes="float32", budget=0.01, half_on_cpu=False))
    row = json.loads(times.read_text())["models"][0]["graphs"][0]
    assert "Hardmax" in row["error"] and "eager_float32" not in row
