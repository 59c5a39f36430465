"""The grouped-convolution rules on the built-in models: e-graph growth, saturation time and optimized cost with
and without them, and whether a grouped rewrite is found (a rule fired) and chosen (in the written graph).

Run: ``python benchmarks/grouped_rules.py [--costs gpu-sim] [--time-limit 60] [--opt-in] [MODEL ...]`` (default:
TASO's seven, the small CNN and MobileNetV2, whose depthwise convolutions have as many groups as channels); writes
``benchmarks/results/grouped_rules_<costs>.md``. "Without" is the default rules less those of
``eqsat.rules.grouped`` and the relu fusion of a convolution of any group count; ``--opt-in`` adds a run with
``eqsat.rules.grouped.OPT_IN_RULES`` on top of the default rules.
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

MODELS = ("taso_resnext50", "taso_nasnet_a", "taso_inception_v3", "taso_squeezenet", "taso_vgg19", "taso_bert",
          "taso_nasrnn", "small_cnn", "mobilenet_v2")
#: The rules this change added to the defaults.
ADDED = {r.name for r in GROUPED_RULES} | {"conv-relu-fuse"}


def rule_sets(opt_in: bool) -> dict[str, list[Rule]]:
    """The rule sets compared, by label."""
    from eqsat.pipeline import default_rules

    full = default_rules()
    sets = {"without": [r for r in full if r.name not in ADDED], "with": full}
    if opt_in:
        sets["with + opt-in"] = full + list(OPT_IN_RULES)
    return sets


def run_one(model: str, rules: Sequence[Rule], costs: str, time_limit: float) -> dict[str, Any]:
    """Optimize one model with one rule set; what the table shows."""
    from eqsat import optimize

    t0 = time.perf_counter()
    res = optimize(builtin_models()[model](), rules=list(rules), cost_model=costs, time_limit=time_limit, cache=False)
    ours = ADDED | {r.name for r in OPT_IN_RULES}
    grouped = {k: v for k, v in res.rules_fired.items() if k.removesuffix("-rev") in ours}
    groups_before = sorted({n.p["groups"] for n in res.original.nodes if n.p.get("groups", 1) > 1})
    groups_after = sorted({n.p["groups"] for n in res.graph.nodes if n.p.get("groups", 1) > 1})
    return {"model": model, "enodes": res.egraph_size[0], "stop": res.stop_reason,
            "saturate": res.stage_seconds.get("saturate", 0.0), "total": time.perf_counter() - t0,
            "before": res.cost_before, "after": res.cost_after, "fired": sum(grouped.values()),
            "fired_rules": grouped, "groups": (groups_before, groups_after)}


def table(rows: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """The markdown table."""
    out = ["| model | rules | e-nodes | stop | saturate (s) | cost before | cost after | grouped-rule matches | "
           "groups > 1 before -> after |", "|---|---|---|---|---|---|---|---|---|"]
    for label, r in rows:
        before, after = r["groups"]
        out.append(f"| {r['model']} | {label} | {r['enodes']} | {r['stop']} | {r['saturate']:.1f} | "
                   f"{r['before']:.4f} | {r['after']:.4f} | {r['fired']} | {before} -> {after} |")
    return out


def main() -> None:
    """Parse the command line, run, print and save."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--costs", default="gpu-sim")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--opt-in", action="store_true", help="also run with eqsat.rules.grouped.OPT_IN_RULES")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for model in args.models:
        for label, rules in rule_sets(args.opt_in).items():
            r = run_one(model, rules, args.costs, args.time_limit)
            print(f"{model} {label}: {r['enodes']} e-nodes ({r['stop']}), saturate {r['saturate']:.1f} s, "
                  f"{r['before']:.4f} -> {r['after']:.4f}, grouped rules {r['fired_rules']}, groups {r['groups']}",
                  flush=True)
            rows.append((label, r))
    out = args.out or Path(__file__).parent / "results" / f"grouped_rules_{args.costs}.md"
    text = "\n".join([f"# Grouped-convolution rules on the built-in models ({args.costs} costs)", "",
                      f"Ran as {ran_as()}; time limit {args.time_limit:g} s per run, cached transformations off.", "",
                      *table(rows)]) + "\n"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
