"""E-graph dumps: the saturated e-graph of a run, with costs, the input graph's place in it and the choice.

:class:`EGraphDump` is one immutable object; :func:`build_dump` makes it from the engine's saturation result,
the node costs and the extraction, and :meth:`EGraphDump.write` / :meth:`EGraphDump.read` store it in the
``eqsat-egraph`` file format (version 2). The file is extraction-gym JSON (``nodes`` with ``op``,
``children``, ``eclass`` and ``cost``; ``root_eclasses``; ``class_data``), so extraction-gym and ``eqsat
extract`` read it as is, with eqsat's fields beside the standard ones::

    {"eqsat": {"format": "eqsat-egraph", "version": 2, "source": MODEL, "cost_model": NAME, "provenance": BOOL,
               "saturation": {"rules", "limits", "stop_reason", "seconds",
                              "iterations": [{"iteration", "enodes", "eclasses", "seconds", "rules_fired",
                                              "merges"}]},
               "extraction": {"solver", "status", "cost", "bound", "gap", "seconds", "kept_original"}},
     "root_eclasses": [CLASS, ...],
     "nodes": {ID: {"op", "children", "eclass", "cost", "params", "onnx_op", "in_input", "chosen",
                    "first_iteration", "rules"}},
     "class_data": {CLASS: {"type", "shape", "tensors"}}}

``children`` are node ids, as extraction-gym wants: each names the first node of the child's e-class (the
object keeps child e-classes: its graph part is the engine's :class:`eqsat.engine.egraph.EGraph`). ``onnx_op`` is
written for opaque nodes only. A node's shape is its class's.
``in_input`` marks the terms of the imported input graph (:func:`eqsat.engine.readback.input_terms`: the input
graph walked bottom-up and each term looked up by operator, parameters and child e-classes, which is exact);
``tensors`` names the input graph's tensors each class holds (found by the same walk); ``chosen`` marks the
extraction's selection (one node per e-class reachable from the roots).

Version 2 adds provenance, when the run recorded it (``"provenance": true`` in the ``eqsat`` block; then every
node has both fields): ``first_iteration``, the iteration in which the e-node first existed (0: a term of
the input graph, or of an n-way sibling merge the engine adds before iteration 1), and ``rules``, rule name
-> the first iteration in which that rule's right-hand side built the e-node, ordered by iteration then
name (``"sibling-merge"`` for the engine's sibling merges; the input graph's own terms are no rule's, but a
rule that built one again later is listed). The engine records it exactly
(:func:`eqsat.engine.compile.compile_rule`): a rule's action writes a row per term it builds, and a
right-hand side merged only after its shape check still dates from the iteration whose rule built it. Version 1
files read with no provenance.

This module is the only one that reads or writes the file's dicts; everything else uses the object.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from eqsat.engine.egraph import EClass, EGraph, ENode, sorted_rules
from eqsat.engine.limits import Limits
from eqsat.engine.readback import graph_from_selection, input_terms
from eqsat.engine.saturation import IterationStats, SaturationResult
from eqsat.errors import EqsatError
from eqsat.extract import Extraction
from eqsat.files import write_file
from eqsat.ir.graph import Graph
from eqsat.ir.symbols import Symbols, format_shape, graph_symbols

__all__ = ["FORMAT", "VERSION", "DumpError", "IterationInfo", "SaturationInfo", "ExtractionInfo",
           "ExtractionChanges", "EGraphDump", "build_dump", "load_json", "is_dump"]


FORMAT = "eqsat-egraph"
VERSION = 2
#: the e-nodes of the lists of an opaque node's inputs (plumbing, not tensors)
LIST_OPS = frozenset({"TNil", "TCons"})
log = logging.getLogger(__name__)


class DumpError(EqsatError, ValueError):
    """A file that is not a readable e-graph dump of this version, or a lookup in a dump that fails."""


def _frozen(value: Any) -> Any:
    """JSON arrays as tuples, recursively (parameters are tuples in memory)."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list | tuple) else value


