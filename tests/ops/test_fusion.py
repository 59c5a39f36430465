"""Fusion patterns: the pattern language (eqsat.ops.fusion) and its generic matcher (eqsat.onnx_io.collapse) on toy
fusions, and each fusion the registry declares collapsing one of its spellings into a model that computes what
the original does (onnxruntime)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from _onnx_checks import assert_same_outputs, ops_of
from onnx import TensorProto, helper

from eqsat import ops
from eqsat.onnx_io import load_model, random_feeds, run_onnxruntime, to_onnx
from eqsat.onnx_io.collapse import collapse_fusions
from eqsat.ops.fusion import (
    Const,
    ConstVar,
    Fusion,
    FusionMatch,
    Var,
    one_of,
    op,
    optional,
    product,
    required_op_types,
    root_op_types,
)
from eqsat.testing.onnx_builders import make_model

n = helper.make_node
X = Var("x")


def _relu_of_x(m: FusionMatch) -> tuple[str, list[str], list[str], dict]:
    return ("Relu", [m.tensor("x")], [m.output], {})


def _toy(pattern, check: Callable[[FusionMatch], bool] = lambda m: True, replacement=_relu_of_x) -> Fusion:
    return Fusion(name="toy", op="relu", pattern=pattern, replacement=replacement, check=check)


def _collapse(fusion: Fusion, nodes: list[onnx.NodeProto], consts: dict[str, float | np.ndarray],
              outputs: tuple[str, ...] = ("y",), add_const=None):
    arrays = {k: np.asarray(v, dtype=np.float32) if isinstance(v, float) else v for k, v in consts.items()}
    return collapse_fusions(nodes, arrays, set(outputs), lambda t: (2, 3), lambda t: True, add_const, [fusion])


# (x + 1) * 2, the Add's operands in either order
ADD_TIMES_TWO = _toy(op.Mul(op.Add(X, Const(1.0)), Const(2.0)))
ONE_TWO = {"one": 1.0, "two": 2.0}


def test_a_match_becomes_the_replacement_node_with_the_original_nodes_kept_for_a_fallback() -> None:
    nodes = [n("Tanh", ["a"], ["x"]), n("Add", ["x", "one"], ["s"]), n("Mul", ["s", "two"], ["y"], name="last")]
    out, collapsed = _collapse(ADD_TIMES_TWO, nodes, ONE_TWO)
    assert [(m.op_type, list(m.input), list(m.output)) for m in out] == [("Tanh", ["a"], ["x"]),
                                                                         ("Relu", ["x"], ["y"])]
    assert out[1].name == "last_collapsed"
    assert collapsed[id(out[1])].originals == nodes[1:]


def test_commutative_operands_match_in_either_order_and_others_do_not() -> None:
    nodes = [n("Add", ["one", "x"], ["s"]), n("Mul", ["two", "s"], ["y"])]
    assert [m.op_type for m in _collapse(ADD_TIMES_TWO, nodes, ONE_TWO)[0]] == ["Relu"]
    sub = _toy(op.Sub(X, Const(1.0)))  # x - 1 is not 1 - x
    assert [m.op_type for m in _collapse(sub, [n("Sub", ["one", "x"], ["y"])], ONE_TWO)[0]] == ["Sub"]
    assert [m.op_type for m in _collapse(sub, [n("Sub", ["x", "one"], ["y"])], ONE_TWO)[0]] == ["Relu"]


@pytest.mark.parametrize("how", ["read-by-another-node", "graph-output", "read-by-a-subgraph"])
def test_an_intermediate_read_outside_the_match_refuses_it(how: str) -> None:
    nodes = [n("Add", ["x", "one"], ["s"]), n("Mul", ["s", "two"], ["y"])]
    outputs = ("y", "s") if how == "graph-output" else ("y",)
    if how == "read-by-another-node":
        nodes.append(n("Neg", ["s"], ["z"]))
    elif how == "read-by-a-subgraph":  # an If whose branch reads s from around it
        branch = helper.make_graph([n("Identity", ["s"], ["b"])], "branch", [],
                                   [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])])
        nodes.append(n("If", ["cond"], ["z"], then_branch=branch, else_branch=branch))
    out, collapsed = _collapse(ADD_TIMES_TWO, nodes, ONE_TWO, outputs)
    assert not collapsed and out == nodes


def test_a_spelling_whose_intermediate_a_subgraph_reads_imports_node_by_node() -> None:
    # the collapse would remove the tensor the If's branch reads (da8769d's patterns.py did: a GraphError)
    branch = helper.make_graph([n("Identity", ["e"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 10])])
    nodes = [n("Relu", ["x0"], ["x"]), n("Div", ["x", "sqrt2"], ["d"]), n("Erf", ["d"], ["e"]),
             n("Add", ["e", "one"], ["a"]), n("Mul", ["x", "a"], ["m"]), n("Mul", ["m", "half"], ["y"]),
             n("If", ["c"], ["z"], then_branch=branch, else_branch=branch)]
    inits = {"sqrt2": _c(math.sqrt(2)), "one": _c(1.0), "half": _c(0.5)}
    model = make_model(nodes, [("x0", [3, 10]), ("c", [], TensorProto.BOOL)], [("y", [3, 10]), ("z", [3, 10])],
                       inits, opset=17)
    g = load_model(model)
    assert "gelu" not in ops_of(g) and "Erf" in g.meta["opaque_reasons"]
    assert_same_outputs(model, to_onnx(g))


def test_an_optional_node_is_taken_where_present() -> None:
    scaled = _toy(optional(op.Add(X, Const(1.0)), lambda t: op.Mul(t, ConstVar("scale"), name="scale")),
                  replacement=lambda m: ("Relu", [m.tensor("x")], [m.output],
                                         {} if m.node("scale") is None else {"scale": m.tensor("scale")}))
    nodes = [n("Add", ["x", "one"], ["s"]), n("Mul", ["g", "s"], ["y"])]
    out, _ = _collapse(scaled, nodes, {"one": 1.0, "g": np.ones(3, np.float32)})
    assert [m.op_type for m in out] == ["Relu"] and helper.get_attribute_value(out[0].attribute[0]) == b"g"
    # the Mul by an activation is no scale: the match ends before it
    out, _ = _collapse(scaled, nodes, {"one": 1.0})
    assert [(m.op_type, m.output[0]) for m in out] == [("Relu", "s"), ("Mul", "y")] and not out[0].attribute


@pytest.mark.parametrize("value,dtype,collapses", [(2.0, np.float32, True), (2.0001, np.float32, True),
                                                   (2.001, np.float32, False), (2, np.int64, False)])
def test_a_constant_must_be_close_to_its_value_and_of_its_kind(value: float, dtype: type, collapses: bool) -> None:
    nodes = [n("Add", ["x", "one"], ["s"]), n("Mul", ["s", "two"], ["y"])]
    out, _ = _collapse(ADD_TIMES_TWO, nodes, {"one": 1.0, "two": np.array(value, dtype)})
    assert ([m.op_type for m in out] == ["Relu"]) == collapses


@pytest.mark.parametrize("order", [(0, 1, 2), (0, 2, 1), (1, 2, 0), (2, 1, 0)])
@pytest.mark.parametrize("swap", [False, True])
def test_a_product_of_three_factors_matches_in_any_grouping(order: tuple[int, int, int], swap: bool) -> None:
    factors = ["x", "half", "e"]
    a, b, c = (factors[i] for i in order)
    inner = [a, b] if not swap else [b, a]
    nodes = [n("Exp", ["x"], ["e"]), n("Mul", inner, ["m"]), n("Mul", ["m", c] if not swap else [c, "m"], ["y"])]
    out, _ = _collapse(_toy(product(X, Const(0.5), op.Exp(X))), nodes, {"half": 0.5})
    assert [m.op_type for m in out] == ["Relu"]


def test_a_variable_used_twice_binds_one_tensor() -> None:
    square = _toy(op.Mul(X, X))
    assert [m.op_type for m in _collapse(square, [n("Mul", ["x", "x"], ["y"])], {})[0]] == ["Relu"]
    assert [m.op_type for m in _collapse(square, [n("Mul", ["x", "z"], ["y"])], {})[0]] == ["Mul"]


def test_a_pattern_object_used_twice_is_one_tensor_alternatives_too() -> None:
    either = one_of(op.Relu(X), op.Sigmoid(X))
    twice = _toy(op.Add(either, either))
    one = [n("Relu", ["x"], ["r"]), n("Add", ["r", "r"], ["y"])]
    assert [m.op_type for m in _collapse(twice, one, {})[0]] == ["Relu"]
    # two different tensors, though each matches one of the alternatives: no match (found in review)
    two = [n("Relu", ["x"], ["r"]), n("Sigmoid", ["x"], ["g"]), n("Add", ["r", "g"], ["y"])]
    assert [m.op_type for m in _collapse(twice, two, {})[0]] == ["Relu", "Sigmoid", "Add"]


def test_alternatives_the_check_and_the_replacement_decide() -> None:
    inverse = one_of(op.Reciprocal(X), op.Div(Const(1.0), X))
    nodes = [n("Div", ["one", "x"], ["y"])]
    assert [m.op_type for m in _collapse(_toy(inverse), nodes, {"one": 1.0})[0]] == ["Relu"]
    assert [m.op_type for m in _collapse(_toy(inverse, check=lambda m: False), nodes, {"one": 1.0})[0]] == ["Div"]

    def needs_a_const(m: FusionMatch):
        name = m.add_const(np.ones(3, np.float32), "unit")
        return None if name is None else ("Relu", [m.tensor("x"), name], [m.output], {})

    assert [m.op_type for m in _collapse(_toy(inverse, replacement=needs_a_const), nodes, {"one": 1.0})[0]] == ["Div"]
    added: dict[str, np.ndarray] = {}

    def add_const(array: np.ndarray, hint: str) -> str:
        added[hint] = array
        return hint

    out, _ = _collapse(_toy(inverse, replacement=needs_a_const), nodes, {"one": 1.0}, add_const=add_const)
    assert list(out[0].input) == ["x", "unit"] and list(added) == ["unit"]


def test_a_node_of_another_domain_or_with_other_inputs_does_not_match() -> None:
    nodes = [n("Add", ["x", "one"], ["s"], domain="com.example"), n("Mul", ["s", "two"], ["y"])]
    assert [m.op_type for m in _collapse(ADD_TIMES_TWO, nodes, ONE_TWO)[0]] == ["Add", "Mul"]
    mean = _toy(op.ReduceMean(X))
    nodes = [n("ReduceMean", ["x", "axes"], ["y"])]
    assert [m.op_type for m in _collapse(mean, nodes, {})[0]] == ["ReduceMean"]
    assert [m.op_type for m in _collapse(_toy(op.ReduceMean(X, other_inputs=True)), nodes, {})[0]] == ["Relu"]


def test_the_op_types_a_pattern_needs_and_ends_with() -> None:
    p = optional(op.Add(X, op.Exp(X)), lambda t: op.Mul(t, Const(2.0)))
    assert required_op_types(p) == {"Add", "Exp"} and root_op_types(p) == {"Add", "Mul"}


def test_every_fusion_becomes_an_operator_with_an_importer() -> None:
    assert {"gelu-erf", "gelu-tanh", "layernorm", "rmsnorm"} <= set(ops.FUSIONS)
    for fusion in ops.FUSIONS.values():
        assert fusion.op in ops.REGISTRY
        assert root_op_types(fusion.pattern), fusion.name  # matched from its last node


# -- the registry's fusions, one spelling of each: collapsed, and the same computation -------------------------

def _c(value: float) -> np.ndarray:
    return np.array(value, np.float32)


def _gelu_tanh() -> onnx.ModelProto:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * (x * x)))), grouped as (x * 0.5) * a, operands swapped."""
    nodes = [n("Relu", ["x0"], ["x"]), n("Mul", ["x", "x"], ["xx"]), n("Mul", ["xx", "x"], ["p"]),
             n("Mul", ["cubic", "p"], ["q"]), n("Add", ["q", "x"], ["s"]), n("Mul", ["scale", "s"], ["u"]),
             n("Tanh", ["u"], ["e"]), n("Add", ["one", "e"], ["a"]), n("Mul", ["half", "x"], ["h"]),
             n("Mul", ["a", "h"], ["y"])]
    inits = {"cubic": _c(0.044715), "scale": _c(math.sqrt(2 / math.pi)), "one": _c(1.0), "half": _c(0.5)}
    return make_model(nodes, [("x0", [3, 10])], [("y", [3, 10])], inits, opset=17)


