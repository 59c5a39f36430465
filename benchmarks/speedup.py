"""Real speedups end to end (issue 11's yardstick): is the optimized model faster in onnxruntime on CPU?

For every benchmark model (TASO's seven, the BERT attention block, the NasRNN cell, BERT-base as transformers
exports it, the onnx light zoo) and every thread count in ``--threads``:

1. ``eqsat.optimize`` with measured CPU costs (onnxruntime, the cost model's threads = that thread count),
   run twice in a subprocess of its own: first on a fresh, empty cost cache (``cold``: every operator
   configuration is measured), then again on the same cache (``warm``). The seconds are those of the
   ``optimize()`` call (reading the model file, saturation, costs, extraction, export, the end-to-end
   check that keeps the original unless it is beaten, the numeric check); interpreter start, imports and
   building the model are left out. A run past ``--timeout`` is killed; a failure is a row, not the end.
2. The original and the optimized model (the cold run's; the warm run's if the cold one failed) timed end
   to end in onnxruntime: CPU provider, the session's default graph optimization level (ORT_ENABLE_ALL, what
   users run), ``intra_op_num_threads`` = the thread count. Each of ``--rounds`` rounds runs a batch of each
   model (the same number of runs for both, a batch >= ``--batch-ms``), the order alternating A/B, B/A.
3. Speedup = median over rounds of the per-round ratio original / optimized; its 95 % confidence interval
   is a percentile bootstrap over rounds (the rounds resampled with replacement, the median of their
   ratios recomputed; 10 000 resamples, seed 0).

On Linux the benchmark (and the workers it starts) runs with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``:
glibc's malloc then asks for transparent huge pages, as the kernel's ``madvise`` mode requires. Without them,
the same model in fresh processes ran between 26 and 36 ms here (TASO's BERT, 1 thread: where its 128 MB of
weights land in physical memory), more than the gains being measured; with them, 26.5 ms each time. Both
models of a pair share the setting; ``--default-malloc`` leaves the environment as it is.

The summary gives the geometric-mean speedup per thread count, the minimum, and issue 11's targets. Writes
``speedup.md``, ``speedup.csv``, ``speedup.json`` and ``speedup.png`` (if matplotlib is installed) under ``--out``.

Usage: python benchmarks/speedup.py [--models NAME ...] [--quick] [--threads 1 2] [--rounds 20]
                                    [--time-limit 120] [--timeout 900] [--out benchmarks/results]
       python benchmarks/speedup.py --render benchmarks/results/speedup.json   (tables and plot only)
A model may take integer builder arguments: ``hf_bert:layers=2``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import hashlib
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded from its path (the tests)
from _common import geomean, git_commit, spearman  # noqa: E402

#: The issue's small set (``--quick``).
QUICK = ("bert_attention_block", "nasrnn_cell", "taso_nasrnn", "squeezenet", "hf_bert")
#: Models the targets name. A target over several models is met when every one of them that ran meets it.
NASRNN = ("taso_nasrnn", "nasrnn_cell")
TASO_BERT = ("taso_bert",)
RESNET50_SIZED = ("resnet50", "taso_resnext50")
GEOMEAN_TARGET = 1.10
NASRNN_TARGET = 1.5
BERT_TARGET = 1.2
FLOOR = 0.99
COLD_TARGET_S = 120.0
WARM_TARGET_S = 15.0
SPEARMAN_TARGET = 0.95
ERROR_TARGET = 0.10
CI_LEVEL = 0.95
BOOTSTRAP = 10_000
HUGE_PAGES = "glibc.malloc.hugetlb=1"  # malloc asks for transparent huge pages (madvise)
CSV_FIELDS = ["model", "threads", "status", "error", "original_ms", "optimized_ms", "speedup", "ci_low", "ci_high",
              "rounds", "identical", "noise_ratio", "kept_original", "kept_original_warm", "same_result", "timed",
              "optimize_cold_s", "optimize_warm_s", "cold_measured", "warm_measured", "predicted_before_ms",
              "predicted_after_ms", "nodes_before", "nodes_after", "checked", "candidates_timed",
              "first_choice_fastest"]


# ---------------------------------------------------------------------------------------------------------
# statistics and targets (pure functions: tests/benchmarks/test_speedup_bench.py)


def bootstrap_ci(values: Sequence[float], level: float = CI_LEVEL, resamples: int = BOOTSTRAP,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of ``values`` (resampled with replacement)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    medians = np.median(x[rng.integers(0, x.size, size=(resamples, x.size))], axis=1)
    alpha = (1 - level) / 2
    return float(np.quantile(medians, alpha)), float(np.quantile(medians, 1 - alpha))


def paired_speedup(original_ms: Sequence[float], optimized_ms: Sequence[float], level: float = CI_LEVEL,
                   resamples: int = BOOTSTRAP, seed: int = 0) -> dict[str, float]:
    """Speedup from paired per-round times: the median of the per-round ratios original / optimized, its
    bootstrap interval, and each model's median time."""
    if len(original_ms) != len(optimized_ms) or not len(original_ms):
        raise ValueError("need the same number (at least one) of rounds for both models")
    ratios = [a / b for a, b in zip(original_ms, optimized_ms, strict=True)]
    lo, hi = bootstrap_ci(ratios, level, resamples, seed)
    return {"original_ms": float(np.median(original_ms)), "optimized_ms": float(np.median(optimized_ms)),
            "speedup": float(np.median(ratios)), "ci_low": lo, "ci_high": hi, "rounds": len(ratios)}


