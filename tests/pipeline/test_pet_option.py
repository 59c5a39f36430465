"""``optimize(pet=True)``: PET's corrected mutants join the e-graph beside the convolutions they compute again
(merged into their e-classes, with provenance), and the run's export and numeric check are unchanged."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import eqsat


def conv_relu_block() -> object:
    """Conv + Relu, then a dilated Conv: a ResNet-like conv and a CSRNet-like dilated one, batch 2."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32), f"w{i}")
             for i in (1, 2)]
    inits += [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), f"b{i}") for i in (1, 2)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["h1"]),
             helper.make_node("Conv", ["h1", "w2", "b2"], ["y"], pads=[2, 2, 2, 2], dilations=[2, 2])]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_pet_alternatives_join_the_egraph_and_the_run_stays_checked(tmp_path: Path) -> None:
    said: list[str] = []
    dump = tmp_path / "egraph.json"
    res = eqsat.optimize(conv_relu_block(), pet=True, time_limit=20, cache=False, progress=said.append,
                         dump_egraph=str(dump), provenance=True, iter_limit=2)
    assert any(line.startswith("pet: ") and "corrected mutants of 2 convolutions" in line for line in said), said
    assert res.cost_after <= res.cost_before
    nodes = json.loads(dump.read_text())["nodes"].values()
    pet_classes = {n["eclass"] for n in nodes if any(r.startswith("pet:") for r in n["rules"])}
    conv_classes = {n["eclass"] for n in nodes if n["op"] == "conv2d" and n["in_input"]}
    assert conv_classes and conv_classes <= pet_classes  # each convolution's e-class holds a corrected mutant
    names = {r for n in nodes for r in n["rules"] if r.startswith("pet:")}
    assert "pet:phases_to_batch(2) > conv2d[undilated] > batch_to_phases(2)" in names
    assert "pet:batch_to_width(2) > conv2d > width_to_batch(2)" in names


def test_a_chains_corrected_mutant_joins_the_second_convolutions_eclass(tmp_path: Path) -> None:
    """Two 3x3 convolutions (a ReLU between) on 16-wide images: one fold around both, its two-column seam
    corrected, computes the second one's tensor from the first one's input."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32), f"w{i}")
             for i in (1, 2)]
    inits += [numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), f"b{i}") for i in (1, 2)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["h1"]),
             helper.make_node("Conv", ["h1", "w2", "b2"], ["y"], pads=[1, 1, 1, 1])]
    shape = [2, 4, 8, 16]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    dump = tmp_path / "egraph.json"
    res = eqsat.optimize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), pet=True,
                         time_limit=20, cache=False, dump_egraph=str(dump), provenance=True, iter_limit=2)
    assert res.numeric is not None and res.numeric.ok
    enodes = json.loads(dump.read_text())["nodes"]
    chain = "pet:batch_to_width(2) > conv2d+conv2d > width_to_batch(2)"
    chain_classes = {n["eclass"] for n in enodes.values() if chain in n["rules"]}
    w2 = {k for k, n in enodes.items() if n["op"] == "Weight" and n["params"]["name"] == "w2"}
    second = {n["eclass"] for n in enodes.values() if n["op"] == "conv2d" and n["in_input"] and w2 & set(n["children"])}
    assert len(second) == 1 and second <= chain_classes


def test_pet_is_off_by_default() -> None:
    from eqsat.pipeline import OptimizeOptions

    assert OptimizeOptions().pet is False


def test_the_report_and_egraph_stats_count_the_rewrites_found_and_chosen(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from eqsat.cli.app import main

    dump = tmp_path / "egraph.json"
    res = eqsat.optimize(conv_relu_block(), pet=True, time_limit=20, cache=False, dump_egraph=str(dump),
                         provenance=True, iter_limit=2)
    assert res.pet is not None and res.pet.found >= 2 and res.pet.convolutions == 2
    assert res.pet.corrections >= 1 and res.pet.correction_flops > 0
    assert all(name.startswith("pet:") for _, name, _ in res.pet.chosen)
    assert "partially equivalent" in res.summary() and res.to_dict()["pet"]["found"] == res.pet.found
    assert res.egraph_dump is not None and dict(res.egraph_dump.pet) == dataclasses.asdict(res.pet)  # one report
    assert main(["egraph", "stats", str(dump)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("partially equivalent"))
    assert f"{res.pet.found} corrected mutants of 2 convolutions" in row and "e-nodes built by them" in row
    off = eqsat.optimize(conv_relu_block(), time_limit=20, cache=False, iter_limit=1)
    assert off.pet is None and "partially equivalent" not in off.summary()



def test_rules_pet_on_the_command_line_is_pet_on(tmp_path: Path) -> None:
    import onnx

    from eqsat.cli.app import main

    src, report = tmp_path / "m.onnx", tmp_path / "report.json"
    onnx.save(conv_relu_block(), src)
    assert main(["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--rules", "pet", "--no-cache",
                 "--time-limit", "20", "--report-json", str(report), "-q"]) == 0
    assert json.loads(report.read_text())["pet"]["convolutions"] == 2
