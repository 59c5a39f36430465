"""Benchmark the greedy and CP-SAT extractors on every e-graph JSON under a folder; writes CSV, Markdown, PNG.

Usage::

    python benchmarks/extraction.py DIR [--time-limit 60] [--workers 8] [--match SUBSTR]
                                        [--out benchmarks/results/extraction]

writes ``OUT.csv``, ``OUT.md`` and ``OUT.png`` (the CSV/Markdown are rewritten after every file, so an
interrupted run keeps what it measured). A file that fails is reported in the table, not a crash.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import math
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from _common import git_commit

from eqsat.extract import extract_cpsat, extract_greedy, load_egraph, validate_selection

COLUMNS = ("file", "nodes", "classes", "greedy_cost", "ilp_cost", "ratio", "improvement", "status", "bound",
           "gap", "greedy_s", "ilp_s", "error")


@dataclass
class Row:
    """One benchmark line (costs are DAG costs recomputed by the validator)."""

    file: str
    nodes: int | None = None
    classes: int | None = None
    greedy_cost: float | None = None
    ilp_cost: float | None = None
    ratio: float | None = None
    improvement: float | None = None
    status: str = "error"
    bound: float | None = None
    gap: float | None = None
    greedy_s: float | None = None
    ilp_s: float | None = None
    error: str = ""


def run_one(path: Path, root: Path, time_limit: float, workers: int, seed: int | None) -> Row:
    """Load, run greedy and CP-SAT on one file; errors become a row with ``status == 'error'``."""
    row = Row(file=str(path.relative_to(root)) if path != root else path.name)
    try:
        eg = load_egraph(path)
        row.nodes, row.classes = eg.num_nodes, eg.num_classes
        g = extract_greedy(eg)
        row.greedy_cost, row.greedy_s = g.cost, g.seconds
        ext = extract_cpsat(eg, time_limit=time_limit, num_workers=workers, random_seed=seed)
        cost = validate_selection(eg, ext.selection)  # belt and braces: re-check what we report
        row.ilp_cost, row.status, row.ilp_s = cost, ext.status, ext.seconds
        row.bound, row.gap = ext.bound, ext.gap
        row.ratio = _ratio(cost, g.cost)
        row.improvement = _improvement(cost, g.cost)
        if cost > g.cost:
            row.error = "WORSE THAN GREEDY"
    except Exception as e:  # noqa: BLE001 -- a benchmark reports failures instead of stopping
        row.error = f"{type(e).__name__}: {e}"
        traceback.print_exc(file=sys.stderr)
    return row


def _ratio(cost: float, greedy: float) -> float | None:
    if greedy == 0:
        return 1.0 if cost == 0 else None
    return cost / greedy


def _improvement(cost: float, greedy: float) -> float:
    """(greedy - ILP) / |greedy|: the fraction saved over greedy (also meaningful for negative costs)."""
    if greedy == 0:
        return 0.0 if cost == 0 else -math.copysign(math.inf, cost)
    return (greedy - cost) / abs(greedy)


def _cell(v: object, digits: int = 6) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if math.isfinite(v) else str(v)
    return str(v)


def _table_lines(rows: list[Row]) -> list[str]:
    head = ["file", "nodes", "classes", "greedy cost", "ILP cost", "saved vs greedy", "status", "bound",
            "gap", "time (s)", "error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        gap = "-" if r.gap is None else f"{100 * r.gap:.3g} %"
        saved = "-" if r.improvement is None else f"{100 * r.improvement:.3g} %"
        cells = [r.file, _cell(r.nodes), _cell(r.classes), _cell(r.greedy_cost, 10), _cell(r.ilp_cost, 10),
                 saved, r.status, _cell(r.bound, 10), gap,
                 "-" if r.ilp_s is None else f"{r.ilp_s:.2f}", r.error.replace("|", "/")[:120]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary_lines(rows: list[Row]) -> list[str]:
    """Counts of statuses, improvements over greedy and failures."""
    ok = [r for r in rows if r.ilp_cost is not None]
    better = sum(1 for r in ok if r.ilp_cost < r.greedy_cost)  # type: ignore[operator]
    worse = sum(1 for r in ok if r.ilp_cost > r.greedy_cost)  # type: ignore[operator]
    statuses = {s: sum(1 for r in rows if r.status == s) for s in ("optimal", "feasible", "greedy", "error")}
    total_s = sum(r.ilp_s or 0.0 for r in rows)
    return [f"- files: {len(rows)}; " + ", ".join(f"{k}: {v}" for k, v in statuses.items()),
            f"- CP-SAT strictly better than greedy on {better} files, equal on {len(ok) - better - worse}, "
            f"**worse on {worse}**",
            f"- total CP-SAT time: {total_s:.1f} s"]


def write_markdown(path: Path, rows: list[Row], args: argparse.Namespace, commit: str, started: str) -> None:
    """The results table with the run's metadata."""
    meta = [f"# Extraction benchmark: {args.dir}", "",
            f"- date: {started}", f"- git commit: {commit}",
            f"- command: `python benchmarks/extraction.py {' '.join(sys.argv[1:])}`",
            f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            f"- CP-SAT: time limit {args.time_limit} s per e-graph, {args.workers} workers, seed {args.seed}",
            "- costs are DAG costs (sum over distinct chosen e-nodes) recomputed by `validate_selection`; "
            "time (s) is the whole CP-SAT extraction (greedy + model + solve)", ""]
    text = "\n".join(meta + summary_lines(rows) + [""] + _table_lines(rows)) + "\n"
    path.write_text(text, encoding="utf-8")


