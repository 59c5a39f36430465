"""A model whose weights are external data is read without them: each large weight stays in its file, read as a
view of one shared memory map (the import, the check and the writer read the same pages), and its optimized or
kept copy is written with all its data."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.cli.app import main
from eqsat.errors import ModelReadError
from eqsat.onnx_io import (
    ModelNotFoundError,
    drop_read_pages,
    inference_session,
    onnxruntime_runner,
    read_model,
    read_model_stored,
    save_model,
    write_model,
)
from eqsat.onnx_io.stored import ON_DISK_BYTES, is_on_disk, tensor_array
from eqsat.pipeline import optimize

N = 128  # a 128 x 128 float32 weight is 64 KiB: it stays on disk
assert N * N * 4 >= ON_DISK_BYTES


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"w{k}": rng.standard_normal((N, N)).astype(np.float32) for k in range(3)}


def _shared_input() -> onnx.ModelProto:
    """(x @ w0 + x @ w1) reshaped by a small constant, @ w2: the two products of x are fused into one, a
    concatenated weight export computes."""
    inits = [numpy_helper.from_array(v, k) for k, v in _weights().items()]
    inits.append(numpy_helper.from_array(np.array([-1, N], dtype=np.int64), "rows"))
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"]), helper.make_node("MatMul", ["x", "w1"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Reshape", ["c", "rows"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, N])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, N])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _nothing_to_gain() -> onnx.ModelProto:
    """relu(x @ w0) @ w1: no rewrite makes it cheaper, so the original is kept."""
    w = _weights(1)
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w1"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, N])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, N])],
                          [numpy_helper.from_array(w["w0"], "w0"), numpy_helper.from_array(w["w1"], "w1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _save_external(model: onnx.ModelProto, path: Path) -> Path:
    """``model`` saved with every tensor, small ones too, in ``<name>.data`` beside it (``model`` unchanged)."""
    stored = onnx.ModelProto()
    stored.CopyFrom(model)
    onnx.save_model(stored, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    return path


def _outputs(model: onnx.ModelProto | Path, seed: int = 0) -> list[np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((4, N)).astype(np.float32)
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, {"x": x})


def test_large_weights_stay_in_their_file_and_are_read_as_one_shared_map(tmp_path: Path) -> None:
    original = _shared_input()
    path = _save_external(original, tmp_path / "m.onnx")
    lazy, _, external = read_model_stored(path, weights_on_disk=True)
    assert external
    by_name = {t.name: t for t in lazy.graph.initializer}
    for name, want in _weights().items():
        t = by_name[name]
        assert is_on_disk(t) and not t.HasField("raw_data")  # the proto holds no copy of the weight's bytes
        got = tensor_array(t)
        np.testing.assert_array_equal(got, want)
        assert not got.flags.writeable  # a view of the file, not a copy
        assert np.shares_memory(got, tensor_array(t))  # every read of the weight reads the same pages
    # a small tensor (a shape that inference and folding read) is read into the model
    assert not is_on_disk(by_name["rows"]) and by_name["rows"].HasField("raw_data")
    # read as before without weights_on_disk: everything in the model
    eager, _ = read_model(path)
    assert all(t.HasField("raw_data") and t.data_location != TensorProto.EXTERNAL for t in eager.graph.initializer)
    drop_read_pages()  # the pages go, the values come back on the next read
    np.testing.assert_array_equal(tensor_array(by_name["w2"]), _weights()["w2"])


def test_the_import_and_the_check_read_the_weights_from_the_file(tmp_path: Path) -> None:
    original = _shared_input()
    path = _save_external(original, tmp_path / "m.onnx")
    res = optimize(path, time_limit=20)
    assert not res.kept_original and res.numeric is not None and res.numeric.ok
    on_disk = [res.original.weights[k] for k in _weights()]
    assert all(not w.flags.writeable and not w.flags.owndata for w in on_disk)  # the IR's views of the file
    # the written model holds its own weights, the fused products' concatenated one among them
    assert not any(t.data_location == TensorProto.EXTERNAL for t in res.model.graph.initializer)
    np.testing.assert_allclose(_outputs(res.model)[0], _outputs(original)[0], rtol=1e-4, atol=1e-3)


def test_the_optimized_model_is_written_with_its_data_and_equals_the_original_again_over_its_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    original = _shared_input()
    _save_external(original, tmp_path / "m.onnx")
    want = _outputs(original)[0]
    # the command over the model, again over its own output, and over itself (its data file replaced under the
    # map that reads it)
    for src, out in (("m.onnx", "out/a.onnx"), ("out/a.onnx", "out/b.onnx"), ("out/b.onnx", "out/b.onnx")):
        assert main(["optimize", src, "-o", out, "--time-limit", "20", "-q"]) == 0, src
        written = onnx.load(out, load_external_data=False)
        large = [t for t in written.graph.initializer if np.prod(t.dims) * 4 >= 1024]
        assert large and all(t.data_location == TensorProto.EXTERNAL for t in large)
        np.testing.assert_allclose(_outputs(Path(out))[0], want, rtol=1e-4, atol=1e-3)
        loaded = onnx.load(out)  # with its data, as onnx reads it
        assert all(t.HasField("raw_data") for t in loaded.graph.initializer)


def test_a_kept_original_is_written_with_all_its_data(tmp_path: Path) -> None:
    original = _nothing_to_gain()
    path = _save_external(original, tmp_path / "m.onnx")
    res = optimize(path, time_limit=20)
    assert res.kept_original
    # the model returned holds every weight's bytes: none refers to the file it was read from
    got = {t.name: numpy_helper.to_array(t) for t in res.model.graph.initializer}
    assert not any(t.data_location == TensorProto.EXTERNAL for t in res.model.graph.initializer)
    for t in original.graph.initializer:
        np.testing.assert_array_equal(got[t.name], numpy_helper.to_array(t))
    out = tmp_path / "kept" / "m.onnx"
    assert main(["optimize", str(path), "-o", str(out), "--time-limit", "20", "-q"]) == 0
    written = onnx.load(str(out))
    assert {t.name: numpy_helper.to_array(t).tobytes() for t in written.graph.initializer} == {
        t.name: numpy_helper.to_array(t).tobytes() for t in original.graph.initializer}
    np.testing.assert_array_equal(_outputs(out)[0], _outputs(original)[0])


def test_a_model_with_weights_on_disk_is_written_without_changing_it(tmp_path: Path) -> None:
    """The writer streams a weight left on disk from its file: in the model's own data file or inline."""
    original = _nothing_to_gain()
    lazy, _, _ = read_model_stored(_save_external(original, tmp_path / "m.onnx"), weights_on_disk=True)
    before = lazy.SerializeToString()
    write_model(lazy, tmp_path / "inline.onnx")
    save_model(lazy, tmp_path / "out" / "ext.onnx", external_data=True)
    assert lazy.SerializeToString() == before
    for path in (tmp_path / "inline.onnx", tmp_path / "out" / "ext.onnx"):
        got = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
        for t in original.graph.initializer:
            np.testing.assert_array_equal(got[t.name], numpy_helper.to_array(t))
    stored = onnx.load(str(tmp_path / "out" / "ext.onnx"), load_external_data=False)
    offsets = [int({e.key: e.value for e in t.external_data}["offset"]) for t in stored.graph.initializer]
    assert all(o % 64 == 0 for o in offsets)  # aligned: a view of each one is aligned for its type


