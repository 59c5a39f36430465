"""Pricing a run's operator configurations within a deadline.

A measured cost model spends a fraction of a second to seconds on each configuration it has not timed before,
and a large model has hundreds: timing them all would overrun any time limit. :func:`price_within` takes the
cached ones as they are, times the others in order of importance (the input graph's own configurations first,
since the original's cost is what every gain is judged against, then by their analytic cost, largest first)
until the deadline, and estimates the rest with the analytic model scaled to the timed ones
(:func:`estimate_scales`). The :class:`Pricing` says which is which, and :class:`PricedCostModel` is the one
table every later figure of the run is read from, so no configuration gets two prices in one report.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from eqsat.costs.analytic import AnalyticCostModel, kernel_as_parts
from eqsat.costs.base import CostModel, Progress
from eqsat.ops import CostKey

__all__ = ["Pricing", "PricedCostModel", "estimate_scales", "price_within"]


@dataclass(frozen=True)
class Pricing:
    """What :func:`price_within` found.

    Attributes:
        costs: every configuration's cost (ms).
        estimated: the configurations priced by the scaled analytic estimate (none under a computed model).
        timed: the configurations measured by this call (the others were in the cache, or estimated).
        scales: operator -> the factor its analytic estimates were multiplied by (``"*"``: operators with
            fewer than two timed configurations use the factor of all of them).
        seconds: how long the pricing took.
    """

    costs: Mapping[CostKey, float]
    estimated: frozenset[CostKey]
    timed: frozenset[CostKey]
    scales: Mapping[str, float]
    seconds: float

    @property
    def measured(self) -> int:
        """Configurations priced by the cost model itself (timed now, read from the cache, or computed)."""
        return len(self.costs) - len(self.estimated)

    @property
    def cached(self) -> int:
        """Configurations read from the cache."""
        return self.measured - len(self.timed)


def estimate_scales(measured: Mapping[CostKey, float], analytic: Mapping[CostKey, float]) -> dict[str, float]:
    """Per operator, the geometric mean of measured / analytic cost over its measured configurations (a
    typical ratio: one badly estimated configuration does not swing it as it would a ratio of sums); ``"*"``
    is the same over all of them, for operators with fewer than two (1.0 when nothing was measured)."""
    logs: dict[str, list[float]] = {}
    for k, ms in measured.items():
        a = analytic.get(k, 0.0)
        if ms > 0 and a > 0:
            r = math.log(ms / a)
            logs.setdefault(k.op, []).append(r)
            logs.setdefault("*", []).append(r)
    return {op: math.exp(sum(v) / len(v)) for op, v in logs.items() if op == "*" or len(v) >= 2} | (
        {} if "*" in logs else {"*": 1.0})


class PricedCostModel(CostModel):
    """A cost model that answers from one :class:`Pricing`: a configuration it does not hold (the read-back of an
    extraction can write one the e-graph did not, e.g. an n-ary concatenation) is estimated like the pricing's
    estimated ones, never measured: the run's measuring time is over. It has the wrapped model's name,
    identity, threads and flags; :attr:`extra` counts the configurations it had to estimate afterwards."""

    def __init__(self, pricing: Pricing, inner: CostModel) -> None:
        self.pricing = pricing
        self.inner = inner
        self.name = inner.name
        self.is_measured = inner.is_measured
        self.times_end_to_end = inner.times_end_to_end
        self.threads = inner.threads
        self._analytic = AnalyticCostModel()
        self._extra: dict[CostKey, float] = {}

    @property
    def extra(self) -> int:
        """Configurations estimated after the pricing (see the class docstring)."""
        return len(self._extra)

    def cost(self, key: CostKey) -> float:
        """The priced cost, or the scaled analytic estimate."""
        if key in self.pricing.costs:
            return self.pricing.costs[key]
        if not self.is_measured:
            return float(self.inner.cost(key))
        if key not in self._extra:
            self._extra[key] = _estimate(key, self.pricing.costs, self.pricing.scales, self._analytic.cost)
        return self._extra[key]

    def device_identity(self) -> dict[str, str]:
        """The wrapped model's identity."""
        return self.inner.device_identity()


def price_within(cost_model: CostModel, keys: Iterable[CostKey], *, deadline: float | None = None,
                 first: Collection[CostKey] = (), progress: Progress | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> Pricing:
    """Price ``keys`` under ``cost_model``; a measured model times the configurations it has not cached until
    ``deadline`` (a ``clock()`` time; None: all of them) and the rest are estimated (see the module docstring).

    Configurations in ``first`` are timed before the others. A configuration is not started when the time
    left is less than the average one has taken so far. ``progress(done, total)`` follows the timing.
    """
    began = clock()
    keys = list(dict.fromkeys(keys))
    if not cost_model.is_measured:
        costs = cost_model.costs(keys, progress) if progress else cost_model.costs(keys)
        return Pricing(costs, frozenset(), frozenset(), {"*": 1.0}, clock() - began)
    analytic_model = AnalyticCostModel()
    analytic = {k: analytic_model.cost(k) for k in keys}
    costs = dict(cost_model.cached(keys))
    first_set = set(first)
    todo = sorted((k for k in keys if k not in costs), key=lambda k: (k not in first_set, -analytic[k]))
    timed: list[CostKey] = []
    measuring = clock()
    for k in todo:
        now = clock()
        if deadline is not None and now + ((now - measuring) / len(timed) if timed else 0.0) > deadline:
            break
        costs[k] = float(cost_model.costs([k])[k])
        timed.append(k)
        if progress:
            progress(len(timed), len(todo))
    scales = estimate_scales(costs, analytic)
    estimated = [k for k in keys if k not in costs]
    priced = dict(costs)
    for k in estimated:
        costs[k] = _estimate(k, priced, scales, analytic_model.cost)
    return Pricing(costs, frozenset(estimated), frozenset(timed), scales, clock() - began)


def _estimate(key: CostKey, priced: Mapping[CostKey, float], scales: Mapping[str, float],
              analytic: Callable[[CostKey], float]) -> float:
    """The scaled analytic estimate of a configuration not timed. A runtime's own kernel (``OpSpec.runtime``) is
    its parts as priced (timed, or estimated in turn) and a hair more, as the analytic model has it: scaled as one
    operator beside parts that were timed, it could look cheaper than they are by the estimate's error alone."""
    kernel = kernel_as_parts(key, lambda k: priced[k] if k in priced else _estimate(k, priced, scales, analytic))
    return kernel if kernel is not None else scales.get(key.op, scales["*"]) * analytic(key)
