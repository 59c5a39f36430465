"""eqsat against backtracking and sampling search: eqsat.compare, eqsat.search.comparison and 'eqsat compare'."""

from __future__ import annotations

import json
import math

import onnx
import pytest

from eqsat import models, onnx_io
from eqsat.cli.app import main
from eqsat.costs import get_cost_model, graph_cost, graph_parallel_cost
from eqsat.errors import UsageError
from eqsat.extract import ParallelCost
from eqsat.search.comparison import DEFAULT_METHODS, METHODS, compare, model_cost

#: the module fixture runs the comparison for every test here: one worker runs them all
pytestmark = pytest.mark.xdist_group("compare")

REL = 1e-9


@pytest.fixture(scope="module")
def cost_model():
    return get_cost_model("analytic")


@pytest.fixture(scope="module")
def small_model() -> onnx.ModelProto:
    return models.two_matmul_shared_input(batch=4, hidden=8)


@pytest.fixture(scope="module")
def result(small_model, cost_model):
    return compare(small_model, DEFAULT_METHODS, budget=2.0, cost_model=cost_model, name="tiny")


def test_every_method_runs_and_is_judged_by_the_same_function(result, small_model, cost_model) -> None:
    assert result.model == "tiny"
    assert set(result.methods) == set(DEFAULT_METHODS)
    assert result.original_cost == pytest.approx(model_cost(small_model, cost_model), rel=REL)
    assert result.original_cost == pytest.approx(graph_cost(onnx_io.load_model(small_model), cost_model), rel=REL)
    for name, r in result.methods.items():
        assert r.status == "ok", (name, r.status)
        assert r.model is not None and r.numeric is not None and r.numeric.ok
        assert r.cost <= result.original_cost * (1 + REL), name
        assert r.cost == pytest.approx(model_cost(r.model, cost_model), rel=REL), name
        assert [o.name for o in r.model.graph.output] == [o.name for o in small_model.graph.output]
        assert result.speedup(name) == pytest.approx(result.original_cost / r.cost, rel=REL)
        assert 0.0 <= r.seconds_to_best <= r.seconds
        assert r.trace and r.trace[0][0] == 0.0
        assert r.trace[0][1] == pytest.approx(result.original_cost, rel=REL)
        assert r.work >= 1


def test_the_searches_find_the_fusion(result) -> None:
    for name in ("backtracking", "sampling"):
        assert result.methods[name].cost < result.original_cost, name


def test_every_methods_clock_starts_at_the_call_with_the_model(result) -> None:
    """The same time axis for all: eqsat's trace counts its import (``optimize``'s), and a search imports the model
    too, inside its run, so its trace's points come after that import and its time includes it."""
    for name in ("backtracking", "sampling"):
        r = result.methods[name]
        imported = r.details["import_seconds"]
        assert 0 < imported <= r.details["search_seconds"] + imported <= r.seconds, name
        assert all(t >= imported for t, _ in r.trace[1:]), name
    assert "import_seconds" not in result.methods["eqsat"].details  # in its trace already: optimize's clock


def test_the_table_and_the_dict_name_every_method(result) -> None:
    table = result.table()
    lines = table.splitlines()
    assert len(lines) == 2 + len(DEFAULT_METHODS)
    assert lines[1].startswith("original")
    for name in DEFAULT_METHODS:
        assert any(line.startswith(name) for line in lines), name
    d = result.as_dict()
    json.dumps(d)  # serializable
    assert d["model"] == "tiny" and d["original_cost"] == result.original_cost and d["budget"] == 2.0
    assert set(d["methods"]) == set(DEFAULT_METHODS)
    for name, m in d["methods"].items():
        assert m["cost"] == result.methods[name].cost
        assert {"cost", "seconds", "seconds_to_best", "status", "work", "trace"} <= set(m)


def test_a_subset_of_methods_without_the_check(small_model, cost_model) -> None:
    res = compare(small_model, ["backtracking"], budget=1.0, cost_model=cost_model, check=False)
    assert list(res.methods) == ["backtracking"]
    r = res.methods["backtracking"]
    assert r.numeric is None and r.status == "ok"
    assert r.cost == pytest.approx(model_cost(r.model, cost_model), rel=REL)
    assert math.isfinite(res.speedup("backtracking"))


def test_under_the_mixed_cost_every_method_autograph_included_is_judged_by_it(small_model, cost_model) -> None:
    # eqsat and AutoGraph end when done (a saturated e-graph, an exhausted search), so their budget only has to be
    # generous enough for a loaded machine (1.5 s was not: saturation's 40 % ran out before the merge); the two
    # searches that always use all of theirs get a short one
    done_early = compare(small_model, ["eqsat", "autograph"], budget=8.0, cost_model=cost_model, parallel=2)
    searches = compare(small_model, ["backtracking", "sampling"], budget=1.0, cost_model=cost_model, parallel=2)
    mixed = ParallelCost(branches=2)
    graph = onnx_io.load_model(small_model)
    for res in (done_early, searches):
        assert res.original_cost == pytest.approx(graph_parallel_cost(graph, cost_model, mixed).mixed, rel=REL)
        assert "critical path" in res.cost_model
        for name, r in res.methods.items():
            assert r.status == "ok", (name, r.status)
            assert r.cost == pytest.approx(model_cost(r.model, cost_model, mixed), rel=REL), name
    assert set(done_early.methods) | set(searches.methods) == set(METHODS)
    res = done_early
    # eqsat's exact extraction under the mixed cost is never worse than AutoGraph's search
    assert res.methods["eqsat"].cost <= res.methods["autograph"].cost * (1 + REL)
    with pytest.raises(UsageError, match="parallel"):
        compare(small_model, ["autograph"], budget=1.0, cost_model=cost_model)


