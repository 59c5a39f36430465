"""PET's mutation generator (Algorithm 1), depth-bounded, over one subprogram: programs of the same signature
(the activation's shape in, the output's shape out, the same weights), built from a window operator with the
original's weights and compound reshape/transpose (R/T) moves, each counting one step of depth as in PET.

The moves are the layout changes of an NCHW tensor PET's families are made of: fold part of the batch into
the width or the height (one image twice as wide), cut the width or the height into tiles stacked on the
batch, and gather every ``d``-th pixel into ``d x d`` sub-images on the batch (and each one's inverse). The
window operator comes with the original's parameters, or with its dilation made 1 (pads divided alike). A
mutant is any sequence of at most ``depth`` steps, no two moves in a row (they would be one R/T), holding the
window operator once, whose output has the original's shape; the original itself is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eqsat.ir.graph import Graph, Node, make_node
from eqsat.ir.names import NameAllocator
from eqsat.ops import Shape
from eqsat.rules.pet.program import Subprogram

__all__ = ["Move", "Mutant", "moves_for", "generate_mutants", "DEFAULT_DEPTH"]

#: PET's default depth
DEFAULT_DEPTH = 4

Steps = list[tuple[str, dict[str, object]]]
#: the registry operators an R/T move is written with
RESHAPE = "reshape"
TRANSPOSE = "transpose"


@dataclass(frozen=True)
class Move:
    """A compound R/T step: ``name`` says what it does, ``steps`` the reshape/transpose nodes for an input shape
    (``None`` where it does not apply)."""

    name: str
    steps: Callable[[Shape], Steps | None]


def _batch_to(axis: int, k: int) -> Move:
    """Fold the batch by ``k`` into spatial ``axis`` (2: height, 3: width): images ``k*m .. k*m+k-1`` side by side."""
    def steps(s: Shape) -> Steps | None:
        n, c, h, w = s
        if n % k:
            return None
        perm = (0, 2, 1, 3, 4) if axis == 2 else (0, 2, 3, 1, 4)
        out = (n // k, c, k * h, w) if axis == 2 else (n // k, c, h, k * w)
        return [(RESHAPE, {"shape": (n // k, k, c, h, w)}), (TRANSPOSE, {"perm": perm}),
                (RESHAPE, {"shape": out})]
    return Move(f"batch_to_{'height' if axis == 2 else 'width'}({k})", steps)


def _to_batch(axis: int, k: int) -> Move:
    """Cut spatial ``axis`` into ``k`` tiles stacked on the batch (the inverse of :func:`_batch_to`)."""
    def steps(s: Shape) -> Steps | None:
        n, c, h, w = s
        if s[axis] % k or s[axis] == k:
            return None
        if axis == 2:
            return [(RESHAPE, {"shape": (n, c, k, h // k, w)}), (TRANSPOSE, {"perm": (0, 2, 1, 3, 4)}),
                    (RESHAPE, {"shape": (n * k, c, h // k, w)})]
        return [(RESHAPE, {"shape": (n, c, h, k, w // k)}), (TRANSPOSE, {"perm": (0, 3, 1, 2, 4)}),
                (RESHAPE, {"shape": (n * k, c, h, w // k)})]
    return Move(f"{'height' if axis == 2 else 'width'}_to_batch({k})", steps)


def _phases_to_batch(d: int) -> Move:
    """Gather every ``d``-th pixel into ``d x d`` sub-images stacked on the batch (PET's dilated-conv family)."""
    def steps(s: Shape) -> Steps | None:
        n, c, h, w = s
        if h % d or w % d or h == d or w == d:
            return None
        return [(RESHAPE, {"shape": (n, c, h // d, d, w // d, d)}), (TRANSPOSE, {"perm": (0, 3, 5, 1, 2, 4)}),
                (RESHAPE, {"shape": (n * d * d, c, h // d, w // d)})]
    return Move(f"phases_to_batch({d})", steps)


def _batch_to_phases(d: int) -> Move:
    """The inverse of :func:`_phases_to_batch`: ``d x d`` sub-images interleaved back into one."""
    def steps(s: Shape) -> Steps | None:
        n, c, h, w = s
        if n % (d * d):
            return None
        return [(RESHAPE, {"shape": (n // (d * d), d, d, c, h, w)}), (TRANSPOSE, {"perm": (0, 3, 4, 1, 5, 2)}),
                (RESHAPE, {"shape": (n // (d * d), c, h * d, w * d)})]
    return Move(f"batch_to_phases({d})", steps)


def moves_for(window: Node) -> list[Move]:
    """The R/T moves tried around ``window``: batch folds and spatial tiles by 2, and phase gathers by 2 and by
    the window's dilation."""
    dil = sorted({2} | {int(d) for d in window.p["dilations"] if int(d) > 1})
    return ([_batch_to(a, 2) for a in (2, 3)] + [_to_batch(a, 2) for a in (2, 3)]
            + [_phases_to_batch(d) for d in dil] + [_batch_to_phases(d) for d in dil])


def _window_variants(window: Node) -> list[tuple[str, dict[str, object]]]:
    """The window operator's parameters a mutant may use: the original's, and dilation 1 with pads divided
    by the dilation (PET's dilated conv as a plain one)."""
    p = window.p
    out = [("same", p)]
    dil = tuple(int(d) for d in p["dilations"])
    if any(d > 1 for d in dil) and all(pad % dil[i % 2] == 0 for i, pad in enumerate(p["pads"])):
        pads = tuple(pad // dil[i % 2] for i, pad in enumerate(p["pads"]))
        out.append(("undilated", {**p, "dilations": (1, 1), "pads": pads}))
    return out


@dataclass(frozen=True)
class Mutant:
    """A mutant of a subprogram: ``graph`` has the original's signature; ``steps`` names its steps in order."""

    graph: Graph
    steps: tuple[str, ...]

    @property
    def name(self) -> str:
        """The steps joined, e.g. ``batch_to_width(2) > conv2d > width_to_batch(2)``."""
        return " > ".join(self.steps)


def generate_mutants(sub: Subprogram, depth: int = DEFAULT_DEPTH) -> list[Mutant]:
    """Every mutant of ``sub`` of at most ``depth`` steps (see the module docstring), each once, in the order of
    the depth-first enumeration; the shapes are the registry's shape functions'."""
    g = sub.graph
    window = sub.node
    x, out = sub.activation, sub.output
    target = g.shapes[out]
    moves = moves_for(window)
    found: dict[tuple[str, ...], Mutant] = {}
    # a step: (label, whether it is the window operator, its nodes as (operator, parameters))
    Step = tuple[str, bool, Steps]

    def build(seq: list[Step]) -> Graph | None:
        names = NameAllocator(set(g.shapes))
        cur, nodes = x, []
        for _, is_window, steps in seq:
            for op, params in steps:
                dst = names.fresh(f"{out}_pet")
                nodes.append(make_node(op, params, [cur, *window.inputs[1:]] if is_window else [cur], dst))
                cur = dst
        nodes[-1] = Node(nodes[-1].op, nodes[-1].params, nodes[-1].inputs, out)
        try:
            mg = Graph(g.inputs, g.weights, tuple(nodes), (out,), name=g.name)
            return mg if mg.shapes[out] == target else None
        except ValueError:
            return None

    def walk(seq: list[Step], shape: Shape, used_window: bool, last_move: bool) -> None:
        labels = tuple(label for label, _, _ in seq)
        if used_window and shape == target and labels != (window.op,) and labels not in found:
            if (mg := build(seq)) is not None:
                found[labels] = Mutant(mg, labels)
        if len(seq) >= depth:
            return
        if not last_move and len(shape) == 4:  # two moves in a row would be one R/T
            for mv in moves:
                steps = mv.steps(shape)
                if steps is not None:
                    walk(seq + [(mv.name, False, steps)], tuple(steps[-1][1]["shape"]), used_window, True)  # type: ignore[arg-type]
        if not used_window:
            for label, params in _window_variants(window):
                try:
                    s = window.spec.shape(window.spec.normalize(dict(params)),
                                          [shape, *[g.shapes[i] for i in window.inputs[1:]]])
                except ValueError:
                    continue
                name = window.op if label == "same" else f"{window.op}[{label}]"
                walk(seq + [(name, True, [(window.op, params)])], s, True, False)

    walk([], g.shapes[x], False, False)
    return list(found.values())
