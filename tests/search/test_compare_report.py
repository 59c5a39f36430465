"""The comparison's report: reach times and the curve check (eqsat.search.traces), the new JSON fields and table
columns, ``eqsat compare --plot`` (eqsat.search.comparison_plot) and ``benchmarks/compare.py``'s report."""

from __future__ import annotations

import json
import math

import pytest

from eqsat.cli.app import main
from eqsat.search.comparison import ComparisonResult, MethodResult
from eqsat.search.traces import (
    first_time_above,
    method_reach,
    reach_fields,
    reach_seconds,
    speedup_percent,
    value_at,
    with_reach_fields,
)


@pytest.fixture
def bench():
    """benchmarks/compare.py as a module."""
    from _benchmarks import load_benchmark

    return load_benchmark("compare")


# ---------------------------------------------------------------------------------------------------------
# reach times on hand-made traces

TRACE = [(0.0, 100.0), (1.0, 90.0), (2.5, 80.0), (4.0, 70.0)]


def test_reach_seconds_is_the_first_point_at_or_below_the_target() -> None:
    assert reach_seconds(TRACE, 80.0) == 2.5
    assert reach_seconds(TRACE, 85.0) == 2.5  # between two steps: the step below it
    assert reach_seconds(TRACE, 100.0) == 0.0  # reached at the first point
    assert reach_seconds(TRACE, 150.0) == 0.0
    assert reach_seconds(TRACE, 69.0) is None  # never
    assert reach_seconds([], 1.0) is None


def test_reach_seconds_has_a_relative_tolerance_of_1e_6() -> None:
    assert reach_seconds(TRACE, 70.0 * (1 - 1e-7)) == 4.0  # a running sum a hair above the recomputed cost
    assert reach_seconds(TRACE, 70.0 * (1 - 1e-5)) is None  # a real difference
    assert reach_seconds(TRACE, 80.0 * (1 - 1e-5)) == 4.0


def test_a_methods_reach_is_decided_by_its_recomputed_cost() -> None:
    m = {"cost": 70.0, "seconds_to_best": 4.2, "seconds": 5.0, "trace": TRACE}
    assert method_reach(m, 90.0) == 1.0
    assert method_reach(m, 69.0) is None
    # the trace's running sum ends a little above the recomputed cost: reached when the final graph was found
    assert method_reach({**m, "cost": 69.0}, 69.0) == 4.2
    # the trace claims a cost its exported model does not have: never
    assert method_reach({**m, "cost": 75.0}, 70.0) is None
    assert method_reach({**m, "cost": None}, 90.0) is None  # a failed method
    assert method_reach(m, None) is None


def test_reach_fields_time_every_method_against_backtracking_and_eqsat() -> None:
    methods = {"eqsat": {"cost": 70.0, "seconds_to_best": 4.0, "seconds": 4.5, "trace": TRACE},
               "backtracking": {"cost": 80.0, "seconds_to_best": 0.5, "seconds": 60.0,
                                "trace": [(0.0, 100.0), (0.5, 80.0)]},
               "sampling": {"cost": 90.0, "seconds_to_best": 3.0, "seconds": 60.0,
                            "trace": [(0.0, 100.0), (3.0, 90.0)]}}
    f = reach_fields(methods)
    assert f["eqsat"] == {"seconds_to_backtracking_best": 2.5, "seconds_to_eqsat_best": 4.0}
    assert f["backtracking"] == {"seconds_to_backtracking_best": 0.5, "seconds_to_eqsat_best": None}
    assert f["sampling"] == {"seconds_to_backtracking_best": None, "seconds_to_eqsat_best": None}
    # backtracking did not run (or failed): no key, which the tables show as "-"
    f = reach_fields({k: v for k, v in methods.items() if k != "backtracking"})
    assert set(f["eqsat"]) == {"seconds_to_eqsat_best"}
    f = reach_fields({**methods, "backtracking": {**methods["backtracking"], "cost": None}})
    assert "seconds_to_backtracking_best" not in f["eqsat"]


# ---------------------------------------------------------------------------------------------------------
# the curve check on hand-made step functions


