"""Many models at once: :func:`optimize_many` runs :func:`eqsat.pipeline.run.optimize` on each model in worker
processes (a process pool on this machine, or Ray tasks, locally or on a cluster: the executor of
:mod:`eqsat.rules.distributed`), writes each result into one folder as it finishes, and reports every model,
a failed one included, on its own line: one model's failure never stops the others. The workers share the
measured-cost and transformation caches (files in the cache folder, written whole), so a model repeated in the
batch, or one of the same structure, is searched once where the first has finished."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eqsat.files import check_space

__all__ = ["ModelOutcome", "optimize_many", "outcomes_table"]


@dataclass(frozen=True)
class ModelOutcome:
    """What became of one model of the batch."""

    model: str  # the path given
    output: str  # where its result was written ("" when it failed)
    written: str  # "optimized", "original" (kept) or "failed"
    cost_before: float = 0.0
    cost_after: float = 0.0
    measured_speedup: float | None = None  # the end-to-end check's median, where it ran
    seconds: float = 0.0
    reason: str = ""  # why the original was kept, or the error of a failed model

    @property
    def speedup(self) -> float:
        """The estimated speedup (1 for a kept original or a failure)."""
        return self.cost_before / self.cost_after if self.cost_after > 0 and self.written == "optimized" else 1.0


def _one(task: tuple[str, str, dict[str, Any]]) -> ModelOutcome:
    """Optimize one model and write it (in a worker process): never raises, a failure is the outcome."""
    from eqsat.onnx_io import save_model
    from eqsat.pipeline.choices import RULE_SETS
    from eqsat.pipeline.run import optimize

    src, out, options = task
    t0 = time.perf_counter()
    try:
        opts = dict(options)
        if isinstance(opts.get("rules"), str):
            opts["rules"] = RULE_SETS[opts["rules"]].rules()
        res = optimize(src, **opts)
        # a model whose weights are external data is written the same way (its data beside it)
        save_model(res.model, out, res.external_data)
        measured = res.latency.speedup.median if res.latency is not None and res.latency.speedup else None
        return ModelOutcome(src, out, "original" if res.kept_original else "optimized", res.cost_before,
                            res.cost_after, measured, time.perf_counter() - t0,
                            res.kept_reason if res.kept_original else "")
    except KeyboardInterrupt:
        raise
    except Exception as e:  # the batch goes on: this model's line says why it failed
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return ModelOutcome(src, "", "failed", seconds=time.perf_counter() - t0,
                            reason=f"{type(e).__name__}: {first}"[:500])


def optimize_many(models: Sequence[str | Path], out_dir: str | Path, *, workers: int = 2, backend: str = "pool",
                  address: str | None = None, progress: Callable[[str], None] | None = None,
                  **options: Any) -> list[ModelOutcome]:
    """Optimize each of ``models`` (ONNX files) with ``options`` (those of :func:`eqsat.optimize`; the cost model
    and the rules by name, since they travel to worker processes) and write ``<stem>.opt.onnx`` into
    ``out_dir``. ``backend``: ``"pool"`` (processes on this machine; one worker runs here), ``"ray"`` (Ray tasks;
    ``address`` names a cluster, else Ray starts on this machine with ``workers`` CPUs), ``"serial"``, or
    ``"auto"`` (Ray where it is installed, else the pool). ``progress`` gets a line per finished model. Returns one
    :class:`ModelOutcome` per model, in the order given; raises ValueError before any work for two models that
    would be written to one file, an option that cannot travel or a disk without room for the models (about
    what the originals take there)."""
    from eqsat.onnx_io import stored_bytes
    from eqsat.rules.distributed import Executor

    for key in ("cost_model", "rules"):
        if key in options and options[key] is not None and not isinstance(options[key], str):
            raise ValueError(f"optimize_many: give {key} by name (it travels to worker processes)")
    for key in ("progress", "dump_egraph"):
        if options.get(key):
            raise ValueError(f"optimize_many: {key} is for one model at a time (eqsat.optimize)")
    folder = Path(out_dir)
    outputs = [folder / f"{Path(m).name.removesuffix('.onnx')}.opt.onnx" for m in models]
    seen: dict[Path, str] = {}
    for m, o in zip(models, outputs, strict=True):
        if o in seen:
            raise ValueError(f"optimize_many: {seen[o]} and {m} would both be written to {o}; rename one")
        seen[o] = str(m)
    check_space(folder, sum(stored_bytes(m) for m in models), f"out_dir {out_dir}")
    folder.mkdir(parents=True, exist_ok=True)
    tasks = [(str(m), str(o), dict(options)) for m, o in zip(models, outputs, strict=True)]
    executor = Executor(workers=workers, backend=backend, address=address, retries=1)
    if progress is not None:
        progress(f"optimizing {len(tasks)} models ({executor.describe()})")
    results: list[ModelOutcome | None] = [None] * len(tasks)
    done = 0
    for i, outcome in executor.imap(_one, len(tasks), lambda i: tasks[i]):
        results[i] = outcome
        done += 1
        if progress is not None:
            progress(f"[{done}/{len(tasks)}] {_line(outcome)}")
    return [r for r in results if r is not None]


def _line(o: ModelOutcome) -> str:
    if o.written == "failed":
        return f"{o.model}: FAILED ({o.reason})"
    what = f"{o.speedup:.3f}x estimated" if o.written == "optimized" else f"original kept ({o.reason})"
    return f"{o.model}: {what}, {o.seconds:.1f} s -> {o.output}"


def outcomes_table(outcomes: Sequence[ModelOutcome], extra: Mapping[str, str] | None = None) -> str:
    """The batch's summary, one row per model: costs before and after, the estimated and measured speedups, the
    time, what was written and why."""
    rows = [("model", "before", "after", "speedup", "measured", "seconds", "written", "why")]
    for o in outcomes:
        failed = o.written == "failed"
        rows.append((Path(o.model).name, "-" if failed else f"{o.cost_before:.4g}",
                     "-" if failed else f"{o.cost_after:.4g}", "-" if failed else f"{o.speedup:.3f}x",
                     f"{o.measured_speedup:.3f}x" if o.measured_speedup else "-", f"{o.seconds:.1f}", o.written,
                     o.reason))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows]
    failed = sum(o.written == "failed" for o in outcomes)
    lines.append(f"{len(outcomes)} models: {sum(o.written == 'optimized' for o in outcomes)} optimized, "
                 f"{sum(o.written == 'original' for o in outcomes)} kept as given, {failed} failed")
    return "\n".join(lines)
