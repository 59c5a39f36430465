"""The code's structure, checked from the source (``ast``; the four root packages are imported only to find
their folders):

* the layer order of docs/architecture.md ("What may import what"): every import of one of eqsat's packages by
  another goes to its left in that order, lazy imports (inside functions) and ``if TYPE_CHECKING:`` ones
  included, and the order names every package there is, once;
* no import cycle between eqsat's packages (``eqsat.ir``, ``eqsat.engine``, ..., ``eqsat.rules``; a module
  directly in ``eqsat/`` is a node of its own), nor between its modules, counting every import statement (a
  cycle through a lazy import is still a cycle: the code only hides it);
* no module over 600 lines unless its docstring has a line starting ``Over 600 lines:`` that says why
  (``PENDING_SPLITS`` names modules being split on a branch; it is empty on main);
* ``eqsat.extract`` imports nothing of eqsat outside itself, and only ``eqsat.engine`` imports ``egglog``.

Each check is a function of a module table (:func:`modules`), so the tests below also plant a module that
breaks it and see it fail. Only import statements count: a module named in a string (``importlib``, the
``eqsat.cost_models`` entry point that finds the GPU cost model) is a dependency this test cannot see, and one
the code must say it has. A package's ``__init__`` running before its module is not an edge either (a package
re-exports its modules by design).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from eqsat.extract.greedy import strongly_connected_components

ROOTS = ("eqsat", "eqsat.rules", "eqsat.extract", "eqsat.gpu")
MAX_LINES = 600
#: Modules over MAX_LINES that other branches are splitting (relative to the repository root).
PENDING_SPLITS: frozenset[str] = frozenset()
REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "docs" / "architecture.md"


@dataclass(frozen=True)
class Import:
    """One import statement of a module: the module it names, where, and when it runs: ``top`` (when the
    module is imported), ``lazy`` (inside a function) or ``typing`` (``if TYPE_CHECKING:``, never at run time)."""

    target: str
    line: int
    when: str


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def rel(self) -> str:
        return self.path.relative_to(REPO).as_posix() if self.path.is_relative_to(REPO) else str(self.path)


Modules = Mapping[str, Module]


def _walk_roots() -> dict[str, Module]:
    """Every module of the root packages, by dotted name, found on disk (not imported)."""
    found: dict[str, Module] = {}

    def walk(package: str, folder: Path) -> None:
        found[package] = Module(package, folder / "__init__.py", True)
        for info in pkgutil.iter_modules([str(folder)]):
            name = f"{package}.{info.name}"
            if info.ispkg:
                walk(name, folder / info.name)
            else:
                found[name] = Module(name, folder / f"{info.name}.py", False)

    for root in ROOTS:
        walk(root, Path(importlib.import_module(root).__file__).parent)
    return found


_MODULES = _walk_roots()


def modules() -> dict[str, Module]:
    """The code's modules (a copy: tests plant modules in theirs)."""
    return dict(_MODULES)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(body: list[ast.stmt], when: str) -> list[tuple[ast.stmt, str]]:
    """Import statements with when they run: those of the module body and of its top-level ``try`` / ``if`` /
    ``with`` / class blocks when it is imported (``if TYPE_CHECKING:`` never), deeper ones later, if at all."""
    out: list[tuple[ast.stmt, str]] = []
    for st in body:
        if isinstance(st, ast.Import | ast.ImportFrom):
            out.append((st, when))
        elif isinstance(st, ast.If):
            inner = "typing" if _is_type_checking(st.test) else when
            out += _statements(st.body, inner) + _statements(st.orelse, when)
        elif isinstance(st, ast.Try):
            for block in (st.body, *(h.body for h in st.handlers), st.orelse, st.finalbody):
                out += _statements(block, when)
        elif isinstance(st, ast.With | ast.ClassDef):  # a class body runs when the module is imported
            out += _statements(st.body, when)
        else:  # functions, loops, ...: their imports run later, if at all
            out += [(sub, "lazy" if when == "top" else when) for sub in ast.walk(st)
                    if isinstance(sub, ast.Import | ast.ImportFrom)]
    return out