def _ok(row: dict) -> bool:
    """Whether the row has a measured speedup (a failed warm run leaves the cold run's speedup standing)."""
    return row.get("speedup") is not None


def _check(label: str, threads: Sequence[int], rows: list[dict], models: Sequence[str] | None,
           value: str, threshold: float, higher: bool, fmt: str) -> dict[str, Any]:
    """One target per thread count over ``models`` (None: every model): the worst value among the models
    that ran, met when it is on the right side of ``threshold`` and none of them failed."""
    per: dict[str, dict[str, Any]] = {}
    for t in threads:
        mine = [r for r in rows if r["threads"] == t and (models is None or r["model"] in models)]
        if not mine:
            per[str(t)] = {"value": None, "met": None, "text": "not run"}
            continue
        vals = [(r[value], r["model"]) for r in mine if r.get(value) is not None]
        failed = sorted({r["model"] for r in mine if r.get(value) is None})
        if not vals:
            per[str(t)] = {"value": None, "met": False, "text": "failed: " + ", ".join(failed)}
            continue
        worst, who = (min if higher else max)(vals)
        good = worst >= threshold if higher else worst < threshold
        text = fmt.format(worst) + (f" ({who})" if len(vals) > 1 else "")
        if failed:
            text += "; failed: " + ", ".join(failed)
        per[str(t)] = {"value": worst, "met": bool(good and not failed), "text": text}
    return {"target": label, "per_threads": per}


def prediction_pairs(rows: list[dict], threads: int) -> list[tuple[float, float]]:
    """(predicted, measured) whole-model latency (ms) of every graph timed at ``threads``: each original, and
    each optimized model that is not the original (predicted = the sum of the cost model's operator costs)."""
    pairs = []
    for r in rows:
        if r["threads"] != threads or not _ok(r) or r.get("predicted_before_ms") is None:
            continue
        pairs.append((r["predicted_before_ms"], r["original_ms"]))
        if not r.get("identical") and not r.get("kept_original"):
            pairs.append((r["predicted_after_ms"], r["optimized_ms"]))
    return pairs


def prediction_quality(rows: list[dict], threads: int) -> dict[str, Any]:
    """How well summed operator costs predict whole-model latency: Spearman rank correlation and the mean of
    |predicted - measured| / measured over :func:`prediction_pairs`."""
    pairs = prediction_pairs(rows, threads)
    if not pairs:
        return {"pairs": 0, "spearman": None, "mean_error": None}
    rho = spearman([p for p, _ in pairs], [m for _, m in pairs])
    err = float(np.mean([abs(p - m) / m for p, m in pairs]))
    return {"pairs": len(pairs), "spearman": None if math.isnan(rho) else rho, "mean_error": err}


def first_choice_stats(rows: list[dict], threads: int) -> tuple[int, int]:
    """(models whose cost model's first choice was not the fastest candidate timed, models with >= 2 timed)."""
    mine = [r for r in rows if r["threads"] == threads and r.get("first_choice_fastest") is not None]
    return sum(1 for r in mine if not r["first_choice_fastest"]), len(mine)


