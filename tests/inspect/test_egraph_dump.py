"""E-graph dumps (``eqsat.inspect.dump``) and the ``eqsat egraph`` commands (``eqsat.cli.egraph``)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from eqsat import models, onnx_io
from eqsat.cli.app import main
from eqsat.engine.egraph import EGraph
from eqsat.engine.limits import Limits
from eqsat.engine.readback import tensors_by_class
from eqsat.engine.saturation import saturate
from eqsat.extract import load_egraph, validate_selection
from eqsat.extract.egraph_json import parse_egraph
from eqsat.inspect.dump import FORMAT, VERSION, DumpError, EGraphDump, build_dump
from eqsat.pipeline import OptimizeResult, default_rules, optimize
from eqsat.pipeline.check import check_equal
from eqsat.testing.onnx_builders import make_model

#: the module fixture optimizes two models for every test here: one worker runs them all
pytestmark = pytest.mark.xdist_group("egraph_dump")


def _crafted() -> onnx.ModelProto:
    """Three matmuls of one input (a sibling merge the engine adds as an alternative), an opaque Hardmax, a
    three-way Concat (a binary chain in the e-graph), a Relu; outputs y and the intermediate m1."""
    rng = np.random.default_rng(0)
    ws = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{k}") for k in range(3)]
    nodes = [helper.make_node("MatMul", ["x", f"w{k}"], [f"m{k}"]) for k in range(3)]
    nodes += [helper.make_node("Hardmax", ["m0"], ["h"], axis=-1),
              helper.make_node("Concat", ["h", "m1", "m2"], ["cat"], axis=1),
              helper.make_node("Relu", ["cat"], ["y"])]
    return make_model(nodes, [("x", [4, 8])], [("y", [4, 24]), ("m1", [4, 8])], ws, name="crafted")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, OptimizeResult]]:
    """Each small model saved, and optimized once with its dump kept (the object only); the crafted one with
    provenance."""
    root = tmp_path_factory.mktemp("dumps")
    out = {}
    for name, model in (("two_matmul", models.two_matmul_shared_input(batch=8, hidden=16)), ("crafted", _crafted())):
        path = root / f"{name}.onnx"
        onnx.save(model, str(path))
        res = optimize(str(path), time_limit=20, dump_egraph=True, provenance=name == "crafted")
        assert res.egraph_dump is not None
        out[name] = (path, res)
    return out


def _dump_file(runs: dict[str, tuple[Path, OptimizeResult]], name: str, tmp_path: Path) -> tuple[Path, Path]:
    model, res = runs[name]
    assert res.egraph_dump is not None
    return model, res.egraph_dump.write(tmp_path / f"{name}.json")


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("eqsat: error: ") and "\n" not in err, err
    return err


# -- the format ----------------------------------------------------------------------------------------------


def test_round_trip_is_exact(runs: dict[str, Any], tmp_path: Path) -> None:
    for _, res in runs.values():
        dump = res.egraph_dump
        assert EGraphDump.from_json(dump.to_json()) == dump
        assert EGraphDump.from_json(json.loads(json.dumps(dump.to_json()))) == dump
        assert EGraphDump.loads(dump.dumps()) == dump
        path = dump.write(tmp_path / "new" / "deeper" / "eg.json")  # missing folders are created
        assert EGraphDump.read(path) == dump
        assert EGraphDump.read(path).dumps() == path.read_text()  # the same text again
        assert not list(tmp_path.rglob("*.tmp"))


def test_the_file_is_extraction_gym_json_with_an_eqsat_block(runs: dict[str, Any], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _, path = _dump_file(runs, "crafted", tmp_path)
    res = runs["crafted"][1]
    data = json.loads(path.read_text())
    assert data["eqsat"]["format"] == FORMAT and data["eqsat"]["version"] == VERSION
    assert data["eqsat"]["extraction"]["status"] == res.solver_status
    assert [it["enodes"] for it in data["eqsat"]["saturation"]["iterations"]] == [it.enodes for it in res.iterations]
    eg = parse_egraph(data)  # the extractors' own reader
    dump = res.egraph_dump
    assert eg.num_nodes == len(dump.egraph.nodes) and eg.num_classes == len(dump.egraph.classes)
    assert eg.root_classes == dump.egraph.roots
    for n in dump.egraph.nodes:
        assert eg.op_of(n.id) == n.op and eg.class_of(n.id) == n.eclass and eg.cost_of(n.id) == n.cost
        assert set(eg.child_classes(n.id)) == set(n.children)
    # eqsat extract reads it and finds the pipeline's extraction cost: the optimum, unless the pipeline wrote a
    # graph found earlier that is cheaper as written than the optimum's (status "start", with a note saying so)
    sel = tmp_path / "sel.json"
    assert main(["extract", str(path), "--out", str(sel)]) == 0
    capsys.readouterr()
    got = json.loads(sel.read_text())
    assert got["status"] == "optimal" and res.solver_status in ("optimal", "start")
    if res.solver_status == "optimal":
        assert got["cost"] == pytest.approx(res.extraction_cost, rel=1e-9, abs=1e-12)
    else:
        assert got["cost"] <= res.extraction_cost and any("found at" in n for n in res.cost_notes)


def test_chosen_nodes_are_the_pipelines_selection(runs: dict[str, Any]) -> None:
    for model, res in runs.values():
        dump = res.egraph_dump
        assert dump.extraction is not None and dump.extraction.status == res.solver_status
        selection = dump.selection
        assert len(selection) == len(dump.chosen)  # one chosen node per class
        assert validate_selection(load_egraph(dump.to_json()), selection) == pytest.approx(res.extraction_cost)
        graph = onnx_io.load_model(onnx.load(str(model)))
        _, written = dump.to_graph(selection, graph)
        assert not res.kept_original and written.nodes == res.graph.nodes  # the graph the pipeline wrote


def test_in_input_marks_the_input_graphs_terms(runs: dict[str, Any]) -> None:
    graph = onnx_io.load_model(_crafted())
    dump = runs["crafted"][1].egraph_dump
    # by the graph: 4 leaves, 3 matmuls, the opaque node with its input list (TNil, TCons), 2 concat links, relu
    assert len(dump.input_nodes) == 4 + 3 + 3 + 2 + 1
    marked = [n for n in dump.egraph.nodes if n.id in dump.input_nodes]
    ops = sorted(n.op for n in marked)
    assert ops == sorted(["Input", "Weight", "Weight", "Weight", "matmul", "matmul", "matmul", "opaque", "TNil",
                          "TCons", "concat", "concat", "relu"])
    # each input node computes its tensor's class
    for n in graph.nodes:
        cls = dump.class_of_tensor(n.output)
        assert any(m.id in dump.input_nodes and m.op == n.op for m in dump.egraph.members(cls)), n
    opaque = next(n for n in dump.egraph.nodes if n.op == "opaque")
    assert dump.onnx_ops == {opaque.id: "Hardmax"} and dump.label(opaque) == "opaque:Hardmax"
    assert dump.egraph.eclass(opaque.children[0]).type == "TList"


def test_in_input_at_iteration_zero_leaves_out_only_the_sibling_merge() -> None:
    """With no iterations the e-graph is the input graph plus the n-way sibling merge compile_graph offers."""
    graph = onnx_io.load_model(_crafted())
    sat = saturate(graph, default_rules(), Limits(iter_limit=0, time_limit=20))
    dump = build_dump(sat, graph, {})
    added = sorted(n.op for n in dump.egraph.nodes if n.id not in dump.input_nodes)
    assert added == ["concat", "concat", "matmul", "split", "split", "split"]  # weights stacked, one matmul, splits
    plain = onnx_io.load_model(models.two_matmul_shared_input(batch=8, hidden=16))  # two siblings: no merge
    sat = saturate(plain, default_rules(), Limits(iter_limit=0, time_limit=20))
    dump = build_dump(sat, plain, {})
    assert dump.input_nodes == {n.id for n in dump.egraph.nodes}


def test_tensor_names_are_found_in_their_classes(runs: dict[str, Any]) -> None:
    graph = onnx_io.load_model(_crafted())
    dump = runs["crafted"][1].egraph_dump
    names = [i.name for i in graph.inputs] + list(graph.weights) + [n.output for n in graph.nodes]
    assert sorted(t for ts in dump.tensors.values() for t in ts) == sorted(names)
    members = dump.egraph.members
    for i in graph.inputs:
        assert any(n.op == "Input" and n.p == {"name": i.name} for n in members(dump.class_of_tensor(i.name)))
    for w in graph.weights:
        assert any(n.op == "Weight" and n.p == {"name": w} for n in members(dump.class_of_tensor(w)))
    for out, root in zip(graph.outputs, dump.egraph.roots, strict=True):  # the outputs are the roots, in order
        assert dump.class_of_tensor(out) == root
    assert dump.egraph.shape(dump.class_of_tensor("cat")) == (4, 24)
    # the engine's own record (egglog's let names) agrees with the walk
    sat = saturate(graph, default_rules(), Limits(iter_limit=2, time_limit=20))
    walked = {c: list(ts) for c, ts in build_dump(sat, graph, {}).tensors.items()}
    assert tensors_by_class(sat) == walked


def test_the_dump_of_another_model_is_refused() -> None:
    graph = onnx_io.load_model(_crafted())
    sat = saturate(graph, [], Limits(iter_limit=1, time_limit=20))
    dump = build_dump(sat, graph, {})
    dump.check_input_graph(graph)
    other = onnx_io.load_model(models.two_matmul_shared_input(batch=8, hidden=16))
    with pytest.raises(DumpError, match="not the model this dump was made from"):
        dump.check_input_graph(other)


def test_reading_refuses_what_is_not_a_dump() -> None:
    good = EGraphDump("m", "analytic", EGraph((), (), ())).to_json()
    with pytest.raises(DumpError, match="no 'eqsat' block"):
        EGraphDump.from_json({k: v for k, v in good.items() if k != "eqsat"})
    with pytest.raises(DumpError, match="newer than this eqsat reads"):
        EGraphDump.from_json({**good, "eqsat": {**good["eqsat"], "version": VERSION + 1}})
    with pytest.raises(DumpError, match="malformed e-graph dump: missing field 'nodes'"):
        EGraphDump.from_json({"eqsat": good["eqsat"]})
    with pytest.raises(DumpError, match="not JSON"):
        EGraphDump.loads("{")


def test_with_extraction_replaces_the_choice(runs: dict[str, Any]) -> None:
    dump = runs["two_matmul"][1].egraph_dump
    none = dump.with_extraction({}, None)
    assert not none.selection and none.extraction is None
    again = none.with_extraction(dump.selection, dump.extraction)
    assert again == dump
    assert dataclasses.replace(dump, source="x") != dump


# -- the commands ------------------------------------------------------------------------------------------------


def test_optimize_dump_egraph_writes_the_dump_after_extraction(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(models.two_matmul_shared_input(batch=8, hidden=16), str(src))
    dump = tmp_path / "new" / "eg.json"
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--dump-egraph", str(dump), "-q",
                 "--time-limit", "20"]) == 0
    assert f"wrote e-graph {dump}" in capsys.readouterr().out
    d = EGraphDump.read(dump)
    assert d.source == str(src) and d.cost_model == "analytic" and d.selection
    assert d.saturation is not None and d.saturation.rules == len(default_rules())
    assert dict(d.saturation.limits)["iter_limit"] == 10


def test_stats(runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, path = _dump_file(runs, "crafted", tmp_path)
    assert main(["egraph", "stats", str(path)]) == 0
    out = capsys.readouterr().out
    dump = runs["crafted"][1].egraph_dump
    for text in (f"({FORMAT} v{VERSION})", "from the input graph", "growth per iteration", "operators (e-nodes)",
                 "opaque:Hardmax", "largest e-classes", "what the extraction changed", "chosen, not in the input",
                 "in the input, not chosen", f"cost {dump.extraction.cost:.6g} ms"):
        assert text in out, text
    assert "TCons" not in out  # list plumbing is not an operator
    rows = [line.split()[:3] for line in out.splitlines()]
    for it in runs["crafted"][1].iterations:  # a row per iteration: iteration, e-nodes, e-classes
        assert [str(it.iteration), str(it.enodes), str(it.eclasses)] in rows


def test_show_by_class_tensor_and_node(runs: dict[str, Any], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _, path = _dump_file(runs, "crafted", tmp_path)
    dump = runs["crafted"][1].egraph_dump
    cls = dump.class_of_tensor("m1")
    assert main(["egraph", "show", str(path), "m1"]) == 0
    by_tensor = capsys.readouterr().out
    assert main(["egraph", "show", str(path), cls]) == 0
    assert capsys.readouterr().out == by_tensor
    assert f"e-class {cls}: tensor [4, 8]; holds m1; a root" in by_tensor
    assert all(m.id in by_tensor for m in dump.egraph.members(cls))
    assert "(x)" in by_tensor and "(w1)" in by_tensor  # children by class id and tensor name
    chosen = [line for line in by_tensor.splitlines() if line.strip().startswith("*")]
    assert len(chosen) == 1 and dump.selection[cls] in chosen[0]
    assert "input" in by_tensor and "added" in by_tensor
    # the opaque node's class shows its input list by tensor name
    h = dump.class_of_tensor("h")
    assert main(["egraph", "show", str(path), h]) == 0
    out = capsys.readouterr().out
    assert "opaque:Hardmax" in out and f"[{dump.class_of_tensor('m0')} (m0)]" in out
    node = dump.egraph.members(h)[0].id
    assert main(["egraph", "show", str(path), node]) == 0
    assert capsys.readouterr().out == out


def test_export_own_and_greedy_selections(runs: dict[str, Any], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("two_matmul", "crafted"):
        model, path = _dump_file(runs, name, tmp_path)
        original = onnx.load(str(model))
        own = tmp_path / name / "own.onnx"  # missing folders are created
        assert main(["egraph", "export", str(path), "--model", str(model), "-o", str(own)]) == 0
        out = capsys.readouterr().out
        assert "numeric check  ok" in out and f"wrote {own}" in out
        assert check_equal(original, onnx.load(str(own))).ok
        # the dump's own choice is the model the pipeline wrote
        assert onnx.load(str(own)).SerializeToString() == runs[name][1].model.SerializeToString()
        sel = tmp_path / f"{name}.greedy.json"
        assert main(["extract", str(path), "--solver", "greedy", "--out", str(sel)]) == 0
        capsys.readouterr()
        greedy = tmp_path / f"{name}.greedy.onnx"
        assert main(["egraph", "export", str(path), "--model", str(model), "--selection", str(sel),
                     "-o", str(greedy)]) == 0
        out = capsys.readouterr().out
        assert f"{json.loads(sel.read_text())['cost']:.6g} ms under the dump's costs" in out
        assert check_equal(original, onnx.load(str(greedy))).ok
        # a bare {class: node} object works too
        bare = tmp_path / "bare.json"
        bare.write_text(json.dumps(json.loads(sel.read_text())["selection"]))
        assert main(["egraph", "export", str(path), "--model", str(model), "--selection", str(bare),
                     "-o", str(tmp_path / "bare.onnx")]) == 0
        capsys.readouterr()


def test_inspect_dispatches_on_the_file_type(runs: dict[str, Any], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    model, path = _dump_file(runs, "crafted", tmp_path)
    assert main(["inspect", str(path)]) == 0
    via_inspect = capsys.readouterr().out
    assert main(["egraph", "stats", str(path)]) == 0
    assert capsys.readouterr().out == via_inspect
    # plain extraction-gym JSON (no eqsat block, any file name): sizes and operators only
    data = json.loads(path.read_text())
    del data["eqsat"]
    plain = tmp_path / "plain.egraph"
    plain.write_text(json.dumps(data))
    assert main(["inspect", str(plain)]) == 0
    out = capsys.readouterr().out
    assert "extraction-gym JSON without eqsat's block" in out and f"{len(data['nodes'])} e-nodes" in out
    assert "matmul" in out
    assert main(["egraph", "stats", str(plain)]) == 0
    assert capsys.readouterr().out == out
    # an ONNX model is still described as one
    assert main(["inspect", str(model)]) == 0
    assert "Hardmax" in capsys.readouterr().out


def test_errors_are_one_line_with_status_2(runs: dict[str, Any], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    model, path = _dump_file(runs, "crafted", tmp_path)
    out = tmp_path / "x.onnx"
    assert main(["egraph", "show", str(path), "no-such-thing"]) == 2
    assert "no e-class, tensor or e-node named 'no-such-thing'" in _error_line(capsys)
    assert main(["egraph", "stats", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in _error_line(capsys)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["egraph", "stats", str(bad)]) == 2
    assert "not JSON" in _error_line(capsys)
    assert main(["inspect", str(bad)]) == 2
    _error_line(capsys)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    assert main(["inspect", str(other)]) == 2
    assert "neither an eqsat e-graph dump nor extraction-gym JSON" in _error_line(capsys)
    newer = tmp_path / "newer.json"
    data = json.loads(path.read_text())
    data["eqsat"]["version"] = VERSION + 1
    newer.write_text(json.dumps(data))
    assert main(["egraph", "show", str(newer), "m1"]) == 2
    assert "newer than this eqsat reads" in _error_line(capsys)
    # a selection that does not fit the dump
    sel = tmp_path / "sel.json"
    sel.write_text(json.dumps({"selection": {"T-nope": "n"}}))
    assert main(["egraph", "export", str(path), "--model", str(model), "--selection", str(sel), "-o", str(out)]) == 2
    assert "does not fit the dump" in _error_line(capsys)
    dump = runs["crafted"][1].egraph_dump
    root = dump.egraph.roots[0]
    sel.write_text(json.dumps({"selection": {root: dump.selection[root]}}))  # children not selected
    assert main(["egraph", "export", str(path), "--model", str(model), "--selection", str(sel), "-o", str(out)]) == 2
    assert "which is not selected" in _error_line(capsys)
    sel.write_text("[1, 2]")
    assert main(["egraph", "export", str(path), "--model", str(model), "--selection", str(sel), "-o", str(out)]) == 2
    assert "expected a JSON object" in _error_line(capsys)
    # the wrong model
    wrong, _ = runs["two_matmul"]
    assert main(["egraph", "export", str(path), "--model", str(wrong), "-o", str(out)]) == 2
    assert "not the model this dump was made from" in _error_line(capsys)
    # a dump without an extraction needs --selection
    bare = dump.with_extraction({}, None).write(tmp_path / "bare.json")
    assert main(["egraph", "export", str(bare), "--model", str(model), "-o", str(out)]) == 2
    assert "records no extraction" in _error_line(capsys)
    # export needs an eqsat dump, not plain extraction-gym JSON
    del data["eqsat"]
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(data))
    assert main(["egraph", "export", str(plain), "--model", str(model), "-o", str(out)]) == 2
    assert "no 'eqsat' block" in _error_line(capsys)
    assert not out.exists()


# -- render and view ---------------------------------------------------------------------------------------------

_QUOTED = r'"(?:[^"\\]|\\.)*"'


def _read_dot(text: str) -> dict[str, Any]:
    """A small reader for the DOT ``render`` writes: braces balance outside quoted strings, every quoted string
    closes, every edge endpoint is a declared node and every ``lhead`` a declared cluster. Returns the clusters
    (name -> node ids in it), the node statements (id -> attribute text) and the edges (tail, head, attributes)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "{}":
            depth += 1 if ch == "{" else -1
            assert depth >= 0, "a closing brace without an opening one"
    assert depth == 0 and not in_string, "unbalanced braces or an unclosed string"
    assert text.startswith("digraph egraph {")
    clusters: dict[str, list[str]] = {}
    nodes: dict[str, str] = {}
    edges: list[tuple[str, str, str]] = []
    current = None
    for line in text.splitlines()[1:]:
        if m := re.fullmatch(rf"\s*subgraph ({_QUOTED}) {{", line):
            current = json.loads(m.group(1))
            clusters[current] = []
        elif re.fullmatch(r"\s*}", line):
            current = None
        elif m := re.fullmatch(rf"\s*({_QUOTED}) -> ({_QUOTED})(?: \[(.*)\])?;", line):
            edges.append((json.loads(m.group(1)), json.loads(m.group(2)), m.group(3) or ""))
        elif m := re.fullmatch(rf"\s*({_QUOTED}) \[(.*)\];", line):
            nid = json.loads(m.group(1))
            assert nid not in nodes, f"node {nid} declared twice"
            nodes[nid] = m.group(2)
            if current is not None:
                clusters[current].append(nid)
    for tail, head, attrs in edges:
        assert tail in nodes and head in nodes, (tail, head)
        for lhead in re.findall(rf"lhead=({_QUOTED})", attrs):
            assert json.loads(lhead) in clusters and head in clusters[json.loads(lhead)], (head, lhead)
    return {"clusters": clusters, "nodes": nodes, "edges": edges}


