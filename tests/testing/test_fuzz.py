"""The differential fuzzer (eqsat.testing.fuzz): generator validity, a CI-sized fuzzing run, the fuzzer's own
sensitivity, and one regression test per bug it found."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper, shape_inference

from eqsat import onnx_io
from eqsat.ir.rule import Rule
from eqsat.testing import fuzz
from eqsat.testing.onnx_builders import make_model


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    return make_model(nodes, inputs, outputs, inits, fuzz.OPSET, name="regression", ir_version=fuzz.IR_VERSION)


def _assert_ok(res: fuzz.CaseResult, what: str = "") -> None:
    assert res.error is None, f"optimize raised on a valid model: {res.error}\n{what}"
    assert not res.problems, f"optimized model differs: {res.problems}\n{what}"


# -- the generator ------------------------------------------------------------------------------------------

def test_generated_models_are_valid_and_replayable() -> None:
    """Every generated model passes the ONNX checker and strict shape inference, runs in onnxruntime with the
    output shapes the generator tracked, and replays identically from its decision record."""
    for seed in range(60):
        c = fuzz.RandomChoices(seed)
        g = fuzz.generate_graph(c)
        model = fuzz.to_model([g])
        onnx.checker.check_model(model, full_check=True)
        shape_inference.infer_shapes(model, strict_mode=True)
        outs = onnx_io.run_onnxruntime(model, onnx_io.random_feeds(model, 0))
        assert [tuple(o.shape) for o in outs] == list(g.outputs.values())
        again = fuzz.to_model([fuzz.generate_graph(fuzz.ReplayChoices(c.record))])
        assert again.SerializeToString() == model.SerializeToString()


def test_generator_covers_the_registry_and_opaque_operators() -> None:
    seen: set[str] = set()
    for seed in range(200):
        seen |= {n.op_type for n in fuzz.generate_graph(fuzz.RandomChoices(seed)).nodes}
    registry = {"MatMul", "Gemm", "Conv", "Add", "Mul", "Sum", "Relu", "Sigmoid", "Tanh", "Transpose", "Reshape",
                "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "MaxPool", "AveragePool",
                "GlobalAveragePool", "BatchNormalization"}
    opaque = {"Softmax", "Exp", "Neg", "Sqrt", "TopK", "Clip", "ReduceMean", "LeakyRelu"}
    assert registry | opaque <= seen, sorted((registry | opaque) - seen)


def test_shrink_finds_a_smaller_failing_decision_list() -> None:
    c = fuzz.RandomChoices(3)
    g = fuzz.generate_graph(c, max_motifs=6)

    def has_matmul(rec: list[int]) -> bool:
        return any(n.op_type == "MatMul" for n in fuzz.generate_graph(fuzz.ReplayChoices(rec)).nodes)

    if not has_matmul(c.record):
        pytest.skip("seed 3 has no MatMul")
    small = fuzz.shrink(c.record, has_matmul, marks=g.marks, budget=300)
    assert has_matmul(small)
    assert len(fuzz.generate_graph(fuzz.ReplayChoices(small)).nodes) <= len(g.nodes)


# -- the fuzzer is not vacuous ------------------------------------------------------------------------------

def test_a_corrupted_optimized_model_is_caught() -> None:
    """Compare a model against a copy with one weight nudged: the comparison must report the output."""
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                   [("x", [3, 5])], [("z", [3, 2]), ("y", [3, 2])],
                   [("w", np.random.default_rng(0).normal(size=(5, 2)).astype(np.float32))])
    assert fuzz.check_model(model, optimized=model).ok
    bad = onnx.ModelProto()
    bad.CopyFrom(model)
    w = numpy_helper.to_array(bad.graph.initializer[0]).copy()
    w[1, 1] += 0.05
    bad.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    res = fuzz.check_model(model, optimized=bad)
    assert "y" in res.problems and not res.ok


def test_a_wrong_rule_is_caught_by_the_fuzzer() -> None:
    """The whole loop (generate, optimize, compare) flags a rewrite that drops a relu."""
    wrong = [Rule("drop-relu", ("(relu ?x)",), ("?x",))]
    rep = fuzz.run_fuzz(2, seed=0, per_model=2, rules=wrong, shrink_budget=3)  # graph 1 of seed 0 has a relu
    assert rep.mismatches >= 1
    assert any("drop-relu" in f.rules_fired for f in rep.findings)


# -- CI-sized fuzzing ---------------------------------------------------------------------------------------

@pytest.mark.slow  # four optimize calls of eight graphs each
def test_fuzz_packed_graphs_fixed_seed() -> None:
    """32 random graphs, 8 to an optimize call: no mismatch, no crash, and a good share of the rules fire."""
    rep = fuzz.run_fuzz(32, seed=2024, per_model=8, shrink_budget=40)
    msg = "\n\n".join(f"{f.kind}: {f.detail}\n{f.onnx_text}" for f in rep.findings)
    assert rep.graphs == 32 and rep.invalid == 0, msg
    assert rep.mismatches == 0 and rep.errors == 0, msg
    assert len(rep.rules_fired) >= 40, sorted(rep.rules_fired)  # rewrites fired: the run proves something
    assert rep.changed_models >= 1  # and extraction kept some of them


@pytest.mark.slow  # fifteen optimize calls
@settings(max_examples=15, deadline=None, derandomize=True, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_fuzz_hypothesis(data: st.DataObject) -> None:
    """Hypothesis-driven graphs, one per optimize call, so a failure shrinks to a minimal graph."""
    g = fuzz.generate_graph(fuzz.HypothesisChoices(data), max_motifs=4)
    _assert_ok(fuzz.check_model(fuzz.to_model([g])), g.describe())


# -- regression tests: one per bug the fuzzer found ---------------------------------------------------------

def test_single_input_concat_does_not_crash_the_engine() -> None:
    """ONNX allows a Concat of one tensor; the e-graph compiler raised ``EngineError: concat with a single
    input``. Fixed in the Concat importer (eqsat/ops.py): a one-input Concat imports as an identity."""
    model = _model([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Concat", ["s"], ["y"], axis=0),
                    helper.make_node("Concat", ["x"], ["z"], axis=1)], [("x", [1, 2])], [("y", [1, 2]), ("z", [1, 2])])
    _assert_ok(fuzz.check_model(model))


def test_constant_operator_in_extracted_graph_has_a_dtype() -> None:
    """Extraction may pick a constant operator (here the 1x1 identity ``const_imatmul``); ``Graph.dtypes``
    read ``n.inputs[0]`` of every registry node and raised IndexError for those input-less nodes."""
    model = _model([helper.make_node("MatMul", ["x1", "w2"], ["t3"]),
                    helper.make_node("Gemm", ["t3", "x5", "x5"], ["t6"])],
                   [("x1", [1, 1]), ("x5", [1, 2])], [("t6", [1, 2])],
                   [("w2", np.array([[0.12573022]], dtype=np.float32))])
    _assert_ok(fuzz.check_model(model))


def test_opaque_node_keeps_its_required_unused_outputs() -> None:
    """A TopK whose indices nobody reads: export dropped the trailing unused output, leaving a one-output TopK
    that the ONNX checker rejects (TopK needs both outputs)."""
    model = _model([helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
                    helper.make_node("TopK", ["t", "k"], ["values", "indices"])],
                   [("x", [1, 3, 2])], [("values", [1, 2, 1])], [("k", np.array([1], dtype=np.int64))])
    _assert_ok(fuzz.check_model(model))


def test_rule_reading_a_missing_dimension_does_not_panic() -> None:
    """``(ewadd (ewmul a a) (ewadd a a))`` on rank-1 tensors: rules written for matrices (e.g. r200-rev, whose
    right-hand side reads ``(dim ?w2 1)``) match and egglog panics ``vec-get failed``, ending the run."""
    model = _model([helper.make_node("Reshape", ["x", "shape"], ["t"]), helper.make_node("Mul", ["t", "t"], ["m"]),
                    helper.make_node("Add", ["t", "t"], ["a"]), helper.make_node("Add", ["m", "a"], ["y"])],
                   [("x", [1, 1])], [("y", [1])], [("shape", np.array([1], dtype=np.int64))])
    _assert_ok(fuzz.check_model(model))


def test_shape_rule_rejects_dims_that_do_not_broadcast() -> None:
    """``Concat(Gemm(x, w, bias), same)``: interchange rules built ``ewadd`` of a (1, 4) concat and a (1, 2)
    product; the egglog broadcast shape rule took the larger of each pair of dims without checking that they
    broadcast, gave it shape (1, 4), and extraction picked a graph the IR rejects. Fixed in the registry's
    broadcast shape rule (eqsat/ops.py): dims must be equal or one of them 1."""
    model = _model([helper.make_node("Gemm", ["x1", "w2", "w3"], ["t4"]),
                    helper.make_node("Concat", ["t4", "t4"], ["t6"], axis=1)],
                   [("x1", [1, 1])], [("t6", [1, 4])],
                   [("w2", np.array([[0.12573022, -0.13210486]], dtype=np.float32)),
                    ("w3", np.array([0.32021132], dtype=np.float32))])
    _assert_ok(fuzz.check_model(model))