@cache
def _parsed(path: Path) -> tuple[tuple[ast.Import | ast.ImportFrom, str], ...]:
    """The import statements of a source file, with when each runs."""
    return tuple(_statements(ast.parse(path.read_text(encoding="utf-8"), str(path)).body, "top"))


def imports(name: str, mods: Modules | None = None) -> tuple[Import, ...]:
    """Every import statement of a module, each resolved to the modules it names (``from p import m`` names
    ``p.m`` when that is a module, else ``p``)."""
    mods = _MODULES if mods is None else mods
    mod = mods[name]
    package = name if mod.is_package else name.rpartition(".")[0]
    out: list[Import] = []
    for st, when in _parsed(mod.path):
        if isinstance(st, ast.Import):
            out += [Import(a.name, st.lineno, when) for a in st.names]
            continue
        if st.level:
            base = package.split(".")
            base = base[:len(base) - st.level + 1]
            source = ".".join(base + ([st.module] if st.module else []))
        else:
            source = st.module or ""
        for a in st.names:
            sub = f"{source}.{a.name}"
            out.append(Import(sub if sub in mods else source, st.lineno, when))
    return tuple(out)


def package_of(name: str) -> str:
    """The package node of a module: its first two dotted parts (``eqsat.rules.corpus`` -> ``eqsat.rules``);
    a module directly in eqsat/ is its own node (``eqsat.errors``; ``eqsat`` for eqsat/__init__.py)."""
    return ".".join(name.split(".")[:2])


Graph = dict[str, dict[str, list[str]]]


def edges(node_of: Callable[[str], str], mods: Modules | None = None) -> Graph:
    """node -> node -> the import lines that make the edge ('file:line imports target (lazy)'); every import
    statement counts."""
    mods = _MODULES if mods is None else mods
    graph: Graph = {}
    for name, mod in mods.items():
        a = node_of(name)
        graph.setdefault(a, {})
        for imp in imports(name, mods):
            if imp.target not in mods:
                continue
            b = node_of(imp.target)
            if b != a:
                note = "" if imp.when == "top" else f" ({imp.when})"
                line = f"{mod.rel}:{imp.line} imports {imp.target}{note}"
                if line not in graph[a].setdefault(b, []):  # ``from p import a, b``: one line
                    graph[a][b].append(line)
    return graph


def find_cycles(graph: Graph) -> list[list[str]]:
    """One cycle (a list of nodes, the first repeated at the end) through each strongly connected component of
    more than one node (the extractors' Tarjan, then a path search inside the component)."""
    succ = {v: sorted(graph[v]) for v in sorted(graph)}
    for targets in list(succ.values()):  # a node only imported is a node too
        for w in targets:
            succ.setdefault(w, [])
    comps = [set(c) for c in strongly_connected_components(succ) if len(c) > 1]
    cycles = []
    for comp in comps:
        start = min(comp)
        paths = {start: [start]}
        frontier = [start]
        cycle = None
        while frontier and cycle is None:  # breadth first: the shortest cycle through ``start``
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w == start:
                        cycle = paths[v] + [start]
                        break
                    if w in comp and w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                if cycle:
                    break
            frontier = nxt
        cycles.append(cycle)
    return cycles


def _describe(cycles: list[list[str]], graph: Graph) -> str:
    out = []
    for cycle in cycles:
        out.append(" -> ".join(cycle))
        out += [f"    {a} -> {b}: " + "; ".join(graph[a][b][:3]) for a, b in zip(cycle, cycle[1:], strict=False)]
    return "\n".join(out)


