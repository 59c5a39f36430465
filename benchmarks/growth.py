"""E-graph growth on tiny graphs: e-nodes per iteration under the default rules, and the rules behind it.

Every graph here has at most three operators; saturation should stay small on them (the target is at most
5 000 e-nodes at saturation or after 6 iterations). For each graph the table gives the e-nodes after each
iteration, how the run stopped, and the rules with the most matches (the ones that grow the e-graph).

Run: ``.venv/bin/python benchmarks/growth.py [--rules default|PATH.json] [--iters 6]``; writes
``benchmarks/results/growth.md`` and ``growth.json`` (with ``--rules PATH`` the corpus file at PATH replaces
the committed corpus, e.g. ``git show HEAD:rules/corpus/rules.json > /tmp/base.json`` for a before/after).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from eqsat import engine as E
from eqsat.ir.graph import Graph, TensorInfo, make_node

OUT = Path(__file__).parent / "results" / "growth.md"
TARGET = 5_000

_SAME = {"pads": (1, 1, 1, 1)}


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _graph(nodes: list[Any], weights: dict[str, np.ndarray], inputs: dict[str, tuple[int, ...]],
           outputs: tuple[str, ...]) -> Graph:
    return Graph(tuple(TensorInfo(n, s) for n, s in inputs.items()), weights, tuple(nodes), outputs).validate()


def small_graphs() -> dict[str, Callable[[], Graph]]:
    """Graphs of at most three operators over convolutions, matmuls, element-wise operators and concats."""
    rng = np.random.default_rng(0)
    x = {"x": (1, 8, 8, 8)}
    xy = {"x": (1, 8, 8, 8), "y": (1, 8, 8, 8)}
    cw = {"w1": _w(rng, 8, 8, 3, 3), "b1": _w(rng, 8), "w2": _w(rng, 8, 8, 3, 3), "b2": _w(rng, 8),
          "u1": _w(rng, 8, 8, 1, 1)}
    mw = {"w1": _w(rng, 16, 16), "w2": _w(rng, 16, 16), "w3": _w(rng, 16, 16)}
    m = {"x": (4, 16)}
    mxy = {"x": (4, 16), "y": (4, 16), "z": (4, 16)}

    def conv(i: str, w: str, b: str, out: str, **p: Any) -> Any:
        return make_node("conv2d", {**(_SAME if w != "u1" else {}), **p}, [i, w, b], out)

    return {
        "conv+add": lambda: _graph([conv("x", "w1", "b1", "c"), make_node("ewadd", {}, ["c", "y"], "o")],
                                   cw, xy, ("o",)),
        "conv+relu+add": lambda: _graph([conv("x", "w1", "b1", "c"), make_node("relu", {}, ["c"], "r"),
                                         make_node("ewadd", {}, ["r", "x"], "o")], cw, x, ("o",)),
        "conv+conv+add": lambda: _graph([conv("x", "w1", "b1", "c1"), conv("x", "w2", "b2", "c2"),
                                         make_node("ewadd", {}, ["c1", "c2"], "o")], cw, x, ("o",)),
        "conv(add)": lambda: _graph([make_node("ewadd", {}, ["x", "y"], "s"), conv("s", "w1", "b1", "o")],
                                    cw, xy, ("o",)),
        "conv+conv+concat": lambda: _graph([conv("x", "w1", "b1", "c1"), conv("x", "w2", "b2", "c2"),
                                            make_node("concat", {"axis": 1}, ["c1", "c2"], "o")], cw, x, ("o",)),
        "conv(concat)": lambda: _graph([make_node("concat", {"axis": 0}, ["x", "y"], "s"),
                                        conv("s", "w1", "b1", "o")], cw, xy, ("o",)),
        "conv1x1+conv3x3+add": lambda: _graph([conv("x", "u1", "b1", "c1"), conv("x", "w1", "b2", "c2"),
                                               make_node("ewadd", {}, ["c1", "c2"], "o")], cw, x, ("o",)),
        "matmul+matmul+add": lambda: _graph([make_node("matmul", {}, ["x", "w1"], "a"),
                                             make_node("matmul", {}, ["x", "w2"], "b"),
                                             make_node("ewadd", {}, ["a", "b"], "o")], mw, m, ("o",)),
        "matmul chain": lambda: _graph([make_node("matmul", {}, ["x", "w1"], "a"),
                                        make_node("matmul", {}, ["a", "w2"], "b"),
                                        make_node("matmul", {}, ["b", "w3"], "o")], mw, m, ("o",)),
        "ewmul(ewadd)": lambda: _graph([make_node("ewadd", {}, ["x", "y"], "a"),
                                        make_node("ewmul", {}, ["a", "z"], "o")], {}, mxy, ("o",)),
        "ewadd of ewmuls": lambda: _graph([make_node("ewmul", {}, ["x", "z"], "a"),
                                           make_node("ewmul", {}, ["y", "z"], "b"),
                                           make_node("ewadd", {}, ["a", "b"], "o")], {}, mxy, ("o",)),
        "concat of ewadds": lambda: _graph([make_node("ewadd", {}, ["x", "y"], "a"),
                                            make_node("ewadd", {}, ["z", "x"], "b"),
                                            make_node("concat", {"axis": 1}, ["a", "b"], "o")], {}, mxy, ("o",)),
        "relu(concat)+split": lambda: _graph([make_node("concat", {"axis": 1}, ["x", "y"], "a"),
                                              make_node("relu", {}, ["a"], "r"),
                                              make_node("split", {"axis": 1, "start": 0, "size": 16}, ["r"], "o")],
                                             {}, mxy, ("o",)),
    }


def measure(graph: Graph, rules: list[Any], iters: int = 6, node_limit: int = 200_000,
            multi_iters: int = 1) -> dict[str, Any]:
    """Saturate in process; e-nodes per iteration, stop reason, matches per rule summed over iterations."""
    t = time.perf_counter()
    res = E.saturate(graph, rules, E.Limits(iter_limit=iters, node_limit=node_limit, time_limit=120,
                                            multi_iters=multi_iters), in_process=True)
    fired = res.rules_fired
    stop = str(getattr(res.stop_reason, "value", res.stop_reason))
    return {"enodes": [it.enodes for it in res.iterations], "stop": stop,
            "seconds": time.perf_counter() - t,
            "top": sorted(fired.items(), key=lambda kv: -kv[1])[:5]}


def rules_from(spec: str) -> list[Any]:
    """The default rules, with the corpus read from ``spec`` unless it is ``default``."""
    from eqsat.pipeline import default_rules

    if spec == "default":
        return default_rules()
    from eqsat.rules import engine_worthy
    from eqsat.rules.corpus import load_corpus_rules
    from eqsat.rules.layout import LAYOUT_RULES
    from eqsat.rules.starter import EXTRA_RULES

    rules = [r for r in load_corpus_rules(path=spec) if engine_worthy(r)]
    names = {r.name for r in rules}
    return rules + [r for r in EXTRA_RULES if r.name not in names] + list(LAYOUT_RULES)


def main() -> None:
    """Measure every small graph and write the tables."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rules", default="default")
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--node-limit", type=int, default=200_000)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--baseline", help="a corpus file to measure too, for a before/after table")
    ap.add_argument("--multi-iters", type=int, default=1, help="iterations in which two-output rules run")
    args = ap.parse_args()
    runs = [(args.rules, rules_from(args.rules))]
    if args.baseline:
        runs.insert(0, (args.baseline, rules_from(args.baseline)))
    results: dict[str, dict[str, Any]] = {}
    for label, rules in runs:
        rows = results.setdefault(label, {})
        for name, build in small_graphs().items():
            if args.only and name not in args.only:
                continue
            rows[name] = measure(build(), rules, args.iters, args.node_limit, args.multi_iters)
            print(label, name, rows[name], flush=True)
    lines = ["# E-graph growth on graphs of at most three operators", "",
             f"At most {args.iters} iterations (node limit {args.node_limit}, two-output rules in the first "
             f"{args.multi_iters}); target: at most {TARGET} e-nodes. "
             "`python benchmarks/growth.py" + (f" --baseline {args.baseline}" if args.baseline else "")
             + (f" --multi-iters {args.multi_iters}" if args.multi_iters != 1 else "") + "`.", ""]
    for label, rules in runs:
        lines += [f"## Rules: {label} ({len(rules)} rules)", "",
                  "| graph | e-nodes per iteration | stop | seconds | most matches (rule: matches) |",
                  "|---|---|---|---|---|"]
        for name, r in results[label].items():
            top = ", ".join(f"{k} {v}" for k, v in r["top"][:3])
            lines.append(f"| {name} | {' '.join(map(str, r['enodes']))} | {r['stop']} | {r['seconds']:.2f} | {top} |")
        lines.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    args.out.with_suffix(".json").write_text(json.dumps({"iters": args.iters, "runs": results}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