def test_value_at_is_the_step_function() -> None:
    assert value_at(TRACE, 0.0) == 100.0
    assert value_at(TRACE, 0.99) == 100.0
    assert value_at(TRACE, 1.0) == 90.0
    assert value_at(TRACE, 99.0) == 70.0


def test_a_curve_above_the_other_at_some_time() -> None:
    eq = [(0.0, 100.0), (3.0, 70.0)]  # one result, late
    bt = [(0.0, 100.0), (0.5, 95.0), (2.0, 80.0)]
    assert first_time_above(eq, bt, until=10.0) == 0.5  # backtracking's first step
    assert first_time_above(eq, bt, until=0.4) is None  # the shorter run ended before it
    assert first_time_above(bt, eq, until=10.0) == 3.0  # and the other way round from eqsat's result on


def test_a_curve_always_at_or_below() -> None:
    eq = [(0.0, 100.0), (0.2, 90.0), (1.0, 70.0)]
    bt = [(0.0, 100.0), (0.5, 95.0), (2.0, 70.0 * (1 + 1e-7))]  # equal within the tolerance at the end
    assert first_time_above(eq, bt, until=60.0) is None
    assert first_time_above(eq, eq, until=60.0) is None


def test_speedup_percent_is_tensats() -> None:
    assert speedup_percent(110.0, 100.0) == pytest.approx(10.0)
    assert speedup_percent(100.0, 100.0) == 0.0
    assert speedup_percent(100.0, None) is None and speedup_percent(100.0, math.nan) is None


# ---------------------------------------------------------------------------------------------------------
# ComparisonResult's JSON and table


def _result(methods: dict[str, MethodResult]) -> ComparisonResult:
    return ComparisonResult("m", 100.0, "analytic", 5.0, methods)


def test_the_json_and_the_table_carry_the_reach_times() -> None:
    res = _result({"eqsat": MethodResult("eqsat", 70.0, 4.5, 4.0, list(TRACE), 10, "ok"),
                   "backtracking": MethodResult("backtracking", 80.0, 5.0, 0.5, [(0.0, 100.0), (0.5, 80.0)], 3, "ok"),
                   "sampling": MethodResult("sampling", math.nan, 0.1, math.nan, [], 0, "error: boom")})
    d = json.loads(json.dumps(res.as_dict(), allow_nan=False))  # strict JSON
    eq, bt, sa = d["methods"]["eqsat"], d["methods"]["backtracking"], d["methods"]["sampling"]
    assert eq["seconds_to_backtracking_best"] == 2.5 and eq["seconds_to_eqsat_best"] == 4.0
    assert bt["seconds_to_backtracking_best"] == 0.5 and bt["seconds_to_eqsat_best"] is None
    assert sa["cost"] is None and sa["seconds_to_best"] is None and sa["seconds_to_eqsat_best"] is None
    assert eq["trace"] == [list(p) for p in TRACE]
    lines = res.table().splitlines()
    assert "to bt's best (s)" in lines[0] and "to eqsat's best (s)" in lines[0]
    assert lines[2].split()[:6] == ["eqsat", "70", "1.429x", "4.00", "2.50", "4.00"]
    assert lines[3].split()[:6] == ["backtracking", "80", "1.250x", "0.50", "0.50", "never"]


def test_without_backtracking_the_table_shows_a_dash() -> None:
    res = _result({"eqsat": MethodResult("eqsat", 70.0, 4.5, 4.0, list(TRACE), 10, "ok")})
    assert "seconds_to_backtracking_best" not in res.as_dict()["methods"]["eqsat"]
    assert res.table().splitlines()[2].split()[:6] == ["eqsat", "70", "1.429x", "4.00", "-", "4.00"]


# ---------------------------------------------------------------------------------------------------------
# the CLI and the benchmark's report


