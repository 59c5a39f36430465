"""Clear errors, never a traceback: each case of the issue, named after it.

A user error prints one line on stderr (``eqsat: error: <what happened>; <what to do>``), exits with status 2
and writes nothing. The CLI runs in-process (``eqsat.cli.app.main``) except where a real pipe is needed.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat import models, onnx_io
from eqsat.cli.app import main
from eqsat.errors import DynamicShapeError, EqsatError, InputShapeError, ModelLoadError
from eqsat.ir.graph import Graph, TensorInfo, make_node
from eqsat.testing.onnx_builders import make_model, value_info

ROOT = Path(__file__).resolve().parents[2]
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def _static_model(shape: tuple[int, ...] = (1, 3, 8, 8)) -> onnx.ModelProto:
    """x (static shape) -> Conv -> Relu -> y, opset 17."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, shape[1], 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, [("x", shape)], [("y", [shape[0], 4, *shape[2:]])], [w], name="static", ir_version=8)


def _dynamic_model() -> onnx.ModelProto:
    """The static model with a symbolic batch and height."""
    m = _static_model()
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "batch"
        vi.type.tensor_type.shape.dim[2].dim_param = "h"
    return m


def _control_flow_model() -> onnx.ModelProto:
    """A Loop adding x to an accumulator three times, then Relu."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "x"], ["acc_out"])],
        "body", [value_info("i", [], TensorProto.INT64), value_info("cond_in", [], TensorProto.BOOL),
                 value_info("acc_in", [2, 3])],
        [value_info("cond_out", [], TensorProto.BOOL), value_info("acc_out", [2, 3])])
    inits = [numpy_helper.from_array(np.array(3, np.int64), "trip"), numpy_helper.from_array(np.array(True), "cond"),
             numpy_helper.from_array(np.zeros((2, 3), np.float32), "zero")]
    nodes = [helper.make_node("Loop", ["trip", "cond", "zero"], ["acc"], body=body, name="loop1"),
             helper.make_node("Relu", ["acc"], ["y"])]
    m = make_model(nodes, [("x", [2, 3])], [("y", [2, 3])], inits, name="cf", ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The single line of stderr, which must be an eqsat error."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("eqsat: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _optimize(*args: str) -> int:
    """``eqsat optimize`` with the hand-written starter rules: these tests are about inputs, outputs and errors,
    and the starter rules load in a fraction of the corpus's time (test_report checks the CLI's default rules)."""
    return main(["optimize", *args, "-q", "--time-limit", "5", "--rules", "starter"])


def _runs_in_onnxruntime(path: Path) -> None:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sess.run(None, onnx_io.random_feeds(onnx.load(str(path))))


# -- models the import used to reject -----------------------------------------------------------------------


def test_ir_version_3_light_zoo_model_optimizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = LIGHT / "light_squeezenet.onnx"
    assert onnx.load(str(src)).ir_version == 3  # initializers are listed as graph inputs
    out = tmp_path / "sq.onnx"
    assert main(["optimize", str(src), "-o", str(out), "-q", "--time-limit", "5", "--iter-limit", "2",
                 "--rules", "starter"]) == 0, capsys.readouterr().err
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    _runs_in_onnxruntime(out)
    assert main(["inspect", str(src)]) == 0
    assert "conv2d" in capsys.readouterr().out


def test_opset_7_model_imports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)

    def w(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32), name)

    inits = [w("W", (8, 3, 3, 3)), w("B", (8,)), w("G", (10, 8 * 3 * 3)), w("C", (10,)),
             numpy_helper.from_array(np.array([1, -1], np.int64), "S")]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Add", ["r", "c"], ["a"]),
             helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Dropout", ["p"], ["d"], ratio=0.5),
             helper.make_node("Reshape", ["d", "S"], ["f"]),
             helper.make_node("Gemm", ["f", "G", "C"], ["g"], transB=1), helper.make_node("Softmax", ["g"], ["y"])]
    graph_inputs = [value_info("x", [1, 3, 6, 6])] + [value_info(t.name, list(t.dims), t.data_type) for t in inits]
    m = make_model(nodes, graph_inputs, [("y", [1, 10])], inits, 7, name="op7", ir_version=3)
    onnx.checker.check_model(m, full_check=True)  # shapes onnx can infer
    src, out = _save(m, tmp_path / "op7.onnx"), tmp_path / "op7.opt.onnx"
    g = onnx_io.load_model(src)
    assert g.shapes["y"] == (1, 10) and g.op_histogram()["conv2d"] == 1
    assert _optimize(str(src), "-o", str(out)) == 0, capsys.readouterr().err
    _runs_in_onnxruntime(out)


# -- --input-shape -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", ["-1", "0"])
def test_input_shape_negative_or_zero_dim_is_an_error(dim: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    src, out = _save(_dynamic_model(), tmp_path / "m.onnx"), tmp_path / "out.onnx"
    assert _optimize(str(src), "-o", str(out), "--input-shape", f"x=1,3,{dim},8") == 2
    line = _error_line(capsys)
    assert f"dimension {dim} is not positive" in line and "positive integer" in line
    assert not out.exists()
    with pytest.raises(InputShapeError):
        onnx_io.load_model(src, input_shapes={"x": (1, 3, int(dim), 8)})


def test_input_shape_unknown_name_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = _save(_dynamic_model(), tmp_path / "m.onnx"), tmp_path / "out.onnx"
    assert _optimize(str(src), "-o", str(out), "--input-shape", "data=1,3,8,8") == 2
    line = _error_line(capsys)
    assert "'data'" in line and "inputs are 'x'" in line
    assert not out.exists()
    assert main(["inspect", str(src), "--input-shape", "w=1,3,8,8"]) == 2  # a weight is not an input
    assert "a weight, not an input" in _error_line(capsys)


def test_input_shape_conflicting_with_static_input_is_an_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    src, out = _save(_static_model((1, 3, 8, 8)), tmp_path / "m.onnx"), tmp_path / "out.onnx"
    assert _optimize(str(src), "-o", str(out), "--input-shape", "x=1,3,100,100") == 2
    line = _error_line(capsys)
    assert "static shape [1, 3, 8, 8]" in line and "x=1,3,100,100" in line
    assert not out.exists()
    # a dynamic input keeps its static dimensions, and an identical shape is no conflict
    dyn = _save(_dynamic_model(), tmp_path / "dyn.onnx")
    assert _optimize(str(dyn), "-o", str(out), "--input-shape", "x=2,4,8,8") == 2
    assert "changes a static dimension" in _error_line(capsys)
    assert _optimize(str(src), "-o", str(out), "--input-shape", "x=1,3,8,8") == 0
    assert out.exists()


def test_dynamic_input_keeps_its_axes_or_names_the_dims_to_fix(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    src, out = _save(_dynamic_model(), tmp_path / "m.onnx"), tmp_path / "out.onnx"
    assert _optimize(str(src), "-o", str(out)) == 0  # optimized with its dynamic axes, which the output keeps
    assert "dynamic axes             kept: batch, h" in capsys.readouterr().out
    assert [d.dim_param or d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim] == \
        ["batch", 3, "h", 8]
    with pytest.raises(DynamicShapeError) as e:  # the loader without symbols names what to fix
        onnx_io.load_model(src)
    assert "--input-shape x=batch,3,h,8" in str(e.value)
    assert _optimize(str(src), "-o", str(out), "--input-shape", "x=2,3,5,8") == 0
    assert out.exists()


# -- output paths ------------------------------------------------------------------------------------------


def test_output_path_that_is_a_directory_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _save(_static_model(), tmp_path / "m.onnx")
    folder = tmp_path / "results"
    folder.mkdir()
    before = sorted(tmp_path.rglob("*"))
    assert _optimize(str(src), "-o", str(folder)) == 2
    line = _error_line(capsys)
    assert "names a directory" in line and str(folder / "m.opt.onnx") in line
    assert sorted(tmp_path.rglob("*")) == before  # nothing written
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    assert _optimize(str(src), "-o", str(blocker / "out.onnx")) == 2
    assert "is a file, not a folder" in _error_line(capsys)


def test_dump_egraph_into_missing_folder_creates_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Missing folders of -o and --dump-egraph are created, but only once the run has succeeded."""
    src, out = _save(_static_model(), tmp_path / "m.onnx"), tmp_path / "o" / "out.onnx"
    dump = tmp_path / "new" / "deeper" / "eg.json"
    # a run that fails creates nothing, not even the folders
    assert _optimize(str(src), "-o", str(out), "--dump-egraph", str(dump), "--input-shape", "x=1,3,9,9") == 2
    _error_line(capsys)
    assert not (tmp_path / "new").exists() and not (tmp_path / "o").exists()
    assert _optimize(str(src), "-o", str(out), "--dump-egraph", str(dump)) == 0
    assert out.exists() and dump.exists() and '"root_eclasses"' in dump.read_text()
    assert not list(tmp_path.rglob("*.tmp"))
    # a folder that cannot be created is refused before any work
    (tmp_path / "plain").write_text("x")
    bad_dump = tmp_path / "plain" / "eg.json"
    assert _optimize(str(src), "-o", str(tmp_path / "o2.onnx"), "--dump-egraph", str(bad_dump)) == 2
    assert "--dump-egraph" in _error_line(capsys) and not (tmp_path / "o2.onnx").exists()


