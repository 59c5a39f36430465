"""Hugging Face ``BertModel`` node for node as torch.onnx's TorchScript exporter writes it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# ---------------------------------------------------------------------------------------------------------
# Hugging Face BERT as torch.onnx's TorchScript exporter writes it
#
# Checked against real exports (torch 2.13 ``torch.onnx.export(..., dynamo=False)``, opsets 17 and 20, static
# shapes, batch 1) of ``transformers.BertModel`` from transformers 4.46.3, 4.57.6 and 5.23.0, with both
# attention implementations. Node order, op types, attributes, Constant values and node/tensor names follow
# those exports ('{scope}/{Op}[_k]' nodes with '{node}_output_0' outputs, as for a model exported directly).


class _TorchExport:
    """Node and tensor naming of torch.onnx's TorchScript exporter: node ``{scope}/{Op}`` (``{Op}_{k}`` for the
    k-th further node of that type in the scope), its output ``{node}_output_0``; constants as Constant nodes."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.counts: dict[tuple[str, str], int] = {}
        self.matmul_weights = 0

    def op(self, scope: str, op_type: str, inputs: list[str], out: str | None = None, **attrs: object) -> str:
        k = self.counts.get((scope, op_type), 0)
        self.counts[(scope, op_type)] = k + 1
        name = f"{scope}/{op_type}" + (f"_{k}" if k else "")
        out = out or f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def const(self, scope: str, value: object, dtype: type) -> str:
        return self.op(scope, "Constant", [], value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name))
        return name

    def matmul_weight(self, arr: np.ndarray) -> str:
        """A Linear layer's weight as the exporter stores it for MatMul: transposed, (in, out), unnamed."""
        self.matmul_weights += 1
        return self.init(f"onnx::MatMul_{self.matmul_weights}", arr)

    def expand_shape(self, scope: str, shape: list[int]) -> str:
        """The target-shape idiom of torch's ``expand``: Where(Equal(shape, ones * -1), ones, shape)."""
        s = self.const(scope, shape, np.int64)
        ones = self.op(scope, "ConstantOfShape", [self.const(scope, [len(shape)], np.int64)],
                       value=numpy_helper.from_array(np.array([1], dtype=np.int64)))
        neg = self.op(scope, "Mul", [ones, self.const(scope, -1, np.int64)])
        return self.op(scope, "Where", [self.op(scope, "Equal", [s, neg]), ones, s])