def test_cli_writes_the_new_fields_and_a_plot_and_the_benchmark_renders_them(tmp_path, capsys, bench) -> None:
    out, png = tmp_path / "two.json", tmp_path / "plots" / "two.png"
    assert main(["compare", "two_matmul_shared_input", "--budget", "1", "--methods", "eqsat,backtracking",
                 "--json", str(out), "--plot", str(png), "-q"]) == 0
    assert f"wrote {png}" in capsys.readouterr().out
    d = json.loads(out.read_text())
    for name, m in d["methods"].items():
        assert {"seconds_to_backtracking_best", "seconds_to_eqsat_best", "trace"} <= set(m), name
        assert m["trace"][0] == [0.0, pytest.approx(d["original_cost"], rel=1e-9)]
    bt = d["methods"]["backtracking"]
    assert bt["seconds_to_backtracking_best"] == bt["seconds_to_best"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    rendered = tmp_path / "rendered"
    assert bench.main(["--render", str(out), "--out", str(rendered)]) == 0
    md = (rendered / "compare.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| model | method"))
    assert "| to bt's best (s) | to eqsat's best (s) |" in header
    assert "| two_matmul_shared_input | backtracking |" in md
    assert "best-so-far at or below backtracking's" in md
    assert "Beside Tensat's" not in md  # no published figures for this model
    assert (rendered / "compare.png").stat().st_size > 0
    capsys.readouterr()


def test_cli_refuses_a_plot_format_before_running(tmp_path, capsys) -> None:
    assert main(["compare", "two_matmul_shared_input", "--budget", "30", "--plot", str(tmp_path / "p.gif"),
                 "-q"]) == 2
    captured = capsys.readouterr()
    assert ".png, .svg or .pdf" in captured.err and captured.out == ""  # nothing ran
    assert not (tmp_path / "p.gif").exists()


def _old_file(model: str = "taso_bert") -> dict:
    """One model as eqsat compare --json wrote it before the reach fields existed."""
    return {"model": model, "original_cost": 100.0, "cost_model": "analytic", "budget": 60.0, "methods": {
        "eqsat": {"cost": 90.0, "seconds": 3.5, "seconds_to_best": 3.0, "status": "ok", "work": 7,
                  "trace": [[0.0, 100.0], [3.0, 90.0]]},
        "backtracking": {"cost": 90.0, "seconds": 60.0, "seconds_to_best": 2.0, "status": "ok", "work": 9,
                         "trace": [[0.0, 100.0], [0.5, 95.0], [2.0, 90.0]]}}}


def test_the_benchmark_renders_old_files_with_the_figures_beside_tensats(tmp_path, capsys, bench) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"meta": "an old run", "command": "python benchmarks/compare.py",
                               "results": [_old_file()]}))
    out = tmp_path / "r"
    assert bench.main(["--render", str(old), "--out", str(out), "--tag", "old"]) == 0
    md = (out / "compare_old.md").read_text()
    rows = {line.split(" | ")[1]: line for line in md.splitlines() if line.startswith("| taso_bert | ")}
    assert rows["eqsat"].split(" | ")[6:8] == ["3.00", "3.00"]  # to bt's best, to eqsat's best
    assert rows["backtracking"].split(" | ")[6:8] == ["2.00", "2.00"]
    assert "above on taso_bert (first at 0.50 s: 100 against 95)" in md
    assert "geometric mean 0.67x (target: >= 20x); taso_bert 0.67x (2.000 s / 3.000 s)" in md
    assert "under 3x (the target on each): taso_bert" in md
    assert "First graph cheaper than the original, eqsat against backtracking" in md
    assert "taso_bert 3000 ms against 500 ms" in md
    # beside Tensat's: speedups (100/90 - 1) * 100 = 11.1 %, eqsat's times, then Tensat's and TASO's figures
    assert "| taso_bert (BERT) | 11.1 | 11.1 | 3.00 | 3.5 | 9.2 | 1.4 | 8.5 | 13.6 |" in md
    assert "https://mwillsey.com/papers/tensat" in md and "GPU with cuDNN" in md
    saved = json.loads((out / "compare_old.json").read_text())
    assert saved["results"][0]["methods"]["eqsat"]["seconds_to_backtracking_best"] == 3.0  # filled in
    csv_head = (out / "compare_old.csv").read_text().splitlines()[0]
    assert "seconds_to_backtracking_best,seconds_to_eqsat_best" in csv_head
    capsys.readouterr()