# -- inspect -----------------------------------------------------------------------------------------------


def test_inspect_describes_dynamic_shape_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _save(_dynamic_model(), tmp_path / "m.onnx")
    assert main(["inspect", str(src)]) == 0
    out = capsys.readouterr().out
    # imported with its dynamic axes as symbols, as eqsat optimize sees it
    assert "input  x: [batch, 3, h, 8] float32" in out and "output y: [batch, 4, h, 8]" in out
    assert "dynamic axes: batch, h" in out and "conv2d" in out
    assert main(["inspect", str(src), "--input-shape", "x=2,3,5,8"]) == 0  # fixed: the IR view at that shape
    assert "input  x: [2, 3, 5, 8]" in capsys.readouterr().out
    fixed = _dynamic_model()  # a reshape to one size: opaque, typed as the file declares its output
    fixed.graph.initializer.append(numpy_helper.from_array(np.array([1, 4, 8, 8], dtype=np.int64), "target"))
    fixed.graph.node.append(helper.make_node("Reshape", ["y", "target"], ["z"]))
    del fixed.graph.output[:]
    fixed.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8]))
    assert main(["inspect", str(_save(fixed, tmp_path / "fixed.onnx"))]) == 0
    out = capsys.readouterr().out
    assert "output z: [1, 4, 8, 8]" in out and "Reshape                     1  unsupported" in out
    # the check runs at the costed sizes: where the model does not run there, the error says to give others
    assert _optimize(str(tmp_path / "fixed.onnx"), "-o", str(tmp_path / "out.onnx")) == 2
    assert "--dim" in _error_line(capsys)
    assert _optimize(str(tmp_path / "fixed.onnx"), "-o", str(tmp_path / "out.onnx"), "--dim", "h=8") == 0


