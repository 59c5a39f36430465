"""Checks shared by the operator and rule tests: the IR operators of a graph, an exported model that computes what
the original does (both run in onnxruntime on the same random inputs), a rule on random tensors, and PET's
rewrites (each computes its tensor, in the IR and exported at several batches) and probes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from eqsat.ir.graph import Graph
from eqsat.onnx_io import random_feeds, run_onnxruntime


def ops_of(graph: Graph) -> list[str]:
    """The operators of an IR graph, in order."""
    return [n.op for n in graph.nodes]


def assert_same_outputs(original: onnx.ModelProto, exported: onnx.ModelProto, seed: int = 0,
                        tol: float = 1e-4) -> None:
    """``exported`` is a valid model whose outputs equal ``original``'s on seeded random inputs."""
    onnx.checker.check_model(exported, full_check=True)
    feeds = random_feeds(original, seed)
    ref, got = run_onnxruntime(original, feeds), run_onnxruntime(exported, feeds)
    assert len(ref) == len(got)
    for r, o in zip(ref, got, strict=True):
        assert r.shape == o.shape
        np.testing.assert_allclose(o, r, rtol=tol, atol=tol)


def assert_rule_holds(rule: Any, bindings: list[dict[str, Any]], params: set[str]) -> None:
    """Every direction of ``rule`` computes the same on each binding: its variables in ``params`` take the
    binding's values, the others random tensors of the binding's shapes (which its conditions must accept)."""
    from eqsat.ir.rule import check_condition, evaluate, parse

    rng = np.random.default_rng(0)
    for binding in bindings:
        env = {k: (rng.standard_normal(v) if k not in params else v) for k, v in binding.items()}
        assert all(check_condition(c, env) for c in rule.conditions), (rule.name, binding)
        for d in rule.directions():
            left, right = evaluate(parse(d.lhs[0]), env), evaluate(parse(d.rhs[0]), env)
            np.testing.assert_allclose(left, right, rtol=1e-9, atol=1e-9, err_msg=f"{d.name} {binding}")


def assert_rewrites_run_as_the_original(model: onnx.ModelProto, graph: Graph, rewrites: list[Any],
                                        image: tuple[int, ...], batches: tuple[int, ...] = (1, 2, 5)) -> None:
    """Each PET rewrite (``eqsat.rules.pet.PetRewrite`` of ``graph``, imported from ``model`` with a dynamic
    batch) written into the graph in place of the node it computes again, exported, and run in onnxruntime at
    each of ``batches`` (images of shape ``image``), gives the original model's output."""
    import onnxruntime as ort

    from eqsat.onnx_io import to_onnx

    providers = ["CPUExecutionProvider"]
    want = ort.InferenceSession(model.SerializeToString(), providers=providers)
    (name,) = [i.name for i in graph.inputs]
    for r in rewrites:
        nodes = [m for n in graph.nodes for m in (r.nodes if n.output == r.tensor else (n,))]
        written = to_onnx(Graph(graph.inputs, graph.weights, tuple(nodes), graph.outputs, meta=graph.meta).live())
        sess = ort.InferenceSession(written.SerializeToString(), providers=providers)
        for n in batches:
            x = {name: np.random.default_rng(n).standard_normal((n, *image)).astype(np.float32)}
            np.testing.assert_allclose(sess.run(None, x)[0], want.run(None, x)[0], rtol=1e-4, atol=1e-4,
                                       err_msg=f"{r.name} at batch {n}")


def assert_rewrites_compute_their_tensors(graph: Graph, rewrites: list[Any], feeds: dict[str, np.ndarray]) -> None:
    """Each PET rewrite (``eqsat.rules.pet.PetRewrite`` of ``graph``), its nodes added to the graph beside the node
    they compute again, gives that node's tensor on ``feeds``."""
    from eqsat.ir.graph import make_node

    for r in rewrites:
        last = r.nodes[-1]
        host = Graph(graph.inputs, graph.weights, graph.nodes + r.nodes[:-1] + (
            make_node(last.op, last.p, last.inputs, "alt"),), (r.tensor, "alt"))
        want, got = host.evaluate(feeds)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=r.name)


def assert_probe_decides_as_the_full_footprints(sub: Any) -> None:
    """For each mutant of a PET subprogram ``sub``, the analysis from its one-channel probe's footprints (what
    ``find_rewrites`` does) has the same boxes and decisions as the analysis from the full footprints."""
    from eqsat.rules.pet import analyse, generate_mutants
    from eqsat.rules.pet.program import footprint
    from eqsat.rules.pet.search import probe

    small = probe(sub)
    assert all(i.shape[1] == 1 for i in small.graph.inputs)
    minis = {m.name: m for m in generate_mutants(small)}
    for m in generate_mutants(sub):
        full = analyse(sub.graph, m.graph)
        fast = analyse(sub.graph, m.graph, prints=(footprint(small.graph), footprint(minis[m.name].graph)))
        assert [(d.box, d.equal) for d in fast.decisions] == [(d.box, d.equal) for d in full.decisions], m.name