def test_the_geometric_mean_of_the_reach_ratios(bench) -> None:
    a, b = _old_file("a"), _old_file("b")
    a["methods"]["eqsat"]["trace"] = [[0.0, 100.0], [0.1, 90.0]]  # eqsat 0.1 s, backtracking 2 s: 20x
    a["methods"]["eqsat"]["seconds_to_best"] = 0.1
    b["methods"]["eqsat"]["cost"] = 95.0  # never reaches backtracking's 90: named, not in the mean
    c = _old_file("c")
    c["methods"]["backtracking"]["trace"] = [[0.0, 100.0], [0.1, 90.0]]  # both 0.1 s: 1x
    c["methods"]["backtracking"]["seconds_to_best"] = 0.1
    c["methods"]["eqsat"]["trace"] = [[0.0, 100.0], [0.1, 90.0]]
    c["methods"]["eqsat"]["seconds_to_best"] = 0.1
    text = "\n".join(bench.summary([with_reach_fields(r) for r in (a, b, c)]))
    assert f"geometric mean {math.sqrt(20.0):.2f}x" in text
    assert "eqsat never reached it on b (not in the mean)" in text
    assert "at every time up to the shorter run's end on 2 of 3 models" in text  # a and c; b stays above
    assert "under 3x (the target on each): c;" in text  # a: 20x


def test_output_file_names_carry_the_cost_model(bench) -> None:
    assert bench.output_stem("analytic") == "compare"
    assert bench.output_stem("gpu-sim") == "compare_gpu-sim"
    assert bench.output_stem("onnxruntime-cpu (cached)", "60s") == "compare_onnxruntime-cpu_60s"
    assert bench.output_stem("analytic", imports="as-written") == "compare_as-written"
    assert bench.output_stem("gpu-sim", "60s", "both-imports") == "compare_gpu-sim_both-imports_60s"
    assert [bench.imports_of(r) for r in ([{}], [{"as_written": True}], [{"as_written": True}, {}])] == [
        "", "as-written", "both-imports"]


def test_the_shared_plot_writes_svg_from_saved_results(tmp_path) -> None:
    from eqsat.search.comparison_plot import plot_comparison

    path = tmp_path / "p.svg"
    plot_comparison([_old_file("a"), _old_file("b")], path, title="two panels")
    text = path.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text


def test_the_benchmark_compares_autograph_under_the_mixed_cost(bench, tmp_path) -> None:
    out = tmp_path / "res"
    assert bench.main(["two_matmul_shared_input", "--methods", "eqsat,autograph", "--parallel", "2",
                       "--budget", "1", "--out", str(out)]) == 0
    (found,) = out.glob("compare_*mixed-2.json")
    data = json.loads(found.read_text())
    assert data["costs"] == "analytic mixed-2"
    methods = data["results"][0]["methods"]
    assert set(methods) == {"eqsat", "autograph"}
    assert methods["eqsat"]["cost"] <= methods["autograph"]["cost"] * (1 + 1e-9)


def test_the_benchmark_runs_both_imports_into_one_table(bench, tmp_path) -> None:
    """--both-imports: each model folded (as onnxruntime runs it) and as written (as TASO and Tensat import it)."""
    out = tmp_path / "res"
    assert bench.main(["small_cnn", "--methods", "eqsat,backtracking", "--both-imports", "--budget", "2",
                       "--out", str(out)]) == 0
    data = json.loads((out / "compare_both-imports.json").read_text())
    folded, written = data["results"]
    assert (folded.get("as_written"), written.get("as_written")) == (False, True)
    assert written["original_cost"] > folded["original_cost"]  # its batch norm is not folded before the search
    for r in (folded, written):
        assert all(m["status"] == "ok" for m in r["methods"].values())
    assert written["methods"]["backtracking"]["cost"] < written["original_cost"]  # the search folds it
    md = (out / "compare_both-imports.md").read_text()
    assert "| model | import | method |" in md and "imported folded and as written" in md
    assert "| small_cnn | folded | eqsat |" in md and "| small_cnn | as written | eqsat |" in md
    assert (out / "compare_both-imports.csv").read_text().splitlines()[0].startswith("model,import,method,")
