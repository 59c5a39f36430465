"""The code's structure, checked from the source (``ast``, nothing imported but the four root packages):

* no import cycle between eqsat's packages (``eqsat.ir``, ``eqsat.engine``, ..., ``eqsat.rules``; a module
  directly in ``eqsat/`` is a node of its own), nor between its modules: module-level ``import`` / ``from``
  statements count (also inside a top-level ``try`` or ``if``), imports inside functions and under
  ``if TYPE_CHECKING:`` do not;
* no module over 600 lines unless its docstring has a line starting ``Over 600 lines:`` that says why
  (``PENDING_SPLITS`` names modules being split on a branch; it is empty on main);
* ``eqsat.extract`` imports nothing of eqsat outside itself, and only ``eqsat.engine`` imports ``egglog``
  (every import statement counts here, lazy ones included).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
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


@dataclass(frozen=True)
class Import:
    """One import statement of a module: the module it names, where, and whether it runs at import time."""

    target: str
    line: int
    top_level: bool


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool

    @property
    def rel(self) -> str:
        return self.path.relative_to(REPO).as_posix() if self.path.is_relative_to(REPO) else str(self.path)


@cache
def modules() -> dict[str, Module]:
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


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(body: list[ast.stmt], top: bool) -> list[tuple[ast.stmt, bool]]:
    """Import statements with whether they run when the module is imported: those of the module body and of
    its top-level ``try`` / ``if`` / ``with`` blocks (not ``if TYPE_CHECKING:``); deeper ones run later."""
    out: list[tuple[ast.stmt, bool]] = []
    for st in body:
        if isinstance(st, ast.Import | ast.ImportFrom):
            out.append((st, top))
        elif isinstance(st, ast.If):
            out += _statements(st.body, top and not _is_type_checking(st.test)) + _statements(st.orelse, top)
        elif isinstance(st, ast.Try):
            for block in (st.body, *(h.body for h in st.handlers), st.orelse, st.finalbody):
                out += _statements(block, top)
        elif isinstance(st, ast.With | ast.ClassDef):  # a class body runs when the module is imported
            out += _statements(st.body, top)
        else:  # functions, loops, ...: their imports run later, if at all
            out += [(sub, False) for sub in ast.walk(st) if isinstance(sub, ast.Import | ast.ImportFrom)]
    return out


@cache
def imports(name: str) -> tuple[Import, ...]:
    """Every import statement of a module, each resolved to the modules it names (``from p import m`` names
    ``p.m`` when that is a module, else ``p``)."""
    mod = modules()[name]
    tree = ast.parse(mod.path.read_text(encoding="utf-8"), str(mod.path))
    package = name if mod.is_package else name.rpartition(".")[0]
    out: list[Import] = []
    for st, top in _statements(tree.body, True):
        if isinstance(st, ast.Import):
            out += [Import(a.name, st.lineno, top) for a in st.names]
            continue
        if st.level:
            base = package.split(".")
            base = base[:len(base) - st.level + 1]
            source = ".".join(base + ([st.module] if st.module else []))
        else:
            source = st.module or ""
        for a in st.names:
            sub = f"{source}.{a.name}"
            out.append(Import(sub if sub in modules() else source, st.lineno, top))
    return tuple(out)


def package_of(name: str) -> str:
    """The package node of a module: its first two dotted parts (``eqsat.rules.corpus`` -> ``eqsat.rules``);
    a module directly in eqsat/ is its own node (``eqsat.errors``; ``eqsat`` for eqsat/__init__.py)."""
    return ".".join(name.split(".")[:2])


def _edges(node_of) -> dict[str, dict[str, list[str]]]:
    """node -> node -> the import lines that make the edge ('file:line imports target')."""
    graph: dict[str, dict[str, list[str]]] = {}
    for name, mod in modules().items():
        a = node_of(name)
        graph.setdefault(a, {})
        for imp in imports(name):
            if not imp.top_level or imp.target not in modules():
                continue
            b = node_of(imp.target)
            if b != a:
                graph[a].setdefault(b, []).append(f"{mod.rel}:{imp.line} imports {imp.target}")
    return graph


def find_cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
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


def _describe(cycles: list[list[str]], graph: dict[str, dict[str, list[str]]]) -> str:
    out = []
    for cycle in cycles:
        out.append(" -> ".join(cycle))
        out += [f"    {a} -> {b}: " + "; ".join(graph[a][b][:3]) for a, b in zip(cycle, cycle[1:], strict=False)]
    return "\n".join(out)


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


def test_no_import_cycle_between_packages() -> None:
    graph = _edges(package_of)
    cycles = find_cycles(graph)
    assert not cycles, "import cycles between packages:\n" + _describe(cycles, graph)


def test_no_import_cycle_between_modules() -> None:
    graph = _edges(lambda name: name)
    cycles = find_cycles(graph)
    assert not cycles, "import cycles between modules:\n" + _describe(cycles, graph)


def test_the_cycle_check_finds_and_names_a_cycle() -> None:
    graph = {"a": {"b": ["a.py:1 imports b"]}, "b": {"c": ["b.py:3 imports c"]}, "c": {"a": ["c.py:2 imports a"]},
             "d": {"a": ["d.py:1 imports a"]}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert "c -> a: c.py:2 imports a" in _describe(find_cycles(graph), graph)
    assert find_cycles({"a": {"b": []}, "b": {}}) == []


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
    outside = [f"{modules()[n].rel}:{i.line} imports {i.target}" for n in modules() if n.startswith("eqsat.extract")
               for i in imports(n) if i.target.split(".")[0] == "eqsat" and not i.target.startswith("eqsat.extract")]
    assert not outside, "eqsat.extract is a standalone extractor of serialized e-graphs:\n" + "\n".join(outside)


def test_only_the_engine_imports_egglog() -> None:
    users = [f"{modules()[n].rel}:{i.line}" for n in modules() if package_of(n) != "eqsat.engine"
             for i in imports(n) if i.target.split(".")[0] == "egglog"]
    assert not users, "egglog is the engine's business (eqsat.engine):\n" + "\n".join(users)
    assert any(i.target.split(".")[0] == "egglog" for n in modules() if package_of(n) == "eqsat.engine"
               for i in imports(n))


@pytest.mark.parametrize("source, expect", [
    ("import egglog\n", [("egglog", True)]),
    ("from . import cpsat\n", [("eqsat.extract.cpsat", True)]),
    ("from .result import Extraction\n", [("eqsat.extract.result", True)]),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import eqsat.ir\n",
     [("typing", True), ("eqsat.ir", False)]),
    ("try:\n    import ray\nexcept ImportError:\n    ray = None\n", [("ray", True)]),
    ("def f():\n    import egglog\n", [("egglog", False)]),
])
def test_imports_are_read_as_python_runs_them(source: str, expect: list[tuple[str, bool]], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source)
    fake = {**modules(), "eqsat.extract.probe": Module("eqsat.extract.probe", path, False)}
    monkeypatch.setattr(sys.modules[__name__], "modules", lambda: fake)
    imports.cache_clear()
    try:
        assert [(i.target, i.top_level) for i in imports("eqsat.extract.probe")] == expect
    finally:
        imports.cache_clear()
