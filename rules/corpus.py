"""The committed rule corpus: selection from generated candidates, storage, and loading as engine rules.

The corpus lives in ``rules/corpus/rules.json``: one entry per rule with an id, the S-expression sides in
*expression form* (parameters may be ``(dim ?x k)`` expressions on either side), extra conditions, whether it
is a two-output rule, whether it is applied in both directions, and its verification status and reason.
:func:`load_corpus_rules` turns entries into :class:`~eqsat.ir.rule.Rule` objects the engine compiles:
a computed parameter on a left-hand side becomes a parameter variable with an equality condition.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eqsat import ops
from eqsat.files import write_file
from eqsat.ir.rule import Rule, RuleError, Sexp, Vec, is_var, parse, pretty, split_args, tensor_vars, unparse

CORPUS_PATH = Path(__file__).parent / "corpus" / "rules.json"
#: Rules of four operators that the corpus above cannot derive in a few iterations (``eqsat rules select``).
CORPUS4_PATH = Path(__file__).parent / "corpus" / "rules4.json"


@dataclass
class Entry:
    """One corpus rule."""

    id: str
    lhs: list[str]
    rhs: list[str]
    conditions: list[str] = field(default_factory=list)
    multi: bool = False
    bidirectional: bool = False
    status: str = "unverified"  # proved | unknown | refuted | unverified
    reason: str = ""
    domain: str = ""
    ops: list[int] = field(default_factory=list)  # operator counts of (lhs, rhs)

    def text(self, named: bool = False) -> str:
        """One-line form ``lhs => rhs`` (``named``: parameters by name, defaults left out)."""
        arrow = " <=> " if self.bidirectional else " => "
        form = (lambda x: pretty(parse(x))) if named else (lambda x: x)
        return " ; ".join(map(form, self.lhs)) + arrow + " ; ".join(map(form, self.rhs))


def _spec(e: Sexp) -> ops.OpSpec | None:
    """The registry operator a pattern applies at its root (None for a variable or a literal)."""
    return ops.REGISTRY.get(str(e[0])) if isinstance(e, list) and e else None


def _heavy_ops(e: Sexp) -> int:
    """Matmuls and convolutions (``OpSpec.heavy``) but those whose kernel (``kernel_bias``) is a constant: the
    operators whose count matters."""
    if not isinstance(e, list):
        return 0
    spec, _, ins = split_args(e)
    kernel = _spec(ins[spec.kernel_bias[0]]) if spec.kernel_bias else None
    n = int(spec.heavy and not (kernel is not None and kernel.is_constant))
    return n + sum(_heavy_ops(x) for x in ins)


def _subterm_uses(sides: Sequence[str]) -> dict[str, tuple[str, int]]:
    """Each distinct subterm with tensor inputs: its operator name and how often it occurs."""
    terms: dict[str, tuple[str, int]] = {}

    def walk(e: Sexp) -> None:
        if isinstance(e, list):
            spec, _, ins = split_args(e)
            if ins:
                key = unparse(e)
                terms[key] = (spec.name, terms.get(key, ("", 0))[1] + 1)
            for x in ins:
                walk(x)

    for s in sides:
        walk(parse(s))
    return terms


def _op_counts(sides: Sequence[str]) -> Counter[str]:
    """Operator names of the distinct subterms with tensor inputs (a shared subterm counts once)."""
    return Counter(name for name, _ in _subterm_uses(sides).values())


def _tree_shaped(sides: Sequence[str]) -> bool:
    """No side reuses a computed subterm (rules over DAGs with reuse compose smaller rules)."""
    return all(n == 1 for s in sides for _, n in _subterm_uses([s]).values())


def merges_work(lhs: Sequence[str], rhs: Sequence[str]) -> bool:
    """Whether a two-output rule's target computes fewer operators than its sources, the glue of merges aside
    (``OpSpec.glue``: concatenations and splits; distinct subterms, a shared one once): one matmul over
    concatenated weights instead of two, not two independent rewrites side by side (each output rewritten on its
    own, which single-output rules do, or not at all by design, e.g. a matmul expanded over a concatenation)."""
    def work(sides: Sequence[str]) -> int:
        return sum(n for op, n in _op_counts(sides).items() if not ops.get(op).glue)

    return work(rhs) < work(lhs)


def _is_transpose(e: Sexp) -> bool:
    """Whether a pattern applies a transpose (an operator that only permutes axes: ``OpSpec.permutes``) at its root."""
    spec = _spec(e)
    return spec is not None and bool(spec.permutes)


def _adds_only_a_transpose(c: Any) -> bool:
    """True when the right side is the left side's operators less one transpose (a layout-moving rule)."""
    removed = _op_counts(c.lhs) - _op_counts(c.rhs)
    return (c.n_lhs - c.n_rhs == 1 and not c.multi
            and sum(removed.values()) == 1 and all(ops.get(op).permutes for op in removed)
            and not _op_counts(c.rhs) - _op_counts(c.lhs))


