"""Held-out coverage of TASO's shipped rules: how many of them the default rules derive in an e-graph.

TASO ships 133 substitutions (``graph_subst.pb``); Tensat's repository has them as text, 120 one-output rules in
``converted.txt`` and 13 two-output rules as line pairs in ``converted_multi.txt`` (uwplse/tensat). Neither file is
part of eqsat: pass their paths. Each rule is translated into eqsat's pattern language over the shapes of TASO's
generator (inputs 1-3 ``(2, 4)``, 4-6 ``(4, 4)`` or, in a 4-D rule, ``(4, 4, 3, 3)``, 7-9 ``(2, 4, 5, 5)``, 10-12
``(4, 4, 3, 3)``, 13-15 ``(4, 4, 1, 3)``, 16-18 ``(4, 4, 3, 1)``, 19 ``(4, 1, 3, 3)``): TASO's "same" convolution
gets the pads its kernel needs and the group count its shapes imply, and a bias. TASO's convolutions have none;
eqsat's always do, so each kernel carries a bias of its own, which follows the kernel (the bias of a sum of kernels
is the sum of theirs, of kernels stacked the stack, of kernels side by side on the input channels the sum) as the
rule generator writes its kernels, except where that statement is false (a convolution over a sum of inputs adds
its bias once): there the bias is zero (``--zero-bias`` uses zero everywhere, TASO's exact statement; its sums and
stacks of zero vectors are then terms the rules do not equate with one zero vector, which the counts show).
Every translation is checked numerically on random values before it is used.

A rule is derived when saturating its source alone (its variables as graph inputs) for ``--iters`` iterations
with the default rules (``eqsat.pipeline.default_rules``) builds its target in the source's e-class (each output
of a two-output rule), as ``eqsat.rules.derivable`` checks a candidate.

Run: ``python benchmarks/taso_coverage.py --single PATH/converted.txt --multi PATH/converted_multi.txt
[--iters 5] [--zero-bias] [--out benchmarks/results/taso_coverage.md]``. The results file names the rules not
derived by their index in the files and their family (``eqsat.rules.corpus.family``), not by their text.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import ran_as

from eqsat.ir.rule import Rule, evaluate, parse
from eqsat.rules import corpus, derivable

#: Shapes of TASO's generator's inputs by number (``input_k``); the 4-D form of inputs 1-6 in rules over images.
SHAPES = {**{i: (2, 4) for i in (1, 2, 3)}, **{i: (4, 4) for i in (4, 5, 6)}, **{i: (2, 4, 5, 5) for i in (7, 8, 9)},
          **{i: (4, 4, 3, 3) for i in (10, 11, 12)}, **{i: (4, 4, 1, 3) for i in (13, 14, 15)},
          **{i: (4, 4, 3, 1) for i in (16, 17, 18)}, 19: (4, 1, 3, 3), 20: ()}
SHAPES_4D = (4, 4, 3, 3)

Tree = str | list["Tree"]


def read_tree(text: str) -> Tree:
    """An S-expression of Tensat's rule text as nested lists of tokens."""
    tokens = re.findall(r"\(|\)|[^\s()]+", text)
    pos = 0

    def expr() -> Tree:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok != "(":
            return tok
        items = []
        while tokens[pos] != ")":
            items.append(expr())
        pos += 1
        return items

    return expr()


def read_rules(single: Path, multi: Path) -> list[tuple[str, list[str], list[str]]]:
    """``(name, sources, targets)`` of every rule: ``s<k>`` the k-th line of ``single``, ``m<k>`` the k-th pair of
    lines of ``multi``."""
    out = []
    for k, line in enumerate(single.read_text().strip().splitlines()):
        lhs, rhs = line.split("=>")
        out.append((f"s{k}", [lhs], [rhs]))
    lines = multi.read_text().strip().splitlines()
    for k in range(0, len(lines), 2):
        (l1, r1), (l2, r2) = (x.split("=>") for x in lines[k:k + 2])
        out.append((f"m{k // 2}", [l1, l2], [r1, r2]))
    return out


