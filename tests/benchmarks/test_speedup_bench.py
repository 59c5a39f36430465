"""benchmarks/speedup.py's pure parts on made-up numbers: statistics, targets, rendering (no timing, no sessions)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from _benchmarks import load_benchmark

sp = load_benchmark("speedup")


def row(model: str, threads: int, speedup: float | None, cold: float | None = 1.0, warm: float | None = 0.5,
        **kw: Any) -> dict:
    r = {"model": model, "threads": threads, "status": "ok" if speedup is not None else "error",
         "error": None if speedup is not None else "cold: killed after 900 s", "speedup": speedup,
         "ci_low": None if speedup is None else speedup * 0.98, "ci_high": None if speedup is None else speedup * 1.02,
         "original_ms": None if speedup is None else 2.0, "optimized_ms": None if speedup is None else 2.0 / speedup,
         "optimize_cold_s": cold, "optimize_warm_s": warm, "kept_original": None if speedup is None else False,
         "kept_original_warm": False, "same_result": True, "nodes_before": 10, "nodes_after": 8}
    r.update(kw)
    return r


def test_geomean() -> None:
    assert sp.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert sp.geomean([1.5]) == pytest.approx(1.5)
    assert math.isnan(sp.geomean([]))
    with pytest.raises(ValueError):
        sp.geomean([1.0, 0.0])


def test_bootstrap_ci_brackets_the_median() -> None:
    vals = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8]
    lo, hi = sp.bootstrap_ci(vals, resamples=2000)
    assert min(vals) <= lo <= 1.4 <= hi <= max(vals)
    assert sp.bootstrap_ci(vals, resamples=2000) == (lo, hi)  # seeded
    assert sp.bootstrap_ci([1.25]) == (1.25, 1.25)
    assert sp.bootstrap_ci([3.0] * 7) == (3.0, 3.0)
    wide = sp.bootstrap_ci(vals, level=0.99, resamples=2000)
    assert wide[0] <= lo and wide[1] >= hi


def test_paired_speedup_uses_per_round_ratios() -> None:
    orig = [10.0, 12.0, 11.0, 30.0, 10.0]  # round 4 was slow for both models: the ratio is unaffected
    opt = [5.0, 6.0, 5.5, 15.0, 5.0]
    res = sp.paired_speedup(orig, opt, resamples=500)
    assert res["speedup"] == pytest.approx(2.0)
    assert (res["ci_low"], res["ci_high"]) == pytest.approx((2.0, 2.0))
    assert res["original_ms"] == 11.0 and res["optimized_ms"] == 5.5 and res["rounds"] == 5
    with pytest.raises(ValueError):
        sp.paired_speedup([1.0], [1.0, 2.0])


def _resnet_targets(targets: list[dict]) -> list[dict]:
    """The cold- and warm-cache optimize-time targets."""
    return [t for t in targets if t["target"].startswith("ResNet-50-sized")]


def test_targets_met() -> None:
    rows = [row("taso_nasrnn", 1, 1.6), row("nasrnn_cell", 1, 1.55), row("taso_bert", 1, 1.25),
            row("squeezenet", 1, 1.0), row("resnet50", 1, 1.0, cold=100.0, warm=10.0)]
    targets = {t["target"].split(" ")[0]: t["per_threads"]["1"] for t in sp.evaluate_targets(rows, [1])}
    assert targets["geometric"]["met"] is True
    assert targets["geometric"]["value"] == pytest.approx(sp.geomean([1.6, 1.55, 1.25, 1.0, 1.0]))
    assert targets["NasRNN"] == {"value": 1.55, "met": True, "text": "1.550x (nasrnn_cell)"}
    assert targets["TASO"]["met"] is True and targets["TASO"]["value"] == 1.25
    assert targets["no"]["met"] is True and targets["no"]["value"] == 1.0
    cold, warm = [t["per_threads"]["1"] for t in _resnet_targets(sp.evaluate_targets(rows, [1]))]
    assert cold["met"] is True and cold["value"] == 100.0
    assert warm["met"] is True and warm["value"] == 10.0


def test_targets_not_met_and_not_run() -> None:
    rows = [row("taso_nasrnn", 1, 1.2), row("taso_nasrnn", 2, 1.7), row("squeezenet", 1, 0.98),
            row("squeezenet", 2, None, cold=None, warm=None), row("taso_resnext50", 2, 1.0, cold=130.0, warm=20.0)]
    tg = sp.evaluate_targets(rows, [1, 2])
    by = {t["target"].split(" ")[0]: t["per_threads"] for t in tg}
    assert by["geometric"]["1"]["met"] is False  # sqrt(1.2 * 0.98) < 1.10
    assert by["geometric"]["2"]["text"] == f"{sp.geomean([1.7, 1.0]):.3f}x over 2 of 3"
    assert by["NasRNN"]["1"]["met"] is False and by["NasRNN"]["2"]["met"] is True
    assert by["TASO"]["1"] == {"value": None, "met": None, "text": "not run"}
    assert by["no"]["1"]["met"] is False and by["no"]["1"]["value"] == 0.98
    assert by["no"]["2"]["met"] is False and "failed: squeezenet" in by["no"]["2"]["text"]  # a failure counts
    cold, warm = [t["per_threads"] for t in _resnet_targets(tg)]
    assert cold["1"]["met"] is None and cold["2"]["met"] is False and warm["2"]["met"] is False


def test_a_failed_warm_run_keeps_the_speedup() -> None:
    r = row("taso_bert", 1, 1.3, warm=None, status="partial", error="warm: killed after 900 s")
    by = {t["target"].split(" ")[0]: t["per_threads"]["1"] for t in sp.evaluate_targets([r], [1])}
    assert by["TASO"]["met"] is True
    assert "warm: killed" in sp.result_text(r)


def test_rendering() -> None:
    rows = [row("taso_nasrnn", 1, 1.6), row("taso_nasrnn", 2, 1.5, kept_original=True),
            row("squeezenet", 1, None, cold=None, warm=None)]
    table = sp.render_table(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + len(rows) and all(ln.count("|") == lines[0].count("|") for ln in lines)
    assert "1.600x [1.568, 1.632]" in table and "original kept" in table and "killed after 900 s" in table
    targets = sp.evaluate_targets(rows, [1, 2])
    rendered = sp.render_targets(targets, [1, 2])
    assert "| target | 1 thread | 2 threads |" in rendered and "NOT MET" in rendered and "not run" in rendered
    meta = {"commit": "abc1234", "date": "2024-01-01 00:00", "cpu": "Test CPU", "cores": "2", "onnxruntime": "1.0",
            "python": "3.11", "graph_optimization_level": "ORT_ENABLE_ALL", "command": "python benchmarks/speedup.py",
            "threads": [1, 2], "rounds": 5, "batch_ms": 10.0, "time_limit": 60.0, "timeout": 900.0, "ci": "bootstrap"}
    md = sp.render_markdown(meta, rows, targets)
    assert "abc1234" in md and "ORT_ENABLE_ALL" in md and "## Targets (issue 11)" in md and table in md
    json.dumps({"meta": meta, "rows": rows, "targets": targets})  # what speedup.json holds


def test_prediction_quality_pairs_originals_and_optimized_models() -> None:
    rows = [row("a", 1, 2.0, predicted_before_ms=4.0, predicted_after_ms=2.0),  # 2.0 -> 1.0 ms measured
            row("b", 1, 1.0, predicted_before_ms=6.0, predicted_after_ms=6.0, identical=True, original_ms=3.0),
            row("c", 1, None), row("d", 2, 1.5, predicted_before_ms=1.0, predicted_after_ms=1.5)]
    assert sp.prediction_pairs(rows, 1) == [(4.0, 2.0), (2.0, 1.0), (6.0, 3.0)]
    q = sp.prediction_quality(rows, 1)
    assert q["pairs"] == 3 and q["spearman"] == pytest.approx(1.0)
    assert q["mean_error"] == pytest.approx(1.0)
    assert sp.prediction_quality([], 1) == {"pairs": 0, "spearman": None, "mean_error": None}
    by = {t["target"]: t["per_threads"] for t in sp.evaluate_targets(rows, [1, 2])}
    rho = next(v for k, v in by.items() if "Spearman" in k)
    err = next(v for k, v in by.items() if "mean error" in k)
    assert rho["1"]["met"] is True and err["1"]["met"] is False and "over 3 graphs" in err["1"]["text"]
    assert rho["2"]["met"] is False and rho["2"]["value"] == pytest.approx(-1.0)  # predicted slower, ran faster


def test_spearman_handles_ties_and_reversals() -> None:
    from _common import ranks, spearman  # on sys.path since load_benchmark

    assert list(ranks([3.0, 1.0, 3.0, 2.0])) == [2.5, 0.0, 2.5, 1.0]
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1.0], [2.0])) and math.isnan(spearman([1, 1], [1, 2]))


def test_first_choice_statistics_and_rendering() -> None:
    rows = [row("a", 1, 1.1, first_choice_fastest=True), row("b", 1, 1.0, first_choice_fastest=False),
            row("c", 1, 1.0, first_choice_fastest=None)]
    assert sp.first_choice_stats(rows, 1) == (1, 2)
    text = sp.render_candidates(rows, [1])
    assert "1 of 2 models" in text and "(b)" in text


def test_the_benchmark_runs_again_with_huge_pages_only_where_glibc_lacks_them() -> None:
    env = sp.huge_pages_env({"PATH": "/bin"}, "linux")
    assert env == {"PATH": "/bin", "GLIBC_TUNABLES": sp.HUGE_PAGES}
    assert sp.huge_pages_env(env, "linux") is None  # already set: no second start
    kept = sp.huge_pages_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "linux")
    assert kept["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{sp.HUGE_PAGES}"  # the user's tunables kept
    assert sp.huge_pages_env({}, "darwin") is None