def _nested_transposes(e: Sexp, under: bool = False) -> bool:
    """True when a transpose has another transpose below it."""
    if not isinstance(e, list):
        return False
    _, _, ins = split_args(e)
    here = _is_transpose(e)
    if here and under:
        return True
    return any(_nested_transposes(x, under or here) for x in ins)


def _layout_only(c: Any) -> bool:
    """Both sides are chains of transposes: a composition, to be applied one way only."""
    def only_transposes(e: Sexp) -> bool:
        return is_var(e) or (_is_transpose(e) and only_transposes(e[-1]))

    return all(only_transposes(parse(s)) for s in (*c.lhs, *c.rhs))


def _normal(e: Sexp) -> Sexp:
    """A pattern with the operands of every commutative operator sorted (commutativity applied)."""
    if not isinstance(e, list):
        return e
    spec, params, ins = split_args(e)
    args = [_normal(x) for x in ins]
    if spec.commutative:  # swapping its operands inside a term: the e-graph derives that by congruence
        args.sort(key=unparse)
    return [e[0], *params, *args]


def _normal_key(sides: Sequence[str]) -> tuple[str, ...]:
    return tuple(unparse(_normal(parse(s))) for s in sides)


def _head(e: Sexp) -> str | None:
    """An operator with its parameters (``concat 1``), or None for a leaf."""
    if not isinstance(e, list):
        return None
    _, params, _ = split_args(e)
    return " ".join([e[0], *(unparse(p) for p in params)])


def _children(e: Sexp) -> list[Sexp]:
    if not isinstance(e, list):
        return []
    spec, _, ins = split_args(e)
    if spec.kernel_bias is not None:  # a kernel's bias travels with it
        return [x for i, x in enumerate(ins) if i != spec.kernel_bias[1]]
    return ins


def _has_constants(sides: Sequence[str]) -> bool:
    return any(op.startswith("const_") for s in sides for op in re.findall(r"\((\w+)", s))


def interchange(lhs: str, rhs: str) -> bool:
    """``X(Y(a, b), Y(c, d)) = Y(X(a, c), X(b, d))`` and the like: the root operator of one side is the operator of
    both children on the other side, and the other way round (an element-wise operator over concatenations,
    concatenations along two axes, a convolution over channel-concatenated inputs and kernels)."""
    a, b = parse(lhs), parse(rhs)
    ca, cb = _children(a), _children(b)
    if len(ca) != 2 or len(cb) != 2 or _head(a) == _head(b):
        return False
    heads_a = {_head(x) for x in ca}
    heads_b = {_head(x) for x in cb}
    return heads_a == {_head(b)} and heads_b == {_head(a)}


def factoring(lhs: str, rhs: str) -> bool:
    """``X(Y(a, b), Y(a, c)) = Y(a, X(b, c))`` and ``X(Y(a), Y(b)) = Y(X(a, b))``: a distributive law read in its
    cost-reducing direction (two applications of ``Y`` become one); its reverse is the expansion."""
    a, b = parse(lhs), parse(rhs)
    ca = _children(a)
    if len(ca) != 2 or _head(ca[0]) is None or _head(ca[0]) != _head(ca[1]) or _head(b) != _head(ca[0]):
        return False
    return any(_head(x) == _head(a) for x in _children(b))


#: The generator's variables (a type prefix and a number).
_GEN_VAR = re.compile(r"\?[a-z]+\d+")


def _occurrences(e: Sexp) -> list[str]:
    """Every occurrence of a variable in a pattern (parameters included), in the order its text writes them."""
    if isinstance(e, list):
        return [v for x in e for v in _occurrences(x)]
    if isinstance(e, Vec):
        return [v for x in e.items for v in _occurrences(x)]
    return [e] if is_var(e) else []


