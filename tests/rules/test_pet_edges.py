"""The rules that join PET's mutants where they meet (eqsat.rules.pet.edges): each holds on random tensors, only
inverse permutations cancel, and with them a run of dilated convolutions becomes one run of plain ones over
phase images in the e-graph, with one gather and one scatter, however long the run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from _onnx_checks import assert_rule_holds
from onnx import TensorProto, helper, numpy_helper

import eqsat
from eqsat.rules.pet.edges import _inverse, elementwise_rules, move_permutations, move_rules


def test_every_move_rule_holds_on_random_tensors() -> None:
    rules = {r.name: r for r in move_rules() if r not in elementwise_rules()}
    assert_rule_holds(rules.pop("pet-reshape-reshape"), [
        {"?x": (2, 3, 4), "?t": (6, 4), "?r": (3, 8)}, {"?x": (4, 1, 6, 6), "?t": (2, 2, 1, 6, 6), "?r": (2, 1, 12, 6)},
    ], {"?t", "?r"})
    assert rules  # a transpose pair per move and its inverse
    for rule in rules.values():
        lhs = rule.lhs[0]
        rank = len(lhs[lhs.index("[") + 1:lhs.index("]")].split())
        assert_rule_holds(rule, [{"?x": tuple(range(2, 2 + rank))}, {"?x": (1,) * (rank - 1) + (3,)}], set())


def test_only_inverse_permutations_cancel() -> None:
    perms = move_permutations()
    assert (0, 2, 3, 1, 4) in perms and (0, 3, 1, 2, 4) in perms
    assert _inverse((0, 2, 3, 1, 4), (0, 3, 1, 2, 4)) and not _inverse((0, 2, 3, 1, 4), (0, 2, 3, 1, 4))
    names = {r.name for r in move_rules()} - {r.name for r in elementwise_rules()}
    assert "pet-transpose-inverse-02314-03124" in names and "pet-transpose-inverse-02314-02314" not in names
    assert len(names) == 1 + sum(_inverse(p, q) for p in perms for q in perms)


def test_the_moves_pass_every_unary_element_wise_operator_both_ways() -> None:
    rules = {r.name: r for r in elementwise_rules()}
    assert {"pet-transpose-past-relu", "pet-reshape-past-relu", "pet-transpose-past-sigmoid"} <= set(rules)
    assert all(r.bidirectional and len(r.directions()) == 2 for r in rules.values())  # neither direction dropped
    assert set(rules) <= {r.name for r in move_rules()}
    for name, rule in rules.items():
        # a move's own permutations and shapes, as PET's folds write them
        binding = ({"?x": (2, 3, 4, 5, 6), "?p": (0, 2, 3, 1, 4)} if "transpose" in name
                   else {"?x": (4, 3, 5, 6), "?p": (2, 2, 3, 5, 6)})
        assert_rule_holds(rule, [binding], {"?p"})


def _dilated_run(convs: int) -> tuple[object, int]:
    rng = np.random.default_rng(3)
    inits, nodes, cur = [], [], "x"
    for i in range(1, convs + 1):
        inits += [numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"], pads=[2] * 4, dilations=[2, 2]),
                  helper.make_node("Relu", [f"c{i}"], [f"h{i}"])]
        cur = f"h{i}"
    shape = [1, 4, 8, 8]
    graph = helper.make_graph(nodes, "dilated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), convs


def test_a_run_of_three_dilated_convolutions_is_one_run_over_phase_images(tmp_path: Path) -> None:
    """Chains of two give the last convolution's e-class plain convolutions over phase images reading each other
    two deep; where consecutive mutants' scatter and gather cancel, all three are read in a row."""
    model, convs = _dilated_run(3)
    dump = tmp_path / "egraph.json"
    res = eqsat.optimize(model, pet=True, time_limit=30, cache=False, dump_egraph=str(dump), provenance=True,
                         iter_limit=8)
    assert res.numeric is not None and res.numeric.ok
    enodes = json.loads(dump.read_text())["nodes"]
    weight = {n["params"]["name"]: k for k, n in enodes.items() if n["op"] == "Weight"}

    def plain(i: int) -> set[str]:  # the e-classes of undilated convolutions with kernel w{i}, over phase images
        return {n["eclass"] for n in enodes.values() if n["op"] == "conv2d" and weight[f"w{i}"] in n["children"]
                and n["params"].get("dilations") in ([1, 1], (1, 1))}

    def reads(i: int) -> set[str]:  # the e-classes those convolutions read
        return {enodes[n["children"][0]]["eclass"] for n in enodes.values() if n["op"] == "conv2d"
                and weight[f"w{i}"] in n["children"] and n["params"].get("dilations") in ([1, 1], (1, 1))}

    assert plain(1) and plain(2) and plain(3)
    assert reads(3) & plain(2) and reads(2) & plain(1)  # w3's plain convolution reads w2's, which reads w1's
    # the three deep: some plain w3 convolution reads a plain w2 one that reads a plain w1 one
    deep = {n["eclass"] for n in enodes.values() if n["op"] == "conv2d" and weight["w2"] in n["children"]
            and enodes[n["children"][0]]["eclass"] in plain(1)}
    assert reads(3) & deep
    assert convs == 3
