"""End to end: optimize() and the CLI on built-in and zoo models, numerically checked."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import numpy as np
import onnx
import pytest

from eqsat import models, onnx_io
from eqsat.ir.rule import Rule
from eqsat.pipeline import NumericMismatch, OptimizeResult, optimize


def test_two_matmuls_sharing_an_input_are_fused(optimized: Callable[[str], OptimizeResult]) -> None:
    res = optimized("two_matmul_shared_input")  # optimize(model, time_limit=30), shared
    ops = [n.op for n in res.graph.nodes]
    assert ops.count("matmul") + ops.count("matmul_t") == 1, ops  # one product over concatenated weights
    assert "split" in ops
    assert res.cost_after < res.cost_before
    assert res.numeric.ok
    onnx.checker.check_model(res.model, full_check=True)


def test_fusion_is_not_chosen_when_the_cost_model_makes_it_dearer() -> None:
    """Extraction follows the cost model: if concat+split were very expensive, keep the two matmuls."""
    from eqsat.costs import AnalyticCostModel

    class SplitHater(AnalyticCostModel):
        def cost(self, key):  # noqa: D401 - test double
            return 1e3 if key.op in ("split", "concat") else super().cost(key)

    res = optimize(models.builtin_models()["two_matmul_shared_input"](), cost_model=SplitHater(), time_limit=20)
    ops = [n.op for n in res.graph.nodes]
    assert ops.count("matmul") + ops.count("matmul_t") == 2, ops


@pytest.mark.parametrize("name", ["squeezenet", *(pytest.param(n, marks=pytest.mark.slow)  # full-size models
                                                   for n in ("resnet50", "inception_v1", "densenet121"))])
def test_zoo_model_optimizes_and_stays_equal(name: str, zoo_model: Callable[[str], onnx.ModelProto]) -> None:
    model = zoo_model(name)
    res = optimize(model, time_limit=30)
    onnx.checker.check_model(res.model, full_check=True)
    assert res.numeric.ok
    assert res.cost_after <= res.cost_before + 1e-12
    assert [o.name for o in res.model.graph.output] == [o.name for o in model.graph.output]
    assert [i.name for i in res.model.graph.input] == [i.name for i in model.graph.input
                                                       if i.name not in {t.name for t in model.graph.initializer}]


def test_wrong_rule_is_caught_by_the_numeric_check() -> None:
    wrong = Rule("drop-relu", ("(relu ?x)",), ("?x",))
    with pytest.raises(NumericMismatch, match="drop-relu"):
        optimize(models.builtin_models()["two_matmul_shared_input"](), rules=[wrong], time_limit=10)


@pytest.mark.slow  # a child process: Python, imports and optimize from scratch
def test_cli_optimize_writes_a_checked_model(tmp_path) -> None:
    src = tmp_path / "m.onnx"
    out = tmp_path / "out.onnx"
    dump = tmp_path / "eg.json"
    onnx.save(models.builtin_models()["two_matmul_shared_input"](), str(src))
    r = subprocess.run([sys.executable, "-m", "eqsat", "optimize", str(src), "-o", str(out), "--time-limit", "20",
                        "--dump-egraph", str(dump)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "cost before" in r.stdout and "rules fired" in r.stdout
    model = onnx.load(str(out))
    feeds = onnx_io.random_feeds(model, seed=1)
    a = onnx_io.run_onnxruntime(onnx.load(str(src)), feeds)
    b = onnx_io.run_onnxruntime(model, feeds)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4)
    import json

    eg = json.loads(dump.read_text())
    assert eg["root_eclasses"] and all("cost" in n for n in eg["nodes"].values())


def test_cli_writes_nothing_on_bad_input(tmp_path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07\x12\x03abc" * 3)
    out = tmp_path / "out.onnx"
    r = subprocess.run([sys.executable, "-m", "eqsat", "optimize", str(bad), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "error" in r.stderr
    assert not out.exists()


def test_cli_inspect_lists_opaque_ops(tmp_path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(models.hf_bert(seq=8, hidden=16, heads=2, intermediate=32, vocab=50), str(src))
    r = subprocess.run([sys.executable, "-m", "eqsat", "inspect", str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # attention and normalization are registry operators; the mask's boolean plumbing stays opaque, with why
    assert "softmax" in r.stdout and "layernorm" in r.stdout and "matmul" in r.stdout
    assert "Where" in r.stdout and "eqsat has no operator for Where" in r.stdout


@pytest.mark.slow  # two end-to-end latency timings (about 2 s each)
def test_latency_verification_keeps_the_original_unless_measurably_faster() -> None:
    model = models.two_matmul_shared_input()
    # a margin of 100 % can never be met: the original is kept, and both latencies are reported
    kept = optimize(model, verify_latency=True, latency_margin=1.0, time_limit=30)
    assert kept.kept_original and kept.latency_ms is not None and all(t > 0 for t in kept.latency_ms)
    assert kept.cost_after == kept.cost_before and len(kept.graph.nodes) == len(kept.original.nodes)
    # the kept original is the model as given, byte for byte (not a re-export of its import)
    assert kept.model.SerializeToString() == model.SerializeToString()
    # a negative margin accepts any timing: the cheaper extracted graph is kept
    taken = optimize(model, verify_latency=True, latency_margin=-10.0, time_limit=30)
    assert not taken.kept_original and taken.cost_after < taken.cost_before


# -- options and stages ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"time_limit": -1.0}, ValueError, "time_limit must be a finite, positive number of seconds, got -1.0"),
    ({"candidates": 0}, ValueError, "candidates must be at least 1, got 0"),
    ({"node_limit": -5}, ValueError, "node_limit must be a whole number of e-nodes >= 1, got -5"),
    ({"memory_limit_mb": float("nan")}, ValueError, "memory_limit_mb must be a whole number of MiB >= 1, got nan"),
    ({"solver": "simplex"}, ValueError, "unknown extraction solver 'simplex'; choose one of cpsat, greedy"),
    ({"latency_margin": float("nan")}, ValueError, "latency_margin must be a finite fraction, got nan"),
    ({"cost_model": "abacus"}, ValueError, "unknown cost model 'abacus'"),
    ({"cost_model": 3}, TypeError, "cost_model must be a CostModel"),
    ({"time_limt": 10}, TypeError, "optimize() got unexpected keyword argument(s) 'time_limt'"),
])
def test_options_are_refused_before_the_model_is_read(options: dict, error: type, message: str) -> None:
    from eqsat.pipeline import OptimizeOptions

    with pytest.raises(error) as e:
        optimize("/nonexistent/model.onnx", **options)  # the missing file is never opened
    assert message in str(e.value)
    if "time_limt" not in options:  # the same check, once, when the options object is made
        with pytest.raises(error, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
            OptimizeOptions(**options)


def test_an_options_object_runs_as_the_same_keywords() -> None:
    import dataclasses

    from eqsat.pipeline import OptimizeOptions

    model = models.builtin_models()["two_matmul_shared_input"]()
    opts = OptimizeOptions(time_limit=20, check=False, cost_model="analytic")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.time_limit = 5  # type: ignore[misc]
    by_object = optimize(model, options=opts)
    by_keywords = optimize(model, time_limit=20, check=False)
    assert by_object.cost_after == by_keywords.cost_after and by_object.cost_model == "analytic"
    assert by_object.numeric is None
    checked = optimize(model, options=opts, check=True)  # keywords override the object's fields
    assert checked.numeric is not None and checked.numeric.ok


def test_the_stage_table_reads_only_records_made_before_and_the_check_says_which() -> None:
    import dataclasses

    from eqsat.pipeline.run import STAGES, Stage, check_stages

    check_stages(STAGES)  # the table as it is
    assert [s.makes for s in STAGES][:7] == ["loaded", "rules", "recalled", "saturated", "priced", "extracted",
                                             "decision"]
    assert STAGES[6].reads == ("loaded", "saturated", "priced", "extracted", "recalled")  # export: its parameters
    swapped = list(STAGES)
    swapped[4], swapped[5] = swapped[5], swapped[4]  # extract before cost: it reads the prices
    with pytest.raises(ValueError, match="stage extract reads 'priced', which no stage before it makes"):
        check_stages(swapped)
    # a record that only a stage which may not apply makes must be optional where it is read
    sometimes = [dataclasses.replace(s, applies=lambda run, r: False) if s.name == "check" else s for s in STAGES]
    check_stages(sometimes)  # the report reads the numeric report with a default
    needs = Stage("needs", lambda run, numeric: numeric, "x")
    with pytest.raises(ValueError, match="stage needs needs 'numeric'.*give the parameter a default"):
        check_stages([*sometimes, needs])


def test_stages_are_timed_under_the_reports_keys_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from eqsat.pipeline.run import STAGES

    model = models.builtin_models()["two_matmul_shared_input"]()
    with caplog.at_level(logging.DEBUG, logger="eqsat.pipeline.run"):
        res = optimize(model, time_limit=20, dump_egraph=True)
    assert list(res.stage_seconds) == ["import", "saturate", "cost", "extract", "export", "check", "dump"]
    assert all(s >= 0 for s in res.stage_seconds.values())
    logged = [r.args[0] for r in caplog.records if r.msg.startswith("stage ")]
    # not timed end to end (analytic costs), and a dump turns the transformation cache off
    assert logged == [s.name for s in STAGES if s.name not in ("latency", "executors", "recall", "remember")]
    assert res.egraph_dump is not None and "time: dump" in res.summary()
    res = optimize(model, time_limit=20, check=False)
    assert list(res.stage_seconds) == ["import", "recall", "saturate", "cost", "extract", "export"]


def test_the_pipeline_reads_the_cost_models_protocol_not_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose runtime times whole models gets the end-to-end check by default, with its threads; one
    merely named like onnxruntime does not."""
    from eqsat.costs import AnalyticCostModel
    from eqsat.pipeline import candidates

    class TimesWholeModels(AnalyticCostModel):
        name = "formula"
        times_end_to_end = True
        threads = 3

    class NamedLikeOnnxruntime(AnalyticCostModel):
        name = "onnxruntime-cpu (lookalike)"

    threads = []

    def latencies(models_, graph, cost_model, *_):
        threads.append(cost_model.threads)
        return [[2.0, 2.0, 2.0]] + [[1.0, 1.0, 1.0]] * (len(models_) - 1)

    monkeypatch.setattr(candidates, "latencies", latencies)
    model = models.builtin_models()["two_matmul_shared_input"]()
    res = optimize(model, cost_model=TimesWholeModels(), time_limit=20)
    assert threads and set(threads) == {3} and res.latency_ms == (2.0, 1.0) and "latency" in res.stage_seconds
    threads.clear()
    res = optimize(model, cost_model=NamedLikeOnnxruntime(), time_limit=20)
    assert threads == [] and res.latency_ms is None and "latency" not in res.stage_seconds