def _replace_nth(e: Sexp, var: str, n: int, fresh: str) -> Sexp:
    """``e`` with the ``n``-th occurrence of ``var`` (in text order) renamed ``fresh``."""
    seen = [-1]

    def walk(x: Sexp) -> Sexp:
        if isinstance(x, list):
            return [walk(i) for i in x]
        if isinstance(x, Vec):
            return Vec(tuple(walk(i) for i in x.items))
        if isinstance(x, str) and x == var:
            seen[0] += 1
            return fresh if seen[0] == n else x
        return x

    return walk(e)


def _generalize(c: Any) -> Any | None:
    """The rule with one repeated variable split into two, where that still holds (checked numerically like
    every candidate): e.g. ``(ewadd (concat 1 ?w1 ?w2) (concat 1 ?w2 ?w3))`` generalizes to four operands."""
    from eqsat.rules import generator as gen

    lhs, rhs = [parse(s) for s in c.lhs], [parse(s) for s in c.rhs]
    text_vars = [v for e in lhs for v in _occurrences(e) if _GEN_VAR.fullmatch(v)]
    tensor = [v for v in text_vars if not gen.var_prefix(v).startswith("b") and not gen.is_param_var(v)]
    repeated = [v for v in dict.fromkeys(tensor) if tensor.count(v) > 1]
    if not repeated:
        return c
    v = repeated[0]
    prefix = gen.var_prefix(v)
    used = {int(x[len(prefix) + 1:]) for x in set(tensor) if gen.var_prefix(x) == prefix}
    fresh = f"?{prefix}{max(used) + 1}"
    side = 0 if v in _occurrences(lhs[0]) else 1  # split its last occurrence on the left, each one on the right
    n_l = _occurrences(lhs[side]).count(v)
    for k_r in range(_occurrences(rhs[side]).count(v)):
        new = type(c)(tuple(unparse(_replace_nth(e, v, n_l - 1, fresh)) if i == side else s
                            for i, (e, s) in enumerate(zip(lhs, c.lhs, strict=True))),
                      tuple(unparse(_replace_nth(e, v, k_r, fresh)) if i == side else s
                            for i, (e, s) in enumerate(zip(rhs, c.rhs, strict=True))),
                      c.n_lhs, c.n_rhs, c.domain, c.lhs_ops, c.rhs_ops)
        stage, _, conds = gen.confirm(new)
        if stage is None:
            new = gen.canonical(new)
            new.conditions = conds
            return _generalize(new)
    return None


#: the parameter of a convolution that splits its channels into groups
GROUPS = "groups"


def _is_convolution(spec: ops.OpSpec | None) -> bool:
    """Whether an operator is a convolution: one with a ``groups`` parameter."""
    return spec is not None and GROUPS in spec.param_names()


def _grouped(sides: Sequence[str]) -> bool:
    """True when a side has a grouped convolution with a literal group count above one."""
    def walk(e: Sexp) -> bool:
        if not isinstance(e, list):
            return False
        spec, params, ins = split_args(e)
        if _is_convolution(spec) and isinstance(g := params[spec.param_names().index(GROUPS)], int) and g > 1:
            return True
        return any(walk(x) for x in ins)

    return any(walk(parse(s)) for s in sides)


def _distinct_inputs(lhs: str) -> tuple[str, ...]:
    """``(!= ?x ?y)`` for two convolutions over variables ``?x`` and ``?y``: merged into a grouped convolution over
    ``[x; x]`` when ``x = y``, they would only duplicate the input (one convolution with the two kernels
    concatenated does that merge, and it grew SqueezeNet's e-graph threefold)."""
    kids = _children(parse(lhs))
    ins = [split_args(k)[2][0] for k in kids if _is_convolution(_spec(k))]
    return (f"(!= {ins[0]} {ins[1]})",) if len(ins) == 2 and all(map(is_var, ins)) and ins[0] != ins[1] else ()


#: Operators whose expansion over a concatenation is left out (measured, default limits, same costs): a matmul's
#: reverse closes split/concat cycles with the two-output merges (which build exactly these concatenated-weight
#: matmuls), so exact extraction of the NasRNN cell runs into its time limit (0.2 s -> 30 s); a pool's pushes
#: Inception's max pools into every branch of its four-way concatenations (+10 % e-nodes, one more iteration).
NO_EXPANSION_OVER_CONCAT = ("matmul", "maxpool", "avgpool")


def _matmul_over_concat(lhs: str) -> bool:
    """``concat(op(..), op(..))`` for an operator of :data:`NO_EXPANSION_OVER_CONCAT`: kept in its merging
    direction only."""
    e = parse(lhs)
    return (ops.get(e[0]).glue == "join"
            and all(isinstance(x, list) and x[0] in NO_EXPANSION_OVER_CONCAT for x in _children(e)))