def _inputs(t: Tree, acc: set[int]) -> set[int]:
    if isinstance(t, str):
        if t.startswith("?input_"):
            acc.add(int(t[len("?input_"):]))
    else:
        for x in t:
            _inputs(x, acc)
    return acc


class Translator:
    """Tensat's TASO terms as eqsat patterns over variables ``?i<k>`` (biases ``?b<k>``) of TASO's shapes."""

    def __init__(self, shapes: dict[int, tuple[int, ...]], zero_bias: bool) -> None:
        self.shapes = shapes
        self.zero_bias = zero_bias
        self.env: dict[str, np.ndarray] = {}

    def shape(self, pattern: str) -> tuple[int, ...]:
        """The shape of a translated term."""
        return tuple(np.shape(evaluate(parse(pattern), self.env)))

    def bias(self, kernel: Tree) -> str:
        """The bias that travels with a kernel term (see the module docstring)."""
        if self.zero_bias:
            return f"(const_zero :shape [{self.shape(self.term(kernel))[0]}])"
        if isinstance(kernel, str):
            k = int(kernel[len("?input_"):])
            self.env[f"?b{k}"] = np.zeros(self.shapes[k][0])
            return f"?b{k}"
        head = kernel[0]
        if head in ("ewadd", "ewmul"):
            return f"({head} {self.bias(kernel[1])} {self.bias(kernel[2])})"
        if head == "concat" and kernel[1] == "0":
            return f"(concat :axis 0 {self.bias(kernel[3])} {self.bias(kernel[4])})"
        if head == "concat" and kernel[1] == "1":
            return f"(ewadd {self.bias(kernel[3])} {self.bias(kernel[4])})"
        raise ValueError(f"no bias for a kernel {kernel}")

    def term(self, t: Tree) -> str:
        """One term."""
        if isinstance(t, str):
            k = int(t[len("?input_"):])
            self.env.setdefault(f"?i{k}", np.zeros(self.shapes[k]))
            return f"?i{k}"
        head = t[0]
        if head == "matmul":
            if t[1] != "0":
                raise ValueError("a matmul with a fused activation")
            return f"(matmul {self.term(t[2])} {self.term(t[3])})"
        if head in ("ewadd", "ewmul"):
            return f"({head} {self.term(t[1])} {self.term(t[2])})"
        if head == "relu":
            return f"(relu {self.term(t[1])})"
        if head == "concat":  # (concat axis ndim a b)
            return f"(concat :axis {t[1]} {self.term(t[3])} {self.term(t[4])})"
        if head == "conv2d":  # (conv2d stride_h stride_w pad act x w): pad 0 is "same", act 2 relu
            sh, sw, pad, act = t[1:5]
            if (sh, sw, pad) != ("1", "1", "0"):
                raise ValueError("a convolution other than stride 1, 'same'")
            x, w = self.term(t[5]), self.term(t[6])
            xs, ws = self.shape(x), self.shape(w)
            ph, pw = (ws[2] - 1) // 2, (ws[3] - 1) // 2
            return (f"(conv2d :pads [{ph} {pw} {ph} {pw}] :groups {xs[1] // ws[1]} :act {1 if act == '2' else 0} "
                    f"{x} {w} {self.bias(t[6])})")
        raise ValueError(f"an operator the translation does not know: {head}")


def translate(sources: Sequence[str], targets: Sequence[str], zero_bias: bool
              ) -> tuple[list[str], list[str], dict[str, tuple[int, ...]]]:
    """A rule's sources and targets as eqsat patterns, with the shapes of their variables. A target
    ``(split_0 (split AXIS t))`` (``split_1``) is the first (second) piece of ``t``, cut where the first source's
    size along the axis ends."""
    trees_l, trees_r = [read_tree(x) for x in sources], [read_tree(x) for x in targets]
    text = " ".join([*sources, *targets])
    four_d = " 4 " in text or "conv2d" in text
    used: set[int] = set()
    for t in trees_l + trees_r:
        _inputs(t, used)
    tr = Translator({k: SHAPES_4D if four_d and k <= 6 else SHAPES[k] for k in used}, zero_bias)
    lhs = [tr.term(t) for t in trees_l]
    rhs = []
    for t in trees_r:
        if isinstance(t, list) and t[0] in ("split_0", "split_1"):
            axis, inner = int(t[1][1]), tr.term(t[1][2])
            first = tr.shape(lhs[0])[axis]
            start, size = (0, first) if t[0] == "split_0" else (first, tr.shape(lhs[1])[axis])
            rhs.append(f"(split :axis {axis} :start {start} :size {size} {inner})")
        else:
            rhs.append(tr.term(t))
    return lhs, rhs, {v: a.shape for v, a in tr.env.items()}


