"""The simulated GPU cost model (``gpu-sim``): a formula over a V100's published figures, named as a simulation,
reachable by name and from the CLI; and the analytic model it shares its accounting with, unchanged."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import eqsat
from eqsat import models, ops
from eqsat.cli.app import main
from eqsat.costs import COST_MODEL_NAMES, AnalyticCostModel, CachedCostModel, GpuSimCostModel, get_cost_model
from eqsat.ops import CostKey


def _key(op: str, params: dict, ins: list[tuple[int, ...]], out: tuple[int, ...]) -> CostKey:
    spec = ops.get(op)
    return spec.cost_key(spec.normalize(params), ins, out)


def _mm(m: int, k: int, n: int) -> CostKey:
    return _key("matmul", {}, [(m, k), (k, n)], (m, n))


def _relu(n: int) -> CostKey:
    return _key("relu", {}, [(1, n)], (1, n))


def _conv(act: int = 0) -> CostKey:
    return _key("conv2d", {"pads": (1, 1, 1, 1), "act": act}, [(1, 16, 32, 32), (16, 16, 3, 3), (16,)],
                (1, 16, 32, 32))


def test_named_a_simulation_computed_not_measured_and_not_cached() -> None:
    assert "gpu-sim" in COST_MODEL_NAMES
    m = get_cost_model("gpu-sim")
    assert type(m) is GpuSimCostModel and not isinstance(m, CachedCostModel)
    assert "simulated" in m.name and "V100" in m.name
    assert (m.is_measured, m.times_end_to_end) == (False, False)
    assert m.in_context(10**9) is m


def test_compute_ops_cost_more_than_nothing_and_views_nothing() -> None:
    m = GpuSimCostModel()
    for key in (_mm(64, 256, 256), _conv(), _conv(1), _relu(1024),
                _key("softmax", {"axis": -1}, [(64, 1024)], (64, 1024))):
        assert m.cost(key) == m.cost(key) > m.launch_overhead_ms
    assert m.cost(_key("reshape", {"shape": (256, 64)}, [(64, 256)], (256, 64))) == 0


def test_cost_grows_with_size() -> None:
    m = GpuSimCostModel()
    for family in ([_mm(n, n, n) for n in (16, 64, 256, 1024, 4096)], [_relu(4**e) for e in range(4, 14)]):
        costs = [m.cost(k) for k in family]
        assert costs == sorted(costs) and costs[0] < costs[-1]


def test_large_gemm_reaches_its_efficiency_and_small_kernels_are_launch_bound() -> None:
    m = GpuSimCostModel()
    n = 4096
    assert m.cost(_mm(n, n, n)) == pytest.approx(2 * n**3 / (15.7e12 * 0.9) * 1e3 + 0.005)
    assert m.cost(_relu(256)) == pytest.approx(0.005, rel=0.01)  # a tiny kernel: its launch
    # a memory-bound kernel streams at 0.8 of 900 GB/s
    assert m.cost(_relu(2**24)) == pytest.approx(2 * 4 * 2**24 / (0.8 * 900e9) * 1e3 + 0.005)


def test_launch_overhead_makes_one_matmul_cheaper_than_two_halves() -> None:
    m = GpuSimCostModel()
    assert m.cost(_mm(64, 256, 512)) < 2 * m.cost(_mm(64, 256, 256))
    assert m.cost(_mm(64, 1024, 2048)) < 2 * m.cost(_mm(64, 1024, 1024))


def test_analytic_model_is_unchanged() -> None:
    """The analytic model's numbers, pinned from before it shared its accounting with gpu-sim."""
    m = AnalyticCostModel()
    assert m.cost(_mm(64, 256, 512)) == 0.34054432
    assert m.cost(_conv(1)) == 0.11747904
    assert m.cost(_key("lrn", {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, [(1, 96, 54, 54)],
                       (1, 96, 54, 54))) == 0.2289488
    assert m.cost(_key("relu", {}, [(1, 64, 56, 56)], (1, 64, 56, 56))) == 0.1655632
    assert m.cost(_key("softmax", {"axis": -1}, [(64, 1024)], (64, 1024))) == 0.057428799999999995
    assert m.name == "analytic"


def test_optimize_with_gpu_sim_names_the_simulation() -> None:
    res = eqsat.optimize(models.builtin_models()["two_matmul_shared_input"](), cost_model="gpu-sim",
                         time_limit=30, check=False)
    assert "simulated" in res.cost_model
    assert "simulated" in res.summary()
    assert 0 < res.cost_after <= res.cost_before


def test_cli_optimize_and_demo_accept_gpu_sim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(models.builtin_models()["two_matmul_shared_input"](), str(src))
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--costs", "gpu-sim", "-q",
                 "--time-limit", "20"]) == 0
    assert "simulated V100" in capsys.readouterr().out
    assert main(["demo", "--model", "two_matmul_shared_input", "--costs", "gpu-sim", "-q", "--time-limit", "20"]) == 0
    assert "simulated V100" in capsys.readouterr().out


def test_cli_compare_accepts_gpu_sim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c.json"
    assert main(["compare", "two_matmul_shared_input", "--methods", "eqsat,backtracking", "--budget", "1",
                 "--costs", "gpu-sim", "--json", str(out), "-q"]) == 0
    assert "simulated" in out.read_text()


def test_cli_refuses_threads_with_gpu_sim(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--costs", "gpu-sim", "--threads", "1", "-q"]) == 2
    assert "measured CPU costs only" in capsys.readouterr().err
