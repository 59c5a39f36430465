"""Grouped convolutions as first-class: their groups split and merge, and channel permutations over concatenations.

Hand-written, because the generator enumerates convolutions of literal parameters (stride 1, "same" pads, one or
two groups) while these hold for any strides, pads, dilations, activation and group count: each is a rule over
parameter variables, with the shape guards it needs as conditions. Each is tested numerically on random tensors
and shapes, both directions, group counts 2, 4 and 8 (tests/rules/test_grouped_rules.py), and all but
``conv-input-permute`` are proved by Z3, their parameters left as variables, from axioms declared with the
operators and validated symbolically like every axiom: ``conv-group-merge-any`` (two convolutions of ``g`` groups
side by side are one of ``2g``) and ``conv-concat-out-any`` with ``conv2d``, ``conv-merge-gconv`` (``k`` adjacent
groups are one group of a block-diagonal kernel) with :data:`eqsat.ops.conv.MERGE_GCONV`. A proof of
``conv-input-permute`` needs the shapes of a split's pieces, which the verifier does not model (it is tested
numerically on inputs of unequal channel counts), and ``conv-group-split-input`` follows from
``conv-group-merge`` and ``concat-of-splits`` (a test derives it).

A grouped convolution of ``g`` groups over ``C`` input and ``O`` output channels convolves each ``C/g`` input
channels with its own ``O/g`` kernel rows. So:

* two convolutions of ``g`` groups with kernels of one shape, side by side on the channel axis, are one of ``2g``
  groups over the concatenated inputs and kernels (``conv-group-merge``), and back (``conv-group-split``, where
  the group count is even and the input and kernel are such concatenations);
* ``k`` adjacent groups are one group whose kernel is zero off its ``k`` diagonal blocks (``conv-group-regroup``:
  halves the group count, ``k = 2``, as TASO's ``create_merge_group_convs``; applied again it quarters it, and so
  on down to one group). The kernel is weight-only work that export precomputes;
* the output channels of two convolutions of one input are those of one convolution with the kernels
  concatenated (``conv-concat-out``), both ways.

:data:`OPT_IN_RULES` also split a grouped convolution over any input into two over its channel halves, and permute
a convolution's input channels over a concatenation (the other order, the kernel's input-channel blocks swapped:
weight-only work): sound, but they multiply the e-graph, so they are not in the default rules.
"""

from __future__ import annotations

from eqsat.ir.rule import Rule

#: A convolution's strides, pads and dilations (any values; the rules keep them).
_P = "?st ?pd ?dl"


def _conv(groups: str, x: str, w: str, b: str, act: str = "?act") -> str:
    """A convolution pattern with the shared parameters, a group count (variable or expression) and operands."""
    return f"(conv2d {_P} {groups} {act} {x} {w} {b})"


def _half(size: str) -> str:
    return f"(/ {size} 2)"


def _split(axis: int, start: str, size: str, x: str) -> str:
    return f"(split {axis} {start} {size} {x})"


GROUPED_RULES: tuple[Rule, ...] = (
    # two convolutions side by side on the channel axis are one of twice the groups (block-diagonal kernel)
    Rule("conv-group-merge",
         (f"(concat 1 {_conv('?g', '?x', '?w', '?b')} {_conv('?g', '?y', '?v', '?c')})",),
         (_conv("(* 2 ?g)", "(concat 1 ?x ?y)", "(concat 0 ?w ?v)", "(concat 0 ?b ?c)"),),
         conditions=("(= (shape ?x) (shape ?y))", "(= (shape ?w) (shape ?v))", "(!= ?x ?y)")),
    Rule("conv-group-split",
         (_conv("?g", "(concat 1 ?x ?y)", "(concat 0 ?w ?v)", "(concat 0 ?b ?c)"),),
         (f"(concat 1 {_conv(_half('?g'), '?x', '?w', '?b')} {_conv(_half('?g'), '?y', '?v', '?c')})",),
         conditions=("(= (% ?g 2) 0)", "(= (shape ?x) (shape ?y))", "(= (shape ?w) (shape ?v))")),
    # two adjacent groups are one, the kernel block-diagonal (TASO's merge_gconv with count 2)
    Rule("conv-group-regroup",
         (_conv("?g", "?x", "?w", "?b"),),
         (_conv(_half("?g"), "?x", f"(merge_gconv {_half('?g')} 2 ?w)", "?b"),),
         conditions=("(= (% ?g 2) 0)",)),
    # a channel permutation: the output channels of two convolutions of one input
    Rule("conv-concat-out",
         (f"(concat 1 {_conv('1', '?x', '?w', '?b')} {_conv('1', '?x', '?v', '?c')})",),
         (_conv("1", "?x", "(concat 0 ?w ?v)", "(concat 0 ?b ?c)"),),
         conditions=("(!= ?w ?v)",), bidirectional=True),
)

#: Sound rules that multiply the e-graph, so not default rules (``optimize(model, rules=default_rules() +
#: list(OPT_IN_RULES))`` adds them): a grouped convolution over any input as two over its channel halves, each with
#: half the groups and the matching half of the kernel and bias (the per-group convolutions, halving again down to
#: one group each: a convolution of g groups grows into 2g - 1, each with its splits; ResNeXt-50's e-graph reaches
#: the node limit), and a convolution over a concatenation as one over the other order with its kernel's
#: input-channel blocks swapped (every order of an n-way concatenation: Inception-v3's e-graph grows from 2 554
#: e-nodes, saturated, to the time limit at 38 310, for no lower cost; ``benchmarks/rule_families.py``).
OPT_IN_RULES: tuple[Rule, ...] = (
    Rule("conv-group-split-input",
         (_conv("?g", "?x", "?w", "?b"),),
         ("(concat 1 "
          + _conv(_half("?g"), _split(1, "0", _half("(dim ?x 1)"), "?x"), _split(0, "0", _half("(dim ?w 0)"), "?w"),
                  _split(0, "0", _half("(dim ?w 0)"), "?b")) + " "
          + _conv(_half("?g"), _split(1, _half("(dim ?x 1)"), _half("(dim ?x 1)"), "?x"),
                  _split(0, _half("(dim ?w 0)"), _half("(dim ?w 0)"), "?w"),
                  _split(0, _half("(dim ?w 0)"), _half("(dim ?w 0)"), "?b")) + ")",),
         conditions=("(= (% ?g 2) 0)",)),
    Rule("conv-input-permute",
         (_conv("1", "(concat 1 ?x ?y)", "?w", "?b"),),
         (_conv("1", "(concat 1 ?y ?x)",
                f"(concat 1 {_split(1, '(dim ?x 1)', '(dim ?y 1)', '?w')} {_split(1, '0', '(dim ?x 1)', '?w')})",
                "?b"),),
         conditions=("(!= ?x ?y)",)),
)