def _quality_target(label: str, threads: Sequence[int], rows: list[dict], key: str, threshold: float,
                    higher: bool, fmt: str) -> dict[str, Any]:
    per: dict[str, dict[str, Any]] = {}
    for t in threads:
        q = prediction_quality(rows, t)
        v = q[key]
        if v is None:
            per[str(t)] = {"value": None, "met": None if not q["pairs"] else False,
                           "text": "not run" if not q["pairs"] else "undefined"}
        else:
            per[str(t)] = {"value": v, "met": v >= threshold if higher else v <= threshold,
                           "text": fmt.format(v) + f" over {q['pairs']} graphs"}
    return {"target": label, "per_threads": per}


def evaluate_targets(rows: list[dict], threads: Sequence[int]) -> list[dict[str, Any]]:
    """Issue 11's targets on these rows, per thread count: ``{"target", "per_threads": {"1": {"value",
    "met" (True, False, or None when no model it names ran), "text"}}}``."""
    out = []
    per: dict[str, dict[str, Any]] = {}
    for t in threads:
        mine = [r for r in rows if r["threads"] == t]
        ok = [r["speedup"] for r in mine if _ok(r)]
        if not mine:
            per[str(t)] = {"value": None, "met": None, "text": "not run"}
        elif not ok:
            per[str(t)] = {"value": None, "met": False, "text": "no model timed"}
        else:
            g = geomean(ok)
            per[str(t)] = {"value": g, "met": g >= GEOMEAN_TARGET,
                           "text": f"{g:.3f}x over {len(ok)}" + (f" of {len(mine)}" if len(ok) < len(mine) else "")}
    out.append({"target": f"geometric mean >= {GEOMEAN_TARGET:.2f}x", "per_threads": per})
    out.append(_check(f"NasRNN >= {NASRNN_TARGET:.1f}x ({', '.join(NASRNN)})", threads, rows, NASRNN, "speedup",
                      NASRNN_TARGET, True, "{:.3f}x"))
    out.append(_check(f"TASO BERT >= {BERT_TARGET:.1f}x (taso_bert)", threads, rows, TASO_BERT, "speedup",
                      BERT_TARGET, True, "{:.3f}x"))
    out.append(_check(f"no model below {FLOOR:.2f}x (minimum)", threads, rows, None, "speedup", FLOOR, True,
                      "{:.3f}x"))
    out.append(_check(f"ResNet-50-sized, cold cache < {COLD_TARGET_S:g} s ({', '.join(RESNET50_SIZED)})", threads,
                      rows, RESNET50_SIZED, "optimize_cold_s", COLD_TARGET_S, False, "{:.1f} s"))
    out.append(_check(f"ResNet-50-sized, warm cache < {WARM_TARGET_S:g} s", threads, rows, RESNET50_SIZED,
                      "optimize_warm_s", WARM_TARGET_S, False, "{:.1f} s"))
    out.append(_quality_target(f"predicted vs measured latency: Spearman >= {SPEARMAN_TARGET:.2f}", threads, rows,
                               "spearman", SPEARMAN_TARGET, True, "{:.3f}"))
    out.append(_quality_target(f"predicted vs measured latency: mean error <= {ERROR_TARGET:.0%}", threads, rows,
                               "mean_error", ERROR_TARGET, False, "{:.1%}"))
    return out


# ---------------------------------------------------------------------------------------------------------
# rendering


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def result_text(row: dict) -> str:
    """What the optimizer returned: optimized, original kept, or the failure."""
    if row.get("kept_original") is None:
        return row.get("error") or row.get("status", "-")
    text = "original kept" if row["kept_original"] else "optimized"
    if row.get("identical"):
        text += f" (identical: 1x; timed {row['noise_ratio']:.3f}x, noise)"
    if row.get("kept_original_warm") is not None and row.get("same_result") is False:
        text += " (warm run: " + ("original kept" if row["kept_original_warm"] else "a different graph") + ")"
    if row.get("error"):
        text += "; " + row["error"]
    return text