def test_inspect_describes_control_flow_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _save(_control_flow_model(), tmp_path / "cf.onnx")
    assert main(["inspect", str(src)]) == 0
    out = capsys.readouterr().out
    # it imports (the Loop opaque, reading x from around it) and its body is described
    assert "Loop 'loop1' (2 nodes inside)" in out and "the graph around it optimized" in out
    assert "inside control-flow bodies" in out and "Add" in out and "relu" in out
    assert "control flow: kept as it is" in out  # the opaque reason
    assert _optimize(str(src), "-o", str(tmp_path / "out.onnx")) == 0


def test_inspect_of_static_model_is_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _save(_static_model(), tmp_path / "m.onnx")
    assert main(["inspect", str(src)]) == 0
    out = capsys.readouterr().out
    assert "IR nodes" in out and "input  x: [1, 3, 8, 8] float32" in out and "opaque (kept as is" in out


# -- pipes and files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["inspect", str(LIGHT / "light_squeezenet.onnx")], ["rules", "list"]])
def test_piping_inspect_to_head_prints_no_traceback(command: list[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "eqsat", *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line, like `| head -0`
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err
    assert proc.returncode in (0, 141)


def test_empty_file_says_it_is_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "model.onnx", tmp_path / "out.onnx"
    src.write_bytes(b"")
    assert _optimize(str(src), "-o", str(out)) == 2
    assert "model.onnx is empty (0 bytes)" in _error_line(capsys)
    assert main(["inspect", str(src)]) == 2
    assert "is empty (0 bytes)" in _error_line(capsys)
    assert not out.exists()


def test_truncated_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "cut.onnx", tmp_path / "out.onnx"
    src.write_bytes(_static_model().SerializeToString()[:-9])
    assert _optimize(str(src), "-o", str(out)) == 2
    assert "not a readable ONNX model" in _error_line(capsys) and not out.exists()


def test_missing_model_and_bad_options_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _save(_static_model(), tmp_path / "m.onnx")
    assert _optimize(str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "o.onnx")) == 2
    assert "no such model file" in _error_line(capsys)
    assert _optimize(str(src), "-o", str(tmp_path / "o.onnx"), "--costs", "bogus") == 2
    assert "unknown cost model" in _error_line(capsys)
    assert main(["optimize", str(src)]) == 2  # argparse: one line too
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-o/--output" in err and "--help" in err


# -- library behaviour -------------------------------------------------------------------------------------


def test_node_without_inputs_measured_costs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Inception-v3's 3x3 average pools become a conv with the constant ``const_pool`` kernel (a node with no
    inputs) when measured costs favour it; ``Graph.dtypes`` used to read that node's first input."""
    from eqsat.costs.base import CostModel
    from eqsat.costs.measured_cpu import OnnxRuntimeCostModel
    from eqsat.ir.rule import Rule
    from eqsat.pipeline import optimize

    conv = make_node("conv2d", {"pads": (1, 1, 1, 1), "groups": 4}, ["x", "k", "b"], "y")
    g = Graph((TensorInfo("x", (1, 4, 8, 8)),), {}, (
        make_node("const_pool", {"kernel": (3, 3), "channels": 4}, [], "k"),
        make_node("const_zero", {"shape": (4,)}, [], "b"), conv), ("y",))
    assert g.validate().dtypes == {"x": "float32", "k": "float32", "b": "float32", "y": "float32"}

    nodes = [helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              count_include_pad=1), helper.make_node("Relu", ["a"], ["y"])]
    model = make_model(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], opset=13, name="pool", ir_version=8)

    class PoolAverse(CostModel):
        """Measured onnxruntime costs, with average pooling priced out so the const_pool conv is chosen."""

        name = "onnxruntime-cpu-pool-averse"

        def __init__(self) -> None:
            self.measured = OnnxRuntimeCostModel(warmup=1, repeats=2, working_set_mb=0)

        def cost(self, key):  # type: ignore[no-untyped-def]
            return self.measured.cost(key) + (100.0 if key.op == "avgpool" else 0.0)

    pool_as_conv = Rule("pool-as-conv", ("(avgpool [3 3] [1 1] [1 1 1 1] 1 ?x)",),
                        ("(conv2d [1 1] [1 1 1 1] [1 1] (dim ?x 1) 0 ?x (const_pool [3 3] (dim ?x 1)) "
                         "(const_zero [(dim ?x 1)]))",))
    res = optimize(model, cost_model=PoolAverse(), rules=[pool_as_conv], time_limit=10, verify_latency=False)
    assert "const_pool" in res.graph.op_histogram() and res.numeric.ok
    # and the CLI end to end with the real measured model (its cache in tmp_path)
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path / "cache"))
    src, out = _save(model, tmp_path / "pool.onnx"), tmp_path / "pool.opt.onnx"
    assert _optimize(str(src), "-o", str(out), "--costs", "measured") == 0, capsys.readouterr().err
    _runs_in_onnxruntime(out)