def write_csv(path: Path, rows: list[Row]) -> None:
    """One line per file, columns as in :data:`COLUMNS`."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in asdict(r).items()})


def write_plot(path: Path, rows: list[Row]) -> None:
    """Two panels: saving of CP-SAT over greedy (%) and CP-SAT time (log scale) per file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.ilp_cost is not None]
    if not ok:
        return
    names = [r.file for r in ok]
    saved = [100 * r.improvement if r.improvement is not None else float("nan") for r in ok]
    colors = {"optimal": "tab:green", "feasible": "tab:orange", "greedy": "tab:gray"}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(8.0, 0.22 * len(ok)), 8), sharex=True)
    ax1.bar(range(len(ok)), saved, color=[colors.get(r.status, "tab:red") for r in ok])
    ax1.axhline(0.0, color="black", linewidth=0.8)
    ax1.set_ylabel("(greedy - ILP) / |greedy|  (%)")
    ax1.set_title("CP-SAT vs greedy DAG extraction (green optimal, orange feasible, grey = greedy kept)")
    ax2.bar(range(len(ok)), [max(r.ilp_s or 0.0, 1e-3) for r in ok], color="tab:blue")
    ax2.set_yscale("log")
    ax2.set_ylabel("CP-SAT time (s, log)")
    ax2.set_xticks(range(len(ok)))
    ax2.set_xticklabels(names, rotation=90, fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="folder searched recursively for *.json (or one .json file)")
    p.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT seconds per e-graph (default 60)")
    p.add_argument("--workers", type=int, default=8, help="CP-SAT workers (default 8)")
    p.add_argument("--seed", type=int, default=None, help="CP-SAT random seed")
    p.add_argument("--match", default=None, help="only files whose relative path contains this substring")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/extraction"),
                   help="output prefix: writes OUT.csv, OUT.md, OUT.png (default: %(default)s)")
    return p.parse_args(argv)


def find_files(root: Path, match: str | None) -> list[Path]:
    """Every *.json under ``root`` (recursively, sorted), optionally filtered by a substring."""
    files = [root] if root.is_file() else sorted(root.rglob("*.json"))
    return [f for f in files if match is None or match in str(f.relative_to(root) if f != root else f.name)]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0, or 1 when a file errored or CP-SAT was worse than greedy."""
    args = parse_args(argv)
    if not args.dir.exists():
        print(f"error: {args.dir} does not exist", file=sys.stderr)
        return 2
    files = find_files(args.dir, args.match)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    md, csv_path, png = (args.out.with_name(args.out.name + ext) for ext in (".md", ".csv", ".png"))
    started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    commit = git_commit()
    rows: list[Row] = []
    print(f"{'file':<60} {'nodes':>6} {'classes':>7} {'greedy':>12} {'ILP':>12} {'status':>8} {'bound':>12} "
          f"{'time':>7}", flush=True)
    t0 = time.perf_counter()
    for f in files:
        r = run_one(f, args.dir, args.time_limit, args.workers, args.seed)
        rows.append(r)
        print(f"{r.file[-60:]:<60} {_cell(r.nodes):>6} {_cell(r.classes):>7} {_cell(r.greedy_cost, 8):>12} "
              f"{_cell(r.ilp_cost, 8):>12} {r.status:>8} {_cell(r.bound, 8):>12} "
              f"{'-' if r.ilp_s is None else f'{r.ilp_s:.2f}':>7} {r.error}", flush=True)
        write_csv(csv_path, rows)
        write_markdown(md, rows, args, commit, started)
    write_plot(png, rows)
    print("\n".join(summary_lines(rows)))
    print(f"wrote {md}, {csv_path}, {png} ({time.perf_counter() - t0:.0f} s)")
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
