"""``eqsat egraph ...``: read the e-graph dumps ``eqsat optimize --dump-egraph`` writes.

* ``stats DUMP``: sizes, operators (input vs added), the largest e-classes, growth and rules per iteration,
  the extraction and what it changed against the input graph. Plain extraction-gym JSON gets its sizes and
  operators (``eqsat inspect`` on a JSON file prints the same).
* ``show DUMP CLASS|TENSOR``: one e-class, by class id, tensor name of the input graph or e-node id.
* ``render DUMP -o OUT.svg|.dot [--around CLASS|TENSOR --depth N] [--chosen-only]``: a Graphviz drawing
  (e-classes as clusters, chosen e-nodes filled); the ``.dot`` text is written here, other formats by the
  system's ``dot`` (without it the ``.dot`` is written and the error says how to install Graphviz).
* ``view DUMP -o OUT.html [...]``: one self-contained HTML page with egglog's interactive visualizer inlined,
  opening fitted to the window (readable), the extraction's choice highlighted.
* ``export DUMP --model ORIGINAL.onnx [--selection SEL.json] -o OUT.onnx``: an extractor's selection (the
  ``eqsat extract --out`` format, or a bare ``{class: node}`` object; default the dump's own choice) back into
  an ONNX model, checked numerically against the original.

Problems the user can fix raise :class:`eqsat.errors.EqsatError`; ``eqsat`` prints them on one line (exit 2).
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from eqsat.cli.common import Count, check_output, input_shapes, parse_shape, write_file
from eqsat.engine.egraph import ENode
from eqsat.errors import UsageError
from eqsat.extract import InvalidExtraction, validate_selection
from eqsat.extract.egraph_json import parse_egraph
from eqsat.inspect.draw import select, to_dot, to_html
from eqsat.inspect.dump import FORMAT, LIST_OPS, DumpError, EGraphDump, is_dump, load_json
from eqsat.rules.pet import PET_RULE_PREFIX

__all__ = ["register", "stats_report", "class_report", "plain_report", "print_egraph_file", "is_json_file"]


# -------------------------------------------------------------------------------------------------------------
# reports


def _fmt(v: float | None, digits: int = 6) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def _counts(items: Iterable[str], limit: int | None = None) -> str:
    """``a x3, b x1`` by count, then name; ``(none)`` when empty; ``+N more`` past ``limit``."""
    c = sorted(Counter(items).items(), key=lambda kv: (-kv[1], kv[0]))
    if not c:
        return "(none)"
    shown = c if limit is None else c[:limit]
    text = ", ".join(f"{k} x{v}" for k, v in shown)
    return text + (f" (+{len(c) - len(shown)} more)" if len(shown) < len(c) else "")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]], right: set[int] | None = None,
           indent: str = "  ") -> list[str]:
    right = right or set()
    cells = [tuple(str(x) for x in r) for r in [header, *rows]]
    widths = [max(len(r[k]) for r in cells) for k in range(len(header))]
    out = []
    for r in cells:
        parts = [r[k].rjust(widths[k]) if k in right else r[k].ljust(widths[k]) for k in range(len(r))]
        out.append((indent + "  ".join(parts)).rstrip())
    return out


def _tensor_note(dump: EGraphDump, cls: str, limit: int = 2) -> str:
    names = dump.tensors_of(cls)
    if not names:
        return ""
    return ", ".join(names[:limit]) + (f" (+{len(names) - limit})" if len(names) > limit else "")


def _class_ref(dump: EGraphDump, cls: str) -> str:
    """``T-5 (matmul2)``; a list class as its items, ``[T-0 (x), T-2]``."""
    c = dump.egraph.eclass(cls)
    if c.type == "TList":
        items, seen = [], set()
        while cls not in seen:
            seen.add(cls)
            node = dump.egraph.members(cls)[0]
            if node.op != "TCons":
                break
            items.append(_class_ref(dump, node.children[0]))
            cls = node.children[1]
        return "[" + ", ".join(items) + "]"
    note = _tensor_note(dump, cls)
    return f"{cls} ({note})" if note else cls


def stats_report(dump: EGraphDump, path: str = "") -> str:
    """The ``eqsat egraph stats`` report of a dump."""
    eg = dump.egraph
    nodes = [n for n in eg.nodes if n.op not in LIST_OPS]
    lists = len(eg.nodes) - len(nodes)
    n_in = sum(n.id in dump.input_nodes for n in nodes)
    tensors = [c for c in eg.classes if c.type == "T"]
    n_nodes, n_classes = eg.tensor_size  # the size the optimize report gives
    lines = [f"e-graph dump {path or '-'} ({FORMAT} v{EGraphDump.VERSION}) of {dump.source or '(unknown model)'}, "
             f"costs: {dump.cost_model or '-'}, provenance: "
             + ("recorded" if dump.provenance else "not recorded (eqsat optimize --dump-egraph PATH --provenance)")]
    rows = [("e-graph", f"{n_nodes} e-nodes ({n_in} from the input graph, {n_nodes - n_in} added), "
                        f"{n_classes} e-classes, {len(eg.roots)} root(s)"
                        + (f"; {lists} list node(s) for opaque nodes' inputs" if lists else ""))]
    if dump.symbols:  # why a rewrite right only at some sizes is not in the e-graph
        generic = ", ".join(f"{k}={v}" for k, v in dump.symbols.items())
        rows.append(("dynamic axes", f"{', '.join(dump.symbols)}: built at generic sizes ({generic}), so a rewrite "
                                     "merged only where its shape guard holds for every size; one right at some "
                                     "sizes only (batch 1) never fired"))
    sat = dump.saturation
    if sat is not None:
        limits = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in sat.limits)
        rows.append(("saturation", f"{max(0, len(sat.iterations) - 1)} iteration(s), stopped: {sat.stop_reason}, "
                                   f"{sat.seconds:.2f} s; {sat.rules} rules"
                                   + (f"; limits: {limits}" if limits else "")))
    ext = dump.extraction
    if ext is not None:
        gap = "-" if ext.gap is None else f"{100 * ext.gap:.3g} %"
        rows.append(("extraction", f"{ext.solver}, {ext.status}, cost {_fmt(ext.cost)} ms, bound {_fmt(ext.bound)}, "
                                   f"gap {gap}, {ext.seconds:.2f} s"
                                   + ("; the run kept the original model" if ext.kept_original else "")))
    else:
        rows.append(("extraction", "none recorded"))
    if dump.pet:
        rows.append(("partially equivalent", _pet_row(dump, nodes)))
    width = max(len(k) for k, _ in rows)
    lines += [f"{k:<{width}}  {v}" for k, v in rows]

    if sat is not None and sat.iterations:
        lines += ["", "growth per iteration (the engine's counts, with the terms of no valid shape the e-graph above "
                      "leaves out; rules fired: matches applied; merges: right-hand sides shape-checked and merged)"]
        trows = []
        prev = None
        for it in sat.iterations:
            fired = sorted(it.rules_fired, key=lambda kv: (-kv[1], kv[0]))
            shown = ", ".join(f"{k} {v}" for k, v in fired[:4]) + (f" (+{len(fired) - 4} more)" if len(fired) > 4
                                                                    else "")
            trows.append((it.iteration, it.enodes, it.eclasses, "-" if prev is None else f"{it.enodes - prev:+d}",
                          it.merges, f"{it.seconds:.3f}", shown or "-"))
            prev = it.enodes
        lines += _table(("iter", "engine e-nodes", "e-classes", "growth", "merges", "seconds", "rules fired"), trows,
                        right={0, 1, 2, 3, 4, 5})

    if dump.provenance:
        lines += ["", *_provenance_table(dump, nodes)]

    lines += ["", "operators (e-nodes)"]
    ops: dict[str, list[int]] = {}
    for n in nodes:
        row = ops.setdefault(dump.label(n), [0, 0, 0])
        row[0 if n.id in dump.input_nodes else 1] += 1
        row[2] += n.id in dump.chosen
    orows = [(op, a, b, c) for op, (a, b, c) in sorted(ops.items(), key=lambda kv: (-sum(kv[1][:2]), kv[0]))]
    lines += _table(("operator", "input", "added", "chosen"), orows, right={1, 2, 3})

    lines += ["", "largest e-classes"]
    biggest = sorted(tensors, key=lambda c: -len(eg.members(c.id)))[:10]
    crows = []
    for c in biggest:
        members = eg.members(c.id)
        chosen = next((dump.label(n) for n in members if n.id in dump.chosen), "-")
        crows.append((c.id, len(members), dump.shape_text(c.shape), chosen,
                      _tensor_note(dump, c.id) or "-"))
    lines += _table(("e-class", "e-nodes", "shape", "chosen", "tensors"), crows, right={1})

    if ext is not None:
        ch = dump.changes()
        def real(ns: Iterable[ENode]) -> list[ENode]:
            return [n for n in ns if n.op not in LIST_OPS]
        replaced = [(a, b) for _, a, b in ch.replaced if b.op not in LIST_OPS]
        added, removed = real(ch.added), real(ch.removed)
        lines += ["", f"what the extraction changed ({len(ch.kept)} e-classes kept their input node, "
                      f"{len(replaced)} replaced, {len(added)} added, {len(removed)} input nodes no longer computed)"]
        label = dump.label
        rows = [("chosen, not in the input", _counts([label(b) for _, b in replaced] + [label(n) for n in added])),
                ("in the input, not chosen", _counts([label(a) for a, _ in replaced] + [label(n) for n in removed])),
                ("replaced", _counts(f"{label(a)} -> {label(b)}" for a, b in replaced)),
                ("added (new tensors)", _counts(label(n) for n in added)),
                ("removed", _counts(label(n) for n in removed))]
        width = max(len(k) for k, _ in rows)
        lines += [f"  {k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)


def _pet_row(dump: EGraphDump, nodes: list[ENode]) -> str:
    """PET's corrected mutants in the run (``eqsat optimize --pet``), as the report says them; with provenance,
    the e-nodes they built and how many of those the extraction chose."""
    from eqsat.pipeline.result import PetReport  # lazy: only a dump of a PET run has the row

    text = PetReport.from_dict(dump.pet).describe()
    if dump.provenance:
        built = [n for n in nodes if any(r.startswith(PET_RULE_PREFIX) for r in dump.creators(n))]
        text += f"; {len(built)} e-nodes built by them, {sum(n.id in dump.chosen for n in built)} chosen"
    return text


def _provenance_table(dump: EGraphDump, nodes: list[ENode]) -> list[str]:
    """E-nodes added per iteration, by the rules that built them in it (their first iteration)."""
    per: dict[int | None, list[ENode]] = {}
    for n in nodes:
        per.setdefault(dump.first_iteration(n), []).append(n)
    rows = []
    for k in sorted(per, key=lambda k: -1 if k is None else k):
        group = per[k]
        if k == 0:
            by = Counter("input graph" if n.id in dump.input_nodes else r for n in group
                         for r in (dump.creators(n) or ("input",)))
        else:
            by = Counter(r for n in group for r in (dump.creators(n) or ("(unknown)",)))
        top = sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"{r} {c}" for r, c in top[:5]) + (f" (+{len(top) - 5} more)" if len(top) > 5 else "")
        rows.append(("?" if k is None else k, len(group), shown))
    return ["e-nodes added per iteration by rule (provenance: the iteration an e-node first existed in and the "
            "rules that built it then; an e-node built by several rules counts for each)",
            *_table(("iter", "new e-nodes", "built by"), rows, right={0, 1})]


def class_report(dump: EGraphDump, key: str) -> str:
    """The ``eqsat egraph show`` report: one e-class, by class id, tensor name or e-node id."""
    cls = dump.find_class(key)
    eg = dump.egraph
    c = eg.eclass(cls)
    members = eg.members(cls)
    inputs = dump.input_nodes
    chosen = next((n for n in members if n.id in dump.chosen), None)
    shape = "a list of an opaque node's inputs" if c.type == "TList" else \
        "tensor " + dump.shape_text(c.shape)
    tensors = dump.tensors_of(cls)
    holds = f"; holds {', '.join(tensors)}" if tensors else ""
    root = "; a root (graph output)" if cls in eg.roots else ""
    lines = [f"e-class {cls}: {shape}{holds}{root}",
             f"{len(members)} e-node(s), {sum(n.id in inputs for n in members)} from the input graph; chosen: "
             + (f"{chosen.id} ({dump.label(chosen)})" if chosen else
                "none" if dump.extraction is not None else "none (no extraction recorded)")]
    parents = eg.parents(cls)
    if parents:
        used = sorted({p.eclass for p in parents}, key=lambda k: (k not in dump.selection, k))
        more = f" (+{len(used) - 8} more)" if len(used) > 8 else ""
        lines.append(f"used by {len(parents)} e-node(s) in: " + ", ".join(_class_ref(dump, u) for u in used[:8])
                     + more)
    lines.append("")
    order = sorted(members, key=lambda n: (n.id not in dump.chosen, n.id not in inputs, n.cost, n.id))
    if dump.provenance:
        rows = [("*" if n.id in dump.chosen else "", n.id, dump.describe(n), _fmt(n.cost),
                 "input" if n.id in inputs else "added",
                 "-" if dump.first_iteration(n) is None else dump.first_iteration(n), dump.describe_provenance(n),
                 ", ".join(_class_ref(dump, k) for k in n.children) or "-") for n in order]
        lines += _table(("", "e-node", "operator", "cost (ms)", "origin", "iter", "built by", "children"), rows,
                        right={3, 5})
    else:
        rows = [("*" if n.id in dump.chosen else "", n.id, dump.describe(n), _fmt(n.cost),
                 "input" if n.id in inputs else "added",
                 ", ".join(_class_ref(dump, k) for k in n.children) or "-") for n in order]
        lines += _table(("", "e-node", "operator", "cost (ms)", "origin", "children"), rows, right={3})
    lines.append("")
    lines.append("marks: * chosen by the extraction; origin: input = a term of the imported input graph, added = "
                 "made by rewrites")
    if dump.provenance:
        lines.append("iter: the iteration the e-node first existed in (0: input graph, sibling merges); built by: "
                     "the rules whose right-hand side built it then, and rule@N for a rule that built it again "
                     "first in iteration N")
    else:
        lines.append("provenance (iteration, rules) not recorded: 'eqsat optimize --dump-egraph PATH --provenance'")
    return "\n".join(lines)


def plain_report(data: Mapping[str, Any], path: str) -> str:
    """Sizes and operators of extraction-gym JSON without eqsat's block."""
    try:
        eg = parse_egraph(data)
    except ValueError as e:
        raise DumpError(f"{path}: neither an eqsat e-graph dump nor extraction-gym JSON ({e})") from None
    lines = [f"e-graph {path} (extraction-gym JSON without eqsat's block: sizes and operators only; "
             "'eqsat optimize --dump-egraph' writes full dumps)",
             f"e-graph  {eg.num_nodes} e-nodes, {eg.num_classes} e-classes, {len(eg.roots)} root(s)",
             "", "operators (e-nodes)"]
    lines += _table(("operator", "e-nodes"), sorted(Counter(eg.node_ops).items(), key=lambda kv: (-kv[1], kv[0])),
                    right={1})
    return "\n".join(lines)