def holds(lhs: Sequence[str], rhs: Sequence[str], shapes: dict[str, tuple[int, ...]], seed: int = 0) -> bool:
    """Whether a translation holds on random values."""
    rng = np.random.default_rng(seed)
    env = {v: rng.standard_normal(s) for v, s in shapes.items()}
    return all(np.allclose(evaluate(parse(a), env), evaluate(parse(b), env)) for a, b in zip(lhs, rhs, strict=True))


def measure(rules: Sequence[tuple[str, list[str], list[str]]], engine_rules: Sequence[Rule], iters: int,
            zero_bias: bool) -> list[dict[str, Any]]:
    """Translate, check and derive every rule; one record each."""
    out = []
    for name, sources, targets in rules:
        lhs, rhs, shapes = translate(sources, targets, zero_bias)
        how = "zero" if zero_bias else "kernel"
        if not zero_bias and not holds(lhs, rhs, shapes):  # its statement with biases is false: TASO's, unbiased
            lhs, rhs, shapes = translate(sources, targets, True)
            how = "zero (with biases it is false)"
        if not holds(lhs, rhs, shapes):
            raise AssertionError(f"{name}: the translation does not hold numerically")
        t0 = time.perf_counter()
        derived, cut = derivable._saturate_and_check([(tuple(lhs), tuple(rhs))], shapes, engine_rules, iters,
                                                     50_000, 60.0)
        out.append({"name": name, "outputs": len(lhs), "derived": derived[0], "limit_reached": cut, "bias": how,
                    "family": corpus.family([*lhs, *rhs]), "seconds": round(time.perf_counter() - t0, 2)})
    return out


def report(records: Sequence[dict[str, Any]], iters: int, zero_bias: bool) -> str:
    """The markdown results."""
    n = sum(r["derived"] for r in records)
    lines = ["# Held-out coverage of TASO's shipped rules", "", f"Ran as {ran_as()}.", "",
             f"Biases: {'zero everywhere (TASO exactly)' if zero_bias else 'each kernel its own (zero where false)'}"
             f"; {iters} iterations per rule with the default rules.", "",
             f"**Derived: {n} of {len(records)}** ({sum(r['derived'] for r in records if r['outputs'] == 1)} of "
             f"{sum(r['outputs'] == 1 for r in records)} one-output rules, "
             f"{sum(r['derived'] for r in records if r['outputs'] == 2)} of {sum(r['outputs'] == 2 for r in records)} "
             "two-output rules).", "", "| rule | outputs | family | limit reached |", "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['outputs']} | {r['family']} | {'yes' if r['limit_reached'] else 'no'} |"
              for r in records if not r["derived"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Parse the command line, measure, print and save."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--single", type=Path, required=True, help="Tensat's converted.txt (one-output rules)")
    ap.add_argument("--multi", type=Path, required=True, help="Tensat's converted_multi.txt (two-output rules)")
    ap.add_argument("--iters", type=int, default=5, help="saturation iterations per rule (default 5)")
    ap.add_argument("--zero-bias", action="store_true", help="zero biases everywhere (TASO's exact statement)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "taso_coverage.md")
    ap.add_argument("--json", type=Path, help="also write the per-rule records as JSON")
    args = ap.parse_args()
    from eqsat.pipeline import default_rules

    records = measure(read_rules(args.single, args.multi), default_rules(), args.iters, args.zero_bias)
    text = report(records, args.iters, args.zero_bias)
    print(text)
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
