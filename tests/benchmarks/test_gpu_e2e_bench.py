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
regroup = load_benchmark("_regroup")


def _dilated_conv() -> onnx.ModelProto:
    """A dilated 3x3 convolution of 8x8 images, which PET runs as a plain one over its phase images."""
    from eqsat.ir.graph import Graph, TensorInfo, make_node
    from eqsat.onnx_io import to_onnx

    rng = np.random.default_rng(0)
    node = make_node("conv2d", {"pads": (2,) * 4, "dilations": (2, 2), "act": 0}, ["x", "w", "b"], "y")
    return to_onnx(Graph((TensorInfo("x", (1, 2, 8, 8)),), {"w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
                                                         "b": rng.standard_normal(4).astype(np.float32)}, (node,),
                         ("y",)))


def _small_resnext() -> onnx.ModelProto:
    from eqsat.models import taso_resnext50

    return taso_resnext50(image=16, widths=(16,), depths=(2,), groups=8, stem=8)


@pytest.mark.parametrize("factor", [2, 4, 8])
def test_regrouped_convolutions_compute_the_same_function_with_fewer_groups(factor: int) -> None:
    model = _small_resnext()
    assert regroup.group_counts(model) == [8]
    fewer = regroup.regrouped(model, factor)
    assert regroup.group_counts(fewer) == ([8 // factor] if factor < 8 else [])
    assert regroup.group_counts(model) == [8]  # the original is left as it was
    feeds = random_feeds(model, seed=3)
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
           for m in (model, fewer)]
    np.testing.assert_allclose(run[1], run[0], rtol=1e-4, atol=1e-5)
    kernels = {t.name: numpy_helper.to_array(t) for t in fewer.graph.initializer}
    grouped = [n for n in model.graph.node if n.op_type == "Conv" and any(a.i == 8 for a in n.attribute
                                                                          if a.name == "group")]
    w = kernels[grouped[0].input[1]]
    assert w.shape[1] == 16 // 8 * factor  # input channels per group grow by the factor
    assert np.count_nonzero(w) <= w.size // factor  # zero off the diagonal blocks


def test_regrouping_refuses_a_kernel_it_would_change_for_another_node_and_a_model_with_nothing_to_regroup() -> None:
    model = _small_resnext()
    conv = next(n for n in model.graph.node if n.op_type == "Conv" and any(a.name == "group" and a.i == 8
                                                                           for a in n.attribute))
    other = next(n for n in model.graph.node if n.op_type == "Conv" and n is not conv)
    shared = onnx.ModelProto()
    shared.CopyFrom(model)
    next(n for n in shared.graph.node if n.name == other.name).input.append(conv.input[1])  # a second reader
    with pytest.raises(ValueError, match="not an initializer of its own"):
        regroup.regrouped(shared, 2)
    with pytest.raises(ValueError, match="no grouped Conv"):
        regroup.regrouped(builtin_models()["small_cnn"](), 2)


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


@pytest.mark.slow  # an optimize run and the timings (about 6 s)
def test_prepare_time_and_report_run_on_the_cpu(tmp_path: Path) -> None:
    calibration = {"gflops": 50_000.0, "bandwidth_gbs": 2_000.0, "launch_ms": 0.01, "resident_threads": 100_000}
    measured = tmp_path / "measured.json"  # no times: everything priced by the roofline
    measured.write_text(json.dumps({"identity": {"gpu": "a GPU"}, "calibration": calibration, "costs": []}))
    bundle, times, out = tmp_path / "bundle", tmp_path / "times.json", tmp_path / "results"
    small = tmp_path / "small_resnext.onnx"
    onnx.save(_small_resnext(), str(small))
    dilated = tmp_path / "dilated.onnx"
    onnx.save(_dilated_conv(), str(dilated))
    e2e.prepare(argparse.Namespace(models=["two_matmul_shared_input"], measured=[str(measured)], bundle=str(bundle),
                                   dims="", candidates=3, time_limit=30.0, regroup=[str(small)], pet=[],
                                   pet_limit=4, append=False))
    e2e.prepare(argparse.Namespace(models=[], measured=[str(measured)], bundle=str(bundle), dims="", candidates=3,
                                   time_limit=30.0, regroup=[], pet=[str(dilated)], pet_limit=4, append=True))
    manifest = json.loads((bundle / "manifest.json").read_text())
    entry, variants, pet = manifest["models"]
    assert pet["kind"] == "pet" and pet["name"].startswith("dilated_pet_") and len(pet["graphs"]) == 2
    assert pet["graphs"][1]["role"].startswith("mutant ")
    keys = json.loads((bundle / "keys_bundle.json").read_text())  # every graph's configurations, the mutant's too
    assert {"matmul", "conv2d"} <= {k["op"] for k in keys} and len(keys) == len({json.dumps(k) for k in keys})
    assert variants["kind"] == "regrouped" and [g["role"] for g in variants["graphs"]] == [
        "8 groups", "4 groups", "2 groups", "1 group"]
    assert entry["name"] == "two_matmul_shared_input" and entry["numeric_ok"]
    assert entry["graphs"][0]["role"] == "original" and len(entry["graphs"]) >= 2
    assert entry["graphs"][1]["predicted_ms"] < entry["graphs"][0]["predicted_ms"]  # the merged product
    e2e.time_bundle(argparse.Namespace(bundle=str(bundle), out=str(times), device="cpu", models=None,
                                       modes="eager,graph", dtypes="float32,float16", budget=0.02,
                                       half_on_cpu=True))
    timed, timed_variants, timed_pet = (m["graphs"] for m in json.loads(times.read_text())["models"])
    assert all(g["error_float32"] < 1e-4 for g in timed_variants + timed_pet)
    assert [g["file"] for g in timed] == [g["file"] for g in entry["graphs"]]
    for g in timed:
        assert g["error_float32"] < 1e-5 and g["error_float16"] < 1e-2
        assert g["eager_float32"]["median_ms"] > 0 and "graph_float32" not in g  # no CUDA graphs on the CPU
    e2e.report(argparse.Namespace(bundle=str(bundle), times=str(times), out=str(out), stem="e2e",
                                  reprice=str(measured), graph_costs=str(measured)))
    saved = json.loads((out / "e2e.json").read_text())
    rows, regrouped = saved["rows"], saved["regrouped"][0]["rows"]
    assert len(rows) == 1  # the variants are not an optimization: their own table
    assert [r["groups"] for r in regrouped] == ["8 groups", "4 groups", "2 groups", "1 group"]
    assert regrouped[0]["eager_float32_speedup"] == 1.0
    for r, g in zip(regrouped, variants["graphs"], strict=True):  # the same costs: the same prices
        assert r["repriced_ms"] == pytest.approx(g["predicted_ms"])
    assert rows[0]["predicted_speedup"] == pytest.approx(
        entry["graphs"][0]["predicted_ms"] / entry["graphs"][1]["predicted_ms"])
    measured_up = timed[0]["eager_float32"]["median_ms"] / timed[1]["eager_float32"]["median_ms"]
    assert rows[0]["eager_float32_speedup"] == pytest.approx(measured_up)
    assert -1 <= rows[0]["eager_float32_spearman"] <= 1 or math.isnan(rows[0]["eager_float32_spearman"])
    text = (out / "e2e.md").read_text()
    assert "| two_matmul_shared_input |" in text and "eager fp32" in text and "eager fp16" in text
    assert "small_resnext_regrouped: the grouped convolutions regrouped" in text and "| 2 groups |" in text
    pet_row = saved["pet"][0]
    assert pet_row["subprogram"] == pet["name"] and pet_row["eager_float32_speedup"] == pytest.approx(
        timed_pet[0]["eager_float32"]["median_ms"] / timed_pet[1]["eager_float32"]["median_ms"])
    assert "PET's corrected mutants, each subprogram alone" in text
    graph_rows = saved["graph_costs"]  # priced again by the same table: the same prices, the same choice
    assert [r["model"] for r in graph_rows] == ["two_matmul_shared_input"]
    assert graph_rows[0]["first_choice_predicted_speedup"] == pytest.approx(rows[0]["predicted_speedup"])
    assert "Priced as a CUDA graph runs the operators" in text


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


def test_large_float_inputs_are_left_out_and_drawn_again_at_their_shapes(tmp_path: Path) -> None:
    feeds = {"big": np.ones((2, 64, 8, 8), np.float32), "small": np.arange(6, dtype=np.float32).reshape(2, 3),
             "ids": np.zeros((4096,), np.int64)}
    drawn = e2e._save_inputs(tmp_path, feeds)
    assert drawn == ["big"] and set(np.load(tmp_path / "inputs.npz")) == {"small", "ids"}
    entry = {"shapes": {k: list(v.shape) for k, v in feeds.items()}, "drawn_inputs": drawn}
    got, again = e2e.load_inputs(tmp_path, entry), e2e.load_inputs(tmp_path, entry)
    assert got["big"].shape == (2, 64, 8, 8) and got["big"].dtype == np.float32 and 0.5 < got["big"].std() < 1.5
    assert np.array_equal(got["big"], again["big"]) and np.array_equal(got["small"], feeds["small"])
    assert np.array_equal(got["ids"], feeds["ids"])
