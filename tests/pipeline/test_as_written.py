"""The import as written (``optimize(as_written=True)``, ``eqsat compare --as-written``): a model keeps the nodes the
default import folds into a convolution (BatchNormalization, a residual Add, Relu), the rules that fold them join the
rule set, and the search folds them where they pay; every method of a comparison starts from that graph."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from eqsat import models, onnx_io, ops
from eqsat.cli.app import main
from eqsat.costs import get_cost_model, graph_cost
from eqsat.ir.rule import Rule, parse
from eqsat.pipeline import OptimizeOptions, optimize
from eqsat.pipeline.choices import default_rules, with_fold_rules
from eqsat.pipeline.transforms import run_key
from eqsat.rules.starter import IMPORT_FOLD_RULES
from eqsat.search.comparison import DEFAULT_METHODS, compare, model_cost

REL = 1e-9
C, HW = 8, 8


def residual_block(seed: int = 0) -> onnx.ModelProto:
    """ResNet's basic block, as a framework exports it: Conv -> BatchNormalization -> Relu -> Conv ->
    BatchNormalization -> Add (the block's input) -> Relu."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []

    def weight(name: str, shape: list[int], positive: bool = False) -> str:
        a = rng.normal(0, 0.3, shape).astype(np.float32)
        inits.append(numpy_helper.from_array(np.abs(a) + 0.5 if positive else a, name))
        return name

    def conv_bn(x: str, k: int) -> list[onnx.NodeProto]:
        norm = [weight(f"scale{k}", [C], True), weight(f"bias{k}", [C]), weight(f"mean{k}", [C]),
                weight(f"var{k}", [C], True)]
        return [helper.make_node("Conv", [x, weight(f"w{k}", [C, C, 3, 3]), weight(f"c{k}", [C])], [f"y{k}"],
                                 pads=[1, 1, 1, 1]),
                helper.make_node("BatchNormalization", [f"y{k}", *norm], [f"z{k}"], epsilon=1e-5)]

    nodes = [*conv_bn("x", 1), helper.make_node("Relu", ["z1"], ["r1"]), *conv_bn("r1", 2),
             helper.make_node("Add", ["z2", "x"], ["s"]), helper.make_node("Relu", ["s"], ["out"])]
    shape = [1, C, HW, HW]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _ops(graph) -> Counter[str]:
    return Counter(n.op for n in graph.nodes)


def _feeds(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((1, C, HW, HW)).astype(np.float32)}


@pytest.fixture(scope="module")
def block() -> onnx.ModelProto:
    return residual_block()


@pytest.fixture(scope="module")
def analytic():
    return get_cost_model("analytic")


def test_as_written_the_import_keeps_the_nodes_the_default_import_folds(block) -> None:
    written, folded = onnx_io.load_model(block, as_written=True), onnx_io.load_model(block)
    assert _ops(written) == Counter(conv2d=2, batchnorm=2, relu=2, ewadd=1)
    assert all(n.p["act"] == ops.ACT_NONE for n in written.nodes if n.op == "conv2d")
    assert _ops(folded) == Counter(conv2d=1, conv2d_add=1)  # batch norms, the add and the relus folded in
    # both compute what the model does
    want = onnx_io.run_onnxruntime(block, _feeds(1))[0]
    for graph in (written, folded):
        np.testing.assert_allclose(graph.evaluate(_feeds(1))[0], want, rtol=1e-4, atol=1e-5)


def test_optimizing_as_written_makes_the_folds_and_writes_a_correct_model(block, analytic) -> None:
    res = optimize(block, as_written=True, time_limit=30, cache=False)
    assert res.as_written and res.to_dict()["as_written"] and "as written" in res.summary()
    assert res.numeric is not None and res.numeric.ok and not res.kept_original
    # it starts from the model as written and reaches the default import's cost: the batch norms folded by the rule
    assert res.cost_before == pytest.approx(graph_cost(onnx_io.load_model(block, as_written=True), analytic), rel=REL)
    assert res.cost_after < res.cost_before
    assert res.cost_after == pytest.approx(graph_cost(onnx_io.load_model(block), analytic), rel=1e-6)
    assert res.rules_fired.get("conv-batchnorm-fold", 0) > 0
    written = Counter(n.op_type for n in res.model.graph.node)
    assert "BatchNormalization" not in written and len(res.model.graph.node) < len(block.graph.node)
    for seed in (2, 3):  # onnxruntime, apart from the pipeline's own check
        got, want = onnx_io.run_onnxruntime(res.model, _feeds(seed)), onnx_io.run_onnxruntime(block, _feeds(seed))
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_the_default_import_starts_from_the_folds(block, analytic) -> None:
    res = optimize(block, time_limit=20, cache=False)
    assert not res.as_written and "as written" not in res.summary()
    assert res.cost_before == pytest.approx(graph_cost(onnx_io.load_model(block), analytic), rel=REL)
    assert res.cost_before < graph_cost(onnx_io.load_model(block, as_written=True), analytic)


def test_as_written_the_fold_rules_join_any_rule_set(block) -> None:
    names = {r.name for r in IMPORT_FOLD_RULES}
    assert names == {"conv-batchnorm-fold", "conv-add-fuse", "conv-relu-fuse", "conv-add-relu-fuse"}
    only_comm = [Rule("ewadd-comm", ("(ewadd ?a ?b)",), ("(ewadd ?b ?a)",))]
    assert [r.name for r in with_fold_rules(only_comm)][0] == "ewadd-comm"
    assert names <= {r.name for r in with_fold_rules(only_comm)}
    both = with_fold_rules(default_rules())  # no rule twice where the rule set has some already
    assert len({r.name for r in both}) == len(both)
    res = optimize(block, rules=only_comm, as_written=True, time_limit=20, cache=False)
    assert res.rules_fired.get("conv-batchnorm-fold", 0) > 0 and res.cost_after < res.cost_before
    assert res.numeric is not None and res.numeric.ok


def _operators(rule: Rule) -> tuple[set[str], set[str]]:
    """The operators of a rule's left-hand and right-hand sides."""
    def heads(term: object) -> set[str]:
        if not isinstance(term, list) or not term:
            return set()
        head = {term[0]} if isinstance(term[0], str) and not term[0].startswith("?") else set()
        return head.union(*(heads(t) for t in term[1:]))

    return (set().union(*(heads(parse(s)) for s in rule.lhs)), set().union(*(heads(parse(s)) for s in rule.rhs)))


def test_every_fold_the_registry_declares_has_its_rule() -> None:
    """A fold added to the registry (``weight_fold``, ``fuses``, ``activation``) needs its rule here, or a model
    imported as written could not reach what the default import gives."""
    sides = [_operators(r) for r in IMPORT_FOLD_RULES]
    folds = [({s.name, s.weight_fold.into}, None) for s in ops.REGISTRY.values() if s.weight_fold is not None]
    folds += [(set(s.fuses), s.name) for s in ops.REGISTRY.values() if s.fuses is not None]
    activations = [s.name for s in ops.REGISTRY.values() if s.activation is not None]
    folds += [({a, into}, into) for a in activations for into in ("conv2d", *(s.name for s in ops.REGISTRY.values()
                                                                            if s.fuses is not None))]
    for lhs_ops, rhs_op in folds:
        assert any(lhs_ops <= lhs and (rhs_op is None or rhs_op in rhs) for lhs, rhs in sides), lhs_ops


def test_as_written_is_in_the_cache_key(block, analytic) -> None:
    graph, rules = onnx_io.load_model(block), default_rules()
    assert run_key(graph, rules, analytic, OptimizeOptions()) != run_key(graph, rules, analytic,
                                                                          OptimizeOptions(as_written=True))


def test_compare_as_written_starts_and_judges_every_method_from_the_model_as_written(block, analytic) -> None:
    # 4 s: eqsat's share of 2 s (about 1.1 s) was mostly the engine's start (egglog loading ~180 rules), so on a
    # loaded two-core machine its first iteration sometimes did not finish and it kept the original
    res = compare(block, DEFAULT_METHODS, budget=4.0, cost_model=analytic, name="block", as_written=True)
    unfolded = model_cost(block, analytic, as_written=True)
    assert res.as_written and res.as_dict()["as_written"] and "original (as written)" in res.table()
    assert res.original_cost == pytest.approx(unfolded, rel=REL) and unfolded > model_cost(block, analytic)
    start = len(onnx_io.load_model(block, as_written=True).nodes)
    for name, r in res.methods.items():
        assert r.status == "ok", (name, r.status)
        assert r.trace[0][1] == pytest.approx(unfolded, rel=REL), name  # the same original for every method
        assert r.details["start_nodes"] == start, name
        assert r.cost == pytest.approx(model_cost(r.model, analytic, as_written=True), rel=REL), name
    for name in ("eqsat", "backtracking"):  # both fold the batch norms
        assert res.methods[name].cost < res.original_cost, name


def test_compare_as_written_on_a_small_taso_model_starts_every_method_unfolded(analytic) -> None:
    model = models.taso_resnext50(image=32, widths=(8, 16), depths=(1, 1), groups=2, stem=8)
    written, folded = onnx_io.load_model(model, as_written=True), onnx_io.load_model(model)
    assert len(written.nodes) > len(folded.nodes)  # its relus and residual adds kept apart
    res = compare(model, DEFAULT_METHODS, budget=1.0, cost_model=analytic, as_written=True)
    for name, r in res.methods.items():
        assert r.status == "ok" and r.details["start_nodes"] == len(written.nodes), (name, r.status)
        assert r.trace[0][1] == pytest.approx(res.original_cost, rel=REL), name


@pytest.mark.slow  # a full-size TASO model, every method
def test_cli_compare_as_written_on_a_built_in_taso_model(tmp_path, capsys, analytic) -> None:
    out = tmp_path / "c.json"
    assert main(["compare", "taso_squeezenet", "--as-written", "--budget", "1", "--json", str(out), "-q"]) == 0
    assert "original (as written)" in capsys.readouterr().out
    d = json.loads(out.read_text())
    model = models.taso_squeezenet()
    written = len(onnx_io.load_model(model, as_written=True).nodes)
    assert d["as_written"] and written > len(onnx_io.load_model(model).nodes)
    assert d["original_cost"] == pytest.approx(model_cost(model, analytic, as_written=True), rel=REL)
    assert set(d["methods"]) == set(DEFAULT_METHODS)
    for name, m in d["methods"].items():
        assert m["status"] == "ok", name
        assert m["start_nodes"] == written, name
        assert m["trace"][0][1] == pytest.approx(d["original_cost"], rel=REL), name
        assert m["cost"] <= d["original_cost"] * (1 + REL), name
