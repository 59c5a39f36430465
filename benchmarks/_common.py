"""Helpers shared by the benchmark scripts (each run as ``python benchmarks/NAME.py``)."""

from __future__ import annotations

import datetime
import json
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def git_commit(mark_uncommitted: bool = False) -> str:
    """Short hash of HEAD (``unknown`` outside git), with " (with uncommitted changes)" when asked and the
    tracked files (other than benchmarks/results) differ from it, so a results file says what it measured."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              timeout=10, cwd=here).stdout.strip()
        # results files a benchmark is writing (this one, or one run before it) are not code: they do not count
        dirty = mark_uncommitted and subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":/", ":(exclude,top)benchmarks/results"],
            capture_output=True, text=True, check=True, timeout=10, cwd=here).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (" (with uncommitted changes)" if dirty else "")


def ran_as() -> str:
    """How the running benchmark was started, for its results file: the command line, the commit (marked where
    tracked files differ from it) and the date."""
    script = Path(sys.argv[0]).name
    return (f"`python benchmarks/{script} {' '.join(sys.argv[1:])}` at commit {git_commit(True)}, "
            f"{datetime.date.today()}")


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive numbers (nan for none)."""
    vals = [float(v) for v in values]
    if not vals:
        return math.nan
    if any(not v > 0 or math.isinf(v) for v in vals):
        raise ValueError(f"geometric mean of non-positive or non-finite values: {vals}")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 0, ties sharing their average rank."""
    x = np.asarray(values, dtype=float)
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=float)
    for v in np.unique(x):
        tied = x == v
        if tied.sum() > 1:
            r[tied] = r[tied].mean()
    return r


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (ties get average ranks); nan for fewer than two pairs or a constant side."""
    if len(a) != len(b):
        raise ValueError("spearman needs two sequences of the same length")
    if len(a) < 2:
        return float("nan")
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def parse_sizes(text: str) -> dict[str, int]:
    """``NAME=SIZE,...`` (a ``--dims`` option) as a dict."""
    return {k: int(v) for k, v in (p.split("=") for p in text.split(",") if p)}


def save_results(out: str | Path, stem: str, head: str, table: str, rows: Any) -> None:
    """Write ``<stem>.md`` (``head`` then ``table``) and ``<stem>.json`` (``rows``) into the folder ``out``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.md").write_text(head + table + "\n", encoding="utf-8")
    (folder / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


def timed_rounds(models: list[Any], f: dict[str, np.ndarray], rounds: int, runs: int,
                 seed: int = 0) -> list[list[float]]:
    """Per round, each model's median ms per run under onnxruntime's default level, one thread: each round runs the
    models in a random order, each 2 warm-up runs (its weights back in the caches) then ``runs`` timed ones. A run
    another process interrupts lands in a tail the median leaves out (batched timings, a sum, keep it)."""
    import onnxruntime as ort

    sessions = []
    for m in models:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
        sessions.append(ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]))
    for s in sessions:
        for _ in range(5):
            s.run(None, f)
    rng = np.random.default_rng(seed)
    times: list[list[float]] = [[] for _ in models]
    for _ in range(rounds):
        for k in rng.permutation(len(models)):
            for _ in range(2):
                sessions[k].run(None, f)
            one = []
            for _ in range(runs):
                t = time.perf_counter()
                sessions[k].run(None, f)
                one.append(time.perf_counter() - t)
            times[k].append(1e3 * float(np.median(one)))
    return times