def _drawn_classes(dot: dict[str, Any]) -> set[str]:
    return {name.removeprefix("cluster_") for name in dot["clusters"]}


def test_render_dot_draws_classes_as_clusters_and_marks_the_choice(runs: dict[str, Any], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _, path = _dump_file(runs, "crafted", tmp_path)
    dump = runs["crafted"][1].egraph_dump
    out = tmp_path / "new" / "eg.dot"
    assert main(["egraph", "render", str(path), "-o", str(out), "--max-nodes", "1000"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    dot = _read_dot(out.read_text())
    drawn = [n for n in dump.egraph.nodes if n.op not in ("TNil", "TCons")]
    assert _drawn_classes(dot) == {n.eclass for n in drawn}  # list classes are plumbing, not drawn
    assert {k.removeprefix("n:") for k in dot["nodes"] if k.startswith("n:")} == {n.id for n in drawn}
    for n in drawn:
        attrs = dot["nodes"]["n:" + n.id]
        assert ("filled" in attrs) == (n.id in dump.chosen), n.id  # the extraction's choice is filled
        assert ("peripheries=2" in attrs) == (n.id in dump.input_nodes), n.id  # input terms have a double border
        assert f"n:{n.id}" in dot["clusters"][f"cluster_{n.eclass}"]
    # every child e-class is reached by an edge; the opaque node points at its input list's items
    opaque = next(n for n in drawn if n.op == "opaque")
    heads = {h for t, h, _ in dot["edges"] if t == f"n:{opaque.id}"}
    assert {dot_cls for dot_cls, ids in dot["clusters"].items() if heads & set(ids)} == \
        {f"cluster_{dump.class_of_tensor('m0')}"}
    assert "it 0: sibling-merge" in out.read_text() and "it 1: " in out.read_text()  # provenance in labels


def test_render_around_keeps_the_classes_within_depth(runs: dict[str, Any], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _, path = _dump_file(runs, "crafted", tmp_path)
    dump = runs["crafted"][1].egraph_dump
    start = dump.class_of_tensor("m1")

    def near(cls: str) -> set[str]:
        eg = dump.egraph
        out = {c for n in eg.members(cls) for c in n.children} | {p.eclass for p in eg.parents(cls)}
        return {c for c in out if eg.eclass(c).type == "T"}

    expected = {0: {start}, 1: {start} | near(start)}
    expected[2] = expected[1] | {c for k in expected[1] for c in near(k)}
    for depth, classes in expected.items():
        out = tmp_path / f"around{depth}.dot"
        assert main(["egraph", "render", str(path), "-o", str(out), "--around", "m1", "--depth", str(depth),
                     "--max-nodes", "2000"]) == 0  # depth 2 holds 307 e-nodes
        capsys.readouterr()
        dot = _read_dot(out.read_text())
        assert _drawn_classes(dot) == classes, depth
        # classes a drawn node uses but the drawing leaves out are stubs with dashed edges
        stubs = {k for k in dot["nodes"] if k.startswith("x:")}
        assert all("dashed" in a for t, h, a in dot["edges"] if h in stubs)
    assert len(expected[1]) < len(expected[2]) < len({n.eclass for n in dump.egraph.nodes})
    # by class id, the same drawing
    assert main(["egraph", "render", str(path), "-o", str(tmp_path / "c.dot"), "--around", start, "--depth", "1"]) == 0
    capsys.readouterr()
    assert (tmp_path / "c.dot").read_text() != "" and \
        _drawn_classes(_read_dot((tmp_path / "c.dot").read_text())) == expected[1]


def test_render_chosen_only_and_the_size_limit(runs: dict[str, Any], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    _, path = _dump_file(runs, "crafted", tmp_path)
    dump = runs["crafted"][1].egraph_dump
    out = tmp_path / "chosen.dot"
    assert main(["egraph", "render", str(path), "-o", str(out), "--chosen-only"]) == 0
    capsys.readouterr()
    dot = _read_dot(out.read_text())
    chosen = {n.id for n in dump.egraph.nodes if n.id in dump.chosen and n.op not in ("TNil", "TCons")}
    assert {k.removeprefix("n:") for k in dot["nodes"] if k.startswith("n:")} == chosen
    assert all("filled" in a for k, a in dot["nodes"].items() if k.startswith("n:"))
    # too many e-nodes without --around: refused with the way out
    assert main(["egraph", "render", str(path), "-o", str(out), "--max-nodes", "5"]) == 2
    err = _error_line(capsys)
    assert "more than --max-nodes 5" in err and "--around" in err and "--chosen-only" in err
    assert main(["egraph", "render", str(path), "-o", str(out), "--around", "m1", "--max-nodes", "2"]) == 2
    assert "lower --depth" in _error_line(capsys)
    assert main(["egraph", "render", str(path), "-o", str(tmp_path / "x.gif")]) == 2
    assert ".dot" in _error_line(capsys)
    assert main(["egraph", "render", str(path), "-o", str(out), "--around", "nope"]) == 2
    assert "no e-class, tensor or e-node named 'nope'" in _error_line(capsys)
    bare = dump.with_extraction({}, None).write(tmp_path / "bare.json")
    assert main(["egraph", "render", str(bare), "-o", str(out), "--chosen-only"]) == 2
    assert "records no extraction" in _error_line(capsys)


def test_render_svg_without_graphviz_writes_the_dot_and_says_how_to_install(
        runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    _, path = _dump_file(runs, "two_matmul", tmp_path)
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    out = tmp_path / "eg.svg"
    assert main(["egraph", "render", str(path), "-o", str(out)]) == 2
    err = _error_line(capsys)
    assert "apt install graphviz" in err and "eg.dot" in err
    assert not out.exists()
    _read_dot((tmp_path / "eg.dot").read_text())


@pytest.mark.skipif(__import__("shutil").which("dot") is None,
                    reason="Graphviz's dot is not installed (apt install graphviz): the SVG branch is not exercised")
def test_render_svg_with_graphviz(runs: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import xml.etree.ElementTree as ET

    _, path = _dump_file(runs, "crafted", tmp_path)
    dump = runs["crafted"][1].egraph_dump
    out = tmp_path / "eg.svg"
    assert main(["egraph", "render", str(path), "-o", str(out), "--around", "m1"]) == 0
    capsys.readouterr()
    root = ET.fromstring(out.read_text())  # well-formed SVG
    titles = {t.text for t in root.iter("{http://www.w3.org/2000/svg}title")}
    assert f"cluster_{dump.class_of_tensor('m1')}" in titles


def _module_script(page: str) -> str:
    m = re.search(r'<script type="module">\n(.*)</script>', page, re.S)
    assert m
    return m.group(1)


def test_view_writes_one_offline_html_file_with_the_dump(runs: dict[str, Any], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _, path = _dump_file(runs, "crafted", tmp_path)
    dump = runs["crafted"][1].egraph_dump
    out = tmp_path / "new" / "eg.html"
    assert main(["egraph", "view", str(path), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text()
    # nothing is loaded from anywhere: no src/href attributes at all, no import of a URL
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=", page, re.I)
    assert not re.search(r"""\bimport\s*(\(\s*)?["']https?:""", page)
    assert "esm.sh" not in page
    module = _module_script(page)
    assert "</script" not in module.lower() and "\nexport {" not in module
    # the data: egraph-serialize JSON of the drawn nodes, the chosen ones not greyed out ("subsumed")
    m = re.search(r'<script type="application/json" id="egraph-data">(.*?)</script>', page, re.S)
    data = json.loads(m.group(1))
    drawn = {n.id: n for n in dump.egraph.nodes if n.op not in ("TNil", "TCons")}
    assert set(data["nodes"]) == set(drawn)
    for nid, n in data["nodes"].items():
        assert n["subsumed"] == (nid not in dump.chosen) and n["eclass"] == drawn[nid].eclass
        assert all(k in data["nodes"] for k in n["children"])
    assert data["root_eclasses"] == list(dump.egraph.roots)
    assert data["class_data"][dump.class_of_tensor("m1")]["tensors"] == "m1"
    assert "chosen e-nodes" in page and "sibling-merge" in page  # the table, with provenance


@pytest.mark.skipif(__import__("shutil").which("node") is None, reason="node is not installed: the inlined "
                    "visualizer's JavaScript is not syntax-checked")
def test_view_module_is_valid_javascript(runs: dict[str, Any], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess

    _, path = _dump_file(runs, "two_matmul", tmp_path)
    assert main(["egraph", "view", str(path), "-o", str(tmp_path / "eg.html")]) == 0
    capsys.readouterr()
    script = tmp_path / "module.mjs"
    script.write_text(_module_script((tmp_path / "eg.html").read_text()))
    done = subprocess.run(["node", "--check", str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


_CHROMIUM = next((c for c in ("chromium", "chromium-browser", "google-chrome", "chromium-headless-shell")
                  if __import__("shutil").which(c)), None)


def _load_in_chromium(exe: str, url: str, wait: float = 60.0, probe: str = "null") -> tuple[int, list[str], Any]:
    """Open ``url`` in headless Chromium (DevTools protocol over --remote-debugging-pipe) until the visualizer
    has drawn nodes or ``wait`` seconds passed; return the React Flow nodes drawn, the errors logged and the
    value of the JavaScript expression ``probe`` once they are drawn (JSON-serializable)."""
    import os
    import select
    import subprocess
    import time

    to_chrome, from_chrome = os.pipe(), os.pipe()
    keep = (to_chrome[0], from_chrome[1])

    def fds() -> None:  # the protocol's pipes are the child's fds 3 (commands) and 4 (replies)
        high = [os.dup(fd) for fd in keep]
        os.dup2(high[0], 3)
        os.dup2(high[1], 4)

    proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                             "--window-size=1200,900"], preexec_fn=fds, pass_fds=(3, 4, *keep),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for fd in keep:
        os.close(fd)
    buf, msgs, ids = b"", [], iter(range(1, 10**6))

    def call(method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        nonlocal buf
        i = next(ids)
        msg = {"id": i, "method": method, "params": params or {}, **({"sessionId": session} if session else {})}
        os.write(to_chrome[1], json.dumps(msg).encode() + b"\0")
        end = time.monotonic() + 30
        while time.monotonic() < end:
            for m in msgs:
                if m.get("id") == i:
                    msgs.remove(m)
                    return m
            if select.select([from_chrome[0]], [], [], 0.2)[0]:
                chunk = os.read(from_chrome[0], 1 << 20)
                assert chunk, "Chromium closed the DevTools pipe"
                *done, buf = (buf + chunk).split(b"\0")
                msgs.extend(json.loads(x) for x in done)
        raise TimeoutError(method)

    try:
        target = call("Target.createTarget", {"url": "about:blank"})["result"]["targetId"]
        session = call("Target.attachToTarget", {"targetId": target, "flatten": True})["result"]["sessionId"]
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            call(method, session=session)
        call("Page.navigate", {"url": url}, session=session)
        drawn, end = 0, time.monotonic() + wait
        while not drawn and time.monotonic() < end:
            time.sleep(0.5)
            reply = call("Runtime.evaluate", {"expression": "document.querySelectorAll('.react-flow__node').length",
                                              "returnByValue": True}, session=session)
            drawn = int(reply["result"]["result"].get("value") or 0)
        time.sleep(0.5)  # the first view is set once the nodes are measured
        probed = call("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=session)
        errors = [json.dumps(m["params"])[:300] for m in msgs if m.get("method") == "Runtime.exceptionThrown"
                  or m.get("method") == "Runtime.consoleAPICalled" and m["params"]["type"] in ("error", "assert")
                  or m.get("method") == "Log.entryAdded" and m["params"]["entry"]["level"] == "error"]
        return drawn, errors, probed["result"]["result"].get("value")
    finally:
        proc.kill()
        proc.wait()
        os.close(to_chrome[1])
        os.close(from_chrome[0])


@pytest.mark.slow  # a cold Chromium start alone takes 3 to 25 s
@pytest.mark.skipif(_CHROMIUM is None, reason="no headless Chromium (chromium, chromium-browser, google-chrome or "
                    "chromium-headless-shell) is installed: the page is not loaded in a browser")
def test_view_loads_in_chromium_without_errors_and_draws_nodes(runs: dict[str, Any], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    _, path = _dump_file(runs, "crafted", tmp_path)
    out = tmp_path / "eg.html"
    assert main(["egraph", "view", str(path), "-o", str(out), "--around", "m1", "--depth", "1"]) == 0
    capsys.readouterr()
    chosen = next(n.id for n in runs["crafted"][1].egraph_dump.egraph.nodes if n.id in
                  runs["crafted"][1].egraph_dump.chosen and n.op == "matmul")
    probe = ("({view: window.eqsatView, transform: document.querySelector('.react-flow__viewport').style.transform, "
             "background: getComputedStyle(document.querySelector("
             f"'.react-flow__node[data-id=\"node-{chosen}\"] > div')).backgroundColor}})")
    drawn, errors, seen = _load_in_chromium(_CHROMIUM, out.resolve().as_uri(), probe=probe)
    assert not errors, errors
    assert drawn > 0
    # opened by eqsat's fit: readable (whole when that is readable, else the shorter side filling the window),
    # and the chosen matmul highlighted
    view = seen["view"]
    assert view is not None and (view["zoom"] >= 0.6 or view["zoom"] == pytest.approx(view["whole"]))
    shown = re.search(r"scale\(([\d.e+-]+)\)", seen["transform"])  # what React Flow applied
    assert shown and float(shown.group(1)) == pytest.approx(view["zoom"], rel=1e-4)
    assert seen["background"] == "rgb(255, 224, 138)"
