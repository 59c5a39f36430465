"""Sweeps of the research comparison (eqsat.search.sweep, benchmarks/compare.py --repetitions/--workers/--ray):
units written as they finish, a run over the same folder resumed, repetitions folded into a median and a range."""

from __future__ import annotations

import json

import pytest

from eqsat.search.sweep import SweepUnit, aggregate, grid, run_sweep


@pytest.fixture(scope="module")
def bench():
    """benchmarks/compare.py as a module."""
    from _benchmarks import load_benchmark

    return load_benchmark("compare")


def _fake(unit: SweepUnit) -> dict:
    # a comparison's JSON whose costs depend on the repetition: eqsat 10, 11, 12, ...; backtracking never reaches
    # eqsat's cost on repetition 1
    eq, bt = 10.0 + unit.repetition, 12.0
    return {"model": unit.model, "budget": unit.budget, "costs": unit.costs, "repetition": unit.repetition,
            "original_cost": 20.0, "as_written": unit.as_written, "cost_model": unit.costs,
            "methods": {"eqsat": {"cost": eq, "seconds_to_best": 0.1 * (unit.repetition + 1),
                                  "seconds_to_backtracking_best": 0.05},
                        "backtracking": {"cost": bt, "seconds_to_best": 1.0,
                                         "seconds_to_backtracking_best": 1.0,
                                         "seconds_to_eqsat_best": None if unit.repetition == 1 else 2.0}}}


def test_the_grid_has_every_unit_once_with_a_key_of_its_settings() -> None:
    units = grid(["a", "b"], [1, 5], ["analytic", "gpu-sim"], 3, ["eqsat", "backtracking"])
    assert len(units) == 2 * 2 * 2 * 3 == len({u.key() for u in units})
    assert [u.repetition for u in units[:3]] == [0, 1, 2]  # repetitions innermost
    assert units[0].key() == SweepUnit("a", 1.0, "analytic", 0, ("eqsat", "backtracking")).key()
    assert units[0].key() != SweepUnit("a", 1.0, "analytic", 0, ("eqsat",)).key()


def test_a_sweep_writes_each_unit_and_a_second_run_resumes(tmp_path) -> None:
    units = grid(["m"], [1], ["analytic"], 3, ["eqsat", "backtracking"])
    lines: list[str] = []
    first = run_sweep(units, tmp_path, progress=lines.append, runner=_fake)
    assert [r["repetition"] for r in first] == [0, 1, 2] and len(list(tmp_path.glob("*.json"))) == 3
    assert sum("done" in line for line in lines) == 3

    def refuse(unit: SweepUnit) -> dict:
        raise AssertionError(f"{unit} was run again")

    lines.clear()
    assert run_sweep(units, tmp_path, progress=lines.append, runner=refuse) == first
    assert lines == [f"resumed: 3 of 3 units already in {tmp_path}"]
    # a damaged file (a run killed before atomic writes) is run again, the others not
    (tmp_path / f"{units[1].key()}.json").write_text('{"model": "m", "meth')
    ran: list[int] = []

    def again(unit: SweepUnit) -> dict:
        ran.append(unit.repetition)
        return _fake(unit)

    assert run_sweep(units, tmp_path, runner=again) == first and ran == [1]


def test_repetitions_fold_into_the_median_run_and_each_figures_range() -> None:
    results = [_fake(u) for u in grid(["m"], [1], ["analytic"], 3, ["eqsat", "backtracking"])]
    (agg,) = aggregate(results)
    assert agg["repetitions"] == 3 and agg["repetition"] == 1  # eqsat's costs 10, 11, 12: the median is 11
    eq, bt = agg["methods"]["eqsat"], agg["methods"]["backtracking"]
    assert eq["spread"]["cost"] == [10.0, 11.0, 12.0]
    assert eq["spread"]["seconds_to_best"] == pytest.approx([0.1, 0.2, 0.3])
    # never reached (repetition 1) counts as infinite: the median is 2.0 and the maximum has no value
    assert bt["spread"]["seconds_to_eqsat_best"] == [2.0, 2.0, None]
    json.dumps(agg, allow_nan=False)  # strict JSON, as the benchmark writes it
    # two settings stay apart
    other = [_fake(u) for u in grid(["m"], [5], ["analytic"], 2, ["eqsat"])]
    assert [a["budget"] for a in aggregate(results + other)] == [1.0, 5.0]


@pytest.mark.slow  # two units of two methods with a 1 s budget each, in a pool of two
def test_the_benchmark_runs_repetitions_in_a_pool_and_resumes(bench, tmp_path, capsys) -> None:
    args = ["two_matmul_shared_input", "--methods", "eqsat,backtracking", "--budget", "1", "--repetitions", "2",
            "--workers", "2", "--out", str(tmp_path), "--units", str(tmp_path / "units")]
    assert bench.main(args) == 0
    md = (tmp_path / "compare.md").read_text()
    assert "cost over 2 runs: median (range)" in md and "2 run(s) of each, on pool, 2 workers" in md
    data = json.loads((tmp_path / "compare.json").read_text())
    assert {r["repetitions"] for r in data["results"]} == {2}
    assert all(m["status"] == "ok" for r in data["results"] for m in r["methods"].values())
    capsys.readouterr()
    assert bench.main(args) == 0
    assert "resumed: 2 of 2 units" in capsys.readouterr().err


@pytest.mark.slow  # two comparisons of two methods with a 1 s budget each
def test_eqsat_compare_over_two_models_is_a_sweep_with_a_table_each(tmp_path, capsys) -> None:
    from eqsat.cli.app import main

    out = tmp_path / "sweep.json"
    assert main(["compare", "two_matmul_shared_input", "small_cnn", "--methods", "eqsat,backtracking", "--budget", "1",
                 "--json", str(out), "--units", str(tmp_path / "units"), "-q"]) == 0
    printed = capsys.readouterr().out
    assert "two_matmul_shared_input:" in printed and "small_cnn:" in printed and printed.count("backtracking") >= 2
    data = json.loads(out.read_text())
    assert [r["model"] for r in data["results"]] == ["two_matmul_shared_input", "small_cnn"]
    assert len(list((tmp_path / "units").glob("*.json"))) == 2
    assert main(["compare", "small_cnn", "--plot", str(tmp_path / "p.png"), "--repetitions", "2", "-q"]) == 2


@pytest.mark.slow  # a local Ray started, two comparisons of 1 s
@pytest.mark.xdist_group("ray")
@pytest.mark.skipif(not __import__("eqsat.rules.distributed", fromlist=["x"]).ray_available(),
                    reason="Ray is not installed (pip install 'eqsat[dist]')")
def test_a_sweep_runs_as_ray_tasks_with_the_loader_bound(tmp_path) -> None:
    # the runner is a functools.partial (run_unit with its model loader), which Ray does not take as a task
    import functools

    import ray

    from eqsat.models.registry import builtin_model
    from eqsat.rules.distributed import Executor
    from eqsat.search.sweep import run_unit

    if ray.is_initialized():
        ray.shutdown()
    units = grid(["two_matmul_shared_input"], [1], ["analytic"], 2, ["eqsat", "backtracking"])
    try:
        results = run_sweep(units, tmp_path, Executor(workers=2, backend="ray"),
                            runner=functools.partial(run_unit, load=builtin_model))
    finally:
        ray.shutdown()
    assert [r["repetition"] for r in results] == [0, 1]
    assert all(m["status"] == "ok" for r in results for m in r["methods"].values())
