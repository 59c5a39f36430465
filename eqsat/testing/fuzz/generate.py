"""Random graphs from motifs: :func:`generate_graph` draws a number of motifs and their parameters from the
choices, then picks the outputs (every computed tensor nobody consumes, plus some consumed intermediates);
:func:`generate_model` does it from a seed and keeps the decision record for replay."""

from __future__ import annotations

from collections.abc import Collection

import onnx

from eqsat.testing.fuzz.choices import Choices, RandomChoices, flip, weighted
from eqsat.testing.fuzz.graph import FuzzGraph, GraphBuilder, to_model
from eqsat.testing.fuzz.motifs import MOTIFS


def generate_graph(c: Choices, *, max_motifs: int = 6, prefix: str = "", avoid: Collection[str] = ()) -> FuzzGraph:
    """A random, valid ONNX graph built from 1..``max_motifs`` motifs, every decision taken from ``c``.

    Outputs: every computed tensor nobody consumes, plus some intermediates that are also consumed. ``avoid``
    names motifs (keys of :data:`MOTIFS`) or opaque operators (:data:`OPAQUE_KINDS`) not to generate, e.g.
    to keep a known, still open bug out of a CI run.
    """
    seed = c.int(0, 2**16)
    b = GraphBuilder(c, prefix, seed, avoid)
    used: list[str] = []
    marks: list[int] = []
    for _ in range(c.int(1, max_motifs)):
        marks.append(len(getattr(c, "record", ())))
        name = weighted(c, [(k, w) for k, (_, w) in MOTIFS.items() if k not in b.avoid])
        MOTIFS[name][0](b)
        used.append(name)
    consumed = {i for n in b.nodes for i in n.input}
    computed = [a for a in b.acts if a not in b.inputs]
    outputs = [a for a in computed if a not in consumed or flip(c, 0.15)]
    if not outputs:
        outputs = [computed[-1]] if computed else [b.one("Relu", [b.any_act()], b.shapes[b.acts[-1]])]
    return FuzzGraph(b.nodes, dict(b.inputs), dict(b.weights), {o: b.shapes[o] for o in outputs}, used, prefix,
                      marks)


def generate_model(seed: int, *, max_motifs: int = 6, avoid: Collection[str] = ()) -> tuple[onnx.ModelProto, list[int]]:
    """A single random graph from ``seed`` as a model, with its decision record (for :class:`ReplayChoices`)."""
    c = RandomChoices(seed)
    return to_model([generate_graph(c, max_motifs=max_motifs, avoid=avoid)]), c.record
