"""A decoder step with a KV cache, written node by node as torch's dynamo exporter writes one (without torch).

Inputs ``input_ids [batch, sequence]`` and per layer ``past_key_L``/``past_value_L [batch, kv_heads,
past_sequence, head]``; outputs ``logits [batch, sequence, vocab]`` and per layer ``present_key_L``/
``present_value_L [batch, kv_heads, past_sequence + sequence, head]``. The sizes are read from the inputs at run
time (``Shape``, ``Squeeze``, ``Add``); rotary positions are a float ``Range`` from the past length to the total;
the causal mask over past and new positions is ``Range``, ``LessOrEqual`` and ``Where``; grouped-query heads share
each key and value head (``Expand``, ``Reshape``). ``benchmarks/export_kv_decoder.py`` exports the same
arithmetic from PyTorch.
"""

from __future__ import annotations

import numpy as np
import onnx

from eqsat.models.builder import FLOAT, INT64, ModelBuilder, make_model

__all__ = ["kv_decoder_step"]


def kv_decoder_step(layers: int = 2, seed: int = 0, hidden: int = 32, heads: int = 4, kv_heads: int = 2,
                    vocab: int = 50) -> onnx.ModelProto:
    """The decoder step (module docstring), ``layers`` layers deep, seeded weights."""
    head = hidden // heads
    b = ModelBuilder(seed)

    def c(value: object, name: str, dtype: type = np.int64) -> str:
        return b.const(np.asarray(value, dtype=dtype), name)

    zero_axis = c([0], "axis0")
    s = b.op("Squeeze", [b.op("Shape", ["input_ids"], start=1, end=2), zero_axis], "sequence_len")
    p = b.op("Squeeze", [b.op("Shape", ["past_key_0"], start=2, end=3), zero_axis], "past_len")
    total = b.op("Add", [p, s], "total_len")
    # rotary positions p .. p + s - 1, in floats
    pos = b.op("Range", [b.op("Cast", [p], to=onnx.TensorProto.FLOAT), b.op("Cast", [total], to=onnx.TensorProto.FLOAT),
                         c(1.0, "one", np.float32)])
    inv = c((1.0 / 10000 ** (np.arange(0, head, 2) / head))[None, :], "inv_freq", np.float32)
    freqs = b.op("Mul", [b.op("Unsqueeze", [pos, c([1], "axis1")]), inv])
    angles = b.op("Concat", [freqs, freqs], axis=-1)
    cos, sin = b.op("Cos", [angles]), b.op("Sin", [angles])
    # causal over past and new positions: new token i sees positions up to p + i
    cols = b.op("Unsqueeze", [b.op("Range", [c(0, "start0"), total, c(1, "step1")]), c([0], "axis0b")])
    rows = b.op("Unsqueeze", [b.op("Add", [b.op("Range", [c(0, "start0b"), s, c(1, "step1b")]), p]),
                              c([1], "axis1b")])
    mask = b.op("Where", [b.op("LessOrEqual", [cols, rows]), c(0.0, "zero", np.float32),
                          c(-1e9, "masked", np.float32)])
    h = b.op("Gather", [b.weight((vocab, hidden), scale=0.5, name="embed"), "input_ids"])
    half = head // 2
    outputs = []

    def rotary(x: str) -> str:
        first = b.op("Slice", [x, c([0], "s0"), c([half], "e0"), c([3], "ax3")])
        second = b.op("Slice", [x, c([half], "s1"), c([head], "e1"), c([3], "ax3b")])
        rotated = b.op("Concat", [b.op("Neg", [second]), first], axis=3)
        return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [rotated, sin])])

    def heads_of(x: str, n: int) -> str:  # [batch, seq, n * head] -> [batch, n, seq, head]
        return b.op("Transpose", [b.op("Reshape", [x, c([0, 0, n, head], "shape_heads")])], perm=[0, 2, 1, 3])

    for layer in range(layers):
        q = rotary(heads_of(b.op("MatMul", [h, b.weight((hidden, hidden), name="wq")]), heads))
        k = rotary(heads_of(b.op("MatMul", [h, b.weight((hidden, kv_heads * head), name="wk")]), kv_heads))
        v = heads_of(b.op("MatMul", [h, b.weight((hidden, kv_heads * head), name="wv")]), kv_heads)
        present_k = b.op("Concat", [f"past_key_{layer}", k], f"present_key_{layer}", axis=2)
        present_v = b.op("Concat", [f"past_value_{layer}", v], f"present_value_{layer}", axis=2)
        outputs += [present_k, present_v]

        def shared(x: str) -> str:  # each key/value head serves heads / kv_heads query heads
            wide = b.op("Expand", [b.op("Unsqueeze", [x, c([2], "axis2")]),
                                   c([1, 1, heads // kv_heads, 1, 1], "repeat")])
            return b.op("Reshape", [wide, c([0, heads, -1, head], "shape_shared")])

        scores = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [shared(present_k)], perm=[0, 1, 3, 2])]),
                              c(1.0 / np.sqrt(head), "scale", np.float32)])
        att = b.op("Softmax", [b.op("Add", [scores, mask])], axis=-1)
        ctx = b.op("Reshape", [b.op("Transpose", [b.op("MatMul", [att, shared(present_v)])], perm=[0, 2, 1, 3]),
                               c([0, 0, hidden], "shape_merge")])
        h = b.op("Add", [h, b.op("MatMul", [ctx, b.weight((hidden, hidden), name="wo")])])
        up = b.op("MatMul", [h, b.weight((hidden, 2 * hidden), name="w1")])
        h = b.op("Add", [h, b.op("MatMul", [b.op("Mul", [up, b.op("Sigmoid", [up])]),
                                            b.weight((2 * hidden, hidden), name="w2")])])
    logits = b.op("MatMul", [h, b.weight((hidden, vocab), name="lm_head")], "logits")
    cache = ["batch", kv_heads, "past_sequence", head]
    present = ["batch", kv_heads, "past_sequence + sequence", head]
    inputs = [("input_ids", ["batch", "sequence"], INT64)] + [
        (f"past_{kind}_{k}", cache, FLOAT) for k in range(layers) for kind in ("key", "value")]
    outs = [(logits, ["batch", "sequence", vocab], FLOAT)] + [(o, present, FLOAT) for o in outputs]
    return make_model(b.nodes, inputs, outs, b.inits, 18, name="kv_decoder_step", ir_version=8,
                      producer="eqsat.testing", check=True)