def render_table(rows: list[dict]) -> str:
    """Markdown table, one line per (model, threads)."""
    head = ["model", "threads", "original (ms)", "optimized (ms)", "speedup [95 % CI]", "result",
            "optimize cold / warm (s)", "ONNX nodes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        sp = (f"{r['speedup']:.3f}x [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if _ok(r) else "-")
        nodes = (f"{r['nodes_before']} -> {r['nodes_after']}" if r.get("nodes_before") is not None else "-")
        cells = [r["model"], str(r["threads"]), _num(r.get("original_ms"), ".3f"), _num(r.get("optimized_ms"), ".3f"),
                 sp, result_text(r).replace("|", "/")[:120],
                 f"{_num(r.get('optimize_cold_s'), '.1f')} / {_num(r.get('optimize_warm_s'), '.1f')}", nodes]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_targets(targets: list[dict], threads: Sequence[int]) -> str:
    """Markdown table of the targets: value and met / not met per thread count."""
    def cell(p: dict) -> str:
        mark = {True: "met", False: "NOT MET", None: "-"}[p["met"]]
        return f"{p['text']}: {mark}" if p["met"] is not None else p["text"]

    head = ["target"] + [f"{t} thread{'s' if t != 1 else ''}" for t in threads]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for tg in targets:
        lines.append("| " + " | ".join([tg["target"]] + [cell(tg["per_threads"][str(t)]) for t in threads]) + " |")
    return "\n".join(lines)


def render_markdown(meta: dict, rows: list[dict], targets: list[dict]) -> str:
    """The whole results file."""
    threads = meta["threads"]
    return "\n".join([
        "# End-to-end speedup over onnxruntime (CPU), optimized with measured costs\n",
        f"commit {meta['commit']}, {meta['date']}, {meta['cpu']} ({meta['cores']} cores), onnxruntime "
        f"{meta['onnxruntime']}, Python {meta['python']}\n",
        f"Command: `{meta['command']}`\n",
        f"Both models timed in onnxruntime at {meta['graph_optimization_level']} (the session default), CPU "
        f"provider, intra-op threads = the row's thread count, {meta['rounds']} interleaved rounds (order "
        f"alternating), batches >= {meta['batch_ms']:g} ms. Speedup: median of the per-round ratios original / "
        f"optimized; interval: {meta['ci']}. Optimization: `eqsat.optimize` with measured CPU costs at the row's "
        f"thread count, {meta.get('candidates', 1)} candidate(s) extracted and timed, time limit "
        f"{meta['time_limit']:g} s (killed after {meta['timeout']:g} s); cold = empty cost "
        "cache, warm = the same cache again; seconds of the optimize() call. A result byte-identical to the "
        "original is 1x by identity; its timed ratio (this machine's noise) is shown beside it. Environment: "
        f"GLIBC_TUNABLES={meta.get('glibc_tunables') or '(unset)'}.\n",
        render_table(rows), "", "## Targets (issue 11)\n", render_targets(targets, threads), "",
        "## Choosing by measuring\n", render_candidates(rows, threads), ""])


def render_candidates(rows: list[dict], threads: Sequence[int]) -> str:
    """How often the cost model's first choice was not the fastest of the candidates optimize() timed."""
    lines = []
    for t in threads:
        wrong, n = first_choice_stats(rows, t)
        names = [r["model"] for r in rows if r["threads"] == t and r.get("first_choice_fastest") is False]
        lines.append(f"- {t} thread{'s' if t != 1 else ''}: the first choice was not the fastest candidate in "
                     f"{wrong} of {n} models with two or more candidates timed"
                     + (f" ({', '.join(names)})" if names else ""))
    return "\n".join(lines)


def plot(rows: list[dict], threads: Sequence[int], path: Path, title: str) -> bool:
    """Speedup per model with CI bars, one bar per thread count; False when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(models) + 2), 4.2))
    width = 0.8 / max(1, len(threads))
    for j, t in enumerate(threads):
        xs, ys, lo, hi = [], [], [], []
        for i, m in enumerate(models):
            r = next((r for r in rows if r["model"] == m and r["threads"] == t and _ok(r)), None)
            if r is None:
                continue
            xs.append(i + (j - (len(threads) - 1) / 2) * width)
            ys.append(r["speedup"])
            lo.append(r["speedup"] - r["ci_low"])
            hi.append(r["ci_high"] - r["speedup"])
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, label=f"{t} thread{'s' if t != 1 else ''}")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(GEOMEAN_TARGET, color="gray", lw=0.8, ls="--", label=f"{GEOMEAN_TARGET:.2f}x (geomean target)")
    ax.set_xlim(-0.6, len(models) - 0.4)
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("speedup (original / optimized)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(textwrap.fill(title, 100), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_results(out: Path, meta: dict, rows: list[dict]) -> str:
    """Write speedup.{md,csv,json,png} under ``out``; returns the Markdown."""
    targets = evaluate_targets(rows, meta["threads"])
    md = render_markdown(meta, rows, targets)
    out.mkdir(parents=True, exist_ok=True)
    (out / "speedup.md").write_text(md)
    (out / "speedup.json").write_text(json.dumps({"meta": meta, "rows": rows, "targets": targets}, indent=1) + "\n")
    with open(out / "speedup.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    if not plot(rows, meta["threads"], out / "speedup.png",
                f"commit {meta['commit']}, {meta['date']}, {meta['cpu']}, onnxruntime {meta['onnxruntime']}"):
        print("matplotlib not installed: no speedup.png", file=sys.stderr)
    return md


# ---------------------------------------------------------------------------------------------------------
# models, optimization (in a subprocess) and timing


def all_models() -> list[str]:
    """The suite: TASO's seven, the BERT block, the NasRNN cell, BERT-base (transformers), the light zoo."""
    from eqsat import models as zoo
    return [*zoo.TASO_SUITE, "bert_attention_block", "nasrnn_cell", "hf_bert", *zoo.zoo_names()]


def build_model(spec: str) -> Any:
    """A model by name (built-in or light zoo), optionally ``name:key=value,...`` (integer builder arguments)."""
    from eqsat import models as zoo
    name, _, args = spec.partition(":")
    kwargs = {k: int(v) for k, v in (a.split("=", 1) for a in args.split(",") if a)}
    builders = zoo.builtin_models()
    if name in builders:
        return builders[name](**kwargs)
    if name in zoo.zoo_names() and not kwargs:
        return zoo.load_zoo_model(name)
    raise ValueError(f"unknown model {spec!r}; built in: {sorted(builders)}; zoo: {zoo.zoo_names()}")


def worker(spec: dict) -> dict:
    """Run in a subprocess: one ``optimize`` call with measured costs on the given cache; saves the model."""
    import onnx
    import onnxruntime  # noqa: F401  (imported before the clock starts)

    from eqsat.costs import CachedCostModel, CostCache, OnnxRuntimeCostModel
    from eqsat.pipeline import optimize

    say = (lambda msg: print(f"    {msg}", file=sys.stderr, flush=True)) if spec.get("verbose") else None
    t0 = time.perf_counter()
    # get_cost_model("measured"), spelt out: its cache counts what was measured and what was found
    cm = CachedCostModel(OnnxRuntimeCostModel(threads=spec["threads"]), CostCache(spec["cache_dir"]))
    res = optimize(spec["model_path"], cost_model=cm, time_limit=spec["time_limit"],
                   candidates=spec.get("candidates", 1), progress=say, cache=False)
    seconds = time.perf_counter() - t0
    onnx.save(res.model, spec["out_model"])
    return {"seconds": seconds, "kept_original": res.kept_original, "predicted_before_ms": res.cost_before,
            "predicted_after_ms": res.cost_after, "nodes_before": res.onnx_nodes[0], "nodes_after": res.onnx_nodes[1],
            "checked": bool(res.numeric and res.numeric.ok), "latency_ms": res.latency_ms,
            "stage_seconds": res.stage_seconds, "measured": cm.misses,
            "cached": cm.hits, "stop_reason": res.stop_reason, "solver_status": res.solver_status,
            "candidates": [dataclasses.asdict(c) for c in res.candidates]}


def run_worker(spec: dict, timeout: float) -> dict:
    """``worker`` in a fresh interpreter (its own process group, killed after ``timeout`` seconds). Returns its
    result, or ``{"error": ...}``."""
    result = Path(spec["out_model"]).with_suffix(".json")
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec),
                             "--worker-result", str(result)], start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the worker and what it started (saturation runs in a child)
        except ProcessLookupError:
            pass
        proc.wait()
        return {"error": f"killed after {timeout:g} s"}
    if result.exists():
        return json.loads(result.read_text())
    return {"error": f"worker exited with status {rc} and no result"}


