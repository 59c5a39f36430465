"""Drawings of e-graph dumps: Graphviz DOT (``eqsat egraph render``) and a self-contained HTML page with egglog's
interactive visualizer (``eqsat egraph view``).

Both draw a :class:`Drawing`, a part of a dump chosen by :func:`select`: every e-class, the e-classes within
``depth`` steps of one (a step is an e-node of one class having the other as a child, either way), or only
the extraction's choice. The inputs of an opaque node are drawn as its children (the ``TCons``/``TNil`` lists
the e-graph keeps them in are plumbing); e-classes a drawn e-node uses but the drawing leaves out are shown as
stubs.
"""

from __future__ import annotations

import html
import importlib.util
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from eqsat.engine.egraph import ENode
from eqsat.inspect.dump import LIST_OPS, DumpError, EGraphDump

__all__ = ["Drawing", "select", "to_dot", "to_html", "visualizer_files", "chosen_css", "LEGEND"]

log = logging.getLogger(__name__)

#: what the marks of a drawing mean (DOT and HTML)
LEGEND = ("filled, bold: chosen by the extraction; double border: a term of the input graph; dashed: an e-class "
          "the drawing leaves out; costs in ms")


@dataclass(frozen=True)
class Drawing:
    """A part of a dump to draw.

    Attributes:
        dump: the dump.
        classes: the tensor e-classes drawn, in dump order.
        nodes: the e-nodes drawn (list plumbing left out).
        edges: (e-node id, child e-class, argument index) for every input of a drawn e-node; the child is a
            drawn class or one of ``outside``.
        outside: e-classes used by drawn e-nodes but not drawn (stubs).
        title: what was selected, for captions.
    """

    dump: EGraphDump
    classes: tuple[str, ...]
    nodes: tuple[ENode, ...]
    edges: tuple[tuple[str, str, int], ...]
    outside: tuple[str, ...]
    title: str


def _list_items(dump: EGraphDump, cls: str) -> list[str]:
    """The items of an opaque node's input list (a ``TCons`` chain): the chosen cons where there is one."""
    items: list[str] = []
    seen: set[str] = set()
    while cls not in seen:
        seen.add(cls)
        members = dump.egraph.members(cls)
        node = next((n for n in members if n.id in dump.chosen), members[0])
        if node.op != "TCons":
            break
        items.append(node.children[0])
        cls = node.children[1]
    return items


def _inputs(dump: EGraphDump, node: ENode) -> list[str]:
    """A node's tensor inputs: its children, or for an opaque node the items of its input list."""
    if node.is_opaque and node.children and dump.egraph.eclass(node.children[0]).type == "TList":
        return _list_items(dump, node.children[0])
    return list(node.children)


def select(dump: EGraphDump, around: str | None = None, depth: int = 2, chosen_only: bool = False,
           max_nodes: int = 300) -> Drawing:
    """The part of ``dump`` to draw: all of it, or the e-classes within ``depth`` steps of ``around`` (an
    e-class id, a tensor name of the input graph or an e-node id), of the chosen e-nodes only with
    ``chosen_only``.

    Raises:
        DumpError: ``around`` names nothing or a list class, ``chosen_only`` without an extraction, or more
            than ``max_nodes`` e-nodes to draw (the message says how to draw less).
    """
    if depth < 0:
        raise DumpError(f"--depth must be >= 0, got {depth}")
    pool = [n for n in dump.egraph.nodes if n.op not in LIST_OPS and (n.id in dump.chosen or not chosen_only)]
    if chosen_only and not pool:
        raise DumpError("the dump records no extraction, so nothing is chosen; leave out --chosen-only")
    inputs = {n.id: _inputs(dump, n) for n in pool}
    if around is not None:
        start = dump.find_class(around)
        if dump.egraph.eclass(start).type != "T":
            raise DumpError(f"{around!r} is the input list of an opaque node; give a tensor's e-class instead")
        if chosen_only and start not in dump.selection:
            raise DumpError(f"e-class {start} is not part of the extraction's choice; leave out --chosen-only")
        near: dict[str, set[str]] = {}
        for n in pool:
            for c in inputs[n.id]:
                near.setdefault(n.eclass, set()).add(c)
                near.setdefault(c, set()).add(n.eclass)
        keep = {start}
        frontier = {start}
        for _ in range(depth):
            frontier = {c for f in frontier for c in near.get(f, ())} - keep
            keep |= frontier
        title = f"e-classes within {depth} step(s) of {start}" + (f" ({around})" if around != start else "")
    else:
        keep = {n.eclass for n in pool}
        title = "the whole e-graph"
    if chosen_only:
        title += ", chosen e-nodes only"
    nodes = tuple(n for n in pool if n.eclass in keep)
    if len(nodes) > max_nodes:
        what = f"{len(nodes)} e-nodes to draw ({title})"
        if around is None:
            hint = ("draw part of it with --around CLASS|TENSOR [--depth N]" +
                    ("" if chosen_only else ", or only the extraction's choice with --chosen-only"))
        else:
            hint = "lower --depth" + ("" if chosen_only else " or add --chosen-only")
        raise DumpError(f"{what}, more than --max-nodes {max_nodes}; {hint} (or raise --max-nodes)")
    drawn = {n.eclass for n in nodes}
    classes = tuple(c.id for c in dump.egraph.classes if c.id in drawn)
    edges = tuple((n.id, c, k) for n in nodes for k, c in enumerate(inputs[n.id]))
    outside = tuple(dict.fromkeys(c for _, c, _ in edges if c not in drawn))
    return Drawing(dump, classes, nodes, edges, outside, title)