def select(cands: Iterable[Any]) -> list[Entry]:
    """Choose the corpus from confirmed generator candidates.

    Commutativity applied inside a term (both sides equal once the operands of every commutative operator are
    sorted) is left out, and of rules equal up to commutativity only the first is kept: the e-graph derives
    the others from the commutativity rules by congruence.

    Kept: two-output rules that merge work (:func:`merges_work`), rules that change the operator count, rules
    of at most two operators per side (commutativity, associativity, distributivity and other enabling
    rewrites), same-size rules that
    change the number of matmuls / convolutions without reusing a subterm (merges such as
    ``x1 W1 + x2 W2 = [x1 x2] [W1; W2]`` or a 1x1 and a 3x3 convolution added into one), and same-size
    *interchange* laws (:func:`interchange`: an element-wise operator over concatenations, concatenations along
    two axes), generalized where the generator only found them with a repeated variable. A merge into a grouped
    convolution gets the shape conditions it needs (equal kernels), and distinct inputs. Other same-size
    rules with three operators per side are left out: they are numerous and mostly compositions of the
    smaller ones. So are rules of three operators with a transpose below a transpose: they compose the
    transpose-composition rules (two transposes are one) with smaller rules, and there are many of them for
    rank-3 permutations.

    Applied in both directions: same-size rules, rules that remove one operator from two (but not two
    transposes composed into one: splitting a transpose in two is never useful), rules that only remove a
    transpose (so that e.g. a transpose of a matmul can become a matmul of transposes), and distributive laws
    (:func:`factoring`) without constants, so that targets that need an expansion first are built, except a
    matmul or a pool over a concatenation (:data:`NO_EXPANSION_OVER_CONCAT`).
    """
    out: list[Entry] = []
    seen: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
    for c in cands:
        if not c.multi and max(c.n_lhs, c.n_rhs) >= 2 and _normal_key(c.lhs) == _normal_key(c.rhs):
            continue  # commutativity in context
        if c.multi and not merges_work(c.lhs, c.rhs):
            continue
        same_size_merge = (c.n_lhs == c.n_rhs and _tree_shaped([*c.lhs, *c.rhs])
                           and sum(map(_heavy_ops, map(parse, c.lhs))) != sum(map(_heavy_ops, map(parse, c.rhs))))
        swap = (not c.multi and c.n_lhs == c.n_rhs == 3 and _tree_shaped([*c.lhs, *c.rhs])
                and not _has_constants([*c.lhs, *c.rhs]) and interchange(c.lhs[0], c.rhs[0]))
        if swap:
            c = _generalize(c)
            if c is None:
                continue
        if not (c.multi or c.n_lhs != c.n_rhs or c.n_lhs <= 2 or same_size_merge or swap):
            continue
        if same_size_merge and _grouped([*c.lhs, *c.rhs]) and not c.conditions:
            # a grouped convolution gives each group an equal share of the channels: merging two convolutions
            # into one is sound only when their operands have equal shapes (the generator's shapes have them,
            # so its numeric checks cannot tell)
            from eqsat.rules.generator import shape_conditions

            c.conditions = shape_conditions(c) + _distinct_inputs(c.lhs[0])
        if not c.multi and max(c.n_lhs, c.n_rhs) >= 3 and any(_nested_transposes(parse(x)) for x in (*c.lhs, *c.rhs)):
            continue
        key = (_normal_key(c.lhs), _normal_key(c.rhs))
        if key in seen or (not c.multi and (key[1], key[0]) in seen):
            continue
        seen.add(key)
        expand = (not c.multi and c.n_lhs == 3 and c.n_rhs == 2 and _tree_shaped([*c.lhs, *c.rhs])
                  and not _has_constants([*c.lhs, *c.rhs]) and factoring(c.lhs[0], c.rhs[0])
                  and not _matmul_over_concat(c.lhs[0]))
        bidir = (not c.multi and c.n_rhs >= 1 and not _layout_only(c)
                 and (c.n_lhs == c.n_rhs or (c.n_lhs - c.n_rhs == 1 and c.n_lhs <= 2) or _adds_only_a_transpose(c)
                      or expand))
        out.append(Entry("", list(c.lhs), list(c.rhs), list(getattr(c, "conditions", ()) or ()), c.multi, bidir,
                         domain=c.domain, ops=[c.n_lhs, c.n_rhs]))
    out.sort(key=lambda e: (e.multi, e.domain, sum(e.ops), e.text()))
    assign_ids(out)
    return out


