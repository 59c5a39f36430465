"""eqsat.models.hf_bert: Hugging Face BertModel as torch.onnx's TorchScript exporter writes it (small sizes).

The node structure was checked node by node (names, op types, attributes, Constant values) against real
exports of tiny BertModels (transformers 4.57.6 and 5.23.0, torch 2.13, opsets 17 and 20); these tests pin the
op counts found there and check the graph's numbers against a numpy BERT.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from eqsat import models, onnx_io
from eqsat.pipeline.check import check_equal

SEQ, HIDDEN, HEADS, VOCAB, FFN = 16, 64, 2, 100, 96  # head_dim 32 != SEQ
VARIANTS = [(tr, attn) for tr in ("4", "5") for attn in ("eager", "sdpa")]


def _small(layers: int = 1, **kw: object) -> onnx.ModelProto:
    sizes: dict[str, object] = {"seq": SEQ, "hidden": HIDDEN, "heads": HEADS, "intermediate": FFN, "vocab": VOCAB}
    return models.hf_bert(layers=layers, **{**sizes, **kw})  # type: ignore[arg-type]


def _ops(m: onnx.ModelProto) -> Counter[str]:
    return Counter(n.op_type for n in m.graph.node)


def _feeds(m: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((1, SEQ), dtype=np.int64)
    mask[0, -5:] = 0  # right padding
    mask[0, 3] = 0
    feeds = {"input_ids": rng.integers(0, VOCAB, (1, SEQ)).astype(np.int64), "attention_mask": mask,
             "token_type_ids": rng.integers(0, 2, (1, SEQ)).astype(np.int64)}
    names = {i.name for i in m.graph.input}
    return {k: v for k, v in feeds.items() if k in names}


# per-layer op counts (a 2-layer model minus a 1-layer one), as the real exports have them
_COMMON = Counter({"MatMul": 8, "Add": 9, "Transpose": 4, "Softmax": 1, "LayerNormalization": 2})
PER_LAYER = {
    ("4", "eager"): _COMMON + Counter({"Reshape": 4, "Div": 1, "Constant": 5}),
    ("4", "sdpa"): _COMMON + Counter({"Reshape": 4, "Shape": 1, "Slice": 1, "Cast": 2, "Sqrt": 3, "Div": 1,
                                      "Mul": 2, "Constant": 7}),
    ("5", "eager"): _COMMON + Counter({"Reshape": 4, "Mul": 1, "Constant": 5}),
    ("5", "sdpa"): _COMMON + Counter({"Reshape": 5, "Mul": 2, "Where": 2, "IsNaN": 1, "Constant": 10}),
}
GELU = {"op": Counter({"Gelu": 1}), "erf": Counter({"Div": 1, "Erf": 1, "Add": 1, "Mul": 2, "Constant": 3})}
# what is outside the layers: embeddings, the mask, the pooler (with the token_type_ids input)
FIXED = {
    ("4", "eager"): Counter({"Constant": 6, "Gather": 4, "Add": 2, "LayerNormalization": 1, "Unsqueeze": 2,
                             "Cast": 1, "Sub": 1, "Mul": 1, "Gemm": 1, "Tanh": 1}),
    ("4", "sdpa"): Counter({"Constant": 9, "Gather": 4, "Add": 2, "LayerNormalization": 1, "Unsqueeze": 2,
                            "ConstantOfShape": 1, "Mul": 1, "Equal": 1, "Where": 2, "Expand": 1, "Cast": 3,
                            "Sub": 1, "Gemm": 1, "Tanh": 1}),
    ("5", "sdpa"): Counter({"Constant": 12, "Gather": 6, "Add": 3, "LayerNormalization": 1, "Cast": 3,
                            "ConstantOfShape": 2, "GreaterOrEqual": 1, "And": 2, "Shape": 2, "Flatten": 1,
                            "Mul": 2, "Reshape": 2, "Concat": 1, "Equal": 1, "Where": 1, "Expand": 1, "Gemm": 1,
                            "Tanh": 1}),
}
FIXED[("5", "eager")] = FIXED[("5", "sdpa")] + Counter({"Constant": 2, "Where": 1})


@pytest.mark.parametrize("transformers,attention", VARIANTS)
@pytest.mark.parametrize("gelu", ["op", "erf"])
def test_op_counts(transformers: str, attention: str, gelu: str) -> None:
    one, two = (_small(n, attention=attention, gelu=gelu, transformers=transformers, token_type_ids=True)
                for n in (1, 2))
    per_layer = _ops(two) - _ops(one)
    expected = PER_LAYER[(transformers, attention)] + GELU[gelu]
    assert per_layer == expected
    assert _ops(one) == FIXED[(transformers, attention)] + expected
    for m, layers in ((one, 1), (two, 2)):
        ops = _ops(m)
        assert ops["LayerNormalization"] == 2 * layers + 1 and ops["Softmax"] == layers
        assert all(n.op_type != "Gelu" for n in m.graph.node) or gelu == "op"


@pytest.mark.parametrize("transformers,attention", VARIANTS)
def test_attention_matmuls_are_4d_with_exported_perms(transformers: str, attention: str) -> None:
    m = _small(2, attention=attention, transformers=transformers)
    # the shapes as run (ONNX shape inference leaves dimensions of the exported mask and Reshape(-1) unknown)
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    matmuls = [n for n in m.graph.node if n.op_type == "MatMul"]
    names = sorted({i for n in matmuls for i in n.input} - {t.name for t in m.graph.initializer})
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    values = onnx_io.run_onnxruntime(probe, _feeds(m))[len(m.graph.output):]
    shapes = {n: v.shape for n, v in zip(names, values, strict=True)}
    dh = HIDDEN // HEADS
    batched = [n for n in matmuls if len(shapes[n.input[0]]) == 4]
    assert [(shapes[n.input[0]], shapes[n.input[1]]) for n in batched] == [
        ((1, HEADS, SEQ, dh), (1, HEADS, dh, SEQ)), ((1, HEADS, SEQ, SEQ), (1, HEADS, SEQ, dh))] * 2
    perms = Counter(tuple(helper.get_attribute_value(n.attribute[0])) for n in m.graph.node
                    if n.op_type == "Transpose")
    assert perms == Counter({(0, 2, 1, 3): 6, (0, 2, 3, 1): 2})
    softmax = [n for n in m.graph.node if n.op_type == "Softmax"]
    assert all(helper.get_attribute_value(n.attribute[0]) == -1 for n in softmax)
    lns = [n for n in m.graph.node if n.op_type == "LayerNormalization"]
    for n in lns:
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["axis"] == -1 and abs(attrs["epsilon"] - 1e-12) < 1e-18
    # every projection: MatMul by an (in, out) initializer, then Add(bias, product)
    inits = {t.name: tuple(t.dims) for t in m.graph.initializer}
    dense = [n for n in m.graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    assert len(dense) == 12 and all(inits[n.input[1]][0] in (HIDDEN, FFN) for n in dense)
    consumers = {i: n for n in m.graph.node for i in n.input}
    assert all(consumers[n.output[0]].op_type == "Add" and consumers[n.output[0]].input[1] == n.output[0]
               for n in dense)


def test_interface_and_checker() -> None:
    m = _small(token_type_ids=True)
    onnx.checker.check_model(m, full_check=True)
    assert m.ir_version == 9 and [(o.domain, o.version) for o in m.opset_import] == [("", 20)]
    io = [(v.name, v.type.tensor_type.elem_type, tuple(d.dim_value for d in v.type.tensor_type.shape.dim))
          for v in list(m.graph.input) + list(m.graph.output)]
    i64, f32 = onnx.TensorProto.INT64, onnx.TensorProto.FLOAT
    assert io == [("input_ids", i64, (1, SEQ)), ("attention_mask", i64, (1, SEQ)), ("token_type_ids", i64, (1, SEQ)),
                  ("last_hidden_state", f32, (1, SEQ, HIDDEN)), ("pooler_output", f32, (1, HIDDEN))]
    assert [i.name for i in _small().graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in _small(pooler=False).graph.output] == ["last_hidden_state"]
    erf17 = _small(gelu="erf", opset=17)
    assert erf17.ir_version == 8 and erf17.opset_import[0].version == 17
    shapes = {t.name: tuple(t.dims) for t in m.graph.initializer}
    assert shapes["embeddings.word_embeddings.weight"] == (VOCAB, HIDDEN)
    assert shapes["embeddings.position_embeddings.weight"] == (512, HIDDEN)
    assert shapes["embeddings.token_type_embeddings.weight"] == (2, HIDDEN)
    assert shapes["pooler.dense.weight"] == (HIDDEN, HIDDEN)


def _ln(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _reference(m: onnx.ModelProto, feeds: dict[str, np.ndarray], layers: int) -> list[np.ndarray]:
    """BERT in numpy (float64), reading the weights by the exported names."""
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    weight_of = {n.name: n.input[1] for n in m.graph.node if n.op_type == "MatMul" and n.input[1] in w}

    def dense(x: np.ndarray, scope: str, name: str) -> np.ndarray:
        return x @ w[weight_of[f"/{scope}/MatMul"]] + w[f"{name}.bias"]

    ids, mask = feeds["input_ids"][0], feeds["attention_mask"][0]
    types = feeds.get("token_type_ids", np.zeros((1, SEQ), dtype=np.int64))[0]
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][types]
         + w["embeddings.position_embeddings.weight"][np.arange(SEQ)])
    x = _ln(x, w, "embeddings.LayerNorm")
    dh = HIDDEN // HEADS
    bias = np.where(mask != 0, 0.0, -np.inf)[None, None, :]
    erf = np.vectorize(math.erf)
    for i in range(layers):
        s, p = f"encoder/layer.{i}", f"encoder.layer.{i}"
        q, k, v = (dense(x, f"{s}/attention/self/{t}", f"{p}.attention.self.{t}").reshape(SEQ, HEADS, dh)
                   .transpose(1, 0, 2) for t in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(dh) + bias
        e = np.exp(scores - scores.max(-1, keepdims=True))
        ctx = ((e / e.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(SEQ, HIDDEN)
        a = _ln(dense(ctx, f"{s}/attention/output/dense", f"{p}.attention.output.dense") + x, w,
                f"{p}.attention.output.LayerNorm")
        h = dense(a, f"{s}/intermediate/dense", f"{p}.intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))
        x = _ln(dense(h, f"{s}/output/dense", f"{p}.output.dense") + a, w, f"{p}.output.LayerNorm")
    pooled = np.tanh(x[0] @ w["pooler.dense.weight"].T + w["pooler.dense.bias"])
    return [x[None], pooled[None]]


@pytest.mark.parametrize("transformers,attention", VARIANTS)
@pytest.mark.parametrize("gelu", ["op", "erf"])
def test_onnxruntime_matches_numpy_bert(transformers: str, attention: str, gelu: str) -> None:
    m = _small(2, attention=attention, gelu=gelu, transformers=transformers, token_type_ids=True)
    feeds = _feeds(m)
    got = onnx_io.run_onnxruntime(m, feeds)
    assert [g.shape for g in got] == [(1, SEQ, HIDDEN), (1, HIDDEN)]
    assert all(np.all(np.isfinite(g)) for g in got)
    assert 0.5 < float(got[0].std()) < 2.0 and 0.01 < float(np.abs(got[1]).mean()) < 0.9  # O(1), tanh unsaturated
    for g, r in zip(got, _reference(m, feeds, layers=2), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


def test_variants_agree_and_weights_are_seeded() -> None:
    base = _small(token_type_ids=True)
    feeds = _feeds(base)
    ref = onnx_io.run_onnxruntime(base, feeds)
    for tr, attn in VARIANTS:
        for tti in (True, False):
            m = _small(attention=attn, transformers=tr, token_type_ids=tti, gelu="erf", opset=19)
            f = dict(feeds, token_type_ids=np.zeros_like(feeds["token_type_ids"])) if not tti else feeds
            want = ref if tti else onnx_io.run_onnxruntime(base, f)
            for g, r in zip(onnx_io.run_onnxruntime(m, f), want, strict=True):
                np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    a, b, c = (_small(seed=s) for s in (0, 0, 1))
    wa, wb, wc = ({t.name: numpy_helper.to_array(t) for t in x.graph.initializer} for x in (a, b, c))
    name = "embeddings.word_embeddings.weight"
    np.testing.assert_array_equal(wa[name], wb[name])
    assert not np.array_equal(wa[name], wc[name]) and 0.015 < float(wa[name].std()) < 0.025


def test_eqsat_round_trip_of_the_defaults() -> None:
    """The defaults (transformers 5.x mask, no token_type_ids input) stay valid on eqsat's integer feeds in [0, 4)."""
    for attn in ("eager", "sdpa"):
        m = _small(attention=attn)
        graph = onnx_io.load_model(m)
        assert graph.op_histogram()["matmul"] >= 8
        out = onnx_io.to_onnx(graph)
        onnx.checker.check_model(out, full_check=True)
        report = check_equal(m, out)
        assert report.ok, report.summary()
        assert "saturated" not in report.summary()