def test_a_truncated_or_missing_data_file_is_a_clear_error_at_read(tmp_path: Path) -> None:
    path = _save_external(_nothing_to_gain(), tmp_path / "m.onnx")
    data = tmp_path / "m.onnx.data"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) - 100)
    with pytest.raises(ModelReadError, match="truncated"):
        read_model_stored(path, weights_on_disk=True)
    data.unlink()
    with pytest.raises(ModelNotFoundError, match="missing"):
        read_model_stored(path, weights_on_disk=True)


def test_a_location_outside_the_models_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    path = _save_external(_nothing_to_gain(), tmp_path / "models" / "m.onnx")
    shutil.move(tmp_path / "models" / "m.onnx.data", tmp_path / "m.onnx.data")
    model = onnx.load(str(path), load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../m.onnx.data"
    onnx.save(model, str(path))
    with pytest.raises(ModelReadError):
        read_model_stored(path, weights_on_disk=True)


def test_a_weight_given_from_memory_is_fed_only_where_it_holds_the_models_bytes() -> None:
    """The check of an optimized model feeds the IR's arrays, but a weight written differently is the model's."""
    model = _nothing_to_gain()
    w0 = numpy_helper.to_array(model.graph.initializer[0])
    x = np.random.default_rng(0).standard_normal((4, N)).astype(np.float32)
    want = onnxruntime_runner(model)({"x": x})["y"]
    for given in (w0, w0 + 1, w0.T.copy(), w0.astype(np.float64)):
        got = onnxruntime_runner(model, arrays={"w0": given})({"x": x})["y"]
        np.testing.assert_array_equal(got, want)


def test_a_session_of_a_model_with_weights_on_disk_gets_them_from_memory(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The end-to-end timing's sessions: onnxruntime never looks for the data file (the folder is elsewhere)."""
    original = _nothing_to_gain()
    lazy, _, _ = read_model_stored(_save_external(original, tmp_path / "m.onnx"), weights_on_disk=True)
    monkeypatch.chdir("/")
    sess, alive = inference_session(lazy, ort.SessionOptions())
    assert len(alive) == 2
    x = np.random.default_rng(0).standard_normal((4, N)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], _outputs(original)[0], rtol=1e-5, atol=1e-4)