def test_library_never_prints_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    from eqsat.pipeline import optimize

    optimize(models.two_matmul_shared_input(batch=4, hidden=16), time_limit=10)
    onnx_io.summarize_model(_control_flow_model())
    with pytest.raises(ModelLoadError):
        onnx_io.load_model(_dynamic_model())
    assert capfd.readouterr().out == ""  # the engine's child process included
    # and no library module calls print() or writes to sys.stdout (command-line modules print their results)
    offenders = []
    checked = 0
    for folder in ("eqsat", "rules", "extract", "gpu"):
        for path in sorted((ROOT / folder).rglob("*.py")):  # subpackages included
            if path.name == "cli.py" or path.name.endswith("_cli.py") or path.parent == ROOT / "eqsat" / "cli":
                continue  # command-line modules
            checked += 1
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} print()")
                if isinstance(node, ast.Attribute) and node.attr == "stdout" and \
                        isinstance(node.value, ast.Name) and node.value.id == "sys":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} sys.stdout")
    assert not offenders, offenders
    assert checked > 50  # every library module, not only those directly in each folder


def test_bug_keeps_its_traceback_and_user_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from eqsat.pipeline import run as pipeline
    src = _save(_static_model(), tmp_path / "m.onnx")

    def boom(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise IndexError("tuple index out of range")

    monkeypatch.setattr(pipeline, "optimize", boom)
    with pytest.raises(IndexError):  # a bug: the traceback is the useful report
        _optimize(str(src), "-o", str(tmp_path / "o.onnx"))

    def user_error(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise EqsatError("something the user can fix\n(second line); do this")

    monkeypatch.setattr(pipeline, "optimize", user_error)
    assert _optimize(str(src), "-o", str(tmp_path / "o.onnx")) == 2
    assert _error_line(capsys) == "eqsat: error: something the user can fix (second line); do this"
    assert not (tmp_path / "o.onnx").exists()


def test_output_that_is_a_graph_input_passes_through(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, [("x", [2, 3])], [("x", [2, 3]), ("y", [2, 3])], name="pass")
    src, out = _save(model, tmp_path / "m.onnx"), tmp_path / "out.onnx"
    assert _optimize(str(src), "-o", str(out)) == 0
    written = onnx.load(str(out))
    assert [o.name for o in written.graph.output] == ["x", "y"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], np.maximum(x, 0))


# -- option values and help ----------------------------------------------------------------------------------


_OPTIMIZE = ["optimize", "{model}", "-o", "{out}"]


@pytest.mark.parametrize("command, option, value, advice", [
    (_OPTIMIZE, "--time-limit", "0", "give a positive number of seconds, e.g. --time-limit 60"),
    (_OPTIMIZE, "--time-limit", "-1", "give a positive number of seconds"),
    (_OPTIMIZE, "--time-limit", "nan", "give a positive number of seconds"),
    (_OPTIMIZE, "--time-limit", "inf", "give a positive number of seconds"),
    (_OPTIMIZE, "--node-limit", "0", "give a whole number of e-nodes >= 1, e.g. --node-limit 50000"),
    (_OPTIMIZE, "--iter-limit", "-1", "give a whole number of iterations >= 0"),
    (_OPTIMIZE, "--candidates", "0", "give a whole number of candidates >= 1, e.g. --candidates 4"),
    (_OPTIMIZE, "--threads", "-1", "give a whole number of threads >= 0 (0: onnxruntime's default), e.g. "
                                   "--threads 4"),
    (_OPTIMIZE, "--threads", "two", "give a whole number of threads >= 0"),
    (["demo"], "--time-limit", "0", "give a positive number of seconds, e.g. --time-limit 60"),
    (["compare", "{model}"], "--budget", "-5", "give a positive number of seconds, e.g. --budget 60"),
    (["compare", "{model}"], "--alpha", "0.5", "give a number >= 1, e.g. --alpha 1.05"),
    (["costs", "measure", "{model}"], "--time-limit", "0", "give a positive number of seconds, e.g. --time-limit 30"),
    (["costs", "show"], "--limit", "-1", "give a whole number of entries >= 0, e.g. --limit 50"),
    (["egraph", "view", "{out}", "-o", "{out}.html"], "--depth", "-1", "give a whole number of steps >= 0"),
    (["egraph", "render", "{out}", "-o", "{out}.dot"], "--max-nodes", "0", "give a whole number of e-nodes >= 1"),
    (["rules", "verify"], "--timeout", "0", "give a positive number of seconds, e.g. --timeout 30"),
    (["rules", "generate"], "--workers", "0", "give a whole number of workers >= 1"),
])
def test_refused_option_values_say_what_to_give(command: list[str], option: str, value: str, advice: str,
                                               tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused before any work (argparse): one line naming the option and its value, and what to give instead."""
    from eqsat.pipeline import run as pipeline

    monkeypatch.setattr(pipeline, "optimize", lambda *a, **k: pytest.fail("ran with a refused option value"))
    names = {"model": str(tmp_path / "m.onnx"), "out": str(tmp_path / "o.onnx")}
    argv = [a.format(**names) for a in command] + [option, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"error: {option} {value}: {advice}" in err, err
    assert "give" in err and "--help" in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_threads_with_a_cost_model_that_has_none_says_what_to_add(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    src = _save(_static_model(), tmp_path / "m.onnx")
    assert _optimize(str(src), "-o", str(tmp_path / "o.onnx"), "--threads", "2") == 2
    assert _error_line(capsys) == ("eqsat: error: --threads 2: applies to measured CPU costs only; add --costs "
                                   "measured")
    assert main(["costs", "measure", str(src), "--device", "gpu", "--threads", "2"]) == 2
    assert "--threads 2: applies to --device cpu only" in _error_line(capsys)


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """(command path, parser) for the parser and every subparser under it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subcommands(sub, (*path, name))


def test_every_option_of_every_subcommand_has_help() -> None:
    from eqsat.cli.app import build_parser

    missing, seen = [], set()
    for path, parser in _subcommands(build_parser(), ("eqsat",)):
        seen.add(" ".join(path))
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            name = "/".join(action.option_strings) or action.dest
            if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                missing.append(f"{' '.join(path)} {name}")
            if isinstance(action, argparse._SubParsersAction):  # each subcommand's line in its parent's help
                missing += [f"{' '.join(path)} {c.dest} (the subcommand)" for c in action._choices_actions
                            if not (c.help or "").strip()]
    assert not missing, "options without help text:\n" + "\n".join(missing)
    assert {"eqsat optimize", "eqsat extract", "eqsat rules verify", "eqsat costs measure",
            "eqsat egraph export"} <= seen  # the subcommands other packages register are walked too
