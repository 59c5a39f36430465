"""Decoder steps with a KV cache keep their dynamic axes: sizes that add symbols up (``past_sequence +
sequence``) read back as sums, a range from the past length to the total (in floats, as rotary positions are
counted) is typed by its symbols, and the optimized step is written as a drop-in, checked at a decode step (one
new token, a long past) and a prefill (many new tokens, a short past)."""

from __future__ import annotations

import numpy as np
import pytest

import eqsat
from eqsat import onnx_io
from eqsat.ir.price_points import summed_symbols
from eqsat.ir.symbols import Symbols, _sums_apart, graph_symbols
from eqsat.ops.dims import Sym
from eqsat.pipeline.check import LONG_SIZE, sizes_to_check
from eqsat.testing.kv_decoder import kv_decoder_step

S, P, B = Sym.var("sequence"), Sym.var("past_sequence"), Sym.var("batch")


def test_a_sum_of_symbols_reads_back_as_that_sum() -> None:
    syms = Symbols.choose(["batch", "sequence", "past_sequence"], static={2, 8, 32, 50})
    g = syms.generic
    assert syms.decode(g["past_sequence"] + g["sequence"]) == P + S
    assert syms.decode(g["past_sequence"] + g["sequence"] + 3) == P + S + 3
    assert syms.decode(2 * g["past_sequence"] + g["sequence"] - 1) == 2 * P + S - 1
    assert syms.decode(g["batch"] * g["sequence"]) == B * S  # products as before
    assert syms.decode(g["sequence"] + 2) == S + 2
    assert syms.decode(50) == 50


def test_generic_values_keep_sums_apart_from_the_models_sizes() -> None:
    a, b = 10007, 11047
    assert _sums_apart({"a": a, "b": b}, {32})
    assert not _sums_apart({"a": a, "b": b}, {a + b + 1})  # a static size the sum would be read as
    syms = Symbols.choose(["a", "b"], static={21054, 21060})
    assert abs(sum(syms.generic.values()) - 21054) > 8 and abs(sum(syms.generic.values()) - 21060) > 8
    assert syms.decode(21054) == 21054  # a size of the model stays a size


def test_the_step_imports_with_its_symbols_and_the_positions_range_is_typed() -> None:
    model = kv_decoder_step()
    graph = onnx_io.load_model(model, symbolic=True)
    syms = graph_symbols(graph)
    assert set(syms.generic) == {"batch", "sequence", "past_sequence"}
    shapes = {o: syms.decode_shape(graph.shapes[o]) for o in graph.outputs}
    assert shapes["present_key_0"] == (B, 2, P + S, 4 * 2)
    assert shapes["logits"] == (B, S, 50)
    assert summed_symbols(graph) == [s for s in syms.generic if s in ("sequence", "past_sequence")]
    sizes, _ = sizes_to_check(graph)
    # a prefill (many new tokens, a short past) and a decode step (one new token, a long past) are checked
    assert {"batch": 1, "sequence": 1, "past_sequence": LONG_SIZE} in sizes
    assert {"batch": 1, "sequence": LONG_SIZE, "past_sequence": 1} in sizes


def _dims(model: object) -> list[tuple[str, int, list[object]]]:
    g = model.graph  # type: ignore[attr-defined]
    return [(v.name, v.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
            for v in (*g.input, *g.output)]


def _feeds(batch: int, seq: int, past: int, layers: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + seq * 10 + past)
    feeds = {"input_ids": rng.integers(0, 50, (batch, seq)).astype(np.int64)}
    for k in range(layers):
        for kind in ("key", "value"):
            feeds[f"past_{kind}_{k}"] = rng.standard_normal((batch, 2, past, 8)).astype(np.float32)
    return feeds


@pytest.mark.slow  # an optimize run of a 2-layer step and its checks at four sets of sizes (about 4 s)
def test_the_optimized_step_is_a_drop_in_at_a_decode_step_and_a_prefill() -> None:
    model = kv_decoder_step()
    res = eqsat.optimize(model, time_limit=30, cache=False)
    assert not res.kept_original and res.dynamic_axes and not res.signature_changes
    assert res.cost_after < res.cost_before
    assert _dims(res.model) == _dims(model)  # names, types and dims by name, 'past_sequence + sequence' too
    # grouped-query heads read by the attention products' broadcast: no Expand copies the cache
    types = ({n.op_type for n in m.graph.node} for m in (model, res.model))
    assert ["Expand" in t for t in types] == [True, False]
    summary = res.numeric.summary() if res.numeric else ""
    assert res.numeric is not None and res.numeric.ok
    assert f"sequence=1, past_sequence={LONG_SIZE}" in summary and "sequence=17, past_sequence=5" in summary
    for batch, seq, past in ((1, 1, 31), (3, 17, 5), (2, 1, 64)):
        feeds = _feeds(batch, seq, past)
        got = onnx_io.run_onnxruntime(res.model, feeds)
        want = onnx_io.run_onnxruntime(model, feeds)
        assert got[1].shape == (batch, 2, past + seq, 8)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_the_layers_of_a_step_are_one_block_each_with_its_own_cache() -> None:
    from eqsat.ir.blocks import reduce_repeats

    graph = onnx_io.load_model(kv_decoder_step(layers=4), symbolic=True)
    red = reduce_repeats(graph)
    assert red is not None and red.repeats.count == 4
    # the engine sees one layer: one past key read, one present key written
    assert sum(i.name.startswith("past_key") for i in red.reduced.inputs) == 1
    whole = red.stitch(red.reduced)
    assert whole.outputs == graph.outputs and {i.name for i in whole.inputs} == {i.name for i in graph.inputs}
    for k in range(4):  # layer k reads its own past and writes its own present
        concat = whole.producers[f"present_key_{k}"]
        assert f"past_key_{k}" in concat.inputs
    assert len(whole.nodes) == len(graph.nodes)


@pytest.mark.slow  # an optimize run of a 4-layer step (about 3 s)
def test_a_deep_step_is_optimized_once_for_every_layer_and_stays_a_drop_in() -> None:
    model = kv_decoder_step(layers=4)
    res = eqsat.optimize(model, time_limit=30, cache=False)
    assert res.blocks and "4 repeated blocks" in res.blocks
    assert res.numeric is not None and res.numeric.ok and not res.signature_changes
    feeds = _feeds(1, 1, 40, layers=4)
    for a, b in zip(onnx_io.run_onnxruntime(res.model, feeds), onnx_io.run_onnxruntime(model, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
