"""Provenance in e-graph dumps: the iteration in which each e-node first existed and the rules that built it
(``eqsat.engine.compile.compile_rule`` with ``provenance``, ``eqsat.engine.serialize.clean_serialized``,
``eqsat.inspect.dump``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from eqsat import onnx_io
from eqsat.cli.app import main
from eqsat.cli.egraph import class_report, stats_report
from eqsat.engine.compile import SIBLING_MERGE, compile_rule, compile_rules
from eqsat.engine.egraph import EGraph, ENode
from eqsat.engine.limits import Limits
from eqsat.engine.saturation import saturate
from eqsat.inspect.dump import DumpError, EGraphDump, build_dump
from eqsat.ir.rule import Rule
from eqsat.pipeline import OptimizeResult, default_rules, optimize
from eqsat.testing.onnx_builders import make_model

# distribute builds three e-nodes from the input graph in iteration 1; swap-products matches only what
# distribute built, so it builds its one new e-node in iteration 2. It comes first in the rule list: rules run in
# order within an iteration, and after distribute it would see distribute's output in the same iteration.
DISTRIBUTE = Rule("distribute", ("(ewmul ?x (ewadd ?y ?z))",), ("(ewadd (ewmul ?x ?y) (ewmul ?x ?z))",))
SWAP = Rule("swap-products", ("(ewadd (ewmul ?x ?y) (ewmul ?x ?z))",), ("(ewadd (ewmul ?x ?z) (ewmul ?x ?y))",))
RULES = [SWAP, DISTRIBUTE]


def _two_step_model() -> onnx.ModelProto:
    """y = c * (a + b)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    return make_model(nodes, [(n, [4, 8]) for n in "abc"], [("y", [4, 8])], name="two_step")


def _siblings_model() -> onnx.ModelProto:
    """Three matmuls of one input (an n-way sibling merge, added before iteration 1) and their concat."""
    rng = np.random.default_rng(0)
    ws = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{k}") for k in range(3)]
    nodes = [helper.make_node("MatMul", ["x", f"w{k}"], [f"m{k}"]) for k in range(3)]
    nodes.append(helper.make_node("Concat", ["m0", "m1", "m2"], ["y"], axis=1))
    return make_model(nodes, [("x", [4, 8])], [("y", [4, 24])], ws, name="siblings")


@pytest.fixture(scope="module")
def two_step() -> OptimizeResult:
    res = optimize(_two_step_model(), rules=RULES, time_limit=20, dump_egraph=True, provenance=True)
    assert res.egraph_dump is not None and res.egraph_dump.provenance
    return res


def _by_term(dump: EGraphDump) -> dict[str, ENode]:
    """Each node by its term over tensor names, e.g. ``ewmul(c,a)`` (the classes of the two-step model)."""
    names = dump.tensor_names

    def term(cls: str) -> str:
        if cls in names:
            return names[cls]
        n = dump.egraph.members(cls)[0]
        return f"{n.op}({','.join(term(k) for k in n.children)})"

    return {f"{n.op}({','.join(term(k) for k in n.children)})" if n.children else n.op + n.p["name"]: n
            for n in dump.egraph.nodes}


def test_a_rule_of_iteration_1_and_one_of_iteration_2(two_step: OptimizeResult) -> None:
    dump = two_step.egraph_dump
    assert [it.iteration for it in two_step.iterations] == [0, 1, 2, 3] and two_step.stop_reason == "saturated"
    nodes = _by_term(dump)
    assert set(nodes) == {"Inputa", "Inputb", "Inputc", "ewadd(a,b)", "ewmul(c,s)", "ewmul(c,a)", "ewmul(c,b)",
                          "ewadd(ewmul(c,a),ewmul(c,b))", "ewadd(ewmul(c,b),ewmul(c,a))"}
    first, creators = dump.first_iteration, dump.creators
    for key in ("Inputa", "Inputb", "Inputc", "ewadd(a,b)", "ewmul(c,s)"):  # the input graph
        assert nodes[key].id in dump.input_nodes and first(nodes[key]) == 0 and creators(nodes[key]) == ()
    for key in ("ewmul(c,a)", "ewmul(c,b)", "ewadd(ewmul(c,a),ewmul(c,b))"):  # distribute's, in iteration 1
        assert first(nodes[key]) == 1 and creators(nodes[key]) == ("distribute",), key
    swapped = nodes["ewadd(ewmul(c,b),ewmul(c,a))"]
    assert first(swapped) == 2 and swapped.rules == (("swap-products", 2),)
    # swap-products rebuilds the products (its right-hand side) in iteration 2 and distribute's sum (matching
    # its own output) in iteration 3: later builders are listed with their own first iteration
    assert nodes["ewmul(c,a)"].rules == (("distribute", 1), ("swap-products", 2))
    assert nodes["ewadd(ewmul(c,a),ewmul(c,b))"].rules == (("distribute", 1), ("swap-products", 3))
    assert dump.describe_provenance(nodes["ewadd(ewmul(c,a),ewmul(c,b))"]) == "distribute, swap-products@3"
    # the e-graph after one iteration has exactly the e-nodes whose first iteration is at most 1
    graph = onnx_io.load_model(_two_step_model())
    one = build_dump(saturate(graph, RULES, Limits(iter_limit=1, time_limit=20)), graph, {})
    assert set(_by_term(one)) == {k for k, n in nodes.items() if first(n) <= 1}