def _pairs(mapping: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple((str(k), _frozen(v)) for k, v in mapping.items())



def _show(v: Any) -> str:
    if isinstance(v, tuple):
        return "[" + " ".join(_show(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v)
    return str(v)



@dataclass(frozen=True)
class IterationInfo:
    """One saturation iteration (0 is the input graph): sizes after it, seconds, matches applied per rewrite
    rule, and right-hand sides merged after their shape check."""

    iteration: int
    enodes: int
    eclasses: int
    seconds: float
    rules_fired: tuple[tuple[str, int], ...] = ()
    merges: int = 0


@dataclass(frozen=True)
class SaturationInfo:
    """How the e-graph was grown: rules in the rule set, limits (name -> value), why it stopped, seconds, and
    the iterations."""

    rules: int
    limits: tuple[tuple[str, Any], ...]
    stop_reason: str
    seconds: float
    iterations: tuple[IterationInfo, ...]

    @property
    def rules_fired(self) -> dict[str, int]:
        """Matches applied per rule over all iterations."""
        out: Counter[str] = Counter()
        for it in self.iterations:
            out.update(dict(it.rules_fired))
        return dict(out)


@dataclass(frozen=True)
class ExtractionInfo:
    """The extraction whose choice the dump's ``chosen`` nodes are; ``kept_original`` when the run wrote the
    original model instead (the extraction was costlier as written, or not faster end to end)."""

    solver: str
    status: str
    cost: float
    bound: float | None = None
    gap: float | None = None
    seconds: float = 0.0
    kept_original: bool = False



@dataclass(frozen=True)
class ExtractionChanges:
    """What the extraction changed against the input graph, per e-class reachable from the roots.

    Attributes:
        kept: classes whose chosen node is the input graph's node.
        replaced: (class, input node, chosen node) where the class holds an input node that was not chosen.
        added: chosen nodes of classes that hold no input node (tensors the input graph did not have).
        removed: input nodes of classes no longer computed (not selected).
    """

    kept: tuple[str, ...]
    replaced: tuple[tuple[str, ENode, ENode], ...]
    added: tuple[ENode, ...]
    removed: tuple[ENode, ...]


@dataclass(frozen=True)
class EGraphDump:
    """A saturated e-graph with its costs, the input graph's terms and tensor names, and the extraction's
    choice; see the module docstring for the file format. Equal dumps write equal files.

    The graph part is the engine's :class:`eqsat.engine.egraph.EGraph` (``egraph``: e-nodes with their costs and,
    with provenance, the rules that built them; e-classes with their shapes; the roots): look e-nodes, e-classes,
    members, parents and shapes up there. The dump adds what a run knows about them, by node or class id.

    Attributes:
        source: the model the run optimized.
        cost_model: the name of the cost model that priced the nodes (costs in ms).
        egraph: the e-graph.
        input_nodes: the e-nodes that are terms of the imported input graph.
        chosen: the e-nodes the extraction chose (:attr:`selection` gives them by e-class).
        tensors: e-class -> the names of the input graph's tensors it holds (classes holding none left out).
        onnx_ops: opaque e-node -> its ONNX op type.
        first_iterations: with provenance, e-node -> the saturation iteration in which it first existed (0 for
            the input graph's terms and the engine's sibling merges; None when unknown); empty without.
        saturation: how the e-graph was grown.
        extraction: the extraction whose choice ``chosen`` is.
        pet: with PET on, what its corrected mutants did (:class:`eqsat.pipeline.result.PetReport` as a dict).
    """

    FORMAT: ClassVar[str] = FORMAT
    VERSION: ClassVar[int] = VERSION

    source: str
    cost_model: str
    egraph: EGraph
    input_nodes: frozenset[str] = frozenset()
    chosen: frozenset[str] = frozenset()
    tensors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    onnx_ops: Mapping[str, str] = field(default_factory=dict)
    first_iterations: Mapping[str, int | None] = field(default_factory=dict)
    saturation: SaturationInfo | None = None
    extraction: ExtractionInfo | None = None
    symbols: Mapping[str, int] = field(default_factory=dict)  # dynamic axes: symbol -> generic value (ir.symbols)
    pet: Mapping[str, Any] = field(default_factory=dict)

    def shape_text(self, shape: tuple[int, ...] | None) -> str:
        """An e-class shape as text, symbolic sizes by their polynomials: ``[batch, seq, 768]``."""
        return format_shape(Symbols(dict(self.symbols)).decode_shape(shape or ()))

    @property
    def provenance(self) -> bool:
        """Whether the run recorded provenance (first iterations, and the rules that built each e-node)."""
        return self.egraph.provenance

    def __hash__(self) -> int:  # the mappings are not hashable; equal dumps agree on these fields
        return hash((self.source, self.cost_model, self.egraph, self.input_nodes, self.chosen))

    # -- what the dump knows about e-nodes and e-classes ---------------------------------------------------
    def first_iteration(self, node: ENode) -> int | None:
        """The iteration in which ``node`` first existed; None without provenance."""
        return self.first_iterations.get(node.id)

    def creators(self, node: ENode) -> tuple[str, ...]:
        """The rules that built ``node`` in its first iteration (none for an input term)."""
        first = self.first_iteration(node)
        return tuple(r for r, k in node.rules if k == first and node.id not in self.input_nodes)

    def describe_provenance(self, node: ENode) -> str:
        """``input``, or the creating rules, with later rebuilders as ``rule@iteration``; ``-`` when unknown."""
        if self.first_iteration(node) is None:
            return "-"
        first = set(self.creators(node))
        parts = (["input"] if node.id in self.input_nodes else []) + \
            [r if r in first else f"{r}@{k}" for r, k in node.rules]
        return ", ".join(parts) or "-"

    def label(self, node: ENode) -> str:
        """The operator as reports show it: ``opaque:Gather`` for an opaque node."""
        onnx_op = self.onnx_ops.get(node.id)
        return f"opaque:{onnx_op}" if node.is_opaque and onnx_op else node.op

    def describe(self, node: ENode) -> str:
        """``op(name=value, ...)``; opaque nodes by ONNX op type and key."""
        p = node.p
        if node.is_opaque:
            return f"{self.label(node)}({p.get('key')}, output {p.get('index')})"
        if not node.params:
            return node.op
        return f"{node.op}({', '.join(f'{k}={_show(v)}' for k, v in node.params)})"

    def tensors_of(self, class_id: str) -> tuple[str, ...]:
        """The names of the input graph's tensors an e-class holds."""
        return self.tensors.get(class_id, ())

    @cached_property
    def _tensor_index(self) -> dict[str, str]:
        return {t: c.id for c in self.egraph.classes for t in self.tensors_of(c.id)}

    def class_of_tensor(self, name: str) -> str | None:
        """The e-class holding the input graph's tensor ``name``, or None."""
        return self._tensor_index.get(name)

    def find_class(self, key: str) -> str:
        """The e-class named by ``key``: a class id, a tensor name of the input graph, or a node id (its
        class). :class:`DumpError` with a hint when it is none of them."""
        eg = self.egraph
        if eg.has_class(key):
            return key
        if key in self._tensor_index:
            return self._tensor_index[key]
        if eg.has_node(key):
            return eg.node(key).eclass
        examples = ", ".join(list(self._tensor_index)[:4])
        raise DumpError(f"no e-class, tensor or e-node named {key!r} in the dump; give an e-class id (e.g. "
                        f"{eg.roots[0] if eg.roots else eg.classes[0].id}) or a tensor name of the input "
                        f"graph ({examples}, ...)")

    @property
    def selection(self) -> dict[str, str]:
        """The extraction's choice, e-class -> chosen node id (empty without an extraction)."""
        return {n.eclass: n.id for n in self.egraph.nodes if n.id in self.chosen}

    @property
    def tensor_names(self) -> dict[str, str]:
        """E-class -> one tensor name (the first in the input graph's order), for naming an exported graph."""
        return {c.id: self.tensors[c.id][0] for c in self.egraph.classes if self.tensors_of(c.id)}

    def with_extraction(self, selection: Mapping[str, str], info: ExtractionInfo | None) -> EGraphDump:
        """A copy with ``chosen`` set from ``selection`` (e-class -> node id) and the extraction's report."""
        chosen = frozenset(n for n in selection.values() if self.egraph.has_node(n))
        return replace(self, chosen=chosen, extraction=info)

    # -- the input graph and extractions -----------------------------------------------------------------
    def check_input_graph(self, graph: Graph, *, model: str = "the model") -> None:
        """Raise :class:`DumpError` unless ``graph`` (an imported model) is the input graph of this dump: each
        of its terms is in the e-graph, and they are exactly the nodes marked ``in_input``."""
        terms = input_terms(self.egraph, graph)
        if terms.missing or terms.nodes != self.input_nodes:
            what = (f"its tensor(s) {', '.join(terms.missing[:3])} are not in the e-graph" if terms.missing else
                    f"{len(self.input_nodes ^ terms.nodes)} e-node(s) differ from the dump's input terms")
            raise DumpError(f"{model} is not the model this dump was made from ({what}); give the model given to "
                            "'eqsat optimize' (with the same --input-shape)")

    def to_graph(self, selection: Mapping[str, str], original: Graph) -> tuple[Graph, Graph]:
        """The IR graph a selection (e-class -> node id) chooses, read back as the pipeline does
        (:func:`eqsat.engine.readback.graph_from_selection`): as read and as written. ``original`` is the input graph
        (it gives graph inputs, weights, output names and opaque nodes)."""
        return graph_from_selection(self.egraph, selection, original, self.tensor_names)

    # -- analysis -----------------------------------------------------------------------------------------
    def changes(self) -> ExtractionChanges:
        """What the extraction's choice changed against the input graph (:class:`ExtractionChanges`)."""
        eg = self.egraph
        selection = self.selection
        kept: list[str] = []
        replaced: list[tuple[str, ENode, ENode]] = []
        added: list[ENode] = []
        for cls, nid in selection.items():
            chosen = eg.node(nid)
            inputs = [n for n in eg.members(cls) if n.id in self.input_nodes]
            if chosen.id in self.input_nodes:
                kept.append(cls)
            elif inputs:
                replaced.append((cls, inputs[0], chosen))
            else:
                added.append(chosen)
        removed = tuple(n for n in eg.nodes if n.id in self.input_nodes and n.eclass not in selection)
        return ExtractionChanges(tuple(kept), tuple(replaced), tuple(added), removed)

    # -- the file format ----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The dump as a JSON-ready object (tuples stand for arrays); :meth:`from_json` reads it back equal."""
        first: dict[str, str] = {}
        for n in self.egraph.nodes:
            first.setdefault(n.eclass, n.id)
        nodes: dict[str, Any] = {}
        for n in self.egraph.nodes:
            d: dict[str, Any] = {"op": n.op, "children": [first[c] for c in n.children], "eclass": n.eclass,
                                 "cost": n.cost, "params": dict(n.params)}
            if n.id in self.onnx_ops:
                d["onnx_op"] = self.onnx_ops[n.id]
            d["in_input"] = n.id in self.input_nodes
            d["chosen"] = n.id in self.chosen
            if self.provenance:
                d["first_iteration"] = self.first_iteration(n)
                d["rules"] = dict(n.rules)
            nodes[n.id] = d
        class_data: dict[str, Any] = {}
        for c in self.egraph.classes:
            d = {"type": c.type}
            if c.shape is not None:
                d["shape"] = list(c.shape)
            d["tensors"] = list(self.tensors_of(c.id))
            class_data[c.id] = d
        block: dict[str, Any] = {"format": FORMAT, "version": VERSION, "source": self.source,
                                 "cost_model": self.cost_model, "provenance": self.provenance,
                                 "saturation": None if self.saturation is None else _saturation_json(self.saturation),
                                 "extraction": None if self.extraction is None else _extraction_json(self.extraction)}
        block |= {k: dict(v) for k, v in (("symbols", self.symbols), ("pet", self.pet)) if v}  # only when present
        return {"eqsat": block, "root_eclasses": list(self.egraph.roots), "nodes": nodes, "class_data": class_data}


    @classmethod
    def from_json(cls, data: Any) -> EGraphDump:
        """Read a dump from its JSON object (parsed, or as :meth:`to_json` returns it).

        Raises:
            DumpError: not an eqsat dump (no ``eqsat`` block, e.g. plain extraction-gym JSON), another format
                or a newer version, or a malformed one (the message says what is wrong).
        """
        if not isinstance(data, Mapping):
            raise DumpError(f"an e-graph dump is a JSON object, got {type(data).__name__}")
        block = data.get("eqsat")
        if not isinstance(block, Mapping):
            raise DumpError("not an eqsat e-graph dump: no 'eqsat' block (plain extraction-gym JSON has only "
                            "sizes and operators: 'eqsat inspect' describes it; 'eqsat optimize --dump-egraph' "
                            "writes dumps)")
        if block.get("format") != FORMAT:
            raise DumpError(f"not an eqsat e-graph dump: format {block.get('format')!r}, expected {FORMAT!r}")
        version = block.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise DumpError(f"e-graph dump with a bad version {version!r}")
        if version > VERSION:
            raise DumpError(f"e-graph dump format version {version} is newer than this eqsat reads ({VERSION}); "
                            "upgrade eqsat")
        try:
            return cls._parse(data, block)
        except DumpError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            what = f"missing field {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
            raise DumpError(f"malformed e-graph dump: {what}") from None

    @classmethod
    def _parse(cls, data: Mapping[str, Any], block: Mapping[str, Any]) -> EGraphDump:
        raw_nodes = data["nodes"]
        raw_classes = data["class_data"]
        provenance = bool(block.get("provenance", False))  # absent in version 1
        if not isinstance(raw_nodes, Mapping) or not isinstance(raw_classes, Mapping):
            raise DumpError("malformed e-graph dump: 'nodes' and 'class_data' must be objects")
        nodes: list[ENode] = []
        input_nodes: set[str] = set()
        chosen: set[str] = set()
        onnx_ops: dict[str, str] = {}
        first_iterations: dict[str, int | None] = {}
        for nid, n in raw_nodes.items():
            kids = []
            for k in n["children"]:
                if k not in raw_nodes:
                    raise DumpError(f"malformed e-graph dump: node {nid!r} has child {k!r}, which is not a node")
                kids.append(str(raw_nodes[k]["eclass"]))
            if str(n["eclass"]) not in raw_classes:
                raise DumpError(f"malformed e-graph dump: node {nid!r} is in e-class {n['eclass']!r}, which "
                                "'class_data' does not describe")
            cost = n["cost"]
            if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost):
                raise DumpError(f"malformed e-graph dump: node {nid!r} has cost {cost!r}")
            rules: tuple[tuple[str, int], ...] = ()
            if provenance:
                first = n["first_iteration"]
                if first is not None and (isinstance(first, bool) or not isinstance(first, int) or first < 0):
                    raise DumpError(f"malformed e-graph dump: node {nid!r} has first_iteration {first!r}")
                rules = _rules_from(n["rules"], nid)
                first_iterations[str(nid)] = first
            nodes.append(ENode(str(nid), str(n["op"]), _pairs(n.get("params", {})), tuple(kids), str(n["eclass"]),
                               float(cost), rules))
            if n.get("onnx_op") is not None:
                onnx_ops[str(nid)] = n["onnx_op"]
            if bool(n["in_input"]):
                input_nodes.add(str(nid))
            if bool(n["chosen"]):
                chosen.add(str(nid))
        classes: list[EClass] = []
        tensors: dict[str, tuple[str, ...]] = {}
        for c, d in raw_classes.items():
            classes.append(EClass(str(c), str(d["type"]), None if d.get("shape") is None else
                                  tuple(int(x) for x in d["shape"])))
            if names := tuple(str(t) for t in d.get("tensors", ())):
                tensors[str(c)] = names
        roots = tuple(str(r) for r in data["root_eclasses"])
        unknown = [r for r in roots if r not in raw_classes]
        if unknown:
            raise DumpError(f"malformed e-graph dump: root e-class {unknown[0]!r} is not described")
        sat, ext = block.get("saturation"), block.get("extraction")
        return cls(str(block.get("source", "")), str(block.get("cost_model", "")),
                   EGraph(tuple(nodes), tuple(classes), roots, provenance), frozenset(input_nodes), frozenset(chosen),
                   tensors, onnx_ops, first_iterations,
                   None if sat is None else _saturation_from(sat), None if ext is None else _extraction_from(ext),
                   {str(k): int(v) for k, v in (block.get("symbols") or {}).items()}, dict(block.get("pet") or {}))

    def dumps(self) -> str:
        """The file's text: the ``eqsat`` block on the first line, then one e-node or e-class per line."""
        d = self.to_json()

        def obj(items: Mapping[str, Any]) -> str:
            return "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in items.items()) + "\n}"

        return (f'{{"eqsat": {json.dumps(d["eqsat"])},\n"root_eclasses": {json.dumps(d["root_eclasses"])},\n'
                f'"nodes": {obj(d["nodes"])},\n"class_data": {obj(d["class_data"])}}}\n')

    @classmethod
    def loads(cls, text: str) -> EGraphDump:
        """Read a dump from the file's text (:class:`DumpError` if it is not one)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DumpError(f"not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
        return cls.from_json(data)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the dump to ``path``, creating missing folders, through a temporary file (a failure leaves
        nothing behind; a special file such as a FIFO is written through, see :func:`eqsat.files.write_file`);
        returns the path."""
        out = Path(path)
        text = self.dumps()
        write_file(out, lambda p: p.write_text(text, encoding="utf-8"))
        return out

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> EGraphDump:
        """Read a dump file (:class:`DumpError` naming the file if it is missing or not a dump)."""
        data = load_json(path)
        try:
            return cls.from_json(data)
        except DumpError as e:
            raise DumpError(f"{path}: {e}") from None



