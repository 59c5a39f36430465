"""A generated graph and the builder motifs write into: :class:`FuzzGraph` (ONNX nodes, inputs, initializers and
outputs, all names prefixed so several graphs pack into one model with :func:`to_model`) and
:class:`GraphBuilder`, which tracks every tensor's shape while motifs append nodes and draws dimensions,
weights and run-time inputs from the choices."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from eqsat.ir.names import NameAllocator
from eqsat.testing.fuzz.choices import Choices, choose, flip

Shape = tuple[int, ...]

OPSET = 17
IR_VERSION = 8
#: Small, odd dimensions (1 and primes find broadcasting and off-by-one bugs; they keep onnxruntime fast).
DIMS = (1, 2, 3, 4, 5, 7)


@dataclass
class FuzzGraph:
    """One random graph: ONNX nodes, inputs, initializers and outputs, all names prefixed."""

    nodes: list[onnx.NodeProto]
    inputs: dict[str, Shape]
    initializers: dict[str, np.ndarray]
    outputs: dict[str, Shape]
    motifs: list[str]
    prefix: str = ""
    #: positions in the decision record where each motif starts (when the choices keep a record)
    marks: list[int] = field(default_factory=list)

    def describe(self) -> str:
        """The graph as ONNX text (for reports and reproducers)."""
        return onnx.printer.to_text(to_model([self]).graph)


class GraphBuilder:
    """Tracks tensors and shapes while motifs append nodes."""

    def __init__(self, c: Choices, prefix: str, seed: int, avoid: Collection[str] = ()) -> None:
        self.c = c
        self.prefix = prefix
        self.avoid = set(avoid)
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: dict[str, Shape] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.shapes: dict[str, Shape] = {}
        self.acts: list[str] = []  # float tensors computed at run time (inputs and node outputs), oldest first
        self.float_weights: list[str] = []
        self.names = NameAllocator(sep="", numbered=True)  # x1, w2, t3, n4, ...: one counter, the prefix first

    # -- names and leaves ---------------------------------------------------------------------------------
    def fresh(self, kind: str) -> str:
        return self.names.fresh(self.prefix + kind)

    def dim(self) -> int:
        return choose(self.c, DIMS)

    def shape(self, rank: int) -> Shape:
        return tuple(self.dim() for _ in range(rank))

    def new_input(self, shape: Shape) -> str:
        name = self.fresh("x")
        self.inputs[name] = tuple(shape)
        self.shapes[name] = tuple(shape)
        self.acts.append(name)
        return name

    def weight(self, shape: Shape, kind: str = "normal", fan_in: int | None = None) -> str:
        """A float initializer: ``normal`` ~ N(0, 1/sqrt(fan_in)), ``positive`` in [0.5, 1.5], ``small``."""
        shape = tuple(shape)
        if kind == "positive":
            arr = self.rng.uniform(0.5, 1.5, shape)
        elif kind == "small":
            arr = self.rng.normal(0.0, 0.5, shape)
        else:
            fan = fan_in if fan_in is not None else (shape[0] if len(shape) == 2 else math.prod(shape[1:]) or 1)
            arr = self.rng.normal(0.0, 1.0 / math.sqrt(max(fan, 1)), shape)
        name = self.fresh("w")
        self.weights[name] = np.asarray(arr, dtype=np.float32)
        self.shapes[name] = shape
        self.float_weights.append(name)
        return name

    def const(self, values: Sequence[int] | np.ndarray, dtype: Any = np.int64) -> str:
        name = self.fresh("c")
        self.weights[name] = np.asarray(values, dtype=dtype)
        self.shapes[name] = tuple(self.weights[name].shape)
        return name

    def matrix_weight(self, k: int, n: int, batch: Shape = ()) -> str:
        """A (batch..., k, n) weight, sometimes one that already exists (weights shared by several nodes)."""
        shared = [w for w in self.float_weights if self.shapes[w][:-1] == batch + (k,) and w in self.weights]
        if shared and flip(self.c, 0.3):
            return choose(self.c, shared)
        return self.weight(batch + (k, n), fan_in=k)

    def act(self, pred: Callable[[Shape], bool], make: Callable[[], Shape]) -> str:
        """A run-time tensor whose shape satisfies ``pred``: usually a recent one, else a new graph input."""
        cands = [a for a in self.acts if pred(self.shapes[a])]
        if cands and not flip(self.c, 0.15):
            return cands[-1 - self.c.int(0, len(cands) - 1)]  # 0: the most recent, for deep chains
        return self.new_input(make())

    def any_act(self, min_rank: int = 1, max_rank: int = 4) -> str:
        return self.act(lambda s: min_rank <= len(s) <= max_rank,
                        lambda: self.shape(self.c.int(max(min_rank, 2), max(max_rank, 2))))

    def node(self, op_type: str, inputs: Sequence[str], out_shapes: Sequence[Shape], **attrs: Any) -> list[str]:
        outs = [self.fresh("t") for _ in out_shapes]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh("n"), **attrs))
        for o, s in zip(outs, out_shapes, strict=True):
            self.shapes[o] = tuple(s)
            self.acts.append(o)
        return outs

    def one(self, op_type: str, inputs: Sequence[str], shape: Shape, **attrs: Any) -> str:
        return self.node(op_type, inputs, [shape], **attrs)[0]

    def perm(self, rank: int) -> list[int]:
        rest = list(range(rank))
        return [rest.pop(self.c.int(0, len(rest) - 1)) for _ in range(rank)]


def to_model(graphs: Sequence[FuzzGraph]) -> onnx.ModelProto:
    """One ONNX model holding the given graphs side by side (disjoint; names must not collide)."""
    nodes, inputs, inits, outputs = [], [], [], []
    for g in graphs:
        nodes += g.nodes
        inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in g.inputs.items()]
        inits += [numpy_helper.from_array(v, k) for k, v in g.initializers.items()]
        outputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(s)) for k, s in g.outputs.items()]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="eqsat.testing.fuzz")
    model.ir_version = IR_VERSION
    return model