def _without_rules(egraph: EGraph) -> EGraph:
    """The e-graph as recorded without provenance."""
    return dataclasses.replace(egraph, provenance=False, nodes=tuple(n._replace(rules=()) for n in egraph.nodes))


@pytest.mark.slow  # two saturations with the default rules
def test_provenance_leaves_the_egraph_unchanged() -> None:
    """The rows are bookkeeping: the same e-nodes, e-classes, sizes and matches per iteration, under a node limit
    that binds (the rows do not count as e-nodes), and the same dump but for the provenance fields."""
    graph = onnx_io.load_model(_siblings_model())
    limits = Limits(iter_limit=6, node_limit=150, time_limit=120)
    plain = saturate(graph, default_rules(), limits)
    recorded = saturate(graph, default_rules(), limits, provenance=True)
    assert plain.stop_reason == recorded.stop_reason == "node limit"
    assert recorded.iterations[-1].enodes <= 150
    assert not plain.egraph.provenance and all(n.rules == () for n in plain.egraph.nodes)
    assert recorded.egraph.provenance and any(n.rules for n in recorded.egraph.nodes)
    assert _without_rules(recorded.egraph) == plain.egraph
    assert [(i.enodes, i.eclasses, i.matches) for i in recorded.iterations] == \
        [(i.enodes, i.eclasses, i.matches) for i in plain.iterations]
    a, b = build_dump(plain, graph, {}), build_dump(recorded, graph, {})
    assert b.provenance and not a.provenance
    assert dataclasses.replace(b, egraph=_without_rules(b.egraph), first_iterations={}, saturation=None) == \
        dataclasses.replace(a, saturation=None)  # (saturation differs in its seconds)


def test_sibling_merges_are_iteration_0() -> None:
    graph = onnx_io.load_model(_siblings_model())
    sat = saturate(graph, default_rules(), Limits(iter_limit=2, time_limit=60), provenance=True)
    dump = build_dump(sat, graph, {})
    first, creators = dump.first_iteration, dump.creators
    merge = [n for n in dump.egraph.nodes if n.id not in dump.input_nodes and first(n) == 0]
    assert sorted(n.op for n in merge) == ["concat", "concat", "matmul", "split", "split", "split"]
    assert all(creators(n) == (SIBLING_MERGE,) for n in merge)
    # every other e-node has a provenance: the input graph's, or a rule's in iteration 1 or 2
    assert all(first(n) is not None for n in dump.egraph.nodes)
    assert {first(n) for n in dump.egraph.nodes if n.id not in dump.input_nodes and n not in merge} == {1, 2}
    assert all(creators(n) and SIBLING_MERGE not in creators(n) for n in dump.egraph.nodes if first(n))


def test_rules_compile_the_same_without_provenance() -> None:
    for rule in default_rules()[:40] + RULES:
        for d in rule.directions():
            plain = compile_rule(d)
            assert compile_rule(d, provenance=False) == plain and "prov_" not in plain
            recorded = compile_rule(d, provenance=True)
            builds = any(t.startswith("(") for t in d.rhs)  # a right-hand side that is a variable builds nothing
            assert ("(= __it (cur_iter))" in recorded) == builds == (f'{json.dumps(d.name)}) __it)' in recorded)
    text = compile_rule(DISTRIBUTE, provenance=True)
    for row in ("(set (prov_ewmul v_x v_y \"distribute\") __it)", "(set (prov_ewmul v_x v_z \"distribute\") __it)",
                "(set (prov_ewadd (ewmul v_x v_y) (ewmul v_x v_z) \"distribute\") __it)"):
        assert row in text
    # deduplication is by the rule without provenance (the rows name the rule): the same rule set either way
    twin = Rule("twin", DISTRIBUTE.lhs, DISTRIBUTE.rhs)
    assert len(compile_rules([DISTRIBUTE, twin], provenance=True)) == \
        len(compile_rules([DISTRIBUTE, twin])) == 1


