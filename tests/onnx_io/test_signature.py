"""A drop-in replacement keeps what the original file says about itself: producer, versions, doc strings,
metadata, the declared types of the intermediate tensors that still exist; and a model whose weights are
external data is written with external data."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from eqsat import models
from eqsat.cli.app import main
from eqsat.pipeline import optimize


def _described() -> onnx.ModelProto:
    """The two-matmul model (optimized into one Gemm and a Split that keeps the products' names, with the relus
    kept after the split) with a
    description of itself, as an exporter writes one."""
    m = models.two_matmul_shared_input()
    m.producer_name, m.producer_version, m.domain, m.model_version = "pytorch", "2.5.0", "ai.example", 7
    m.doc_string = "two heads"
    helper.set_model_props(m, {"author": "someone", "license": "MIT"})
    m.graph.doc_string = "the graph"
    m.graph.input[0].doc_string = "the features"
    m.graph.output[0].doc_string = "the first head"
    (rows, cols) = [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
    m.graph.value_info.extend([
        helper.make_tensor_value_info("matmul2", onnx.TensorProto.FLOAT, ["batch", cols]),  # right, a symbol
        helper.make_tensor_value_info("matmul4", onnx.TensorProto.FLOAT, [rows + 1, cols]),  # a wrong size
    ])
    return m


def test_the_written_model_keeps_the_originals_description() -> None:
    from eqsat.pipeline import default_rules
    from eqsat.rules.over_split import without_over_split

    original = _described()
    # without the relu over the split, which would leave neither product computed by its name
    res = optimize(original, time_limit=20, rules=without_over_split(default_rules()))
    out = res.model
    assert not res.kept_original and out is not original  # a rewritten graph, exported anew
    for field in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        assert getattr(out, field) == getattr(original, field), field
    assert {p.key: p.value for p in out.metadata_props} == {"author": "someone", "license": "MIT"}
    assert out.graph.doc_string == "the graph" and out.graph.name == original.graph.name
    assert out.graph.input[0].doc_string == "the features" and out.graph.output[0].doc_string == "the first head"
    # the declared type that fits the tensor as computed stays; the one that contradicts it goes
    kept = {vi.name: vi for vi in out.graph.value_info}
    assert "matmul2" in kept and "matmul4" not in kept
    assert kept["matmul2"].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert {o for n in out.graph.node for o in n.output} >= {"matmul2", "matmul4"}  # both still computed
    onnx.checker.check_model(out, full_check=True)
    # signature: names, dtypes and shapes of inputs and outputs, opset and IR version
    sig = [(v.name, v.type.SerializeToString()) for v in (*out.graph.input, *out.graph.output)]
    assert sig == [(v.name, v.type.SerializeToString()) for v in (*original.graph.input, *original.graph.output)]
    assert out.ir_version == original.ir_version and out.opset_import[0].version == original.opset_import[0].version


def test_external_data_comes_back_as_external_data(tmp_path: Path, capsys) -> None:
    src, out = tmp_path / "m.onnx", tmp_path / "out" / "m.opt.onnx"
    original = models.two_matmul_shared_input()
    stored = onnx.ModelProto()
    stored.CopyFrom(original)  # saving as external data moves the weights out of the proto saved
    onnx.save_model(stored, str(src), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    (out.parent).mkdir()
    stale = out.with_name("m.opt.onnx.data")
    stale.write_bytes(b"\0" * 4096)  # an older run's data: replaced, not appended to
    assert main(["optimize", str(src), "-o", str(out), "--time-limit", "20", "-q"]) == 0
    assert "the optimized graph" in capsys.readouterr().out  # rewritten, so exported anew
    written = onnx.load(str(out), load_external_data=False)
    # every weight over 1 KB is external (small ones, e.g. a Split's sizes, stay inside, as onnx writes them)
    big = [t for t in written.graph.initializer if np.prod(t.dims) * 4 > 1024]
    assert big and all(t.data_location == onnx.TensorProto.EXTERNAL for t in big)
    assert stale.exists() and os.path.getsize(stale) < 4096 + sum(
        np.prod(t.dims) * 4 for t in written.graph.initializer)
    # it loads with its data and computes what the original computes
    x = np.random.default_rng(0).standard_normal([d.dim_value for d in original.graph.input[0].type.tensor_type
                                                  .shape.dim]).astype(np.float32)
    name = original.graph.input[0].name
    want = ort.InferenceSession(original.SerializeToString()).run(None, {name: x})
    got = ort.InferenceSession(str(out)).run(None, {name: x})
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    # a model with its weights inside is written with them inside
    inline = tmp_path / "inline.onnx"
    onnx.save(original, str(inline))
    assert main(["optimize", str(inline), "-o", str(tmp_path / "inline.opt.onnx"), "--rules", "starter",
                 "--time-limit", "20", "-q"]) == 0
    assert not (tmp_path / "inline.opt.onnx.data").exists()


def test_a_model_with_external_data_is_written_again_over_its_first_output_and_over_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # in the output's folder (onnx's own writer looked for the data file in the current folder and refused it)
    monkeypatch.chdir(tmp_path)
    original = models.two_matmul_shared_input()
    stored = onnx.ModelProto()
    stored.CopyFrom(original)
    onnx.save_model(stored, "m.onnx", save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    old = os.umask(0o027)  # the permissions the files get are the user's umask's, the data file's too
    try:
        for src in ("m.onnx", "m.onnx", "out.onnx"):  # the same command twice, then over its own output
            assert main(["optimize", src, "-o", "out.onnx", "--time-limit", "20", "-q"]) == 0, src
    finally:
        os.umask(old)
    modes = {name: stat.S_IMODE(os.stat(name).st_mode) for name in ("out.onnx", "out.onnx.data")}
    assert modes == {"out.onnx": 0o640, "out.onnx.data": 0o640}
    x = np.random.default_rng(1).standard_normal([d.dim_value for d in original.graph.input[0].type.tensor_type
                                                  .shape.dim]).astype(np.float32)
    name = original.graph.input[0].name
    want = ort.InferenceSession(original.SerializeToString()).run(None, {name: x})
    got = ort.InferenceSession("out.onnx").run(None, {name: x})
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_a_declared_shape_that_contradicts_the_computation_is_not_believed() -> None:
    from eqsat.onnx_io import load_model

    declared, plain = load_model(_described()), load_model(models.two_matmul_shared_input())
    # matmul4 is declared one row too many: the import computes its shape (it had made both its nodes opaque)
    assert declared.shapes == plain.shapes and declared.op_histogram() == plain.op_histogram()
    assert not any(n.op == "opaque" for n in declared.nodes)


def test_weights_keep_their_names_through_a_gemms_transpose_flag() -> None:
    """A Gemm with transB (a classifier head as torch writes it) reads its weight as it is in the file, under its
    name: neither the import nor the export writes a transposed copy."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("fc.weight", (10, 32)), ("fc.bias", (10,)), ("proj.weight", (32, 32)))]
    nodes = [helper.make_node("Gemm", ["x", "proj.weight"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "fc.weight", "fc.bias"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 32])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 10])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    from eqsat.onnx_io import load_model, to_onnx

    out = to_onnx(load_model(model))  # imported and exported anew (an optimized model is written the same way)
    weights = {t.name for t in out.graph.initializer if np.prod(t.dims) > 10}
    assert weights == {"fc.weight", "proj.weight"}
    gemms = [n for n in out.graph.node if n.op_type == "Gemm"]
    assert {n.input[1] for n in gemms} == {"fc.weight", "proj.weight"}
    assert all({a.name: a.i for a in n.attribute}.get("transB") == 1 for n in gemms)