def assign_ids(entries: Sequence[Entry], digits: int = 6) -> None:
    """Give each entry an id derived from its content (sides and conditions), so a rule keeps its id when the
    corpus is regenerated with more operators or rules: ``r`` + the first hex digits of a SHA-256, more of
    them for every entry if two would collide."""
    def digest(e: Entry) -> str:
        return hashlib.sha256(json.dumps([e.lhs, e.rhs, e.conditions]).encode()).hexdigest()

    while True:
        ids = [f"r{digest(e)[:digits]}" for e in entries]
        if len(set(ids)) == len(ids):
            break
        digits += 1
    for e, i in zip(entries, ids, strict=True):
        e.id = i


@dataclass(frozen=True)
class Family:
    """A rule family of TASO's Table 2, by the operators its rules relate: a rule's operator set (the names on
    either side) holds every one of ``all_of``, at least one of ``any_of``, none outside ``only`` (where given),
    and between ``min_ops`` and ``max_ops`` operators (where given)."""

    name: str
    all_of: frozenset[str] = frozenset()
    any_of: frozenset[str] = frozenset()
    only: frozenset[str] = frozenset()
    min_ops: int = 0
    max_ops: int | None = None

    def holds(self, o: set[str]) -> bool:
        """Whether a rule relating the operators ``o`` is of this family."""
        return (self.all_of <= o and (not self.any_of or bool(self.any_of & o)) and (not self.only or o <= self.only)
                and len(o) >= self.min_ops and (self.max_ops is None or len(o) <= self.max_ops))


def _f(name: str, all_of: Iterable[str] = (), any_of: Iterable[str] = (), only: Iterable[str] = (), min_ops: int = 0,
       max_ops: int | None = None) -> Family:
    """A :class:`Family` with its operator sets written as sets."""
    return Family(name, frozenset(all_of), frozenset(any_of), frozenset(only), min_ops, max_ops)


#: Rule families: TASO's Table 2 operator properties grouped by the operators a rule relates (the names are the
#: table's data). A rule belongs to the first family that holds for its operator set.
FAMILIES: tuple[Family, ...] = (
    _f("identities and constants (C_pool, I_conv, I_matmul, I_ewmul)",
       any_of={"const_pool", "const_iconv", "const_imatmul", "const_iewmul"}),
    _f("split of a concatenation", any_of={"split"}),
    _f("reshape", any_of={"reshape"}),
    _f("transpose", any_of={"transpose"}),
    _f("enlarge (a 1x1 kernel as 3x3)", any_of={"enlarge"}),
    _f("convolution over concatenation (incl. grouped merge)", all_of={"conv2d", "concat"}),
    _f("convolution linearity", all_of={"conv2d", "ewadd"}, only={"conv2d", "ewadd", "const_zero"}),
    _f("convolution + relu fusion", all_of={"conv2d", "relu"}, only={"conv2d", "relu", "ewadd", "ewmul"}),
    _f("scalar multiplication", any_of={"smul"}),
    _f("matmul over concatenation", all_of={"matmul", "concat"}),
    _f("matmul linearity", all_of={"matmul", "ewadd"}, only={"matmul", "ewadd"}),
    _f("matmul associativity", all_of={"matmul"}, only={"matmul"}),
    _f("element-wise over concatenation", all_of={"concat"}, only={"concat", "ewadd", "ewmul"}, min_ops=2),
    _f("relu / pooling over concatenation", all_of={"concat"}, only={"concat", "relu", "avgpool", "maxpool"},
       min_ops=2),
    _f("concatenation reassociation and geometry", all_of={"concat"}, only={"concat"}),
    _f("ewmul distributes over ewadd", all_of={"ewadd", "ewmul"}, only={"ewadd", "ewmul"}),
    _f("ewadd / ewmul associativity and commutativity", any_of={"ewadd", "ewmul"}, max_ops=1),
    _f("pooling", any_of={"avgpool", "maxpool"}, only={"avgpool", "maxpool", "ewadd", "relu"}),
)
OTHER_FAMILY = "other (compositions of the above)"


def family(sides: Sequence[str]) -> str:
    """The family (:data:`FAMILIES`) of a rule given all its sides."""
    o = {op for s in sides for op in re.findall(r"\((\w+)", s)} - {"dim"}
    return next((f.name for f in FAMILIES if f.holds(o)), OTHER_FAMILY)