def documented_layers(text: str | None = None) -> list[str]:
    """The layer order of docs/architecture.md, lowest first, as package nodes: the fenced line of names joined
    by ``<`` under "What may import what" (``ops`` is ``eqsat.ops``; ``eqsat`` is eqsat/__init__.py)."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    section = text.split("## What may import what", 1)[1]
    match = re.search(r"```\n(.*?)\n```", section, re.S)
    assert match, "docs/architecture.md: no fenced layer order under 'What may import what'"
    names = [n.strip() for n in " ".join(match.group(1).split()).split("<")]
    return [n if n == "eqsat" else f"eqsat.{n}" for n in names]


def layer_violations(layers: list[str], mods: Modules | None = None) -> list[str]:
    """Each import of a package by one to its left in ``layers`` (or by itself through another package), as
    'importer -> imported: the lines'."""
    rank = {name: k for k, name in enumerate(layers)}
    out = []
    for a, targets in sorted(edges(package_of, mods).items()):
        for b, lines in sorted(targets.items()):
            if a not in rank or b not in rank:  # the test of the order's names says which
                out.append(f"{a} -> {b}: {a if a not in rank else b} is not in the layer order")
            elif rank[b] >= rank[a]:
                out.append(f"{a} -> {b}: " + "; ".join(lines[:3]))
    return out


# ---------------------------------------------------------------------------------------------------------
# the checks


def test_the_walk_finds_every_package() -> None:
    names = set(modules())
    assert {"eqsat.ir.graph", "eqsat.engine.saturation", "eqsat.rules.corpus", "eqsat.extract.cpsat",
            "eqsat.gpu.cupy_measure", "eqsat.testing.fuzz.motifs", "eqsat.errors"} <= names
    assert {package_of(n) for n in names} >= {"eqsat.ir", "eqsat.ops", "eqsat.onnx_io", "eqsat.engine",
                                              "eqsat.costs", "eqsat.inspect", "eqsat.pipeline", "eqsat.search",
                                              "eqsat.models", "eqsat.testing", "eqsat.cli", "eqsat.rules",
                                              "eqsat.extract", "eqsat.gpu"}


def test_the_documented_layer_order_names_every_package_once() -> None:
    layers = documented_layers()
    assert len(layers) == len(set(layers)), f"a package named twice: {layers}"
    packages = {package_of(n) for n in modules()}
    assert not packages - set(layers), ("docs/architecture.md's layer order leaves out "
                                        f"{sorted(packages - set(layers))}: say where they sit")
    assert not set(layers) - packages, f"docs/architecture.md's layer order names no package {set(layers) - packages}"


def test_every_import_follows_the_documented_layer_order() -> None:
    bad = layer_violations(documented_layers())
    assert not bad, ("imports against docs/architecture.md's layer order (a package imports only those to its "
                     "left):\n" + "\n".join(bad))


def test_no_import_cycle_between_packages() -> None:
    graph = edges(package_of)
    cycles = find_cycles(graph)
    assert not cycles, "import cycles between packages:\n" + _describe(cycles, graph)


def test_no_import_cycle_between_modules() -> None:
    graph = edges(lambda name: name)
    cycles = find_cycles(graph)
    assert not cycles, "import cycles between modules:\n" + _describe(cycles, graph)


def test_the_cycle_check_finds_and_names_a_cycle() -> None:
    graph = {"a": {"b": ["a.py:1 imports b"]}, "b": {"c": ["b.py:3 imports c"]}, "c": {"a": ["c.py:2 imports a"]},
             "d": {"a": ["d.py:1 imports a"]}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert "c -> a: c.py:2 imports a" in _describe(find_cycles(graph), graph)
    assert find_cycles({"a": {"b": []}, "b": {}}) == []


def _planted(tmp_path: Path, **sources: str) -> dict[str, Module]:
    """The code's modules with more: ``eqsat_ops_planted="..."`` plants ``eqsat.ops.planted`` with that source."""
    mods = modules()
    for key, source in sources.items():
        name = key.replace("_", ".", 2)
        path = tmp_path / f"{name.rpartition('.')[2]}.py"
        path.write_text(source, encoding="utf-8")
        mods[name] = Module(name, path, False)
    return mods


def test_a_planted_lazy_import_cycle_fails_the_checks(tmp_path: Path) -> None:
    # eqsat.ir imports eqsat.ops at its top; a function in eqsat.ops importing eqsat.ir closes a cycle
    mods = _planted(tmp_path, eqsat_ops_planted="def later():\n    from eqsat.ir.graph import Graph\n")
    graph = edges(package_of, mods)
    cycles = find_cycles(graph)
    assert any({"eqsat.ops", "eqsat.ir"} <= set(c) for c in cycles), cycles
    assert "planted.py:2 imports eqsat.ir.graph (lazy)" in _describe(cycles, graph)
    # between modules: one imports the other at its top, the other imports it back inside a function
    mods = _planted(tmp_path, eqsat_ops_first="from eqsat.ops import second\n",
                    eqsat_ops_second="def later():\n    from eqsat.ops import first\n")
    graph = edges(lambda n: n, mods)
    assert ["eqsat.ops.first", "eqsat.ops.second", "eqsat.ops.first"] in find_cycles(graph)