def _rules_from(value: Any, nid: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, Mapping) or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 0
                                                 for k in value.values()):
        raise DumpError(f"malformed e-graph dump: node {nid!r} has rules {value!r} (expected rule -> iteration)")
    return sorted_rules(value)


def _saturation_json(s: SaturationInfo) -> dict[str, Any]:
    return {"rules": s.rules, "limits": dict(s.limits), "stop_reason": s.stop_reason, "seconds": s.seconds,
            "iterations": [{"iteration": it.iteration, "enodes": it.enodes, "eclasses": it.eclasses,
                            "seconds": it.seconds, "rules_fired": dict(it.rules_fired), "merges": it.merges}
                           for it in s.iterations]}


def _saturation_from(d: Mapping[str, Any]) -> SaturationInfo:
    its = tuple(IterationInfo(int(it["iteration"]), int(it["enodes"]), int(it["eclasses"]), float(it["seconds"]),
                              tuple((str(k), int(v)) for k, v in it.get("rules_fired", {}).items()),
                              int(it.get("merges", 0)))
                for it in d["iterations"])
    return SaturationInfo(int(d["rules"]), _pairs(d.get("limits", {})), str(d["stop_reason"]), float(d["seconds"]), its)


def _extraction_json(e: ExtractionInfo) -> dict[str, Any]:
    return {f.name: getattr(e, f.name) for f in fields(e)}