def is_json_file(path: str) -> bool:
    """Whether ``path`` is (meant as) a JSON file: a ``.json`` name, or text starting with ``{``."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        return True
    try:
        with open(p, "rb") as f:
            return f.read(256).lstrip().startswith(b"{")
    except OSError:
        return False


def print_egraph_file(path: str) -> int:
    """Print the report of an e-graph file: ``stats`` for an eqsat dump, sizes and operators for plain
    extraction-gym JSON."""
    data = load_json(path)
    if is_dump(data):
        try:
            dump = EGraphDump.from_json(data)
        except DumpError as e:
            raise DumpError(f"{path}: {e}") from None
        print(stats_report(dump, path))
    else:
        print(plain_report(data, path))
    return 0


# -------------------------------------------------------------------------------------------------------------
# commands


def cmd_stats(args: argparse.Namespace) -> int:
    """``eqsat egraph stats DUMP``."""
    return print_egraph_file(args.dump)


def cmd_show(args: argparse.Namespace) -> int:
    """``eqsat egraph show DUMP CLASS|TENSOR``."""
    dump = EGraphDump.read(args.dump)
    print(class_report(dump, args.key))
    return 0


class GraphvizMissing(UsageError):
    """``eqsat egraph render`` to SVG (PNG, PDF) where Graphviz's ``dot`` is not installed; the ``.dot`` was
    written instead."""


#: output formats of ``render``: ``.dot`` is written here, the others by Graphviz's ``dot -T<format>``
RENDER_FORMATS = ("dot", "svg", "png", "pdf")


def _drawing(args: argparse.Namespace, max_nodes: int) -> Any:
    dump = EGraphDump.read(args.dump)
    return select(dump, args.around, args.depth, args.chosen_only, max_nodes)


def cmd_render(args: argparse.Namespace) -> int:
    """``eqsat egraph render DUMP -o OUT.svg|.dot [--around CLASS|TENSOR --depth N] [--chosen-only]``."""
    out = check_output(args.output, "-o", "egraph.svg")
    fmt = out.suffix.lower().lstrip(".")
    if fmt not in RENDER_FORMATS:
        raise UsageError(f"-o {args.output}: give a file ending in {', '.join('.' + f for f in RENDER_FORMATS)} "
                         "(.dot is Graphviz's text, the others are drawn by Graphviz's dot)")
    drawing = _drawing(args, args.max_nodes)
    dot = to_dot(drawing)
    size = f"{len(drawing.nodes)} e-nodes in {len(drawing.classes)} e-classes"
    if fmt == "dot":
        write_file(out, lambda p: p.write_text(dot, encoding="utf-8"))
        print(f"wrote {out} ({size}; draw it with: dot -Tsvg {out} -o {out.with_suffix('.svg')})")
        return 0
    exe = shutil.which("dot")
    if exe is None:
        text = out.with_suffix(".dot")
        write_file(text, lambda p: p.write_text(dot, encoding="utf-8"))
        raise GraphvizMissing(f"Graphviz's 'dot' is not installed, so no {out}: wrote {text} ({size}) instead; "
                              f"install Graphviz (apt install graphviz, or brew install graphviz) and run "
                              f"'dot -T{fmt} {text} -o {out}', or give -o with .dot")

    def draw(p: Path) -> None:
        done = subprocess.run([exe, f"-T{fmt}", "-o", str(p)], input=dot.encode(), capture_output=True, check=False)
        if done.returncode != 0 or not p.exists():
            why = done.stderr.decode(errors="replace").strip().splitlines()
            raise UsageError(f"Graphviz's dot failed on the drawing (exit {done.returncode}: "
                             f"{why[-1] if why else 'no message'}); write the text with -o {out.with_suffix('.dot')}")

    write_file(out, draw)
    print(f"wrote {out} ({size})")
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    """``eqsat egraph view DUMP -o OUT.html [--around CLASS|TENSOR --depth N] [--chosen-only]``."""
    out = check_output(args.output, "-o", "egraph.html")
    drawing = _drawing(args, args.max_nodes)
    page = to_html(drawing)
    write_file(out, lambda p: p.write_text(page, encoding="utf-8"))
    print(f"wrote {out} ({len(drawing.nodes)} e-nodes in {len(drawing.classes)} e-classes; one file, works "
          "offline: open it in a browser)")
    return 0


def _read_selection(path: str) -> dict[str, str]:
    """An extractor's selection: ``eqsat extract --out``'s ``{"selection": {class: node}, ...}`` or a bare
    ``{class: node}`` object."""
    try:
        data = load_json(path)
    except DumpError as e:
        raise UsageError(f"--selection {e}") from None
    sel = data.get("selection", data) if isinstance(data, Mapping) else data
    if not isinstance(sel, Mapping) or not sel or not all(isinstance(k, str) and isinstance(v, str)
                                                          for k, v in sel.items()):
        raise UsageError(f"--selection {path}: expected a JSON object of e-class -> e-node ids, or 'eqsat extract "
                         "--out' output ({\"selection\": {...}})")
    return dict(sel)


def cmd_export(args: argparse.Namespace) -> int:
    """``eqsat egraph export DUMP --model ORIGINAL.onnx [--selection SEL.json] -o OUT.onnx``."""
    # lazy: onnx, eqsat.onnx_io and the pipeline load in about 0.2 s; the CLI starts without them
    import onnx

    from eqsat import onnx_io
    from eqsat.pipeline.check import NumericCheckUnavailable, NumericMismatch, check_equal

    out = check_output(args.output, "-o", Path(args.model).stem + ".export.onnx")
    dump = EGraphDump.read(args.dump)
    if args.selection:
        selection, source = _read_selection(args.selection), args.selection
    else:
        selection, source = dump.selection, f"the dump's own choice ({args.dump})"
        if not selection:
            raise UsageError(f"{args.dump} records no extraction; give one with --selection SEL.json (e.g. from "
                             f"'eqsat extract {args.dump} --out SEL.json')")
    proto, label = onnx_io.read_model(args.model)
    fixed = input_shapes(args.input_shape)  # a dump of a model with dynamic axes was made with them as symbols
    graph = onnx_io.load_model(proto, input_shapes=fixed, label=label, symbolic=bool(dump.symbols) and not fixed)
    dump.check_input_graph(graph, model=args.model)
    try:
        cost = validate_selection(dump.egraph.serialized, selection)
    except InvalidExtraction as e:
        raise UsageError(f"--selection {source} does not fit the dump {args.dump}: {e}") from None
    _, written = dump.to_graph(selection, graph)
    model = onnx_io.carry_signature(proto, onnx_io.to_onnx(written), written,  # as optimize writes it
                                    dims="symbols" in graph.meta)
    numeric = None
    if not args.no_check:
        numeric = check_equal(proto, model, reference=f"the original model ({args.model})")
        if not numeric.ran:
            raise NumericCheckUnavailable(f"the numeric check cannot run: {'; '.join(numeric.problems)}. Nothing "
                                          "was written; pass --no-check to export without the check")
        if not numeric.ok:
            raise NumericMismatch(f"the exported model differs from the original: {numeric.summary()}. Nothing "
                                  "was written.")
    write_file(out, lambda p: onnx.save(model, str(p)))
    rows = [("selection", f"{source}: {len(selection)} e-classes"),
            ("cost", f"{_fmt(cost)} ms under the dump's costs ({dump.cost_model or '-'})"
             + ("" if dump.extraction is None or not math.isfinite(dump.extraction.cost) else
                f"; the run's extraction: {_fmt(dump.extraction.cost)} ms")),
            ("graph", f"{len(written.nodes)} IR nodes, {len(model.graph.node)} ONNX nodes "
                      f"(original: {len(graph.nodes)} IR, {len(proto.graph.node)} ONNX)"),
            ("numeric check", "not run (--no-check)" if numeric is None else numeric.summary())]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    print(f"\nwrote {out}")
    return 0


_DESCRIPTION = """Read the e-graph dumps 'eqsat optimize --dump-egraph' writes.

  stats DUMP                  sizes, operators (input vs added), largest e-classes, growth and rules per
                              iteration (with provenance: e-nodes added per iteration by rule), the
                              extraction and what it changed (plain extraction-gym JSON: sizes and operators)
  show DUMP CLASS|TENSOR      one e-class, by class id, tensor name of the input graph or e-node id (with
                              provenance: each e-node's first iteration and the rules that built it)
  render DUMP -o OUT.svg|.dot [--around CLASS|TENSOR --depth N] [--chosen-only]
                              a Graphviz drawing: e-classes as clusters, chosen e-nodes filled
  view DUMP -o OUT.html [--around CLASS|TENSOR --depth N] [--chosen-only]
                              one HTML file with egglog's interactive visualizer (works offline),
                              fitted to the window, the extraction's choice highlighted
  export DUMP --model M.onnx [--selection SEL.json] -o OUT.onnx
                              an extractor's selection ('eqsat extract --out' output; default: the dump's
                              own choice) as an ONNX model, checked against the original"""


_DUMP_HELP = "an e-graph dump written by 'eqsat optimize --dump-egraph'"


def register(subparsers: Any) -> None:
    """Add ``eqsat egraph {stats,show,render,view,export}``."""
    p = subparsers.add_parser("egraph", help="read e-graph dumps (eqsat optimize --dump-egraph): stats, show, render, "
                                             "view, export",
                              description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="egraph_command", metavar="{stats,show,render,view,export}", required=True,
                           help="what to do with the dump")
    s = sub.add_parser("stats", help="sizes, operators, largest e-classes, growth, what extraction changed")
    s.add_argument("dump", metavar="DUMP", help="an e-graph dump (or plain extraction-gym JSON: sizes and operators)")
    s.set_defaults(func=cmd_stats)
    sh = sub.add_parser("show", help="one e-class: its e-nodes with costs, origin, provenance, chosen mark and "
                                     "children")
    sh.add_argument("dump", metavar="DUMP", help=_DUMP_HELP)
    sh.add_argument("key", metavar="CLASS|TENSOR", help="an e-class id (T-5), a tensor name of the input graph, or "
                                                       "an e-node id")
    sh.set_defaults(func=cmd_show)
    for name, func, default_max, help_text, out_help in (
            ("render", cmd_render, 300, "a Graphviz drawing (.svg/.png/.pdf with Graphviz's dot, or .dot text)",
             "the drawing: .dot (Graphviz text, always), .svg, .png or .pdf (need Graphviz's dot)"),
            ("view", cmd_view, 3000, "one self-contained HTML page with egglog's interactive visualizer",
             "the HTML page (missing folders are created)")):
        r = sub.add_parser(name, help=help_text)
        r.add_argument("dump", metavar="DUMP", help=_DUMP_HELP)
        r.add_argument("-o", "--output", required=True, metavar="OUT", help=out_help)
        r.add_argument("--around", metavar="CLASS|TENSOR",
                       help="draw only the e-classes near this one (an e-class id, a tensor name or an e-node id)")
        r.add_argument("--depth", action=Count, minimum=0, unit="steps", default=2, metavar="N",
                       help="with --around: e-classes at most N steps away (a step: an e-node of one class uses "
                            "the other; default 2)")
        r.add_argument("--chosen-only", action="store_true", help="draw only the e-nodes the extraction chose")
        r.add_argument("--max-nodes", action=Count, minimum=1, unit="e-nodes", default=default_max, metavar="N",
                       help=f"refuse to draw more e-nodes than this (default {default_max})")
        r.set_defaults(func=func)
    e = sub.add_parser("export", help="an extractor's selection back into a checked ONNX model")
    e.add_argument("dump", metavar="DUMP", help=_DUMP_HELP)
    e.add_argument("--model", required=True, metavar="ORIGINAL.onnx", help="the model the dump was made from")
    e.add_argument("--selection", metavar="SEL.json",
                   help="e-class -> e-node ids ('eqsat extract --out' output or a bare object); default: the "
                        "dump's own choice")
    e.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="missing folders are created")
    e.add_argument("--input-shape", action="append", type=parse_shape, metavar="NAME=1,3,224,224",
                   help="the input shapes the dump was made with, for a model with dynamic dimensions (repeatable)")
    e.add_argument("--no-check", action="store_true", help="skip the onnxruntime numeric check")
    e.set_defaults(func=cmd_export)
