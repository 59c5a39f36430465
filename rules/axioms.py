"""Operator properties (our encoding of TASO's Table 2) as equations in the rule pattern language.

Each :class:`Axiom` is an equation ``lhs = rhs`` between patterns over tensor variables ``?a`` and parameter
variables (``?ax``, ``?act``...), with the values each parameter variable ranges over when the axiom is
validated. :mod:`eqsat.rules.verifier` turns axioms into universally quantified Z3 formulas over an
uninterpreted tensor sort, validates them by symbolic execution of the registry's reference implementations
(:mod:`eqsat.rules.validation`), and checks them for redundancy. The axioms here relate several operators of
TASO's set; an operator's own properties are declared with it (``eqsat.ops.OpSpec.axioms``) and appended.
``DIM_AXIOMS`` relate the uninterpreted ``dim(tensor, axis)`` function to operators, so that split offsets
written as ``(dim ?x k)`` can be reasoned about; every operator declares its own (``OpSpec.dim_axioms``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from eqsat import ops
from eqsat.ir.rule import Sexp, parse, tensor_vars
from eqsat.ops.core import DimAxiom


@dataclass(frozen=True)
class Axiom:
    """An operator property ``lhs = rhs`` (for all tensors; parameter variables range over ``params``)."""

    name: str
    lhs: str
    rhs: str
    params: dict[str, tuple] = field(default_factory=dict)
    doc: str = ""
    #: Parameter variables the Z3 formula quantifies over (it then holds for every value); their ``params``
    #: values are only the ones validation executes. The others are instantiated once per listed value.
    quantified: tuple[str, ...] = ()
    #: Shape conditions ``(= (shape ?a) (shape ?b))`` under which the equation holds: the Z3 formula is an
    #: implication from equal dimensions, and validation executes only shapes that satisfy them.
    conditions: tuple[str, ...] = ()

    @cached_property
    def terms(self) -> tuple[Sexp, Sexp]:
        """Both sides as patterns (parsed once)."""
        return parse(self.lhs), parse(self.rhs)

    @cached_property
    def tensor_vars(self) -> list[str]:
        """The tensor variables of both sides, sorted."""
        return sorted(tensor_vars(self.terms[0]) | tensor_vars(self.terms[1]))


AX = {"?ax": (0, 1)}
CONV_P = {"?pd": ((0, 0, 0, 0), (1, 1, 1, 1)), "?act": (0, 1)}
CONV0 = "(conv2d :pads ?pd {x} {w} {b})"
CONVA = "(conv2d :pads ?pd :act ?act {x} {w} {b})"
POOL = ":kernel [3 3] :strides [1 1] :pads [1 1 1 1]"
AVGPOOL = f"avgpool {POOL} :count_include_pad 1"
PERMS2 = tuple(p for p in ops.LAYOUT_PERMS if len(p) == 2)
PERMS3 = tuple(p for p in ops.LAYOUT_PERMS if len(p) == 3)
#: A transpose of any permutation: quantified in Z3, validated on every non-identity permutation of rank 2 and 3.
ANY_PERM = {"?p": ops.LAYOUT_PERMS}
#: A reshape to any shape: quantified in Z3, validated on these targets (of inputs with four elements).
ANY_SHAPE = {"?r": ops.LAYOUT_TARGETS}


def _c(t: str, x: str, w: str, b: str) -> str:
    return t.format(x=x, w=w, b=b)


AXIOMS: tuple[Axiom, ...] = (
    # element-wise algebra
    Axiom("ewadd-comm", "(ewadd ?a ?b)", "(ewadd ?b ?a)"),
    Axiom("ewadd-assoc", "(ewadd (ewadd ?a ?b) ?c)", "(ewadd ?a (ewadd ?b ?c))"),
    Axiom("ewmul-comm", "(ewmul ?a ?b)", "(ewmul ?b ?a)"),
    Axiom("ewmul-assoc", "(ewmul (ewmul ?a ?b) ?c)", "(ewmul ?a (ewmul ?b ?c))"),
    Axiom("ewmul-distrib", "(ewmul (ewadd ?a ?b) ?c)", "(ewadd (ewmul ?a ?c) (ewmul ?b ?c))"),
    Axiom("ewmul-ones", "(ewmul ?a (const_iewmul [(dim ?a 0) (dim ?a 1)]))", "?a"),
    # scalar multiplication
    Axiom("smul-assoc", "(smul (smul ?a ?s) ?t)", "(smul ?a (ewmul ?s ?t))"),
    Axiom("smul-comm", "(smul (smul ?a ?s) ?t)", "(smul (smul ?a ?t) ?s)"),
    Axiom("smul-ewadd", "(smul (ewadd ?a ?b) ?s)", "(ewadd (smul ?a ?s) (smul ?b ?s))"),
    Axiom("smul-ewmul", "(ewmul (smul ?a ?s) ?b)", "(smul (ewmul ?a ?b) ?s)"),
    Axiom("smul-transpose", "(transpose ?p (smul ?a ?s))", "(smul (transpose ?p ?a) ?s)", ANY_PERM,
          quantified=("?p",)),
    Axiom("smul-matmul-r", "(matmul ?a (smul ?b ?s))", "(smul (matmul ?a ?b) ?s)"),
    Axiom("smul-matmul-l", "(matmul (smul ?a ?s) ?b)", "(smul (matmul ?a ?b) ?s)"),
    Axiom("smul-concat", "(concat ?ax (smul ?a ?s) (smul ?b ?s))", "(smul (concat ?ax ?a ?b) ?s)", AX),
    Axiom("smul-conv", _c(CONV0, "?x", "(smul ?w ?s)", "(smul ?b ?s)"), "(smul " + _c(CONV0, "?x", "?w", "?b") + " ?s)",
          {"?pd": CONV_P["?pd"]}),
    Axiom("smul-avgpool", f"(smul ({AVGPOOL} ?a) ?s)", f"({AVGPOOL} (smul ?a ?s))"),
    # relu
    Axiom("conv-relu", "(relu " + _c(CONV0, "?x", "?w", "?b") + ")",
          "(conv2d :pads ?pd :act 1 ?x ?w ?b)", {"?pd": CONV_P["?pd"]}),
    Axiom("relu-concat", "(relu (concat ?ax ?a ?b))", "(concat ?ax (relu ?a) (relu ?b))", AX),
    Axiom("relu-transpose", "(relu (transpose ?p ?a))", "(transpose ?p (relu ?a))", ANY_PERM, quantified=("?p",)),
    # convolution
    Axiom("conv-kernel-linear", _c(CONV0, "?x", "(ewadd ?w ?v)", "(ewadd ?b ?c)"),
          "(ewadd " + _c(CONV0, "?x", "?w", "?b") + " " + _c(CONV0, "?x", "?v", "?c") + ")",
          {"?pd": CONV_P["?pd"]}),
    Axiom("conv-input-linear", _c(CONV0, "(ewadd ?x ?y)", "?w", "(ewadd ?b ?c)"),
          "(ewadd " + _c(CONV0, "?x", "?w", "?b") + " " + _c(CONV0, "?y", "?w", "?c") + ")",
          {"?pd": CONV_P["?pd"]}, "linear in the input; the two biases add up (TASO's axiom 18 with biases)"),
    Axiom("conv-concat-channels", _c(CONV0, "(concat 1 ?x ?y)", "(concat 1 ?w ?v)", "(ewadd ?b ?c)"),
          "(ewadd " + _c(CONV0, "?x", "?w", "?b") + " " + _c(CONV0, "?y", "?v", "?c") + ")",
          {"?pd": CONV_P["?pd"]}, "a convolution over channel-concatenated inputs and kernels sums two"),
    Axiom("conv-concat-batch", "(concat 0 " + _c(CONVA, "?x", "?w", "?b") + " " + _c(CONVA, "?y", "?w", "?b") + ")",
          _c(CONVA, "(concat 0 ?x ?y)", "?w", "?b"), CONV_P),
    Axiom("conv-concat-out", "(concat 1 " + _c(CONVA, "?x", "?w", "?b") + " " + _c(CONVA, "?x", "?v", "?c") + ")",
          _c(CONVA, "?x", "(concat 0 ?w ?v)", "(concat 0 ?b ?c)"), CONV_P),
    Axiom("conv-group-merge", "(concat 1 " + _c(CONVA, "?x", "?w", "?b") + " " + _c(CONVA, "?y", "?v", "?c") + ")",
          "(conv2d :pads ?pd :groups 2 :act ?act (concat 1 ?x ?y) (concat 0 ?w ?v) (concat 0 ?b ?c))", CONV_P,
          "two convolutions side by side are one grouped convolution (TASO left it out: it needs the kernels "
          "to have equal shapes, as a group takes an equal share of the channels)",
          conditions=("(= (shape ?w) (shape ?v))",)),
    Axiom("conv-enlarge", "(conv2d :act ?act ?x ?w ?b)",
          "(conv2d :pads [1 1 1 1] :act ?act ?x (enlarge :kernel [3 3] ?w) ?b)", {"?act": (0, 1)},
          "holds for 1x1 kernels: the shape check rejects any other instance"),
    Axiom("conv-iconv", "(conv2d :pads ?pd ?x (const_iconv :kernel [3 3] :channels (dim ?x 1)) "
          "(const_zero :shape [(dim ?x 1)]))",
          "?x", {"?pd": ((1, 1, 1, 1),)}),
    Axiom("conv-pool", "(conv2d :pads [1 1 1 1] :groups (dim ?x 1) ?x (const_pool :kernel [3 3] :channels (dim ?x 1)) "
          "(const_zero :shape [(dim ?x 1)]))", f"({AVGPOOL} ?x)"),
    Axiom("zero-ewadd", "(ewadd (const_zero ?z) (const_zero ?z))", "(const_zero ?z)", {"?z": ((2,), (3,))},
          "zero plus zero (so that a zero bias splits into the two zero biases of a sum of convolutions)",
          quantified=("?z",)),
    # pools
    Axiom("avgpool-ewadd", f"({AVGPOOL} (ewadd ?a ?b))", f"(ewadd ({AVGPOOL} ?a) ({AVGPOOL} ?b))"),
    Axiom("avgpool-concat", f"({AVGPOOL} (concat ?ax ?a ?b))",
          f"(concat ?ax ({AVGPOOL} ?a) ({AVGPOOL} ?b))", AX),
    Axiom("maxpool-concat", f"(maxpool {POOL} (concat ?ax ?a ?b))",
          f"(concat ?ax (maxpool {POOL} ?a) (maxpool {POOL} ?b))", AX),
    # matmul
    Axiom("matmul-assoc", "(matmul (matmul ?a ?b) ?c)", "(matmul ?a (matmul ?b ?c))"),
    Axiom("matmul-linear-r", "(matmul ?a (ewadd ?b ?c))", "(ewadd (matmul ?a ?b) (matmul ?a ?c))"),
    Axiom("matmul-linear-l", "(matmul (ewadd ?a ?b) ?c)", "(ewadd (matmul ?a ?c) (matmul ?b ?c))"),
    Axiom("matmul-concat-r", "(matmul ?a (concat 1 ?b ?c))", "(concat 1 (matmul ?a ?b) (matmul ?a ?c))"),
    Axiom("matmul-concat-l", "(matmul (concat 0 ?a ?b) ?c)", "(concat 0 (matmul ?a ?c) (matmul ?b ?c))"),
    Axiom("matmul-concat-inner", "(matmul (concat 1 ?a ?b) (concat 0 ?c ?d))",
          "(ewadd (matmul ?a ?c) (matmul ?b ?d))"),
    Axiom("matmul-identity", "(matmul ?a (const_imatmul (dim ?a 1)))", "?a"),
    Axiom("identity-matmul", "(matmul (const_imatmul (dim ?a 0)) ?a)", "?a"),
    # transpose
    Axiom("transpose-identity", "(transpose ?p ?a)", "?a", {"?p": ((0, 1), (0, 1, 2))}),
    Axiom("transpose-compose-2", "(transpose ?q (transpose ?p ?a))", "(transpose (compose ?p ?q) ?a)",
          {"?p": PERMS2, "?q": PERMS2}, "two transposes are one: compose ?p ?q permutes by ?p, then by ?q"),
    Axiom("transpose-compose-3", "(transpose ?q (transpose ?p ?a))", "(transpose (compose ?p ?q) ?a)",
          {"?p": PERMS3, "?q": PERMS3}),
    Axiom("transpose-matmul", "(transpose ?p (matmul ?a ?b))", "(matmul (transpose ?p ?b) (transpose ?p ?a))",
          {"?p": ((1, 0), (0, 2, 1))}, "swapping the last two axes of a (batched) matrix product"),
    Axiom("transpose-concat", "(transpose [1 0] (concat ?ax ?a ?b))",
          "(concat (- 1 ?ax) (transpose [1 0] ?a) (transpose [1 0] ?b))", AX),
    Axiom("transpose-ewadd", "(transpose ?p (ewadd ?a ?b))", "(ewadd (transpose ?p ?a) (transpose ?p ?b))", ANY_PERM,
          quantified=("?p",)),
    Axiom("transpose-ewmul", "(transpose ?p (ewmul ?a ?b))", "(ewmul (transpose ?p ?a) (transpose ?p ?b))", ANY_PERM,
          quantified=("?p",)),
    Axiom("transpose-imatmul", "(transpose [1 0] (const_imatmul ?n))", "(const_imatmul ?n)", {"?n": (1, 2, 3)}),
    Axiom("transpose-ones", "(transpose [1 0] (const_iewmul [?n ?m]))", "(const_iewmul [?m ?n])",
          {"?n": (1, 2), "?m": (1, 3)}),
    # reshape (row-major: only the element order counts, so element-wise operators commute with it)
    Axiom("smul-reshape", "(reshape ?r (smul ?a ?s))", "(smul (reshape ?r ?a) ?s)", ANY_SHAPE, quantified=("?r",)),
    Axiom("relu-reshape", "(relu (reshape ?r ?a))", "(reshape ?r (relu ?a))", ANY_SHAPE, quantified=("?r",)),
    Axiom("reshape-ewadd", "(reshape ?r (ewadd ?a ?b))", "(ewadd (reshape ?r ?a) (reshape ?r ?b))", ANY_SHAPE,
          quantified=("?r",)),
    Axiom("reshape-ewmul", "(reshape ?r (ewmul ?a ?b))", "(ewmul (reshape ?r ?a) (reshape ?r ?b))", ANY_SHAPE,
          quantified=("?r",)),
    Axiom("reshape-reshape", "(reshape ?r (reshape ?t ?a))", "(reshape ?r ?a)",
          {**ANY_SHAPE, "?t": ((4,), (2, 2), (2, 1, 2))}, quantified=("?r", "?t")),
    # concat and split
    Axiom("concat-assoc", "(concat ?ax (concat ?ax ?a ?b) ?c)", "(concat ?ax ?a (concat ?ax ?b ?c))", AX),
    Axiom("concat-geometry", "(concat 0 (concat 1 ?a ?b) (concat 1 ?c ?d))",
          "(concat 1 (concat 0 ?a ?c) (concat 0 ?b ?d))"),
    Axiom("concat-ewadd", "(concat ?ax (ewadd ?a ?b) (ewadd ?c ?d))", "(ewadd (concat ?ax ?a ?c) (concat ?ax ?b ?d))",
          AX, "for operands of equal shapes (no broadcasting)"),
    Axiom("concat-ewmul", "(concat ?ax (ewmul ?a ?b) (ewmul ?c ?d))", "(ewmul (concat ?ax ?a ?c) (concat ?ax ?b ?d))",
          AX, "for operands of equal shapes (no broadcasting)"),
    Axiom("split-concat-0", "(split ?ax 0 (dim ?a ?ax) (concat ?ax ?a ?b))", "?a", AX),
    Axiom("split-concat-1", "(split ?ax (dim ?a ?ax) (dim ?b ?ax) (concat ?ax ?a ?b))", "?b", AX),
)

#: The hand-written axioms above; the verifier always uses them.
CORE_AXIOMS = AXIOMS


def declared_axioms(op_names: Iterable[str] | None = None) -> tuple[Axiom, ...]:
    """Axioms declared with their operator in the registry (``OpSpec.axioms``): of the operators named, or all.
    The verifier proves a rule with the core axioms and those of the operators the rule uses, so adding an
    operator never changes what Z3 has to search for rules without it."""
    names = set(ops.REGISTRY) if op_names is None else set(op_names)
    return tuple(Axiom(a[0], a[1], a[2], **(a[3] if len(a) > 3 else {})) for spec in ops.REGISTRY.values()
                 if spec.name in names for a in spec.axioms)


#: Every axiom: the core ones, then the declared ones.
AXIOMS = CORE_AXIOMS + declared_axioms()

#: A wrong "axiom" used to show that validation catches errors: a conv with a fused relu is not linear.
PLANTED_WRONG = Axiom(
    "planted-conv-relu-linear", "(conv2d :pads [1 1 1 1] :act 1 ?x (ewadd ?w ?v) (ewadd ?b ?c))",
    "(ewadd (conv2d :pads [1 1 1 1] :act 1 ?x ?w ?b) (conv2d :pads [1 1 1 1] :act 1 ?x ?v ?c))")

#: The order the dimension axioms were first written in (one list, before each operator declared its own). Z3's
#: search depends on the order of its assertions, and so does which axioms the redundancy check finds entailed
#: within its budget: this order keeps the committed corpus reproducible. Axioms not listed (those of operators
#: added since) follow in registry order.
_FIRST_DIM_ORDER = ("dim-concat-axis", "dim-concat-other", "dim-matmul-0", "dim-matmul-1", "dim-transpose-0",
                    "dim-transpose-1", "dim-conv-0", "dim-conv-1", "dim-relu", "dim-smul", "dim-avgpool",
                    "dim-maxpool", "dim-ewadd", "dim-ewmul")


def declared_dim_axioms(extra: tuple[DimAxiom, ...] = ()) -> tuple[DimAxiom, ...]:
    """The dimension axioms every operator declares (``OpSpec.dim_axioms``): those of :data:`_FIRST_DIM_ORDER` in
    that order, then the others in registry order."""
    first = {name: k for k, name in enumerate(_FIRST_DIM_ORDER)}
    declared = [d for spec in ops.REGISTRY.values() for d in spec.dim_axioms] + list(extra)
    return tuple(sorted(declared, key=lambda d: first.get(d.name, len(first))))  # a stable sort


#: Every operator's dimension axioms.
DIM_AXIOMS: tuple[DimAxiom, ...] = declared_dim_axioms()