@pytest.mark.parametrize("methods", [["eqsat", "bogus"], ["annealing"], []])
def test_unknown_methods_are_a_usage_error(small_model, cost_model, methods) -> None:
    with pytest.raises(UsageError):
        compare(small_model, methods, budget=1.0, cost_model=cost_model)


# ---------------------------------------------------------------------------------------------------------
# CLI


def test_cli_compares_a_built_in_model_and_writes_json(tmp_path, capsys) -> None:
    out = tmp_path / "c.json"
    assert main(["compare", "two_matmul_shared_input", "--budget", "1", "--json", str(out), "-q"]) == 0
    stdout = capsys.readouterr().out
    for name in DEFAULT_METHODS:
        assert name in stdout
    d = json.loads(out.read_text())
    assert d["model"] == "two_matmul_shared_input"
    assert d["original_cost"] > 0
    assert set(d["methods"]) == {"eqsat", "backtracking", "sampling"}
    for name, m in d["methods"].items():
        assert {"cost", "seconds", "seconds_to_best", "status"} <= set(m), name
        assert m["status"] == "ok", name
        assert m["cost"] <= d["original_cost"] * (1 + REL), name
        assert 0.0 <= m["seconds_to_best"] <= m["seconds"], name


def test_the_benchmark_renders_the_clis_json(tmp_path, capsys) -> None:
    """benchmarks/compare.py --render reads the files eqsat compare --json writes (it read only its own)."""
    from _benchmarks import load_benchmark

    bench = load_benchmark("compare")
    cli_json = tmp_path / "two.json"
    assert main(["compare", "two_matmul_shared_input", "--methods", "eqsat,backtracking", "--budget", "1", "--json",
                 str(cli_json), "-q"]) == 0
    out = tmp_path / "rendered"
    assert bench.main(["--render", str(cli_json), "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    assert "| two_matmul_shared_input | eqsat |" in md and "| two_matmul_shared_input | backtracking |" in md
    assert "from eqsat compare --json (two.json)" in md
    assert (out / "compare.png").stat().st_size > 0
    assert json.loads((out / "compare.json").read_text())["results"][0]["model"] == "two_matmul_shared_input"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"something": 1}))
    with pytest.raises(SystemExit, match="neither a compare.json nor"):
        bench.main(["--render", str(bad), "--out", str(out)])
    capsys.readouterr()


def test_cli_rejects_an_unknown_method(capsys) -> None:
    assert main(["compare", "two_matmul_shared_input", "--methods", "eqsat,bogus", "--budget", "1", "-q"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err and len(err.splitlines()) == 1, captured.err
    assert "bogus" in err
    assert "Traceback" not in captured.err
    assert captured.out == ""  # nothing ran


def test_cli_compares_a_model_file(tmp_path, capsys) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(models.two_matmul_shared_input(batch=4, hidden=8), str(path))
    out = tmp_path / "c.json"
    code = main(["compare", str(path), "--methods", "backtracking,sampling", "--budget", "1", "--json", str(out),
                 "-q"])
    assert code == 0, capsys.readouterr().err
    d = json.loads(out.read_text())
    assert set(d["methods"]) == {"backtracking", "sampling"}
    assert d["original_cost"] == pytest.approx(model_cost(onnx.load(str(path)), get_cost_model("analytic")),
                                               rel=REL)
    for m in d["methods"].values():
        assert m["status"] == "ok"
        assert m["cost"] < d["original_cost"]  # both searches find the shared-input fusion here


def test_the_package_level_compare_is_the_comparison_api(small_model, cost_model) -> None:
    import eqsat

    res = eqsat.compare(small_model, ["backtracking"], budget=0.5, cost_model=cost_model, check=False)
    assert list(res.methods) == ["backtracking"] and callable(eqsat.compare)  # not shadowed by a submodule


def test_a_bad_alpha_is_refused_before_any_method_runs(small_model, cost_model) -> None:
    import time

    from eqsat.engine.errors import LimitError

    t = time.perf_counter()
    with pytest.raises(LimitError, match="alpha"):
        compare(small_model, ["eqsat", "backtracking"], budget=30.0, cost_model=cost_model, alpha=0.5)
    assert time.perf_counter() - t < 5.0  # eqsat did not spend its budget first


def test_a_failed_method_has_no_speedup(small_model, cost_model, monkeypatch) -> None:
    import math

    from eqsat.search import comparison
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setitem(comparison._RUNNERS, "sampling", boom)
    res = compare(small_model, ["sampling"], budget=1.0, cost_model=cost_model)
    assert res.methods["sampling"].status.startswith("error: RuntimeError: boom")
    assert math.isnan(res.speedup("sampling")) and " inf" not in res.table()
    assert res.as_dict()["methods"]["sampling"]["cost"] is None