def hf_bert(seq: int = 128, hidden: int = 768, heads: int = 12, layers: int = 1, intermediate: int | None = None,
            vocab: int = 30522, attention: str = "eager", gelu: str = "op", pooler: bool = True,
            token_type_ids: bool = False, transformers: str = "5", opset: int = 20,
            seed: int = 0, dynamic: bool = False) -> onnx.ModelProto:
    """Hugging Face ``transformers.BertModel`` as ``torch.onnx.export(model, ..., dynamo=False,
    opset_version=opset)`` writes it for static shapes at batch 1 (``seq`` <= 512 tokens).

    Inputs: int64 ``input_ids`` and ``attention_mask`` and, with ``token_type_ids=True`` (an export given them),
    ``token_type_ids``, each (1, seq); outputs ``last_hidden_state`` (1, seq, hidden) and (``pooler=True``)
    ``pooler_output`` (1, hidden). Defaults: BERT-base sizes, one layer, ``intermediate`` 4 * hidden, the
    current library (``transformers="5"``), eager attention (transformers itself picks "sdpa" unless told),
    no token_type_ids input. Those defaults keep the model valid for eqsat's random test inputs (integers in
    [0, 4)): a token-type input would index past the 2-row table, and the 4.x mask (1 - m) * float32-min
    overflows to +inf for m = 3, so every output is NaN; the 5.x mask only asks m != 0.

    Embeddings: Gather rows of the word table (vocab, hidden) by ``input_ids``, of the token-type table (2, hidden)
    by ``token_type_ids`` (without that input, by constant zeros that the export expands), Add, Gather of the
    position table (512, hidden) by the constant position ids 0..seq-1, Add, LayerNormalization (axis -1, epsilon
    1e-12). Each layer: q, k, v = MatMul by a transposed (in, out) weight initializer then Add(bias, .) (the bias
    first, as exported); Reshape each to (1, seq, heads, head_dim) (target [1, -1, heads, head_dim] in 4.x, [1, seq,
    -1, head_dim] in 5.x); Transpose q and v with perm (0, 2, 1, 3) and k with (0, 2, 3, 1) (the exporter fuses the
    head transpose with k's transpose); the attention (below); Transpose (0, 2, 1, 3); Reshape (1, seq, hidden)
    (target [1, seq, -1] in 5.x); output projection MatMul + Add; residual Add; LayerNormalization; intermediate
    MatMul + Add; GELU; output MatMul + Add; residual Add; LayerNormalization. Pooler: Gather index 0 on axis 1,
    Gemm (weight (out, in), transB=1, alpha=beta=1), Tanh.

    ``gelu``: ``"op"`` the opset-20 ``Gelu`` node (approximate="none"), ``"erf"`` the decomposition the
    exporter writes below opset 20: Div(x, sqrt 2) -> Erf -> Add(1) -> Mul(x, .) -> Mul(0.5) (``opset`` 17..19
    with ``"erf"`` gives the real export at that opset; ``"op"`` needs opset 20).

    ``transformers``: which library generation the export comes from (they differ in the mask and the
    attention). ``"4"``: transformers 4.x (as 4.57.6 exports; 4.46.3 differs only in node order and a static
    sequence length in the head-split Reshape). The extended mask is (1 - Cast(Unsqueeze(Unsqueeze(mask, 1),
    2), float)) * float32-min. ``attention="eager"``: MatMul(q, kT), Div by sqrt(head_dim), Add mask, Softmax
    (axis -1), MatMul with v. ``attention="sdpa"``: torch's ``scaled_dot_product_attention`` symbolic with the
    scale computed at run time from Shape(q) (Slice, Cast, Sqrt, Div(1, .), Cast) and q and kT each Mul'ed by
    Sqrt(scale) before the MatMul; its mask is expanded to (1, 1, seq, seq) and then Where(bool(1 - m), min,
    1 - m). ``"5"``: transformers 5.x (as 5.23.0 exports): the mask comes from ``create_bidirectional_mask``
    as a boolean (1, 1, seq, seq) built by index arithmetic (GreaterOrEqual, Flatten, Gather, And, Expand);
    eager: MatMul(q, kT), Mul by 1/sqrt(head_dim), Add Where(mask, 0, float32-min), Softmax, MatMul;
    sdpa: per layer q and kT Mul'ed by the constant head_dim**-0.25, MatMul, Add Where(mask, 0, -inf),
    Softmax, Where(IsNaN(p), 0, p), MatMul, and a no-op Reshape (1, heads, seq, head_dim) before the
    transpose back.

    Weights are seeded: matrices and embedding tables N(0, 0.02) as BERT's initializer, biases N(0, 0.02),
    LayerNorm scales N(1, 0.02) and shifts N(0, 0.02) (no two parameters equal, so nothing an exporter would
    merge), so activations stay O(1). IR version 9 (8 below opset 19), as torch writes.
    With ``dynamic=True`` (transformers 4.x, eager attention, no token_type_ids input) the export is the one
    ``dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, ...}`` gives: inputs and outputs (batch, sequence),
    the position ids and token types sliced from their 512-entry buffers up to Shape(input_ids)[1], and each
    Reshape target concatenated from its input's Shape at run time (x.size()[:-1] + (heads, head_dim)).
    """
    if attention not in ("eager", "sdpa"):
        raise ValueError(f"attention must be 'eager' or 'sdpa', not {attention!r}")
    if gelu not in ("op", "erf"):
        raise ValueError(f"gelu must be 'op' or 'erf', not {gelu!r}")
    if transformers not in ("4", "5"):
        raise ValueError(f"transformers must be '4' or '5', not {transformers!r}")
    if not 17 <= opset <= 20 or (gelu == "op" and opset < 20):
        raise ValueError(f"opset {opset}: LayerNormalization needs 17 or later, the Gelu op 20 (use gelu='erf')")
    if hidden % heads or not 1 <= seq <= 512 or layers < 1:
        raise ValueError(f"need hidden % heads == 0, 1 <= seq <= 512 and layers >= 1 "
                         f"(hidden={hidden}, heads={heads}, seq={seq}, layers={layers})")
    ffn = 4 * hidden if intermediate is None else intermediate
    dh = hidden // heads
    v5 = transformers == "5"
    rng = np.random.default_rng(seed)
    t = _TorchExport()
    i64, f32 = np.int64, np.float32
    fmin = np.finfo(np.float32).min

    def normal(shape: tuple[int, ...], mean: float = 0.0) -> np.ndarray:
        return rng.normal(mean, 0.02, shape)

    def linear(scope: str, x: str, n_in: int, n_out: int, name: str) -> str:
        w = t.matmul_weight(normal((n_in, n_out)))
        return t.op(scope, "Add", [t.init(f"{name}.bias", normal((n_out,))), t.op(scope, "MatMul", [x, w])])

    def layer_norm(scope: str, x: str, name: str, out: str | None = None) -> str:
        g = t.init(f"{name}.weight", normal((hidden,), 1.0))
        b = t.init(f"{name}.bias", normal((hidden,)))
        return t.op(scope, "LayerNormalization", [x, g, b], out, axis=-1, epsilon=1e-12)

    # embeddings (and, without a token_type_ids input, the buffered all-zero token types)
    E = "/embeddings"
    word_w = t.init("embeddings.word_embeddings.weight", normal((vocab, hidden)))
    pos_w = t.init("embeddings.position_embeddings.weight", normal((512, hidden)))
    type_w = t.init("embeddings.token_type_embeddings.weight", normal((2, hidden)))
    positions = np.arange(seq, dtype=i64)[None, :]
    if dynamic and (v5 or attention != "eager" or token_type_ids):
        raise ValueError("hf_bert(dynamic=True) writes the transformers 4.x eager export without token_type_ids")
    if dynamic:  # buffers sliced to the run's sequence length, the types expanded to (batch, sequence)
        zero = t.const("", 0, i64)
        ids_shape = t.op(E, "Shape", ["input_ids"])
        length = t.op(E, "Unsqueeze", [t.op(E, "Gather", [ids_shape, t.const(E, 1, i64)], axis=0),
                                       t.const(E, [0], i64)])
        start, axis1 = t.const(E, [0], i64), t.const(E, [1], i64)
        pos_ids = t.op(E, "Slice", [t.const(E, np.arange(512, dtype=i64)[None, :], i64), start, length, axis1])
        types = t.op(E, "Slice", [t.const(E, np.zeros((1, 512), dtype=i64), i64), start, length, axis1])
        types = t.op(E, "Expand", [types, ids_shape])
    elif token_type_ids:
        types = "token_type_ids"
        zero = t.const(E, 0, i64)  # index 0, shared with the pooler's Gather
        pos_ids = t.const(E, positions, i64)
    elif not v5:
        zero = t.const("", 0, i64)
        buffered = t.const("", np.zeros((1, seq), dtype=i64), i64)
        types = t.op("", "Expand", [buffered, t.expand_shape("", [1, seq])])
        pos_ids = t.const(E, positions, i64)
    else:
        zero = t.const(E, 0, i64)
        pos_ids = t.const(E, positions, i64)
        buffered = t.const(E, np.zeros((1, 512), dtype=i64), i64)
        buffered = t.op(E, "Expand", [buffered, t.expand_shape(E, [1, -1])])
        gathered = t.op(E, "GatherElements", [buffered, pos_ids], axis=1)
        types = t.op(E, "Expand", [gathered, t.expand_shape(E, [1, seq])])
    words = t.op(f"{E}/word_embeddings", "Gather", [word_w, "input_ids"])
    x = t.op(E, "Add", [words, t.op(f"{E}/token_type_embeddings", "Gather", [type_w, types])])
    x = t.op(E, "Add", [x, t.op(f"{E}/position_embeddings", "Gather", [pos_w, pos_ids])])
    x = layer_norm(f"{E}/LayerNorm", x, "embeddings.LayerNorm")

    # the attention mask
    mask = ""
    if not v5:
        m = t.op("", "Unsqueeze", ["attention_mask", t.const("", [1], i64)])
        m = t.op("", "Unsqueeze", [m, t.const("", [2], i64)])
        if attention == "sdpa":  # _prepare_4d_attention_mask_for_sdpa expands it first
            m = t.op("", "Expand", [m, t.expand_shape("", [1, 1, seq, seq])])
        m = t.op("", "Cast", [m], to=TensorProto.FLOAT)
        inv = t.op("", "Sub", [t.const("", 1.0, f32), m])
        if attention == "eager":  # BertModel.get_extended_attention_mask
            mask = t.op("", "Mul", [inv, t.const("", fmin, f32)])
        else:
            flag = t.op("", "Cast", [t.op("", "Cast", [inv], to=TensorProto.BOOL)], to=TensorProto.BOOL)
            mask = t.op("", "Where", [flag, t.const("", fmin, f32), inv])
    else:  # masking_utils.create_bidirectional_mask: a boolean (1, 1, seq, seq) mask
        pad = t.op("", "Cast", ["attention_mask"], to=TensorProto.BOOL)
        true = t.op("", "ConstantOfShape", [t.const("", np.zeros((0,), dtype=i64), i64)],
                    value=numpy_helper.from_array(np.array([True])))
        q_idx = t.const("", np.arange(seq, dtype=i64).reshape(1, 1, seq, 1), i64)
        ge = t.op("", "Cast", [t.op("", "GreaterOrEqual", [q_idx, t.const("", 0, i64)])], to=TensorProto.BOOL)
        both = t.op("", "And", [true, ge])
        length = t.op("", "Gather", [t.op("", "Shape", [pad]), t.const("", [1], i64)], axis=0)
        flat = t.op("", "Flatten", [pad], axis=2)
        offset = t.op("", "Mul", [t.const("", np.zeros((1, 1, 1, 1), dtype=i64), i64), length])
        index = t.op("", "Add", [t.const("", np.arange(seq, dtype=i64).reshape(1, 1, 1, seq), i64), offset])
        picked = t.op("", "Gather", [flat, index], axis=0)
        shape = t.op("", "Shape", [index])
        picked = t.op("", "Reshape", [picked, t.const("", [-1], i64)], allowzero=0)
        picked = t.op("", "Reshape", [picked, t.op("", "Concat", [shape], axis=0)], allowzero=0)
        both = t.op("", "And", [both, t.op("", "Cast", [picked], to=TensorProto.BOOL)])
        bool_mask = t.op("", "Expand", [both, t.expand_shape("", [1, -1, seq, seq])])
        if attention == "eager":
            mask = t.op("", "Where", [bool_mask, t.const("", 0.0, f32), t.const("", fmin, f32)])

    for i in range(layers):
        L = f"/encoder/layer.{i}"
        S = f"{L}/attention/self"
        split = [1, seq, -1, dh] if v5 else [1, -1, heads, dh]
        q = linear(f"{S}/query", x, hidden, hidden, f"encoder.layer.{i}.attention.self.query")
        k_in = linear(f"{S}/key", x, hidden, hidden, f"encoder.layer.{i}.attention.self.key")
        v_in = linear(f"{S}/value", x, hidden, hidden, f"encoder.layer.{i}.attention.self.value")
        shapes = [t.const(S, split, i64) for _ in range(3)]
        if dynamic:  # x.size()[:-1] + (heads, head_dim), at run time
            shapes = [t.op(S, "Concat", [t.op(S, "Slice", [t.op(S, "Shape", [y]), t.const(S, [0], i64),
                                                            t.const(S, [-1], i64)]),
                                         t.const(S, [heads, dh], i64)], axis=0) for y in (q, k_in, v_in)]
        q = t.op(S, "Transpose", [t.op(S, "Reshape", [q, shapes[0]], allowzero=0)], perm=[0, 2, 1, 3])
        k = t.op(S, "Reshape", [k_in, shapes[1]], allowzero=0)
        v = t.op(S, "Transpose", [t.op(S, "Reshape", [v_in, shapes[2]], allowzero=0)], perm=[0, 2, 1, 3])
        if attention == "eager":
            kt = t.op(S, "Transpose", [k], perm=[0, 2, 3, 1])
            scores = t.op(S, "MatMul", [q, kt])
            if v5:
                scores = t.op(S, "Mul", [scores, t.const(S, dh ** -0.5, f32)])
            else:
                scores = t.op(S, "Div", [scores, t.const(S, np.sqrt(dh), f32)])
            probs = t.op(S, "Softmax", [t.op(S, "Add", [scores, mask])], axis=-1)
            ctx = t.op(S, "MatMul", [probs, v])
        elif not v5:  # scale = 1 / sqrt(q.shape[-1]) at run time
            last = t.op(S, "Slice", [t.op(S, "Shape", [q]), t.const(S, [-1], i64),
                                     t.const(S, [np.iinfo(np.int64).max], i64)])
            root = t.op(S, "Sqrt", [t.op(S, "Cast", [last], to=TensorProto.FLOAT)])
            scale = t.op(S, "Cast", [t.op(S, "Div", [t.const(S, [1.0], f32), root])], to=TensorProto.FLOAT)
            kt = t.op(S, "Transpose", [k], perm=[0, 2, 3, 1])
            qs = t.op(S, "Mul", [q, t.op(S, "Sqrt", [scale])])
            ks = t.op(S, "Mul", [kt, t.op(S, "Sqrt", [scale])])
            probs = t.op(S, "Softmax", [t.op(S, "Add", [t.op(S, "MatMul", [qs, ks]), mask])], axis=-1)
            ctx = t.op(S, "MatMul", [probs, v])
        else:  # scale = head_dim ** -0.5 given, its square root folded
            kt = t.op(S, "Transpose", [k], perm=[0, 2, 3, 1])
            root = np.sqrt(np.float32(dh ** -0.5))
            qs = t.op(S, "Mul", [q, t.const(S, root, f32)])
            ks = t.op(S, "Mul", [kt, t.const(S, root, f32)])
            scores = t.op(S, "MatMul", [qs, ks])
            bias = t.op(S, "Where", [bool_mask, t.const(S, [0.0], f32), t.const(S, [-np.inf], f32)])
            probs = t.op(S, "Softmax", [t.op(S, "Add", [scores, bias])], axis=-1)
            probs = t.op(S, "Where", [t.op(S, "IsNaN", [probs]), t.const(S, [0.0], f32), probs])
            ctx = t.op(S, "MatMul", [probs, v])
            ctx = t.op(S, "Reshape", [ctx, t.const(S, [1, -1, seq, dh], i64)], allowzero=0)
        ctx = t.op(S, "Transpose", [ctx], perm=[0, 2, 1, 3])
        merged = [1, seq, -1] if v5 else [1, seq, hidden]
        target = t.const(S, merged, i64)
        if dynamic:  # ctx.size()[:-2] + (hidden,)
            target = t.op(S, "Concat", [t.op(S, "Slice", [t.op(S, "Shape", [ctx]), t.const(S, [0], i64),
                                                          t.const(S, [-2], i64)]), t.const(S, [hidden], i64)], axis=0)
        ctx = t.op(S, "Reshape", [ctx, target], allowzero=0)
        a = linear(f"{L}/attention/output/dense", ctx, hidden, hidden, f"encoder.layer.{i}.attention.output.dense")
        a = t.op(f"{L}/attention/output", "Add", [a, x])
        a = layer_norm(f"{L}/attention/output/LayerNorm", a, f"encoder.layer.{i}.attention.output.LayerNorm")
        h = linear(f"{L}/intermediate/dense", a, hidden, ffn, f"encoder.layer.{i}.intermediate.dense")
        G = f"{L}/intermediate/intermediate_act_fn"
        if gelu == "op":
            h = t.op(G, "Gelu", [h], approximate="none")
        else:
            e = t.op(G, "Erf", [t.op(G, "Div", [h, t.const(G, np.sqrt(2.0), f32)])])
            h = t.op(G, "Mul", [t.op(G, "Mul", [h, t.op(G, "Add", [e, t.const(G, 1.0, f32)])]),
                                t.const(G, 0.5, f32)])
        o = linear(f"{L}/output/dense", h, ffn, hidden, f"encoder.layer.{i}.output.dense")
        o = t.op(f"{L}/output", "Add", [o, a])
        x = layer_norm(f"{L}/output/LayerNorm", o, f"encoder.layer.{i}.output.LayerNorm",
                       "last_hidden_state" if i == layers - 1 else None)

    batch_dim, seq_dim = ("batch", "sequence") if dynamic else (1, seq)
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [batch_dim, seq_dim, hidden])]
    if pooler:
        first = t.op("/pooler", "Gather", [x, zero], axis=1)
        w = t.init("pooler.dense.weight", normal((hidden, hidden)))
        b = t.init("pooler.dense.bias", normal((hidden,)))
        y = t.op("/pooler/dense", "Gemm", [first, w, b], alpha=1.0, beta=1.0, transB=1)
        t.op("/pooler/activation", "Tanh", [y], "pooler_output")
        outputs.append(helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [batch_dim, hidden]))
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_type_ids else [])
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, [batch_dim, seq_dim]) for name in names]
    used = {n for node in t.nodes for n in node.input}
    nodes = [n for n in t.nodes if n.op_type != "Constant" or n.output[0] in used]
    g = helper.make_graph(nodes, "main_graph", inputs, outputs, t.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="eqsat.models")
    model.ir_version = 9 if opset >= 19 else 8  # what torch writes for each opset
    onnx.checker.check_model(model, full_check=True)
    return model