def test_builtin_registration_and_bad_arguments() -> None:
    assert models.builtin_models()["hf_bert"] is models.hf_bert
    defaults = {k: p.default for k, p in inspect.signature(models.hf_bert).parameters.items()}
    assert defaults == {"seq": 128, "hidden": 768, "heads": 12, "layers": 1, "intermediate": None, "vocab": 30522,
                        "attention": "eager", "gelu": "op", "pooler": True, "token_type_ids": False,
                        "transformers": "5", "opset": 20, "seed": 0, "dynamic": False}
    for kw in ({"attention": "flash"}, {"gelu": "tanh"}, {"transformers": "3"}, {"opset": 19},
               {"opset": 16, "gelu": "erf"}, {"heads": 5}, {"seq": 513}, {"layers": 0}):
        with pytest.raises(ValueError):
            _small(**kw)


@pytest.mark.parametrize("gen,attention", [("5", "eager"), ("5", "sdpa"), ("4", "eager"), ("4", "sdpa")])
def test_every_compute_op_of_a_transformers_export_imports(gen: str, attention: str) -> None:
    """Issue acceptance: only the mask's boolean plumbing and the embedding lookups stay opaque, each with a
    stated reason; projections, attention products, softmax, layer norms and GELU are registry operators."""
    from eqsat import onnx_io
    m = models.hf_bert(seq=8, hidden=16, heads=2, intermediate=32, vocab=50, transformers=gen, attention=attention,
                    token_type_ids=gen == "4")
    g = onnx_io.load_model(m)
    reasons = onnx_io.opaque_reasons(g)
    assert all(why for _, _, why in reasons)
    assert {op for op, _, _ in reasons} <= {"Gather", "Cast", "Where", "Expand", "Unsqueeze", "Shape", "And",
                                             "Reshape", "Flatten", "Concat", "Add", "Mul", "IsNaN"}
    for op, _, why in reasons:  # the float compute is never among them
        assert op != "Gather" or "embedding" in why or "non-float" in why
        assert op not in ("Add", "Mul", "Reshape", "Concat", "Flatten") or "non-float" in why
    ops_used = {n.op for n in g.nodes}
    assert {"matmul", "softmax", "layernorm", "gelu"} <= ops_used
