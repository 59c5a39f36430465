"""Measured costs as a user meets them: does ``eqsat optimize --costs measured`` keep its time limit, and do
repeated runs write the same model?

``limit``: each model runs through the CLI twice with a time limit, first with an empty cost cache (every
operator still to be timed), then with the cache the first run filled. The table gives the wall time of the
whole command against the limit (target: within +10 %), how many operator configurations were measured (and
read from the cache) or estimated, the stages' seconds, and what was written.

``repeat``: one model runs N times through the CLI, all runs sharing one cost cache that starts empty (the first
run measures what it can, later ones the rest, then everything is cached), and the table gives each run's
written model (a hash of the file), its verdict and its end-to-end speedup; target: the same model written in
at least 9 runs of 10.

Saves ``measured_limit.{md,json}`` or ``measured_repeat.{md,json}``.

Usage: python benchmarks/measured.py limit [MODEL ...] [--time-limit 60] [--out benchmarks/results]
       python benchmarks/measured.py repeat [MODEL] [--runs 10] [--time-limit 60] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import git_commit

LIMIT_MODELS = ["resnet50", "mobilenet_v2"]
REPEAT_MODEL = "hf_bert"


def cpu_name() -> str:
    """The CPU's model name (Linux), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def save_model(name: str, folder: Path) -> Path:
    """A built-in or light-zoo model written to ``folder``."""
    import onnx

    from eqsat import models
    from eqsat.models.zoo import load_zoo_model, zoo_names

    model = load_zoo_model(name) if name in zoo_names() else models.builtin_models()[name]()
    path = folder / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def run_cli(model: Path, time_limit: float, cache: Path, work: Path, tag: str) -> dict[str, Any]:
    """One ``eqsat optimize --costs measured`` command: its wall time, its JSON report and the written file's hash."""
    out, report = work / f"{tag}.opt.onnx", work / f"{tag}.json"
    cmd = [sys.executable, "-m", "eqsat", "optimize", str(model), "-o", str(out), "--costs", "measured",
           "--time-limit", str(time_limit), "--report-json", str(report), "-q"]
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "EQSAT_CACHE_DIR": str(cache)})
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    data = json.loads(report.read_text())
    return {"wall": wall, "report": data, "hash": hashlib.sha256(out.read_bytes()).hexdigest()[:12]}


def limit(models: list[str], time_limit: float, work: Path) -> list[dict[str, Any]]:
    """Each model twice through the CLI, with an empty cost cache and then with the one the first run filled."""
    rows = []
    for name in models:
        path = save_model(name, work)
        cache = work / f"cache-{name}"
        for run in ("cold", "warm"):
            r = run_cli(path, time_limit, cache, work, f"{name}-{run}")
            rep = r["report"]
            rows.append({"model": name, "cache": run, "wall": r["wall"], "limit": time_limit,
                         "within": r["wall"] <= 1.1 * time_limit, "costs": rep["costs"],
                         "stages": rep["stage_seconds"], "kept": rep["kept_original"], "decision": rep["decision"]})
            print(f"{name} {run}: {r['wall']:.1f} s (limit {time_limit:g} s)", file=sys.stderr, flush=True)
    return rows


def repeat(name: str, runs: int, time_limit: float, work: Path) -> list[dict[str, Any]]:
    """``runs`` CLI runs of one model sharing one cost cache that starts empty: what each wrote and why."""
    path = save_model(name, work)
    cache = work / "cache"
    rows = []
    for k in range(runs):
        r = run_cli(path, time_limit, cache, work, f"{name}-{k}")
        rep = r["report"]
        lat = rep["latency"] or {}
        rows.append({"run": k + 1, "hash": r["hash"], "wall": r["wall"], "kept": rep["kept_original"],
                     "decision": rep["decision"], "costs": rep["costs"], "race": lat.get("race"),
                     "again": lat.get("again"), "cost_after": rep["cost_after_ms"]})
        print(f"run {k + 1}: {r['hash']} {r['wall']:.1f} s {rep['decision']}", file=sys.stderr, flush=True)
    return rows


def _speed(s: dict[str, float] | None) -> str:
    return "-" if not s else f"{s['median']:.3f}x [{s['low']:.3f}, {s['high']:.3f}]"


def render_limit(rows: list[dict[str, Any]]) -> list[str]:
    """The ``limit`` table, as Markdown lines."""
    lines = ["| model | cache | wall (s) | limit (s) | within +10 % | measured (cached) / estimated | stages (s) | "
             "written |", "|---|---|---:|---:|---|---|---|---|"]
    for r in rows:
        c = r["costs"] or {}
        stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stages"].items())
        lines.append(f"| {r['model']} | {r['cache']} | {r['wall']:.1f} | {r['limit']:g} | "
                     f"{'yes' if r['within'] else 'NO'} | {c.get('measured', '-')} ({c.get('cached', '-')}) / "
                     f"{c.get('estimated', '-')} | {stages} | {r['decision']} |")
    return lines


def render_repeat(rows: list[dict[str, Any]]) -> list[str]:
    """The ``repeat`` summary and table, as Markdown lines."""
    counts = collections.Counter(r["hash"] for r in rows)
    top, n = counts.most_common(1)[0]
    lines = [f"Same model written in {n} of {len(rows)} runs (file hash {top}).", "",
             "| run | written (hash) | wall (s) | measured (cached) / estimated | race | timed again | written |",
             "|---:|---|---:|---|---|---|---|"]
    for r in rows:
        c = r["costs"] or {}
        lines.append(f"| {r['run']} | {r['hash']} | {r['wall']:.1f} | {c.get('measured', '-')} "
                     f"({c.get('cached', '-')}) / {c.get('estimated', '-')} | {_speed(r['race'])} | "
                     f"{_speed(r['again'])} | {r['decision']} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark named on the command line, print its table and save it."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("limit", "repeat"))
    ap.add_argument("models", nargs="*", help=f"models (limit: default {' '.join(LIMIT_MODELS)}; repeat: one, "
                                              f"default {REPEAT_MODEL})")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per run (default 60)")
    ap.add_argument("--runs", type=int, default=10, help="repeat: runs (default 10)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results",
                    help="folder for the results")
    a = ap.parse_args(argv)
    commit = git_commit(mark_uncommitted=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if a.mode == "limit":
            rows = limit(a.models or LIMIT_MODELS, a.time_limit, work)
            table = render_limit(rows)
        else:
            rows = repeat((a.models or [REPEAT_MODEL])[0], a.runs, a.time_limit, work)
            table = render_repeat(rows)
    command = " ".join(["python benchmarks/measured.py", a.mode, *a.models, f"--time-limit {a.time_limit:g}",
                        *([f"--runs {a.runs}"] if a.mode == "repeat" else [])])
    head = [f"# measured costs: {a.mode}", "",
            f"`{command}` at commit {commit}, {datetime.date.today()}, {cpu_name()}, {os.cpu_count()} cores; "
            "each run is the CLI command, its wall time measured around it.", ""]
    text = "\n".join(head + table) + "\n"
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"measured_{a.mode}.md").write_text(text)
    (a.out / f"measured_{a.mode}.json").write_text(json.dumps({"commit": commit, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
