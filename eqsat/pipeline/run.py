"""``optimize``: the stages of :mod:`eqsat.pipeline.stages` in order (:data:`STAGES`), each declaring the record it
makes and reading, by its parameters' names, the records earlier stages made; :func:`run_stages` runs the ones
that apply and times them, and :func:`check_stages` proves the order sound (every record read is made earlier).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

import onnx

from eqsat.pipeline import stages
from eqsat.pipeline.options import OptimizeKeywords, OptimizeOptions, resolve_options
from eqsat.pipeline.records import Run
from eqsat.pipeline.result import OptimizeResult

log = logging.getLogger(__name__)

Records = Mapping[str, Any]


def _always(run: Run, records: Records) -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    """One step of the run: ``run(the Run, the records it reads)`` makes the record ``makes`` when ``applies``;
    its time is recorded under ``key`` (None: logged only). What it reads are its parameters after the first,
    named as the records are."""

    name: str
    run: Callable[..., Any]
    makes: str
    key: str | None = None
    applies: Callable[[Run, Records], bool] = _always

    @property
    def reads(self) -> tuple[str, ...]:
        """The records it reads, by name."""
        return tuple(list(inspect.signature(self.run).parameters)[1:])

    def optional(self, record: str) -> bool:
        """Whether it runs without ``record`` (the parameter has a default)."""
        return inspect.signature(self.run).parameters[record].default is not inspect.Parameter.empty


def _caches(run: Run) -> bool:
    """Whether the run reads and stores cached transformations: with ``cache``, but for a dump (it is of the
    e-graph a search builds) and a run for the parallel executor (what it writes is decided by timing two
    executors, which a replay would have to do again)."""
    return run.options.cache and not run.options.dump_egraph and run.options.parallel is None


def _searches(run: Run, records: Records) -> bool:
    """Whether the run searches: no cached transformation was replayed."""
    return records.get("recalled") is None


#: The run, in order. The keys are those of ``OptimizeResult.stage_seconds`` (the report and the benchmarks
#: read them): choosing the rules and assembling the result are not timed there. The latency and signature stages
#: refine the export's decision.
STAGES: tuple[Stage, ...] = (
    Stage("load", stages.load, "loaded", "import"),
    Stage("rules", stages.choose_rules, "rules"),
    Stage("recall", stages.recall, "recalled", "recall", lambda run, r: _caches(run)),
    Stage("saturate", stages.saturate, "saturated", "saturate", _searches),
    Stage("cost", stages.cost, "priced", "cost", _searches),
    Stage("extract", stages.extract, "extracted", "extract", _searches),
    Stage("export", stages.export, "decision", "export"),
    Stage("latency", stages.time_latency, "decision", "latency",
          lambda run, r: run.verify_latency and not r["decision"].kept and run.options.parallel is None),
    Stage("executors", stages.choose_executor, "decision", "executors",
          lambda run, r: (run.options.parallel or 0) > 1 and run.options.verify_latency is not False),
    Stage("signature", stages.keep_signature, "decision", None,
          lambda run, r: r["decision"].model is not r["loaded"].as_given),
    Stage("check", stages.check, "numeric", "check", lambda run, r: run.options.check),
    Stage("dump", stages.dump, "egraph_dump", "dump", lambda run, r: bool(run.options.dump_egraph)),
    Stage("remember", stages.remember, "remembered", None, lambda run, r: _caches(run) and r.get("recalled") is None),
    Stage("report", stages.report, "result"),
)


def check_stages(table: Sequence[Stage]) -> None:
    """Raise ValueError unless every record a stage reads is made by a stage before it, and one it may run
    without (a default) wherever the stages that make it only sometimes apply, but under the very condition the
    reader itself applies under (the same ``applies`` function: what it reads does not change once made)."""
    made: dict[str, set[Callable[..., bool]]] = {}  # record -> the conditions of the stages that make it
    for stage in table:
        for record in stage.reads:
            if record not in made:
                raise ValueError(f"stage {stage.name} reads {record!r}, which no stage before it makes")
            conditions = made[record]
            if _always not in conditions and stage.applies not in conditions and not stage.optional(record):
                raise ValueError(f"stage {stage.name} needs {record!r}, which the stages before it make only "
                                 "sometimes: give the parameter a default")
        made.setdefault(stage.makes, set()).add(stage.applies)


check_stages(STAGES)


def run_stages(run: Run, table: Sequence[Stage] = STAGES) -> dict[str, Any]:
    """Run the stages of ``table`` that apply, in order, and return the records they made; log each one's time
    (DEBUG on the ``eqsat.pipeline.run`` logger) and record it in ``run.stage_seconds`` under its key."""
    records: dict[str, Any] = {}
    for stage in table:
        if not stage.applies(run, records):
            continue
        t = time.perf_counter()
        records[stage.makes] = stage.run(run, **{r: records[r] for r in stage.reads if r in records})
        seconds = time.perf_counter() - t
        if stage.key is not None:
            run.stage_seconds[stage.key] = seconds
        log.debug("stage %s: %.3f s (%.3f s since the start)", stage.name, seconds, time.perf_counter() - run.start)
    return records


def optimize(model_or_path: str | Path | bytes | onnx.ModelProto, *, options: OptimizeOptions | None = None,
             **overrides: Unpack[OptimizeKeywords]) -> OptimizeResult:
    """Optimize an ONNX model (a path, bytes or a ``ModelProto``) by equality saturation and exact DAG extraction.

    The options are the fields of :class:`OptimizeOptions`, given as keyword arguments
    (``optimize(model, time_limit=30, cost_model="measured")``), as an object
    (``optimize(model, options=OptimizeOptions(time_limit=30))``), or both (the keywords override the object's
    fields); :class:`OptimizeOptions` says what each does, and its defaults (those of the signature) are the
    ones of a field neither gives. They are validated before the model is read. The run
    is :data:`STAGES`: import, saturation, costs, extraction, export, the end-to-end latency check, the numeric
    check, the e-graph dump; ``result.stage_seconds`` has each one's time.

    Raises the errors a user can fix (:class:`eqsat.errors.EqsatError`: a model that cannot be read or
    imported, :class:`~eqsat.pipeline.NumericMismatch`, ...), ValueError or TypeError for an invalid option.
    """
    start = time.perf_counter()  # the run's clock (its time limit, its trace) starts at the call
    run = Run.begin(model_or_path, resolve_options(options, overrides), optimize, start)
    return run_stages(run)["result"]


def _signature() -> inspect.Signature:
    """``optimize``'s signature with every option a keyword and its default, for ``help`` and ``inspect``."""
    own = list(inspect.signature(optimize).parameters.values())[:2]
    options = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(OptimizeOptions).parameters.values()]
    return inspect.Signature([*own, *options], return_annotation="OptimizeResult")


optimize.__signature__ = _signature()  # type: ignore[attr-defined]