# -------------------------------------------------------------------------------------------------------------
# text for labels


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def node_caption(dump: EGraphDump, node: ENode) -> str:
    """An e-node as one line: operator and short parameters (``matmul``, ``transpose(perm=[1 0])``)."""
    return _short(dump.describe(node))


def provenance_caption(dump: EGraphDump, node: ENode) -> str:
    """``input``, or ``it 2: rA, rB`` (the iteration and the rules that built the node first); empty when
    the dump has no provenance."""
    first = dump.first_iteration(node)
    if first is None:
        return ""
    if node.id in dump.input_nodes:
        return "input"
    return _short(f"it {first}: " + (", ".join(dump.creators(node)) or "?"))


def class_caption(dump: EGraphDump, cls: str) -> str:
    """``T-5 [4, 8]`` with the input graph's tensor names (``m1, m2 (+3)``) and ``output`` for roots."""
    c = dump.egraph.eclass(cls)
    tensors = dump.tensors_of(cls)
    shape = dump.shape_text(c.shape)
    names = ", ".join(tensors[:2]) + (f" (+{len(tensors) - 2})" if len(tensors) > 2 else "")
    return " ".join(x for x in (cls, shape, _short(names, 30), "output" if cls in dump.egraph.roots else "") if x)


# -------------------------------------------------------------------------------------------------------------
# Graphviz


