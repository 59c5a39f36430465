"""The comparison's plot: best cost over time, one panel per model, one step line per method.

Used by ``eqsat compare --plot FILE`` and ``benchmarks/compare.py``; it draws the JSON form of the results
(:meth:`eqsat.search.comparison.ComparisonResult.as_dict`), so saved files can be drawn again. matplotlib is
imported only when a plot is drawn (it is in the ``bench`` and ``test`` extras, not a dependency of eqsat).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eqsat.errors import UsageError

FORMATS = ("png", "svg", "pdf")
_STYLE = {"eqsat": ("C0", "o"), "backtracking": ("C1", "s"), "sampling": ("C2", "^")}


def plot_format(path: str | Path, option: str = "--plot") -> str:
    """The image format named by ``path``'s extension (png, svg or pdf); a UsageError for any other."""
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in FORMATS:
        raise UsageError(f"{option} {path}: give a .png, .svg or .pdf file (the extension picks the format)")
    return ext


def require_matplotlib(option: str = "--plot") -> None:
    """A UsageError saying how to install matplotlib when it is missing (checked before any work is done)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{option} needs matplotlib, which is not installed; pip install matplotlib (or "
                         "pip install 'eqsat[bench]'), or leave out " + option)


def _linthresh(results: Sequence[dict[str, Any]]) -> float:
    """The linear range of the symlog time axis around 0: the power of ten at or below the first positive time
    of any curve, within [1e-4, 1] s."""
    times = [p[0] for r in results for m in r["methods"].values() for p in (m.get("trace") or []) if p[0] > 0]
    times += [m["seconds_to_best"] for r in results for m in r["methods"].values()
              if m.get("seconds_to_best") and m["seconds_to_best"] > 0]
    first = min(times, default=1.0)
    return min(1.0, max(1e-4, 10.0 ** math.floor(math.log10(first))))


def plot_comparison(results: Sequence[dict[str, Any]], path: str | Path, title: str = "",
                    fmt: str | None = None) -> None:
    """Draw best cost so far against time for each model of ``results`` (one panel each) and save it to
    ``path`` (format ``fmt``, else from the extension).

    Each method is a step line from (0, original cost) to the end of its run, with a marker where it reaches its
    final cost; the original cost is a dotted line. Time is on a log axis that is linear near 0 (symlog), so
    the start of every curve is drawn. A method that failed (no trace) is named in the legend only.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = list(results)
    n = max(len(results), 1)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    linthresh = _linthresh(results)
    for k, (ax, r) in enumerate(zip(axes.flat, results, strict=False)):
        original = r["original_cost"]
        end = max([m.get("seconds") or 0.0 for m in r["methods"].values()] + [linthresh])
        ax.axhline(original, color="0.2", linestyle=":", linewidth=1.2, label="original", zorder=5)
        for i, (method, m) in enumerate(r["methods"].items()):
            color, marker = _STYLE.get(method, (f"C{3 + i}", "D"))
            trace = m.get("trace") or []
            if not trace or m.get("cost") is None:
                ax.plot([], [], color=color, label=f"{method} (failed)")
                continue
            xs = [p[0] for p in trace] + [max(m.get("seconds") or 0.0, trace[-1][0])]
            ys = [p[1] for p in trace] + [trace[-1][1]]
            # earlier methods drawn wider, so a curve that coincides with a later one still shows beside it
            width = max(2.6 - 0.7 * i, 0.9)
            ax.step(xs, ys, where="post", color=color, label=method, linewidth=width, zorder=2 + i)
            at = m.get("seconds_to_best")
            if at is not None and not math.isnan(at):
                ax.plot([at], [m["cost"]], marker=marker, color=color, markersize=6, linestyle="none", zorder=6)
        ax.set_xscale("symlog", linthresh=linthresh, linscale=0.5)
        ax.set_xlim(0, end * 1.05)
        written = ", as written" if r.get("as_written") else ""  # the import eqsat compare --as-written makes
        ax.set_title(f"{r['model']} ({r.get('cost_model', '?')}{written})", fontsize=9)
        ax.set_xlabel(f"seconds (log; linear below {linthresh:g} s)", fontsize=8)
        if k % cols == 0:
            ax.set_ylabel("best cost so far (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(results):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format=fmt or plot_format(path), dpi=110)
    plt.close(fig)