def corpus_text(entries: Sequence[Entry], meta: dict[str, Any] | None = None) -> str:
    """The text of a corpus file: one JSON object per rule, one line each, for readable diffs; patterns with
    named parameters (see :func:`eqsat.ir.rule.pretty`). The same entries and metadata give the same text,
    which is what ``eqsat rules verify`` compares."""
    lines = ["{", f'  "meta": {json.dumps(meta or {}, sort_keys=True)},', '  "rules": [']
    for k, e in enumerate(entries):
        row = asdict(e)
        for side in ("lhs", "rhs"):  # parameters by name in the file; positional in memory
            row[side] = [pretty(parse(x), omit_defaults=False) for x in row[side]]
        lines.append("    " + json.dumps(row) + ("," if k < len(entries) - 1 else ""))
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def save_corpus(entries: Sequence[Entry], path: str | Path = CORPUS_PATH, meta: dict[str, Any] | None = None) -> None:
    """Write the corpus (:func:`corpus_text`)."""
    text = corpus_text(entries, meta)
    write_file(Path(path), lambda p: p.write_text(text))  # whole or not at all: the corpus is read back


def read_corpus(path: str | Path = CORPUS_PATH) -> tuple[list[Entry], dict[str, Any]]:
    """Read the corpus entries and its metadata (empty when there is no corpus file)."""
    path = Path(path)
    if not path.exists():
        return [], {}
    data = json.loads(path.read_text())
    entries = [Entry(**e) for e in data.get("rules", [])]
    for e in entries:
        e.lhs, e.rhs = [unparse(parse(x)) for x in e.lhs], [unparse(parse(x)) for x in e.rhs]
    return entries, data.get("meta", {})


def _engine_lhs(e: Sexp, conds: list[str], counter: list[int]) -> Sexp:
    if not isinstance(e, list):
        return e
    spec, params, ins = split_args(e)
    new_params: list[Sexp] = []
    for p in params:
        computed = isinstance(p, list) or (isinstance(p, Vec) and any(isinstance(i, list) for i in p.items))
        if computed:
            counter[0] += 1
            var = f"?p{counter[0]}"
            if isinstance(p, list):
                conds.append(f"(= {var} {unparse(p)})")
            new_params.append(var)
        else:
            new_params.append(p)
    return [e[0], *new_params, *[_engine_lhs(x, conds, counter) for x in ins]]


def engine_rules(entry: Entry) -> list[Rule]:
    """The one-way engine rules of a corpus entry (its reverse too when bidirectional and valid)."""
    out = []
    sides = [(entry.lhs, entry.rhs, entry.id)]
    if entry.bidirectional:
        sides.append((entry.rhs, entry.lhs, entry.id + "-rev"))
    for lhs, rhs, name in sides:
        if any(is_var(parse(s)) for s in lhs):
            continue
        conds = list(entry.conditions) + _distinct(lhs)
        counter = [0]
        elhs = tuple(unparse(_engine_lhs(parse(s), conds, counter)) for s in lhs)
        try:
            out.append(Rule(name, elhs, tuple(rhs), tuple(conds), False, "corpus", entry.status,
                            {"id": entry.id, "reason": entry.reason}))
        except RuleError:
            continue
    return out


def _distinct(lhs: Sequence[str]) -> list[str]:
    """For a two-output rule, a condition that its two matches are different tensors: merging an operator with
    itself (``conv(x, w)`` twice into a batch of ``[x; x]``) is never a gain and only grows the e-graph."""
    if len(lhs) != 2:
        return []
    a, b = (sorted(tensor_vars(parse(s)) - tensor_vars(parse(t))) for s, t in (lhs, lhs[::-1]))
    return [f"(!= {a[0]} {b[0]})"] if a and b else []


def load_corpus_rules(include_unproved: bool = False, path: str | Path = CORPUS_PATH) -> list[Rule]:
    """The corpus as engine rules: proved rules only unless ``include_unproved``. Empty without a corpus."""
    return entries_rules(read_corpus(path)[0], include_unproved)


def entries_rules(entries: Iterable[Entry], include_unproved: bool = False) -> list[Rule]:
    """The engine rules of corpus entries: proved ones only unless ``include_unproved`` (never refuted ones)."""
    rules: list[Rule] = []
    for e in entries:
        if e.status == "proved" or (include_unproved and e.status != "refuted"):
            rules += engine_rules(e)
    return rules