def time_pair(original: Any, optimized: Any, feeds: dict, threads: int, rounds: int, warmup: int = 3,
              batch_ms: float = 10.0) -> tuple[list[float], list[float]]:
    """Per-round wall time per run (ms) of both models in onnxruntime (CPU, ``threads`` intra-op threads, the
    session's default graph optimization level), interleaved: each round runs a batch of each, the order
    alternating; both batches have the same number of runs (>= ``batch_ms`` for the original)."""
    import onnxruntime as ort

    sessions = []
    for m in (original, optimized):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sessions.append(ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]))
    for s in sessions:
        for _ in range(warmup):
            s.run(None, feeds)
    t = time.perf_counter()
    sessions[0].run(None, feeds)
    batch = max(1, min(1000, int(batch_ms / 1e3 / max(time.perf_counter() - t, 1e-6))))
    times: list[list[float]] = [[], []]
    for k in range(rounds):
        for i in ((0, 1) if k % 2 == 0 else (1, 0)):
            t = time.perf_counter()
            for _ in range(batch):
                sessions[i].run(None, feeds)
            times[i].append((time.perf_counter() - t) * 1e3 / batch)
    return times[0], times[1]


def _digest(path: Path) -> str | None:
    return hashlib.sha1(path.read_bytes()).hexdigest() if path.exists() else None