def _gelu_erf() -> onnx.ModelProto:
    """0.5 * x * (1 + erf(x * (1 / sqrt 2))), grouped as x * (a * 0.5)."""
    nodes = [n("Mul", ["inv_sqrt2", "x"], ["d"]), n("Erf", ["d"], ["e"]), n("Add", ["e", "one"], ["a"]),
             n("Mul", ["half", "a"], ["m"]), n("Mul", ["m", "x"], ["y"])]
    inits = {"inv_sqrt2": _c(1 / math.sqrt(2)), "one": _c(1.0), "half": _c(0.5)}
    return make_model(nodes, [("x", [2, 3, 8])], [("y", [2, 3, 8])], inits, opset=13)


def _layernorm() -> onnx.ModelProto:
    """Opset 18 (axes an input), the square as Mul(d, d), a (1, 1, 8) scale on the left and a bias."""
    rng = np.random.default_rng(0)
    nodes = [n("ReduceMean", ["x", "axes"], ["m"]), n("Sub", ["x", "m"], ["d"]), n("Mul", ["d", "d"], ["sq"]),
             n("ReduceMean", ["sq", "axes"], ["v"]), n("Add", ["eps", "v"], ["ve"]), n("Sqrt", ["ve"], ["s"]),
             n("Div", ["d", "s"], ["z"]), n("Mul", ["gamma", "z"], ["zs"]), n("Add", ["zs", "beta"], ["y"])]
    inits = {"axes": np.array([-1], np.int64), "eps": _c(1e-5),
             "gamma": (1 + 0.1 * rng.standard_normal((1, 1, 8))).astype(np.float32),
             "beta": (0.1 * rng.standard_normal(8)).astype(np.float32)}
    return make_model(nodes, [("x", [2, 3, 8])], [("y", [2, 3, 8])], inits, opset=18)


