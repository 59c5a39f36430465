"""Cached transformations (eqsat.pipeline.transforms): what a run wrote is replayed on a model of the same
structure with other weights and names, checked as always; other structures, options and damaged entries search."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from eqsat import models, onnx_io
from eqsat.pipeline import optimize
from eqsat.testing.onnx_builders import f32, make_model, reexported

ROOT = Path(__file__).resolve().parents[2]


def _ops(model: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in model.graph.node)


def _entries() -> list[Path]:
    return sorted(Path(os.environ["EQSAT_TRANSFORMS_DIR"]).glob("*.json"))


def test_a_model_of_the_same_structure_replays_the_transformation_with_its_own_weights() -> None:
    from eqsat.pipeline import default_rules
    from eqsat.rules.over_split import without_over_split

    # without the element-wise operators over a split, the cell saturates in seconds (with them its e-graph
    # reaches the node limit: 25 s of a test about the replay)
    rules = without_over_split(default_rules())
    first = optimize(models.nasrnn_cell(hidden=64), time_limit=30, rules=rules)
    assert first.transformation.startswith("stored") and not first.kept_original and len(_entries()) == 1
    other = reexported(models.nasrnn_cell(hidden=64, seed=7))  # a fine-tune, exported again
    again = optimize(other, time_limit=30, rules=rules)
    assert again.transformation.startswith("replayed") and again.iterations == [] and not again.rules_fired
    assert "saturate" not in again.stage_seconds and again.numeric is not None and again.numeric.ok
    assert _ops(again.model) == _ops(first.model) and again.cost_after == pytest.approx(first.cost_after)
    # its own weights: what it computes is what the new model computes, not what the first one did
    x = {v.name: np.random.default_rng(3).standard_normal(
        [d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float32) for v in other.graph.input}
    want, got = onnx_io.run_onnxruntime(other, x), onnx_io.run_onnxruntime(again.model, x)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert not np.allclose(want[0], onnx_io.run_onnxruntime(first.model, x)[0])


def test_every_option_is_in_the_key_or_said_not_to_decide_a_search() -> None:
    from eqsat.pipeline.options import OPTION_NAMES
    from eqsat.pipeline.transforms import _OPTIONS, NOT_DECIDING

    assert set(_OPTIONS) | set(NOT_DECIDING) == OPTION_NAMES and not set(_OPTIONS) & set(NOT_DECIDING)


def test_another_structure_or_other_options_search_again() -> None:
    assert optimize(models.two_matmul_shared_input(batch=4, hidden=32), time_limit=20).transformation.startswith(
        "stored")
    wider = optimize(models.two_matmul_shared_input(batch=4, hidden=48), time_limit=20)  # other shapes
    assert wider.transformation.startswith("stored") and wider.iterations
    fewer = optimize(models.two_matmul_shared_input(batch=4, hidden=32), time_limit=20, iter_limit=1)
    assert fewer.transformation.startswith("stored") and len(fewer.iterations) == 2  # another option: searched
    off = optimize(models.two_matmul_shared_input(batch=4, hidden=32), time_limit=20, cache=False)
    assert off.transformation == "" and off.iterations and len(_entries()) == 3
    # a graph for the parallel executor is another search's, never the sum's replayed, and is not stored (the
    # executors' race decides what is written)
    parallel = optimize(models.two_matmul_shared_input(batch=4, hidden=32), time_limit=20, parallel=2,
                        verify_latency=False)
    assert parallel.transformation == "" and parallel.iterations and len(_entries()) == 3


def test_an_unchecked_graph_is_not_stored_and_a_kept_original_is() -> None:
    model = models.two_matmul_shared_input(batch=4, hidden=32)
    assert optimize(model, time_limit=20, check=False).transformation == "" and not _entries()
    relu = make_model([onnx.helper.make_node("Relu", ["x"], ["y"])], [f32("x", (2, 3))], [f32("y", (2, 3))])
    first = optimize(relu, time_limit=20)
    assert first.kept_original and first.transformation.startswith("stored")
    again = optimize(relu, time_limit=20)
    assert again.kept_original and again.transformation.startswith("replayed") and again.iterations == []
    assert "no cheaper graph found" in again.kept_reason and "cached transformation" in again.kept_reason


@pytest.mark.parametrize("damage", ["garbage", "truncated", "a place the model has not", "another format"])
def test_a_damaged_or_stale_entry_is_ignored_with_a_warning_and_the_search_runs(
        damage: str, caplog: pytest.LogCaptureFixture) -> None:
    model = models.two_matmul_shared_input(batch=4, hidden=32)
    optimize(model, time_limit=20)
    (entry,) = _entries()
    text = entry.read_text()
    if damage == "garbage":
        entry.write_bytes(b"\x00\xff not json")
    elif damage == "truncated":
        entry.write_text(text[: len(text) // 2])
    else:
        data = json.loads(text)
        if damage == "another format":
            data["format"] = 0
        else:
            data["graph"]["nodes"][0][2] = ["w999"]
        entry.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="eqsat.pipeline.transforms"):
        res = optimize(model, time_limit=20)
    (warning,) = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert "searching" in warning.getMessage() and "\n" not in warning.getMessage()
    assert res.iterations and res.numeric is not None and res.numeric.ok and res.transformation.startswith("stored")
    assert optimize(model, time_limit=20).transformation.startswith("replayed")  # the entry was written anew


@pytest.mark.slow  # two child processes at once
def test_two_runs_sharing_the_folder_at_once_both_write_and_a_later_run_replays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in (1, 2):
        onnx.save(reexported(models.nasrnn_cell(hidden=64, seed=k), prefix=f"r{k}_"), str(tmp_path / f"m{k}.onnx"))
    env = {**os.environ, "EQSAT_TRANSFORMS_DIR": str(tmp_path / "transforms")}
    runs = [subprocess.Popen([sys.executable, "-m", "eqsat", "optimize", str(tmp_path / f"m{k}.onnx"), "-o",
                              str(tmp_path / f"o{k}.onnx"), "-q"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for k in (1, 2)]
    outs = [p.communicate(timeout=120) for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outs
    assert len(list((tmp_path / "transforms").glob("*.json"))) == 1  # one structure, one entry, whole
    assert not list((tmp_path / "transforms").glob(".*"))  # no temporary file left
    monkeypatch.setenv("EQSAT_TRANSFORMS_DIR", str(tmp_path / "transforms"))
    onnx.save(reexported(models.nasrnn_cell(hidden=64, seed=3)), str(tmp_path / "m3.onnx"))
    assert optimize(str(tmp_path / "m3.onnx"), time_limit=30).transformation.startswith("replayed")
