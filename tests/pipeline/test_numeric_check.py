"""The numeric check guards for real: the original as given, several inputs, every output, NaN/inf by position,
tolerances relative to each output's scale, saturation, and models onnxruntime cannot run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from eqsat import onnx_io
from eqsat.cli.app import main
from eqsat.pipeline import NumericCheckUnavailable, NumericMismatch, optimize
from eqsat.pipeline.check import check_equal
from eqsat.rules import starter_rules
from eqsat.testing.onnx_builders import f32, make_model

#: the numeric check is what these tests are about, not the rules: the hand-written starter rules load fastest
STARTER = starter_rules()


def _w(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _matmul_softmax(scale: float) -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((16, 8)) * scale
    return make_model([helper.make_node("MatMul", ["x", "w"], ["logits"]),
                       helper.make_node("Softmax", ["logits"], ["y"], axis=-1)],
                      [f32("x", (4, 16))], [f32("y", (4, 8))], [_w("w", w)])


def _scaled(model: onnx.ModelProto, weight: str, factor: float) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.name == weight:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), weight))
    return out


def test_reference_is_the_original_file_not_its_reexport(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An export bug must not hide behind a reference that went through the same export."""
    src = tmp_path / "m.onnx"  # two products of x: merged into one they cost less, so the model is re-exported
    onnx.save(make_model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"]),
                          helper.make_node("MatMul", ["x", "v"], ["g"]), helper.make_node("Relu", ["g"], ["z"])],
                         [f32("x", (2, 4))], [f32("y", (2, 3)), f32("z", (2, 3))],
                         [_w("w", np.arange(12).reshape(4, 3) - 5.0), _w("v", np.arange(12).reshape(4, 3) - 7.0)]),
              src)
    assert not optimize(str(src), time_limit=10, rules=STARTER).kept_original
    real = onnx_io.to_onnx

    def buggy_export(graph, **kw):  # an export that doubles every weight
        m = real(graph, **kw)
        for init in m.graph.initializer:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 2, init.name))
        return m

    monkeypatch.setattr(onnx_io, "to_onnx", buggy_export)
    with pytest.raises(NumericMismatch):
        optimize(str(src), time_limit=10, rules=STARTER)
    with pytest.raises(NumericMismatch):
        optimize(src.read_bytes(), time_limit=10, rules=STARTER)


def test_saturated_output_still_catches_a_scaled_last_layer() -> None:
    model = _matmul_softmax(1000.0)  # logits ~1e3: the softmax is one-hot
    report = check_equal(model, model)
    assert report.ok and report.saturated, report.summary()
    # the line says what it compared: the output, and the tensor before the softmax it added
    assert "saturated" in report.summary() and "1 tensor(s) before saturating operators (" in report.summary()
    wrong = check_equal(model, _scaled(model, "w", 1.5))
    assert not wrong.ok, wrong.summary()
    assert "before logits" in wrong.summary()


@pytest.mark.slow  # ResNet-50 run six times (the small model above runs in the fast lane)
def test_saturated_zoo_model_catches_a_scaled_last_layer(zoo_model: Callable[[str], onnx.ModelProto]) -> None:
    model = zoo_model("resnet50")  # logits ~4.5e4 under random weights
    last = [n for n in model.graph.node if n.op_type in ("Gemm", "MatMul", "Conv")][-1]
    report = check_equal(model, _scaled(model, last.input[1], 1.5))
    assert not report.ok, report.summary()


