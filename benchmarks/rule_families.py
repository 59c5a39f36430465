"""A family of hand-written rules on the built-in models: e-graph growth, saturation time and optimized cost with
and without them, and whether the family's rewrites are found (a rule fired) and chosen (in the written graph).

Run: ``python benchmarks/rule_families.py [--family grouped|over-split] [--costs gpu-sim] [--time-limit 60]
[--as-written] [--opt-in] [MODEL ...]`` (default: TASO's seven, the small CNN and MobileNetV2, whose depthwise
convolutions have as many groups as channels); writes ``benchmarks/results/<family>_rules_<costs>.md``
(``-as-written`` added with ``--as-written``). "Without" is the default rules less the family's: for ``grouped``
those of ``eqsat.rules.grouped`` and the relu fusion of a convolution of any group count (``--opt-in`` adds a run
with ``eqsat.rules.grouped.OPT_IN_RULES`` on top of the default rules); for ``over-split``, the element-wise
operators moved before a split (``eqsat.rules.over_split``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import ran_as

from eqsat.ir.rule import Rule
from eqsat.models import builtin_models
from eqsat.rules.grouped import GROUPED_RULES, OPT_IN_RULES
from eqsat.rules.over_split import OVER_SPLIT_RULES

MODELS = ("taso_resnext50", "taso_nasnet_a", "taso_inception_v3", "taso_squeezenet", "taso_vgg19", "taso_bert",
          "taso_nasrnn", "small_cnn", "mobilenet_v2")
#: Each family's rules among the defaults.
FAMILIES = {"grouped": {r.name for r in GROUPED_RULES} | {"conv-relu-fuse"},
            "over-split": {r.name for r in OVER_SPLIT_RULES}}


def rule_sets(family: str, opt_in: bool) -> dict[str, list[Rule]]:
    """The rule sets compared, by label."""
    from eqsat.pipeline import default_rules

    full = default_rules()
    sets = {"without": [r for r in full if r.name not in FAMILIES[family]], "with": full}
    if opt_in:
        sets["with + opt-in"] = full + list(OPT_IN_RULES)
    return sets


def run_one(model: str, rules: Sequence[Rule], costs: str, time_limit: float, family: str = "grouped",
            as_written: bool = False) -> dict[str, Any]:
    """Optimize one model with one rule set; what the table shows."""
    from eqsat import optimize

    t0 = time.perf_counter()
    res = optimize(builtin_models()[model](), rules=list(rules), cost_model=costs, time_limit=time_limit, cache=False,
                   as_written=as_written)
    ours = FAMILIES[family] | ({r.name for r in OPT_IN_RULES} if family == "grouped" else set())
    grouped = {k: v for k, v in res.rules_fired.items() if k.removesuffix("-rev") in ours}
    groups_before = sorted({n.p["groups"] for n in res.original.nodes if n.p.get("groups", 1) > 1})
    groups_after = sorted({n.p["groups"] for n in res.graph.nodes if n.p.get("groups", 1) > 1})
    return {"model": model, "enodes": res.egraph_size[0], "stop": res.stop_reason,
            "saturate": res.stage_seconds.get("saturate", 0.0), "total": time.perf_counter() - t0,
            "before": res.cost_before, "after": res.cost_after, "fired": sum(grouped.values()),
            "fired_rules": grouped, "groups": (groups_before, groups_after),
            "ops": {op: (sum(n.op == op for n in res.original.nodes), sum(n.op == op for n in res.graph.nodes))
                    for op in sorted({n.op for n in res.original.nodes} | {n.op for n in res.graph.nodes})}}


def _ops_changed(r: dict[str, Any]) -> str:
    """The operators whose count the optimization changed, ``op before -> after``."""
    return ", ".join(f"{op} {a} -> {b}" for op, (a, b) in r["ops"].items() if a != b) or "-"


def table(rows: Sequence[tuple[str, dict[str, Any]]], family: str = "grouped") -> list[str]:
    """The markdown table."""
    last = "groups > 1 before -> after" if family == "grouped" else "operators before -> after"
    out = ["| model | rules | e-nodes | stop | saturate (s) | total (s) | cost before | cost after | speedup % | "
           f"{family} matches | {last} |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, r in rows:
        before, after = r["groups"]
        change = f"{before} -> {after}" if family == "grouped" else _ops_changed(r)
        out.append(f"| {r['model']} | {label} | {r['enodes']} | {r['stop']} | {r['saturate']:.1f} | "
                   f"{r['total']:.1f} | {r['before']:.4f} | {r['after']:.4f} | "
                   f"{100 * (r['before'] / r['after'] - 1):.1f} | {r['fired']} | {change} |")
    return out


def main() -> None:
    """Parse the command line, run, print and save."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--family", choices=sorted(FAMILIES), default="grouped")
    ap.add_argument("--as-written", action="store_true", help="import the models as written (TASO's originals)")
    ap.add_argument("--costs", default="gpu-sim")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--opt-in", action="store_true", help="also run with eqsat.rules.grouped.OPT_IN_RULES")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for model in args.models:
        for label, rules in rule_sets(args.family, args.opt_in).items():
            r = run_one(model, rules, args.costs, args.time_limit, args.family, args.as_written)
            print(f"{model} {label}: {r['enodes']} e-nodes ({r['stop']}), saturate {r['saturate']:.1f} s, "
                  f"{r['before']:.4f} -> {r['after']:.4f}, {args.family} rules {r['fired_rules']}, "
                  f"groups {r['groups']}, {_ops_changed(r)}", flush=True)
            rows.append((label, r))
    name = "grouped" if args.family == "grouped" else args.family.replace("-", "_")
    suffix = "_as-written" if args.as_written else ""
    out = args.out or Path(__file__).parent / "results" / f"{name}_rules_{args.costs}{suffix}.md"
    title = {"grouped": "Grouped-convolution rules", "over-split": "Element-wise operators over a split"}[args.family]
    imported = "imported as written" if args.as_written else "imported with the folds"
    text = "\n".join([f"# {title} on the built-in models ({args.costs} costs, {imported})", "",
                      f"Ran as {ran_as()}; time limit {args.time_limit:g} s per run, cached transformations off.", "",
                      *table(rows, args.family)]) + "\n"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
