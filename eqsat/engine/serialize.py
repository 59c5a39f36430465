"""Reading egglog's serialization: its JSON becomes the typed :class:`eqsat.engine.egraph.EGraph` of tensor and
list e-classes, with operator parameters decoded, shapes, the egglog globals naming each e-class and, when the
program recorded it, which rules built each e-node. The only module that reads egglog's JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from eqsat import ops
from eqsat.engine.compile import ITERATION_COUNTER, PROVENANCE_PREFIX, egglog_params
from eqsat.engine.egraph import EClass, EGraph, ENode, sorted_rules
from eqsat.engine.errors import EngineError

__all__ = ["clean_serialized", "provenance_rows"]


def _decode_param(value: Any, kind: str) -> Any:
    if kind == "float":
        return float(value)
    if kind == "ints":
        return tuple(value)
    return value


def _primitive_value(node: dict[str, Any], nodes: dict[str, Any]) -> Any:
    op = node["op"]
    if op in ("vec-of", "vec-empty"):
        return tuple(_primitive_value(nodes[c], nodes) for c in node["children"])
    if op.startswith('"'):
        return json.loads(op)
    return int(op)


def clean_serialized(raw: dict[str, Any]) -> EGraph:
    """Reduce egglog's serialized JSON to an :class:`~eqsat.engine.egraph.EGraph` of tensor (``T``) and list
    (``TList``) e-classes. This is the only function that reads egglog's JSON.

    Each kept node gets ``op``, ``params`` (named, decoded), ``children`` (T/TList e-classes), ``eclass`` and a
    zero ``cost`` (costs are assigned later, :meth:`EGraph.with_costs`); e-classes have ``type``, for tensors
    ``shape``, and the egglog globals naming them (``lets``). Tensor classes without a shape (ill-shaped
    right-hand sides that were never merged) are dropped.

    For a program compiled with provenance (it has the ``cur_iter`` counter) the e-graph has ``provenance`` set
    and each node's ``rules``: {rule name: the first iteration in which that rule built the node} as pairs, read
    from the ``prov_<op>`` rows (:func:`provenance_rows`); rows are not e-nodes and are not kept.
    """
    nodes = raw["nodes"]
    ctype = {c: d.get("type") for c, d in raw.get("class_data", {}).items()}
    prim_of_class: dict[str, Any] = {}
    for n in nodes.values():
        t = ctype.get(n["eclass"])
        if t in ("i64", "IVec", "String") and n["eclass"] not in prim_of_class and n["op"] != "shape":
            if not n["op"].startswith("function") and n.get("children") is not None:
                try:
                    prim_of_class[n["eclass"]] = _primitive_value(n, nodes)
                except (ValueError, KeyError):
                    pass
    shape_of: dict[str, tuple[int, ...]] = {}
    for n in nodes.values():
        if n["op"] == "shape" and n["children"]:
            shape_of[nodes[n["children"][0]]["eclass"]] = tuple(prim_of_class[n["eclass"]])
    keep: dict[str, dict[str, Any]] = {}
    for nid, n in nodes.items():
        t = ctype.get(n["eclass"])
        if t not in ("T", "TList"):
            continue
        op = n["op"]
        spec_params: list[tuple[str, str]] = []
        if op in ("Input", "Weight"):
            spec_params = [("name", "str")]
        elif t == "T":
            spec_params = egglog_params(ops.get(op))
        params, kids = {}, []
        prim_children = [c for c in n["children"] if ctype.get(nodes[c]["eclass"]) not in ("T", "TList")]
        for (name, kind), c in zip(spec_params, prim_children, strict=True):
            params[name] = _decode_param(prim_of_class[nodes[c]["eclass"]], kind)
        kids = [nodes[c]["eclass"] for c in n["children"] if ctype.get(nodes[c]["eclass"]) in ("T", "TList")]
        keep[nid] = {"op": op, "params": params, "children": kids, "eclass": n["eclass"]}
    # drop ill-shaped tensor classes, then (to a fixpoint) nodes that depend on dropped classes
    alive_classes = {n["eclass"] for n in keep.values()
                     if ctype[n["eclass"]] == "TList" or n["eclass"] in shape_of}
    changed = True
    while changed:
        changed = False
        for nid in list(keep):
            n = keep[nid]
            if n["eclass"] not in alive_classes or any(c not in alive_classes for c in n["children"]):
                del keep[nid]
                changed = True
        live = {n["eclass"] for n in keep.values()}
        if live != alive_classes:
            alive_classes = live
            changed = True
    recorded = any(n["op"] == ITERATION_COUNTER for n in nodes.values())
    provenance = provenance_rows(nodes, keep, prim_of_class) if recorded else {}
    roots = [str(c) for c in raw.get("root_eclasses", [])]
    missing = [r for r in roots if r not in alive_classes]
    if missing:
        raise EngineError(f"root e-classes lost their shape (engine bug): {missing}")
    raw_classes = raw.get("class_data", {})
    classes = {c: EClass(c, ctype[c], tuple(shape_of[c]) if ctype[c] == "T" else None,
                         tuple(g for g in (x.strip() for x in str(raw_classes[c].get("let") or "").split(",")) if g))
               for c in alive_classes}
    enodes = [ENode(nid, n["op"], tuple(n["params"].items()), tuple(n["children"]), n["eclass"], 0.0,
                    sorted_rules(provenance.get(nid, {}))) for nid, n in keep.items()]
    return EGraph.build(enodes, classes, roots, recorded)


def provenance_rows(nodes: Mapping[str, Any], keep: Iterable[str], values: Mapping[str, Any]
                    ) -> dict[str, dict[str, int]]:
    """Node id -> {rule: first iteration} for the ``keep`` nodes of egglog's serialized JSON ``nodes``, from
    its ``prov_<op>`` rows (:func:`eqsat.engine.compile.compile_rule`); ``values`` maps primitive e-classes to
    their values.

    After saturation a row's arguments are canonical (egglog rebuilds function tables), and the serializer
    writes e-nodes and rows with the same child e-classes (primitives are one class per value), so a row names
    the e-node with its operator and child e-classes. Rows of nodes not kept (ill-shaped right-hand sides
    never merged) are skipped.
    """
    index: dict[tuple[str, tuple[str, ...]], str] = {}
    for nid in keep:
        n = nodes[nid]
        index.setdefault((n["op"], tuple(nodes[c]["eclass"] for c in n["children"])), nid)
    out: dict[str, dict[str, int]] = {}
    for n in nodes.values():
        op = n["op"]
        if not op.startswith(PROVENANCE_PREFIX):
            continue
        kids = n["children"]
        nid = index.get((op[len(PROVENANCE_PREFIX):], tuple(nodes[c]["eclass"] for c in kids[:-1])))
        rule, iteration = values.get(nodes[kids[-1]]["eclass"]), values.get(n["eclass"])
        if nid is not None and isinstance(rule, str) and isinstance(iteration, int):
            rules = out.setdefault(nid, {})
            rules[rule] = min(rules.get(rule, iteration), iteration)
    return out