def test_tensors_before_squashing_are_compared_only_behind_the_same_operators() -> None:
    # tanh(transpose(relu(transpose(x)))) and tanh(transpose(relu(x))) with the two moves as one: equal outputs,
    # but the tensors before the last transpose have other shapes (a rewrite that moves a relu across a transpose,
    # as the fuzzer found: the check compared them and failed a correct model)
    x, y = f32("x", (7, 6, 5)), f32("y", (6, 7, 5))
    original = make_model([helper.make_node("Transpose", ["x"], ["a"], perm=[2, 0, 1]),
                           helper.make_node("Relu", ["a"], ["r"]),
                           helper.make_node("Transpose", ["r"], ["t"], perm=[2, 1, 0]),
                           helper.make_node("Tanh", ["t"], ["y"])], [x], [y])
    moved = make_model([helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
                        helper.make_node("Tanh", ["t"], ["y"])], [x], [y])
    report = check_equal(original, moved)
    assert report.ok, report.summary()
    assert not [c for c in report.comparisons if c.pre_saturation]  # other transposes: nothing before them compared
    # behind the same operators the tensors before them are compared, and a difference there is caught
    scaled = make_model([helper.make_node("Transpose", ["x"], ["a"], perm=[2, 0, 1]),
                         helper.make_node("Relu", ["a"], ["r0"]),
                         helper.make_node("Mul", ["r0", "k"], ["r"]),
                         helper.make_node("Transpose", ["r"], ["t"], perm=[2, 1, 0]),
                         helper.make_node("Tanh", ["t"], ["y"])], [x], [y], [_w("k", 1.0 + 1e-3)])
    pre = [c for c in check_equal(original, scaled).comparisons if c.pre_saturation]
    assert [c.name for c in pre] == ["y (before r)"]


def test_unsaturated_softmax_is_not_reported_as_saturated() -> None:
    report = check_equal(_matmul_softmax(0.1), _matmul_softmax(0.1))
    assert report.ok and not report.saturated, report.summary()


def _nan_model(op: str) -> onnx.ModelProto:
    return make_model([helper.make_node(op, ["x"], ["y"])], [f32("x", (3, 5))], [f32("y", (3, 5))])


def test_nan_positions_must_match() -> None:
    sqrt, relu = _nan_model("Sqrt"), _nan_model("Relu")  # sqrt is NaN where x < 0; relu never is
    assert not check_equal(sqrt, relu).ok
    assert not check_equal(relu, sqrt).ok
    report = check_equal(sqrt, sqrt)
    assert report.ok, report.summary()


def test_all_nan_original_does_not_pass_against_a_finite_model() -> None:
    nan = make_model([helper.make_node("Mul", ["x", "nan"], ["y"])], [f32("x", (3, 5))], [f32("y", (3, 5))],
                     [_w("nan", np.full((1,), np.nan))])
    report = check_equal(nan, _nan_model("Relu"))
    assert not report.ok and "NaN" in report.summary()