def test_a_planted_import_against_the_layer_order_fails_the_check(tmp_path: Path) -> None:
    # no cycle: nothing imports the planted module, but the IR must not reach up to the pipeline
    mods = _planted(tmp_path, eqsat_ir_planted="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                               "    from eqsat.pipeline import run\n")
    bad = [b for b in layer_violations(documented_layers(), mods) if b.startswith("eqsat.ir -> eqsat.pipeline")]
    assert len(bad) == 1 and bad[0].endswith("planted.py:3 imports eqsat.pipeline.run (typing)"), bad


def test_the_layer_order_is_read_from_the_fenced_line() -> None:
    text = "# x\n## What may import what\n\nA may import B:\n\n```\nerrors < ops\n  < ir < eqsat\n```\n"
    assert documented_layers(text) == ["eqsat.errors", "eqsat.ops", "eqsat.ir", "eqsat"]


def _first_docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def test_modules_stay_under_600_lines_or_say_why() -> None:
    too_long = []
    for mod in modules().values():
        lines = len(mod.path.read_text(encoding="utf-8").splitlines())
        if lines <= MAX_LINES or mod.rel in PENDING_SPLITS:
            continue
        if not any(line.startswith("Over 600 lines:") for line in _first_docstring(mod.path).splitlines()):
            too_long.append(f"{mod.rel}: {lines} lines")
    assert not too_long, (f"modules over {MAX_LINES} lines without an 'Over 600 lines: <reason>' line in their "
                          "docstring (split them, or say why they are one module):\n" + "\n".join(too_long))


def test_pending_splits_are_real_files() -> None:
    # an entry that no longer exists (renamed, or split and deleted) must leave the list
    assert all((REPO / rel).is_file() for rel in PENDING_SPLITS), sorted(PENDING_SPLITS)


def test_extraction_imports_nothing_of_eqsat_outside_itself() -> None:
    mods = modules()
    outside = [f"{mods[n].rel}:{i.line} imports {i.target}" for n in mods if n.startswith("eqsat.extract")
               for i in imports(n) if i.target.split(".")[0] == "eqsat" and not i.target.startswith("eqsat.extract")]
    assert not outside, "eqsat.extract is a standalone extractor of serialized e-graphs:\n" + "\n".join(outside)


def test_only_the_engine_imports_egglog() -> None:
    mods = modules()
    users = [f"{mods[n].rel}:{i.line}" for n in mods if package_of(n) != "eqsat.engine"
             for i in imports(n) if i.target.split(".")[0] == "egglog"]
    assert not users, "egglog is the engine's business (eqsat.engine):\n" + "\n".join(users)
    assert any(i.target.split(".")[0] == "egglog" for n in mods if package_of(n) == "eqsat.engine"
               for i in imports(n))


@pytest.mark.parametrize("source, expect", [
    ("import egglog\n", [("egglog", "top")]),
    ("from . import cpsat\n", [("eqsat.extract.cpsat", "top")]),
    ("from .result import Extraction\n", [("eqsat.extract.result", "top")]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import eqsat.ir\n",
     [("typing", "top"), ("eqsat.ir", "typing")]),
    ("try:\n    import ray\nexcept ImportError:\n    ray = None\n", [("ray", "top")]),
    ("def f():\n    import egglog\n", [("egglog", "lazy")]),
    ("class C:\n    def f(self):\n        from . import cpsat\n", [("eqsat.extract.cpsat", "lazy")]),
])
def test_imports_are_read_as_python_runs_them(source: str, expect: list[tuple[str, str]], tmp_path: Path) -> None:
    mods = _planted(tmp_path, eqsat_extract_probe=source)
    assert [(i.target, i.when) for i in imports("eqsat.extract.probe", mods)] == expect
