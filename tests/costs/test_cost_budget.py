"""Measured costs within the time limit: which configurations are timed, in what order, when the timing stops,
how the rest are estimated, and that a run reports the counts and stays within its limit."""

from __future__ import annotations

import math

import pytest

from eqsat import models, ops
from eqsat.costs import (
    AnalyticCostModel,
    CachedCostModel,
    CostCache,
    PricedCostModel,
    graph_cost,
    graph_cost_keys,
    price_within,
)
from eqsat.costs.budget import estimate_scales
from eqsat.ops import CostKey
from eqsat.pipeline import optimize
from eqsat.pipeline import options as pipeline_options


def _mm(m: int, k: int = 256, n: int = 256) -> CostKey:
    return ops.get("matmul").cost_key({}, [(m, k), (k, n)], (m, n))


class FakeMeasured(AnalyticCostModel):
    """A 'measured' model: three times the analytic cost, each timing advancing a fake clock by one second."""

    name = "fake-measured"
    is_measured = True

    def __init__(self, clock: list[float] | None = None, factor: float = 3.0) -> None:
        super().__init__()
        self.clock = clock if clock is not None else [0.0]
        self.factor = factor
        self.timed: list[CostKey] = []

    def cost(self, key: CostKey) -> float:
        self.timed.append(key)
        self.clock[0] += 1.0
        return self.factor * super().cost(key)


def test_timing_stops_at_the_deadline_and_the_rest_is_estimated_to_scale() -> None:
    clock = [0.0]
    model = FakeMeasured(clock)
    keys = [_mm(m) for m in (8, 16, 32, 64, 128, 256, 512, 1024)]
    first = [keys[0]]  # the input graph's configuration: timed first although it is the cheapest
    p = price_within(model, keys, deadline=4.5, first=first, clock=lambda: clock[0])
    # four timings fit before 4.5 s (each takes 1 s, and a fifth would end past the deadline)
    assert model.timed[0] == keys[0] and len(p.timed) == 4 == len(model.timed)
    # then the most expensive by the analytic estimate
    assert model.timed[1:] == [keys[7], keys[6], keys[5]]
    assert p.estimated == frozenset(keys[1:5]) and p.measured == 4 and p.cached == 0
    analytic = AnalyticCostModel()
    # every estimate is the analytic cost times the factor the measured ones show (3x here)
    for k in p.estimated:
        assert p.costs[k] == pytest.approx(3.0 * analytic.cost(k))
    assert p.scales["matmul"] == pytest.approx(3.0)


def test_without_a_deadline_everything_is_timed_and_a_computed_model_is_never_estimated() -> None:
    keys = [_mm(m) for m in (8, 16, 32)]
    p = price_within(FakeMeasured(), keys)
    assert p.estimated == frozenset() and p.measured == 3
    q = price_within(AnalyticCostModel(), keys, deadline=-1.0)
    assert q.estimated == frozenset() and q.costs == {k: AnalyticCostModel().cost(k) for k in keys}


def test_cached_configurations_cost_no_time_and_the_next_run_times_the_rest(tmp_path) -> None:
    keys = [_mm(m) for m in (8, 16, 32, 64)]
    clock = [0.0]
    cached = CachedCostModel(FakeMeasured(clock), CostCache(tmp_path))
    first = price_within(cached, keys, deadline=2.5, clock=lambda: clock[0])
    assert len(first.timed) == 2 and len(first.estimated) == 2
    # a second run with the same budget: the two from the cache are free, so the other two are timed now
    clock[0] = 0.0
    second = price_within(cached, keys, deadline=2.5, clock=lambda: clock[0])
    assert second.cached == 2 and second.timed == first.estimated and second.estimated == frozenset()
    assert {k: second.costs[k] for k in first.timed} == {k: first.costs[k] for k in first.timed}


def test_scales_are_per_operator_with_two_samples_else_overall() -> None:
    a, b, c = _mm(8), _mm(16), ops.get("relu").cost_key({}, [(8, 256)], (8, 256))
    analytic = {a: 1.0, b: 2.0, c: 1.0}
    scales = estimate_scales({a: 2.0, b: 8.0, c: 1.0}, analytic)
    assert scales["matmul"] == pytest.approx(math.sqrt(2.0 * 4.0))  # geometric mean of 2x and 4x
    assert "relu" not in scales and scales["*"] == pytest.approx((2.0 * 4.0 * 1.0) ** (1 / 3))
    assert estimate_scales({}, analytic) == {"*": 1.0}


def test_priced_model_estimates_what_it_was_not_given_and_never_measures() -> None:
    model = FakeMeasured()
    keys = [_mm(8), _mm(16)]
    priced = PricedCostModel(price_within(model, keys), model)
    before = len(model.timed)
    new = _mm(32)
    assert priced.cost(new) == pytest.approx(3.0 * AnalyticCostModel().cost(new))
    assert len(model.timed) == before and priced.extra == 1
    assert priced.is_measured and priced.name == model.name