def test_the_dump_round_trips_and_version_1_files_still_read(two_step: OptimizeResult, tmp_path: Path) -> None:
    dump = two_step.egraph_dump
    path = dump.write(tmp_path / "v2.json")
    assert EGraphDump.read(path) == dump
    data = json.loads(path.read_text())
    assert data["eqsat"]["version"] == 2 and data["eqsat"]["provenance"] is True
    node = next(n for n in data["nodes"].values() if n["first_iteration"] == 2)
    assert node["rules"] == {"swap-products": 2}
    # a version-1 file: no provenance anywhere
    data["eqsat"]["version"] = 1
    del data["eqsat"]["provenance"]
    for n in data["nodes"].values():
        del n["first_iteration"], n["rules"]
    old = tmp_path / "v1.json"
    old.write_text(json.dumps(data))
    v1 = EGraphDump.read(old)
    assert not v1.provenance and not v1.first_iterations and all(n.rules == () for n in v1.egraph.nodes)
    assert v1 == dataclasses.replace(dump, egraph=_without_rules(dump.egraph), first_iterations={})
    assert "provenance: not recorded" in stats_report(v1) and "added per iteration by rule" not in stats_report(v1)
    assert "not recorded" in class_report(v1, "y") and " iter " not in class_report(v1, "y")
    # written again it is a version-2 file without provenance, read back equal
    assert EGraphDump.loads(v1.dumps()) == v1 and '"first_iteration"' not in v1.dumps()


def test_malformed_provenance_is_refused(two_step: OptimizeResult) -> None:
    good = two_step.egraph_dump.to_json()
    nid = next(iter(good["nodes"]))
    for field, value, message in (("rules", ["distribute"], "expected rule -> iteration"),
                                  ("rules", {"distribute": -1}, "expected rule -> iteration"),
                                  ("first_iteration", "one", "first_iteration 'one'")):
        bad = json.loads(json.dumps(good))
        bad["nodes"][nid][field] = value
        with pytest.raises(DumpError, match=message):
            EGraphDump.from_json(bad)
    bad = json.loads(json.dumps(good))
    del bad["nodes"][nid]["first_iteration"]
    with pytest.raises(DumpError, match="missing field 'first_iteration'"):
        EGraphDump.from_json(bad)


def test_stats_and_show_report_provenance(two_step: OptimizeResult) -> None:
    dump = two_step.egraph_dump
    stats = stats_report(dump)
    assert "provenance: recorded" in stats
    table = stats[stats.index("e-nodes added per iteration by rule"):].splitlines()
    rows = [line.split() for line in table[2:5]]
    assert rows == [["0", "5", "input", "graph", "5"], ["1", "3", "distribute", "3"], ["2", "1", "swap-products", "1"]]
    show = class_report(dump, "y")
    assert "iter" in show and "built by" in show
    lines = [line for line in show.splitlines() if "function-" in line]
    assert any(" 2  swap-products " in line for line in lines)
    assert any(" 1  distribute, swap-products@3 " in line for line in lines)
    assert any(" 0  input " in line for line in lines)


@pytest.mark.slow  # two optimize runs through the CLI
def test_optimize_provenance_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(_two_step_model(), str(src))
    out = tmp_path / "o.onnx"
    assert main(["optimize", str(src), "-o", str(out), "--provenance", "-q"]) == 2
    assert "give --dump-egraph PATH too" in capsys.readouterr().err
    dump = tmp_path / "eg.json"
    assert main(["optimize", str(src), "-o", str(out), "--dump-egraph", str(dump), "--provenance", "-q",
                 "--time-limit", "20"]) == 0
    capsys.readouterr()
    d = EGraphDump.read(dump)
    assert d.provenance and all(d.first_iteration(n) is not None for n in d.egraph.nodes)
    assert main(["optimize", str(src), "-o", str(out), "--dump-egraph", str(dump), "-q", "--time-limit", "20"]) == 0
    capsys.readouterr()
    assert not EGraphDump.read(dump).provenance  # opt-in