def test_inf_positions_and_signs_must_match() -> None:
    recip = _nan_model("Reciprocal")
    neg = make_model([helper.make_node("Reciprocal", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
                     [f32("x", (3, 5))], [f32("y", (3, 5))])
    zero_in = make_model([helper.make_node("Mul", ["x", "zero"], ["z"]), helper.make_node("Reciprocal", ["z"], ["y"])],
                         [f32("x", (3, 5))], [f32("y", (3, 5))], [_w("zero", [0.0])])
    assert check_equal(zero_in, zero_in).ok
    assert not check_equal(recip, neg).ok
    assert not check_equal(zero_in, recip).ok


def test_every_output_is_compared_including_intermediate_outputs() -> None:
    def two_outputs(factor: float) -> onnx.ModelProto:
        return make_model([helper.make_node("Mul", ["x", "s"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                          [f32("x", (2, 3))], [f32("y", (2, 3)), f32("h", (2, 3))], [_w("s", [factor])])

    report = check_equal(two_outputs(2.0), two_outputs(2.0))
    assert report.ok and [c.name for c in report.comparisons] == ["y", "h"]
    wrong = make_model([helper.make_node("Mul", ["x", "s"], ["h0"]), helper.make_node("Relu", ["h0"], ["y"]),
                        helper.make_node("Abs", ["h0"], ["h"])],  # y is right, the intermediate output h is not
                       [f32("x", (2, 3))], [f32("y", (2, 3)), f32("h", (2, 3))], [_w("s", [2.0])])
    bad = check_equal(two_outputs(2.0), wrong)
    assert not bad.ok and bad.problems[0].startswith("h:")


def test_an_output_whose_shape_changes_with_the_inputs_is_compared() -> None:
    # each input set gives another length (a loop that ends on its own, say; here x's positive entries: 4, 6, 1
    # and 3 of them): the outputs are compared set by set, and the test of saturation across sets is not made
    def positives(op: str) -> onnx.ModelProto:
        return make_model([helper.make_node("Greater", ["x", "zero"], ["keep"]),
                           helper.make_node("Compress", ["x", "keep"], ["p"], axis=0),
                           helper.make_node(op, ["p"], ["y"])],
                          [f32("x", (6,))], [f32("y", ["n"])], [_w("zero", 0.0)])

    report = check_equal(positives("Sigmoid"), positives("Sigmoid"), trials=4)
    assert report.ok and not report.saturated, report.summary()
    assert not check_equal(positives("Sigmoid"), positives("Tanh"), trials=4).ok


def test_tolerance_is_relative_to_the_outputs_scale() -> None:
    def tiny(offset: float) -> onnx.ModelProto:  # outputs of magnitude ~1e-3
        return make_model([helper.make_node("Mul", ["x", "s"], ["h"]), helper.make_node("Add", ["h", "o"], ["y"])],
                          [f32("x", (4, 4))], [f32("y", (4, 4))], [_w("s", [1e-3]), _w("o", [offset])])

    assert check_equal(tiny(0.0), tiny(0.0)).ok
    report = check_equal(tiny(0.0), tiny(3e-5))  # 1 % of the output's scale: a real difference
    assert not report.ok, report.summary()


def test_several_random_input_sets_are_used() -> None:
    model = _nan_model("Relu")
    report = check_equal(model, model)
    assert report.trials == 3 and "3 random input set(s)" in report.summary()
    # a model that differs only on inputs of one sign is caught, whichever set shows it
    abs_model = _nan_model("Abs")
    assert not check_equal(model, abs_model).ok


def test_a_scalar_input_is_fed_in_every_input_set() -> None:
    """A rank-0 float input (a scale fed in): every distribution gives it a 0-d array, as onnxruntime takes."""
    model = make_model([helper.make_node("Mul", ["x", "s"], ["y"])], [f32("x", (2, 4)), f32("s", ())],
                       [f32("y", (2, 4))])
    report = check_equal(model, model)
    assert report.ok and report.ran and report.trials == 3


def _custom_op_model() -> onnx.ModelProto:
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                    helper.make_node("Mystery", ["h"], ["y"], domain="com.example")],
                   [f32("x", (2, 4))], [f32("y", (2, 3))], [_w("w", np.ones((4, 3)))], domains=["com.example"])
    m.graph.value_info.append(f32("y", (2, 3)))
    return m


def test_custom_op_that_onnxruntime_cannot_run_refuses_to_write(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "custom.onnx", tmp_path / "out.onnx"
    onnx.save(_custom_op_model(), src)
    with pytest.raises(NumericCheckUnavailable, match="--no-check"):
        optimize(str(src), time_limit=10, rules=STARTER)
    assert main(["optimize", str(src), "-o", str(out), "-q", "--rules", "starter"]) == 2
    err = capsys.readouterr().err
    assert "cannot run" in err and "--no-check" in err and not out.exists()
    assert main(["optimize", str(src), "-o", str(out), "-q", "--no-check", "--rules", "starter"]) == 0
    assert out.exists()


def test_report_says_what_was_compared(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_matmul_softmax(0.1), src)
    res = optimize(str(src), time_limit=10, rules=STARTER)
    line = res.numeric.summary()
    assert f"the original model as given ({src})" in line
    assert "3 random input set(s)" in line and "1 output(s)" in line and "worst error" in line
    assert "numeric check" in res.summary() and line in res.summary()


def test_integer_inputs_are_valid_indices_and_masks() -> None:
    """Token types index a one-row table in some models; a mask of 0/1 keeps (1 - mask) * float32-min finite.
    Random integer inputs respect both, so the check runs instead of failing or comparing NaNs."""
    from eqsat import models
    from eqsat.onnx_io import int_input_bounds, random_feeds
    from eqsat.pipeline.check import trial_feeds

    m = models.hf_bert(seq=8, hidden=16, heads=2, intermediate=32, vocab=50, transformers="4", token_type_ids=True)
    assert int_input_bounds(m)["token_type_ids"] == 2
    for feeds in (random_feeds(m), trial_feeds(m, 0), trial_feeds(m, 1)):
        assert set(np.unique(feeds["attention_mask"])) <= {0, 1}
        assert feeds["token_type_ids"].max() < 2
    report = check_equal(m, m)
    assert report.ok and report.ran