def _rmsnorm() -> onnx.ModelProto:
    """x * Div(1, sqrt(mean(x^2) + eps)), a float32 Cast, and a (1, 8) scale."""
    nodes = [n("Pow", ["x", "two"], ["sq"]), n("ReduceMean", ["sq"], ["ms"], axes=[-1]),
             n("Add", ["ms", "eps"], ["mse"]), n("Sqrt", ["mse"], ["rt"]), n("Div", ["one", "rt"], ["inv"]),
             n("Mul", ["inv", "x"], ["nx"]), n("Cast", ["nx"], ["c"], to=TensorProto.FLOAT),
             n("Mul", ["c", "scale"], ["y"])]
    inits = {"two": np.array(2, np.int64), "eps": _c(1e-6), "one": _c(1.0),
             "scale": np.linspace(0.5, 1.5, 8, dtype=np.float32).reshape(1, 8)}
    return make_model(nodes, [("x", [2, 5, 8])], [("y", [2, 5, 8])], inits, opset=17)


SPELLINGS = {"gelu-tanh": (_gelu_tanh, ["relu", "gelu"]), "gelu-erf": (_gelu_erf, ["gelu"]),
             "layernorm": (_layernorm, ["layernorm"]), "rmsnorm": (_rmsnorm, ["rmsnorm"])}


def test_each_declared_fusion_has_a_spelling_here() -> None:
    assert set(SPELLINGS) == set(ops.FUSIONS)


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_a_fused_spelling_collapses_and_computes_what_the_original_does(name: str) -> None:
    build, expected = SPELLINGS[name]
    model = build()
    g = load_model(model)
    assert ops_of(g) == expected and g.meta["opaque_reasons"] == {}
    assert_same_outputs(model, to_onnx(g))  # onnxruntime: the original against the export of the import
    feeds = random_feeds(model, 1)  # and the registry's numpy references agree with onnxruntime too
    np.testing.assert_allclose(g.evaluate(feeds)[0], run_onnxruntime(model, feeds)[0], rtol=1e-4, atol=1e-5)