def measure_model(spec: str, threads: Sequence[int], args: argparse.Namespace) -> list[dict]:
    """Optimize (cold, warm) and time one model at each thread count: one row per thread count."""
    import onnx

    from eqsat import onnx_io
    def say(msg: str) -> None:
        print(f"[{datetime.datetime.now():%H:%M:%S}] {spec}: {msg}", file=sys.stderr, flush=True)

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="eqsat-speedup-") as tmp:
        tmpd = Path(tmp)
        try:
            original = build_model(spec)
            onnx.save(original, tmpd / "model.onnx")
        except Exception as e:  # a row, not the end of the benchmark
            say(f"cannot build: {e}")
            return [{"model": spec, "threads": t, "status": "error", "error": f"build: {type(e).__name__}: {e}"}
                    for t in threads]
        for t in threads:
            row: dict[str, Any] = {"model": spec, "threads": t, "status": "ok", "error": None}
            cache = tmpd / f"cache-t{t}"  # fresh: the cold run measures every configuration
            runs = {}
            for phase in ("cold", "warm"):
                out_model = tmpd / f"optimized-t{t}-{phase}.onnx"
                say(f"optimizing, {t} thread(s), {phase} cost cache")
                runs[phase] = run_worker({"model_path": str(tmpd / "model.onnx"), "out_model": str(out_model),
                                          "threads": t, "cache_dir": str(cache), "time_limit": args.time_limit,
                                          "candidates": args.candidates, "verbose": args.verbose}, args.timeout)
                r = runs[phase]
                row[f"optimize_{phase}_s"] = r.get("seconds")
                row[f"{phase}_measured"] = r.get("measured")
                if "error" in r:
                    say(f"{phase} run failed: {r['error']}")
                else:
                    say(f"{phase}: {r['seconds']:.1f} s, {r['measured']} configurations measured, "
                        f"{'original kept' if r['kept_original'] else 'optimized'}")
            cold, warm = runs["cold"], runs["warm"]
            use = "cold" if "error" not in cold else "warm" if "error" not in warm else None
            errors = [f"{p}: {runs[p]['error']}" for p in ("cold", "warm") if "error" in runs[p]]
            if errors:
                row["error"] = "; ".join(errors)
                row["status"] = "partial" if use is not None else "error"
            row["kept_original_warm"] = warm.get("kept_original") if "error" not in warm else None
            paths = {p: tmpd / f"optimized-t{t}-{p}.onnx" for p in ("cold", "warm")}
            row["same_result"] = (_digest(paths["cold"]) == _digest(paths["warm"])
                                  if "error" not in cold and "error" not in warm else None)
            if use is not None:
                r = runs[use]
                row.update({k: r[k] for k in ("kept_original", "predicted_before_ms", "predicted_after_ms",
                                              "nodes_before", "nodes_after", "checked")})
                cands = r.get("candidates") or []
                row.update({"timed": use, "stage_seconds_cold": cold.get("stage_seconds"),
                            "verify_latency_ms": r.get("latency_ms"), "candidates": cands,
                            "candidates_timed": len(cands),
                            "first_choice_fastest": cands[0]["chosen"] if len(cands) >= 2 else None})
                try:
                    optimized = onnx.load(paths[use])
                    feeds = onnx_io.random_feeds(original, seed=0)
                    a, b = time_pair(original, optimized, feeds, t, args.rounds, batch_ms=args.batch_ms)
                    row.update(paired_speedup(a, b))
                    row["original_round_ms"], row["optimized_round_ms"] = a, b
                    if optimized.SerializeToString() == original.SerializeToString():
                        # the same model: 1x by identity; the timed ratio is this machine's noise, kept apart
                        row["identical"] = True
                        row["noise_ratio"] = row["speedup"]
                        row.update({"speedup": 1.0, "ci_low": 1.0, "ci_high": 1.0})
                    say(f"{t} thread(s): {row['original_ms']:.3f} ms -> {row['optimized_ms']:.3f} ms, "
                        f"{row['speedup']:.3f}x [{row['ci_low']:.3f}, {row['ci_high']:.3f}]")
                except Exception as e:  # a row, not the end of the benchmark
                    row["status"] = "error"
                    row["error"] = "; ".join(filter(None, [row["error"], f"timing: {type(e).__name__}: {e}"]))
                    say(f"timing failed: {e}")
            rows.append(row)
    return rows