def test_signature_changes_name_every_difference_of_inputs_and_outputs() -> None:
    from eqsat.onnx_io import signature_changes

    def model(x_dims, y_name="y", dtype=onnx.TensorProto.FLOAT):
        return helper.make_model(helper.make_graph(
            [helper.make_node("Relu", ["x"], [y_name])], "g", [helper.make_tensor_value_info("x", dtype, x_dims)],
            [helper.make_tensor_value_info(y_name, dtype, x_dims)]))

    original = model(["batch", None, 4])
    assert signature_changes(original, model(["batch", None, 4])) == []
    assert signature_changes(original, model([1, None, 4])) == [
        "input x: float32[batch, ?, 4] -> float32[1, ?, 4]", "output y: float32[batch, ?, 4] -> float32[1, ?, 4]"]
    assert signature_changes(original, model(["batch", "n", 4]))[0] == \
        "input x: float32[batch, ?, 4] -> float32[batch, n, 4]"  # an unnamed dimension given a name is a change
    assert signature_changes(original, model(["batch", None, 4], y_name="z")) == ["outputs ['y'] -> ['z']"]
    assert signature_changes(original, model(["batch", None, 4], dtype=onnx.TensorProto.FLOAT16))[0].endswith(
        "-> float16[batch, ?, 4]")
