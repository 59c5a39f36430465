"""One fuzzing case: :func:`check_model` optimizes a model (``eqsat.optimize``, default rules, no built-in check)
and :func:`compare_models` compares it with the original using the optimizer's own numeric check; a crash of
the optimizer on a valid model is a finding too."""

from __future__ import annotations

import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import onnx

from eqsat.pipeline import optimize
from eqsat.pipeline.check import check_equal


class InvalidModel(ValueError):
    """The original model itself does not run: a generator bug, not an optimizer bug."""


def compare_models(original: onnx.ModelProto, optimized: onnx.ModelProto, *, trials: int = 2) -> dict[str, str]:
    """Compare both models with the optimizer's own numeric check (:func:`eqsat.pipeline.check.check_equal`:
    onnxruntime with graph optimizations off, every output, NaN/inf by position, tolerance relative to each
    output's scale); problems by output name (``<run>`` when the optimized model does not run)."""

    report = check_equal(original, optimized, trials=trials)
    if not report.ran:
        raise InvalidModel(f"the original model does not run: {'; '.join(report.problems)}")
    problems = {c.name: c.problem for c in report.comparisons if c.problem}
    if not report.ok and not problems:
        problems["<run>"] = "; ".join(report.problems)
    return problems


@dataclass
class CaseResult:
    """What optimizing one model did: problems by output (empty: equal), or the exception it raised."""

    problems: dict[str, str]
    rules_fired: dict[str, int]
    changed: bool
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """No mismatch and no crash."""
        return not self.problems and self.error is None


def check_model(model: onnx.ModelProto, *, time_limit: float = 10.0, trials: int = 2,
                rules: Sequence[Any] | None = None, optimized: onnx.ModelProto | None = None) -> CaseResult:
    """Optimize ``model`` (``rules``: default, the corpus and layout rules) and compare it with the original.

    An exception from ``optimize`` on a valid model is a finding too (``error``). ``optimized`` skips the
    optimizer and compares against that model instead (used to show the comparison is not vacuous).
    """

    t = time.perf_counter()
    fired: dict[str, int] = {}
    changed = True
    if optimized is None:
        try:
            res = optimize(model, check=False, time_limit=time_limit, rules=rules, cache=False)
        except Exception as e:  # a crash is a result, not the end of the fuzzing run
            return CaseResult({}, {}, False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}",
                              time.perf_counter() - t)
        optimized, fired = res.model, dict(res.rules_fired)
        changed = not res.kept_original and _signature(res.graph) != _signature(res.original)
    problems = compare_models(model, optimized, trials=trials)
    return CaseResult(problems, fired, changed, None, time.perf_counter() - t)


def _signature(graph: Any) -> Counter:
    return Counter((n.op, repr(n.params)) for n in graph.nodes)