def test_a_run_whose_timing_time_is_spent_estimates_everything_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # no time for timing at all: every configuration is estimated (at the analytic scale), the run finishes
    monkeypatch.setattr(pipeline_options, "MEASURED_SHARES",
                        pipeline_options.TimeShares(saturation=0.25, costs=0.0, extraction=0.5, after=0.25))
    model = FakeMeasured()
    res = optimize(models.two_matmul_shared_input(), cost_model=model, verify_latency=False, time_limit=20)
    c = res.cost_counts
    assert c is not None and c.measured == 0 and c.estimated == c.configurations > 0 and model.timed == []
    assert f"0 measured (0 from the cache), {c.estimated} estimated" in res.summary()
    assert res.to_dict()["costs"]["estimated"] == c.estimated


def test_a_measured_run_times_the_input_graph_first_and_reports_the_counts() -> None:
    model = FakeMeasured()
    res = optimize(models.two_matmul_shared_input(), cost_model=model, verify_latency=False, time_limit=20)
    c = res.cost_counts
    assert c is not None and c.measured == c.configurations and c.estimated == 0
    assert len(model.timed) == c.configurations  # each configuration timed once
    # the input graph's configurations first: the original's cost is what every gain is judged against
    first = {k for ks in graph_cost_keys(res.original) for k in ks}
    assert set(model.timed[:len(first)]) == first
    assert res.cost_before == pytest.approx(3.0 * graph_cost(res.original, AnalyticCostModel()))


def test_an_opaque_node_costs_the_same_in_the_egraph_and_in_the_graph_written() -> None:
    import numpy as np

    from eqsat import engine
    from eqsat.onnx_io import load_model
    from eqsat.pipeline.anytime import node_cost_keys
    from eqsat.rules import starter_rules
    from eqsat.testing.onnx_builders import INT64, make_model, node

    rng = np.random.default_rng(1)
    table, w = rng.standard_normal((1000, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    m = make_model([node("Gather", ["table", "ids"], ["e"], axis=0), node("MatMul", ["e", "w"], ["y"])],
                   [("ids", [1, 8], INT64)], [("y", [1, 8, 64])], {"table": table, "w": w}, ir_version=8)
    graph = load_model(m)
    sat = engine.saturate(graph, starter_rules(), engine.Limits(iter_limit=2), in_process=True)
    keys = node_cost_keys(sat.egraph, graph)
    (gather,) = [n for n in graph.nodes if n.op == "opaque"]
    graph_keys = graph_cost_keys(graph)[graph.nodes.index(gather)]
    opaque = [keys[n.id] for n in sat.egraph.nodes if n.op == "opaque"]
    # the e-graph's opaque node is priced as what the graph written runs (a Gather of ids), not as a placeholder
    assert opaque and all(k == graph_keys for k in opaque)
    assert dict(graph_keys[0].params)["op_type"] == "Gather"
    # so the extraction's objective is the written graph's cost: no "graph read-back" gap in the report
    res = optimize(m, cost_model=FakeMeasured(), verify_latency=False, time_limit=20, rules=starter_rules())
    assert not any("read-back" in n for n in res.cost_notes), res.cost_notes


def test_a_warm_cache_gives_saturation_the_time_measuring_no_longer_needs(tmp_path) -> None:
    from eqsat.pipeline import stages
    from eqsat.pipeline.options import OptimizeOptions, time_shares
    from eqsat.pipeline.records import Run

    cached = CachedCostModel(FakeMeasured(), CostCache(tmp_path))
    model = models.two_matmul_shared_input()

    def shares_at_load():
        return stages.load(Run.begin(model, OptimizeOptions(cost_model=cached, time_limit=20), optimize)).shares

    assert shares_at_load() == time_shares(True, warm=False) and time_shares(True).saturation == 0.25
    optimize(model, cost_model=cached, verify_latency=False, time_limit=20)  # fills the cache
    assert shares_at_load() == time_shares(True, warm=True) and time_shares(True, warm=True).saturation == 0.4


def test_an_untimed_runtime_kernel_is_estimated_as_its_parts_as_priced() -> None:
    """Scaled as one operator beside timed parts, onnxruntime's kernel could look cheaper than them by the
    estimate's error alone; it is its parts as priced (timed here) and a hair more."""
    from eqsat.costs.analytic import KERNEL_MARGIN_MS

    clock = [0.0]
    model = FakeMeasured(clock)
    spec = ops.get("ort_skip_layernorm")
    kernel = spec.cost_key({"epsilon": 1e-5}, [(4, 64, 256)] * 2 + [(256,)] * 2, (4, 64, 256), weights=(2, 3))
    parts = ops.runs_as_keys(kernel)
    first = list(parts)  # the parts are timed; the deadline leaves the kernel estimated
    p = price_within(model, [*parts, kernel, _mm(8)], deadline=2.5, first=first, clock=lambda: clock[0])
    assert set(p.timed) == set(parts) and kernel in p.estimated
    assert p.costs[kernel] == pytest.approx(sum(p.costs[k] for k in parts) + KERNEL_MARGIN_MS)
    assert PricedCostModel(p, model).cost(kernel) == pytest.approx(p.costs[kernel])