def metadata(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """Commit, date, machine, onnxruntime, the command and the method."""
    import platform

    import onnxruntime as ort

    from eqsat.costs import OnnxRuntimeCostModel

    ident = OnnxRuntimeCostModel().device_identity()
    return {"commit": git_commit(mark_uncommitted=True), "date": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
            "cpu": ident["cpu"], "cores": ident["cores"], "onnxruntime": ort.__version__,
            "python": platform.python_version(),
            "graph_optimization_level": str(ort.SessionOptions().graph_optimization_level).split(".")[-1],
            "command": "python benchmarks/speedup.py " + " ".join(shlex.quote(a) for a in argv),
            "threads": list(args.threads), "rounds": args.rounds, "batch_ms": args.batch_ms,
            "time_limit": args.time_limit, "timeout": args.timeout, "candidates": args.candidates,
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
            "ci": f"{CI_LEVEL:.0%} percentile bootstrap of the median per-round ratio over rounds "
                  f"({BOOTSTRAP} resamples, seed 0)"}


def huge_pages_env(environ: Mapping[str, str], platform: str) -> dict[str, str] | None:
    """The environment to run again with so that glibc's malloc asks for transparent huge pages, or None where
    it already does or this is not Linux (glibc)."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    if platform != "linux" or HUGE_PAGES in tunables.split(":"):
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join(filter(None, [tunables, HUGE_PAGES]))}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or a worker, or re-render saved results)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", metavar="NAME", help="default: the whole suite")
    ap.add_argument("--quick", action="store_true", help=f"the small set: {', '.join(QUICK)}")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds (default 20)")
    ap.add_argument("--batch-ms", type=float, default=10.0, help="least time of one batch of runs (default 10)")
    ap.add_argument("--time-limit", type=float, default=120.0, help="optimize()'s time limit in seconds")
    ap.add_argument("--timeout", type=float, default=900.0, help="kill one optimization after this many seconds")
    ap.add_argument("--candidates", type=int, default=4,
                    help="optimize(candidates=K): graphs extracted and timed per model (default 4)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--verbose", action="store_true", help="optimize()'s progress lines")
    ap.add_argument("--default-malloc", action="store_true",
                    help="do not ask glibc's malloc for transparent huge pages (see above)")
    ap.add_argument("--render", metavar="JSON", help="only re-render the files of a saved speedup.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        try:
            res = worker(json.loads(args.worker))
        except Exception as e:  # reported as the row's error
            traceback.print_exc()
            res = {"error": f"{type(e).__name__}: {e}"}
        Path(args.worker_result).write_text(json.dumps(res))
        return 0
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        print(write_results(Path(args.out), saved["meta"], saved["rows"]))
        return 0
    if any(t < 1 for t in args.threads) or args.rounds < 1 or args.candidates < 1:
        ap.error("--threads, --rounds and --candidates must be positive")
    env = None if args.default_malloc else huge_pages_env(os.environ, sys.platform)
    if env is not None:  # glibc reads its tunables at start: run again with them (the workers inherit them)
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *argv], env)
    models = args.models or (list(QUICK) if args.quick else all_models())
    from eqsat import models as zoo
    known = set(zoo.builtin_models()) | set(zoo.zoo_names())
    unknown = [m for m in models if m.partition(":")[0] not in known]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {sorted(known)}")
    meta = metadata(args, argv)  # the commit as the run starts
    rows: list[dict] = []
    t0 = time.perf_counter()
    for m in models:
        rows += measure_model(m, args.threads, args)
    meta["wall_s"] = round(time.perf_counter() - t0, 1)
    print(write_results(Path(args.out), meta, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