def _q(text: str) -> str:
    """A DOT quoted string (``\\n`` in ``text`` stays a line break)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(d: Drawing) -> str:
    """The drawing as Graphviz DOT: an e-class is a cluster, an e-node a box in it; an edge from an e-node to a
    child e-class points at one e-node of it (the chosen one where there is one), clipped to the cluster's
    border by ``lhead`` (``compound=true``), so it reads as pointing at the class and ranks it below."""
    dump = d.dump
    src = dump.source or "(unknown model)"
    lines = ["digraph egraph {",
             "  compound=true; newrank=true; rankdir=TB; nodesep=0.25; ranksep=0.45;",
             f"  label={_q(f'{src}: {d.title}' + chr(10) + LEGEND)}; labelloc=b; fontsize=10; fontname=Helvetica;",
             '  node [shape=box, style=rounded, fontname=Helvetica, fontsize=10, height=0.3];',
             '  edge [arrowsize=0.6, color="#444444"];']
    members: dict[str, list[ENode]] = {}
    for n in d.nodes:
        members.setdefault(n.eclass, []).append(n)
    for cls in d.classes:
        root = cls in dump.egraph.roots
        lines.append(f"  subgraph {_q('cluster_' + cls)} {{")
        lines.append(f"    label={_q(class_caption(dump, cls))}; labelloc=t; style=rounded; fontsize=9; "
                     f"color={_q('#1f4e99' if root else '#999999')}; penwidth={2 if root else 1};")
        for n in members[cls]:
            label = "\n".join(x for x in (node_caption(dump, n), f"{n.cost:.4g} ms" if n.cost else "",
                                          provenance_caption(dump, n)) if x)
            attrs = [f"label={_q(label)}", f"tooltip={_q(n.id)}"]
            if n.id in dump.chosen:
                attrs += ['style="rounded,filled,bold"', 'fillcolor="#cfe3ff"', "penwidth=2"]
            if n.id in dump.input_nodes:
                attrs.append("peripheries=2")
            lines.append(f"    {_q('n:' + n.id)} [{', '.join(attrs)}];")
        lines.append("  }")
    for cls in d.outside:
        lines.append(f"  {_q('x:' + cls)} [label={_q(class_caption(dump, cls))}, style=dashed, color=gray50, "
                     "fontcolor=gray40, fontsize=9];")
    arity = Counter(nid for nid, _, _ in d.edges)
    owner = {n.id: n.eclass for n in d.nodes}
    target = {cls: "n:" + next((n for n in ns if n.id in dump.chosen), ns[0]).id for cls, ns in members.items()}
    for nid, child, k in d.edges:
        attrs = []
        if child in d.outside:
            head = "x:" + child
            attrs.append('style=dashed, color="#999999"')
        else:
            head = target[child]
            if child != owner[nid]:  # an edge within a cluster cannot be clipped to it
                attrs.append(f"lhead={_q('cluster_' + child)}")
        if arity[nid] > 1:
            attrs.append(f'label="{k}", fontsize=8, fontcolor="#666666"')
        lines.append(f"  {_q('n:' + nid)} -> {_q(head)}" + (f" [{', '.join(attrs)}];" if attrs else ";"))
    lines.append("}")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------------------------
# HTML with egglog's visualizer


def visualizer_files() -> tuple[str, str]:
    """The JavaScript module and the stylesheet of the interactive e-graph visualizer the egglog package ships
    (``egglog/visualizer.js``, ``visualizer.css``); :class:`DumpError` if this egglog has none."""
    # the files only: egglog itself is the engine's (eqsat.engine) to import
    spec = importlib.util.find_spec("egglog")
    if spec is None or spec.origin is None:
        raise DumpError("the egglog package is not installed; 'eqsat egraph render' draws with Graphviz instead")
    folder = Path(spec.origin).parent
    try:
        return (folder / "visualizer.js").read_text(encoding="utf-8"), \
            (folder / "visualizer.css").read_text(encoding="utf-8")
    except OSError as e:
        raise DumpError(f"the egglog package at {folder} has no e-graph visualizer ({e.strerror}: {e.filename}); "
                        "'eqsat egraph render' draws with Graphviz instead") from None


_EXPORTS = re.compile(r"\nexport\s*\{(?P<names>[^{}]*)\}\s*;?\s*$")


def _inline_module(js: str) -> tuple[str, str]:
    """The visualizer module without its closing ``export {...}`` (an inline script imports nothing) and the
    local name of its ``mount`` function."""
    m = _EXPORTS.search(js)
    mount = None
    if m:
        for item in m.group("names").split(","):
            parts = item.split()
            if len(parts) == 3 and parts[1] == "as" and parts[2] == "mount":
                mount = parts[0]
    if m is None or mount is None:
        raise DumpError("the egglog package's visualizer.js does not end with an export list naming 'mount' (an "
                        "egglog version this eqsat does not know); 'eqsat egraph render' draws with Graphviz")
    body = js[:m.start()] + "\n"
    return re.sub(r"</(script)", r"<\\/\1", body, flags=re.IGNORECASE), mount


# the visualizer's one view-fitting call, made once its nodes are drawn (egglog 13.2, pinned): routed to
# _FIT_SCRIPT's window.eqsatFit, falling back to the call as it was where the page has no such function
_FIT_CALL = re.compile(r"\b(?P<flow>[A-Za-z_$][\w$]*)\.fitView\(\{\s*padding:\s*0\.1,\s*duration:\s*1e3\s*\}\)")


def _hook_fit(module: str) -> str:
    """The visualizer module with its initial fitView call routed to ``window.eqsatFit`` (unchanged, with a
    warning, for a visualizer without that call: the drawing then opens as the visualizer fits it)."""
    hooked, n = _FIT_CALL.subn(lambda m: f"(window.eqsatFit ? window.eqsatFit({m['flow']}) : {m[0]})", module)
    if n != 1:
        log.warning("egglog's visualizer.js has %d fitView calls where eqsat expects one; the drawing opens as "
                    "the visualizer fits it, not fitted to the window", n)
        return module
    return hooked


#: Fits the drawing to the window when it is drawn (and again after a 'Filter'). The visualizer's own fit shows
#: the whole drawing, which for an e-graph (wide layers of wide e-classes) is a thin, unreadable strip; this one
#: shows the whole drawing when that is readable (zoom >= READABLE) and otherwise fills the window with its
#: shorter side, from the top-left corner, at a readable zoom at least ('fit view' in the corner shows it all).
_FIT_SCRIPT = """
{  // a block: these names cannot meet the visualizer module's own
const READABLE = 0.6, LARGEST = 1.5, PAD = 16;
let fitted = false;
window.eqsatFit = (flow) => {
  const pane = document.querySelector("#egraph-visualizer .react-flow");
  const nodes = flow.getNodes();
  if (!pane || !nodes.length) return flow.fitView({ padding: 0.1 });
  const b = flow.getNodesBounds(nodes);
  const w = Math.max(pane.clientWidth - 2 * PAD, 1), h = Math.max(pane.clientHeight - 2 * PAD, 1);
  const byWidth = w / Math.max(b.width, 1), byHeight = h / Math.max(b.height, 1);
  const whole = Math.min(byWidth, byHeight);
  const zoom = Math.min(LARGEST, whole >= READABLE ? whole : Math.max(READABLE, byWidth, byHeight));
  const x = b.width * zoom <= w ? PAD + (w - b.width * zoom) / 2 - b.x * zoom : PAD - b.x * zoom;
  const y = b.height * zoom <= h ? PAD + (h - b.height * zoom) / 2 - b.y * zoom : PAD - b.y * zoom;
  flow.setViewport({ x, y, zoom }, { duration: fitted ? 500 : 0 });
  fitted = true;
  window.eqsatView = { zoom, whole, width: b.width, height: b.height };  // what it chose, for tests
};
}
"""


def _css_string(text: str) -> str:
    """``text`` as a CSS string literal that also cannot end a ``<style>`` element."""
    return '"' + "".join(c if c.isalnum() or c in "-_.:/ " else f"\\{ord(c):x} " for c in text) + '"'


def chosen_css(d: Drawing) -> str:
    """A stylesheet highlighting the drawn e-nodes the extraction chose (the visualizer names each drawn
    e-node ``node-<id>`` in its ``data-id``); empty when the dump records no extraction."""
    chosen = [n.id for n in d.nodes if n.id in d.dump.chosen]
    if not chosen:
        return ""
    selectors = ",\n".join(f".react-flow__node[data-id={_css_string('node-' + nid)}] > div" for nid in chosen)
    return (f"/* the extraction's choice: {len(chosen)} e-node(s) */\n{selectors} {{\n"
            "  background-color: #ffe08a !important; outline: 2px solid #9a6700 !important; font-weight: 600;\n}")


def visualizer_json(d: Drawing) -> str:
    """The drawing as egraph-serialize JSON for egglog's visualizer: e-nodes labelled with their operator and
    short parameters; with an extraction, the nodes not chosen are ``subsumed`` (drawn grey), so the chosen
    term stands out; the e-classes outside the drawing get a stub node (type ``outside``)."""
    dump = d.dump
    first: dict[str, str] = {}
    for n in d.nodes:
        first.setdefault(n.eclass, n.id)
    stub = {c: f"outside:{c}" for c in d.outside}
    target = {**first, **stub}
    kids: dict[str, list[str]] = {}
    for nid, child, _ in d.edges:
        kids.setdefault(nid, []).append(target[child])
    marked = dump.extraction is not None
    nodes: dict[str, dict[str, object]] = {}
    for n in d.nodes:
        label = node_caption(dump, n)
        nodes[n.id] = {"op": label, "children": kids.get(n.id, []), "eclass": n.eclass, "cost": n.cost,
                       "subsumed": marked and n.id not in dump.chosen}
    for c, sid in stub.items():
        nodes[sid] = {"op": "… not drawn", "children": [], "eclass": c, "cost": 0.0, "subsumed": True}
    class_data: dict[str, dict[str, str]] = {}
    for c in (*d.classes, *d.outside):
        info = dump.egraph.eclass(c)
        data = {"type": "outside" if c in stub else ("output" if c in dump.egraph.roots else "tensor"), "e-class": c,
                "shape": dump.shape_text(info.shape)}
        if dump.tensors_of(c):
            data["tensors"] = ", ".join(dump.tensors_of(c))
        class_data[c] = data
    return json.dumps({"nodes": nodes, "root_eclasses": [r for r in dump.egraph.roots if r in first],
                       "class_data": class_data})


def _table(rows: Iterable[tuple[str, ...]], header: tuple[str, ...]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_PAGE_CSS = """
body { font-family: system-ui, sans-serif; margin: 0.8em; color: #222; }
h1 { font-size: 1.15em; margin: 0 0 0.3em 0; }
p.meta { margin: 0.2em 0; font-size: 0.9em; color: #444; }
/* the drawing fills the window below the header (the tables follow it) */
#egraph-visualizer { height: calc(100vh - 7.5em); min-height: 20em; border: 1px solid #ccc; margin: 0.5em 0; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; font-family: ui-monospace, monospace; }
details { margin: 0.4em 0; }
"""


def to_html(d: Drawing) -> str:
    """One self-contained page: egglog's interactive visualizer (its module and stylesheet inlined, so it needs
    no network) showing the drawing, with a legend and the chosen e-nodes as a table. The drawing fills the
    window and opens fitted to it (readable, see ``_FIT_SCRIPT``), the extraction's choice highlighted
    (:func:`chosen_css`)."""
    js, css = visualizer_files()
    module, mount = _inline_module(js)
    module = _hook_fit(module)
    dump = d.dump
    data = visualizer_json(d).replace("</", "<\\/")
    ext = dump.extraction
    meta = [f"{len(d.nodes)} e-nodes in {len(d.classes)} e-classes ({d.title})"]
    if ext is not None:
        meta.append(f"extraction: {ext.solver}, {ext.status}, cost {ext.cost:.6g} ms")
    legend = ("E-nodes highlighted in yellow are the extraction's choice; grey ones are the alternatives it did not "
              "choose. " if ext is not None else "The dump records no extraction. ")
    legend += ("E-classes: colour by kind (output, tensor, outside = not drawn, its stub node '… not drawn'); "
               "each lists its shape and the input graph's tensors it holds. Click 'Filter' on an e-class or "
               "e-node to show only what it reaches; drag to pan, scroll to zoom, the corner's fit button shows "
               "it all.")
    header = ("e-node", "e-class", "tensors", "operator", "cost (ms)", "origin", "first iteration", "built by")

    def row(n: ENode) -> tuple[str, ...]:
        first = dump.first_iteration(n)
        return (n.id, n.eclass, ", ".join(dump.tensors_of(n.eclass)[:3]), dump.describe(n), f"{n.cost:.4g}",
                "input" if n.id in dump.input_nodes else "added", "-" if first is None else str(first),
                dump.describe_provenance(n))

    chosen = [n for n in d.nodes if n.id in dump.chosen]
    table = (f"<details open><summary>chosen e-nodes ({len(chosen)})</summary>"
             + _table(map(row, chosen), header) + "</details>" if chosen else "")
    table += (f"<details><summary>all e-nodes drawn ({len(d.nodes)})</summary>" + _table(map(row, d.nodes), header)
              + "</details>")
    title = f"e-graph of {dump.source or '(unknown model)'}"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
{css}
</style>
<style>{_PAGE_CSS}</style>
<style id="eqsat-chosen">
{chosen_css(d)}
</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p class="meta">{html.escape('; '.join(meta))}</p>
<p class="meta">{html.escape(legend)}</p>
<div id="egraph-visualizer"></div>
{table}
<script type="application/json" id="egraph-data">{data}</script>
<script type="module">
{module}
{_FIT_SCRIPT}
const egraphs = [document.getElementById("egraph-data").textContent];
{mount}(document.getElementById("egraph-visualizer")).render(egraphs);
</script>
</body>
</html>
"""