def _extraction_from(d: Mapping[str, Any]) -> ExtractionInfo:
    def opt(v: Any) -> float | None:
        return None if v is None else float(v)

    return ExtractionInfo(str(d["solver"]), str(d["status"]), float(d["cost"]), opt(d.get("bound")),
                          opt(d.get("gap")), float(d.get("seconds", 0.0)), bool(d.get("kept_original", False)))


def load_json(path: str | os.PathLike[str]) -> Any:
    """Parse a JSON file; :class:`DumpError` with a one-line reason when it is missing or not JSON."""
    p = Path(path)
    if not p.exists():
        raise DumpError(f"no such file: {path}; check the path")
    if p.is_dir():
        raise DumpError(f"{path} is a directory, not an e-graph file")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise DumpError(f"{path}: not a text file (an e-graph dump is JSON)") from None
    except json.JSONDecodeError as e:
        raise DumpError(f"{path}: not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None


def is_dump(data: Any) -> bool:
    """Whether parsed JSON is an eqsat e-graph dump (it has the ``eqsat`` block), of any version."""
    return isinstance(data, Mapping) and isinstance(data.get("eqsat"), Mapping) \
        and data["eqsat"].get("format") == FORMAT



# -------------------------------------------------------------------------------------------------------------
# building a dump from a run


def iteration_infos(iterations: Iterable[IterationStats]) -> tuple[IterationInfo, ...]:
    """The engine's :class:`eqsat.engine.saturation.IterationStats` as :class:`IterationInfo`: rewrite rules only
    (the shape bookkeeping left out), with the shape-checked merges counted apart."""
    out = []
    for it in iterations:
        fired = tuple((k, int(v)) for k, v in it.matches.items()
                      if v and not k.startswith("shape-") and k != "merge-checked")
        out.append(IterationInfo(it.iteration, it.enodes, it.eclasses, float(it.seconds), fired,
                                 int(it.matches.get("merge-checked", 0))))
    return tuple(out)


def build_dump(sat: SaturationResult, graph: Graph, costs: Mapping[str, float], *, source: str = "",
               cost_model: str = "", rules: int = 0, limits: Limits | None = None,
               extraction: Extraction | None = None, kept_original: bool = False) -> EGraphDump:
    """The dump of a run: ``sat`` the engine's result for the imported ``graph``, ``costs`` node id -> cost,
    ``extraction`` the extractor's result (its selection becomes the ``chosen`` marks), ``rules`` the size of
    the rule set and ``limits`` the saturation limits used. Provenance comes with ``sat`` when the engine
    recorded it (:func:`eqsat.engine.saturation.saturate` with ``provenance``): an input term's first iteration
    is 0, another node's the smallest iteration of its rows."""
    eg = sat.egraph
    terms = input_terms(eg, graph)
    if terms.missing:  # an engine bug: the e-graph saturate returned always holds its input graph
        log.warning("e-graph dump: %d input tensor(s) not found in the e-graph (%s); their in_input marks and "
                    "tensor names are missing", len(terms.missing), ", ".join(terms.missing[:5]))
    op_type = {(n.p["key"], n.p["index"]): str(n.p["op_type"]) for n in graph.nodes if n.is_opaque}
    nodes: list[ENode] = []
    onnx_ops: dict[str, str] = {}
    first_iterations: dict[str, int | None] = {}
    for n in eg.nodes:
        p = n.p
        onnx_op = op_type.get((p.get("key"), p.get("index"))) if n.is_opaque else None
        if onnx_op is not None:
            onnx_ops[n.id] = onnx_op
        if eg.provenance:
            first_iterations[n.id] = 0 if n.id in terms.nodes else min((k for _, k in n.rules), default=None)
        nodes.append(ENode(n.id, n.op, _pairs(p), n.children, n.eclass, float(costs.get(n.id, n.cost)),
                           n.rules if eg.provenance else ()))
    tensors: dict[str, list[str]] = {}
    for t, c in terms.tensor_class.items():
        tensors.setdefault(c, []).append(t)
    classes = tuple(EClass(c, eg.eclass(c).type, eg.shape(c)) for c in dict.fromkeys(n.eclass for n in nodes))
    chosen = frozenset(i for i in extraction.selection.values() if eg.has_node(i)) if extraction is not None \
        else frozenset()
    saturation = SaturationInfo(rules, () if limits is None else _pairs(vars(limits)), str(sat.stop_reason),
                                float(sat.seconds), iteration_infos(sat.iterations))
    info = None
    if extraction is not None:
        info = ExtractionInfo(extraction.solver, extraction.status, float(extraction.cost),
                              None if extraction.bound is None else float(extraction.bound),
                              None if extraction.gap is None else float(extraction.gap), float(extraction.seconds),
                              kept_original)
    return EGraphDump(source, cost_model, EGraph(tuple(nodes), classes, eg.roots, eg.provenance),
                      frozenset(terms.nodes), chosen, {c: tuple(ts) for c, ts in tensors.items()}, onnx_ops,
                      first_iterations, saturation, info, dict(graph_symbols(graph).generic))
