"""Multi-linear subprograms (PET's MLTPs) over registry operators: what they are made of, their exact evaluation
modulo a prime, and their footprints (which activation element each output position reads through each tap).

A subprogram is an IR :class:`~eqsat.ir.graph.Graph` with one activation input, its weights and one output,
built only from the operators of :data:`ROLES`: a window operator (a convolution) and operators that move data
(reshape, transpose, split, concat, zero padding). A fused activation (``act``) is element-wise, so it commutes
with everything the analysis does to positions; the analysis runs on the linear core (``act`` 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from eqsat.ir.graph import Graph, Node, TensorInfo, make_node
from eqsat.ops.conv import patches

__all__ = ["PRIME", "ROLES", "Subprogram", "subprogram_of", "linear_core", "random_values", "evaluate_mod",
           "footprint", "NotMultiLinear"]

#: The field the random tests compute in: 2^13 - 1, a Mersenne prime. Values below it, products below 2^26 and
#: sums of up to 2^27 products are exact in float64, so the tests run on BLAS (PET uses 2^31 - 1 in integers).
PRIME = 8191

#: PET's operator set as far as this slice handles it (PET's Table 1 has more), and each one's role in a
#: footprint: ``window`` reads a window of its first input per output position (a convolution), ``move`` only
#: moves data (zero padding reads nothing at its borders).
ROLES: dict[str, str] = {"conv2d": "window", "reshape": "move", "transpose": "move", "split": "move",
                         "concat": "move", "pad": "move"}


class NotMultiLinear(ValueError):
    """The graph holds an operator outside :data:`ROLES`, or a shape of one the analysis does not handle."""


@dataclass(frozen=True)
class Subprogram:
    """One multi-linear subprogram: ``graph`` reads the activation ``graph.inputs[0]`` and weights, and computes
    ``graph.outputs[0]``; ``node`` is the node of the host graph it stands for (its tensor names are the host's)."""

    graph: Graph
    node: Node

    @property
    def activation(self) -> str:
        """The name of the activation input."""
        return self.graph.inputs[0].name

    @property
    def output(self) -> str:
        """The name of the output tensor."""
        return self.graph.outputs[0]


def subprogram_of(graph: Graph, node: Node) -> Subprogram | None:
    """The subprogram of one window node of ``graph`` over its activation and weights, or ``None`` where the node
    is not a window operator of :data:`ROLES` (or reads no activation and weights, or has groups)."""
    if ROLES.get(node.op) != "window" or node.p.get("groups", 1) != 1:
        return None
    x, *rest = node.inputs
    if x in graph.weights or not all(r in graph.weights for r in rest):
        return None
    shapes = graph.shapes
    sub = Graph((TensorInfo(x, shapes[x], graph.dtypes[x]),), {r: graph.weights[r] for r in rest}, (node,),
                (node.output,), name=f"pet_{node.output}")
    return Subprogram(sub, node)


def linear_core(graph: Graph) -> Graph:
    """``graph`` with every fused activation off: the multi-linear program the theorems speak of."""
    nodes = tuple(make_node(n.op, {**n.p, "act": 0}, n.inputs, n.output) if n.p.get("act", 0) else n
                  for n in graph.nodes)
    return Graph(graph.inputs, graph.weights, nodes, graph.outputs, graph.name)


def random_values(graph: Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Uniform random residues modulo :data:`PRIME` for every input and weight of ``graph`` (PET's Theorem 2
    draws all of a program's inputs, weights included)."""
    shapes = graph.shapes
    names = [i.name for i in graph.inputs] + list(graph.weights)
    return {n: rng.integers(0, PRIME, size=shapes[n]).astype(np.float64) for n in names}


def evaluate_mod(graph: Graph, values: Mapping[str, np.ndarray]) -> np.ndarray:
    """The output of ``graph``'s linear core on ``values`` (residues), exactly, modulo :data:`PRIME`."""
    env = dict(values)
    for n in linear_core(graph).nodes:
        if n.op not in ROLES:
            raise NotMultiLinear(f"pet: {n.op} ({n.output!r}) is not one of the multi-linear operators handled")
        args = [env[i] for i in n.inputs]
        if ROLES[n.op] == "window":
            reduction = int(np.prod(graph.shapes[n.inputs[1]][1:]))
            if reduction * (PRIME - 1) ** 2 >= 2 ** 53:
                raise NotMultiLinear(f"pet: {n.output!r} sums too many products to stay exact in float64")
            env[n.output] = np.mod(n.spec.numpy_fn(n.p, *args), PRIME)
        else:  # a move only moves residues (zero padding adds zeros): they stay residues
            env[n.output] = n.spec.numpy_fn(n.p, *args)
    return env[graph.outputs[0]]


def footprint(graph: Graph) -> np.ndarray:
    """Which activation element each output position reads through each tap: an int array of the output's shape
    plus a tap axis, holding the element's flat index plus one (0: nothing, a zero of padding). A window node
    reads its window's ``C x kh x kw`` taps, every output channel the same; a move reads one.

    Raises :class:`NotMultiLinear` for another operator or for a window over a window's output."""
    x = graph.inputs[0].name
    shapes = graph.shapes
    env: dict[str, np.ndarray] = {x: (np.arange(int(np.prod(shapes[x])), dtype=np.int64) + 1).reshape(
        shapes[x] + (1,))}
    for n in graph.nodes:
        role = ROLES.get(n.op)
        if role is None or any(i not in env for i in n.inputs if i not in graph.weights):
            raise NotMultiLinear(f"pet: no footprint through {n.op} ({n.output!r})")
        if role == "window":
            ids = env[n.inputs[0]]
            if ids.shape[-1] != 1:
                raise NotMultiLinear(f"pet: a window over a window's output ({n.output!r})")
            kh, kw = shapes[n.inputs[1]][2:]
            win = patches(ids[..., 0], kh, kw, n.p["strides"], n.p["pads"], n.p["dilations"])  # N,C,kh,kw,OH,OW
            nb, c, _, _, oh, ow = win.shape
            taps = win.transpose(0, 4, 5, 1, 2, 3).reshape(nb, 1, oh, ow, c * kh * kw)
            env[n.output] = np.broadcast_to(taps, (nb, shapes[n.output][1], oh, ow, c * kh * kw))
        else:
            args = [env[i] for i in n.inputs]
            taps = args[0].shape[-1]
            if any(a.shape[-1] != taps for a in args):
                raise NotMultiLinear(f"pet: {n.output!r} joins tensors of different footprints")
            env[n.output] = np.stack([n.spec.numpy_fn(n.p, *[a[..., t] for a in args]) for t in range(taps)],
                                     axis=-1).astype(np.int64)
    return np.asarray(env[graph.outputs[0]])
