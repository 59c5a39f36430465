"""Tests of eqsat.extract: loader, greedy, CP-SAT, validator and CLI, checked against brute force."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import threading
from pathlib import Path

import pytest

from eqsat.extract import (
    Extraction,
    InvalidExtraction,
    NoFiniteChoice,
    SerializedEGraph,
    extract,
    extract_cpsat,
    extract_greedy,
    load_egraph,
    validate_selection,
)
from eqsat.extract import cli as extract_cli
from eqsat.extract import greedy as greedy_module
from eqsat.extract.validate import reachable_part

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # the extractor warns about model bugs

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "extraction-data"
FAST = {"time_limit": 10.0, "num_workers": 2, "random_seed": 1}


# ------------------------------------------------------------------------------------------ helpers
def egraph(spec: dict[str, tuple[str, float, list[str]]], roots: list[str]) -> dict:
    """JSON dict from {node id: (class, cost, children node ids)}."""
    return {"nodes": {n: {"op": n, "cost": cost, "eclass": c, "children": kids}
                      for n, (c, cost, kids) in spec.items()},
            "root_eclasses": roots}


def brute_force(data: dict) -> float | None:
    """Minimum DAG cost over every acyclic selection (None if none exists), straight from the JSON."""
    nodes = data["nodes"]
    classes: dict[str, list[str]] = {}
    for nid, node in nodes.items():
        classes.setdefault(node["eclass"], []).append(nid)
    names = list(classes)
    best = None
    for combo in itertools.product(*(classes[c] for c in names)):
        choice = dict(zip(names, combo, strict=True))
        cost = _dag_cost(nodes, choice, data["root_eclasses"])
        if cost is not None and (best is None or cost < best):
            best = cost
    return best


def _dag_cost(nodes: dict, choice: dict[str, str], roots: list[str]) -> float | None:
    """DAG cost of ``choice`` (every class chosen) or None if the part reachable from the roots is cyclic."""
    state: dict[str, int] = {}

    def visit(c: str) -> bool:
        if state.get(c) == 1:
            return False
        if state.get(c) == 2:
            return True
        state[c] = 1
        ok = all(visit(nodes[k]["eclass"]) for k in nodes[choice[c]]["children"])
        state[c] = 2
        return ok

    if not all(visit(r) for r in roots):
        return None
    return math.fsum(float(nodes[choice[c]].get("cost", 1.0)) for c in state)


def random_egraph(rng: random.Random, negative: bool = False, floats: bool = False) -> dict:
    """A small random e-graph (cycles, self-loops, repeated children, duplicate roots all possible)."""
    n_classes = rng.randint(2, 7)
    counts = [rng.randint(1, 3) for _ in range(n_classes)]
    spec = {}
    for c in range(n_classes):
        for j in range(counts[c]):
            targets = [rng.randrange(n_classes) for _ in range(rng.randint(1, 3))]
            kids = [] if rng.random() < 0.3 else [f"{d}.{rng.randrange(counts[d])}" for d in targets]
            cost = rng.randint(-3 if negative else 0, 6)
            if floats:
                cost = round(cost * 0.137 + rng.random() * 0.01, 4)
            spec[f"{c}.{j}"] = (str(c), cost, kids)
    roots = [str(rng.randrange(n_classes)) for _ in range(rng.randint(1, 3))]
    return egraph(spec, roots)


def check(eg: SerializedEGraph, ext: Extraction) -> None:
    """The result is valid, its cost is the validator's, and the selection holds only reachable classes."""
    assert validate_selection(eg, ext.selection) == pytest.approx(ext.cost, abs=1e-9)
    reached = {eg.class_of(n) for n in ext.selection.values()}
    assert reached == set(ext.selection)
    assert set(eg.root_classes) <= set(ext.selection)


# ------------------------------------------------------------------------------------------- loader
def test_loader_indexes_classes_children_and_roots() -> None:
    data = egraph({"a0": ("A", 2.0, ["b0", "b1", "b0"]), "b0": ("B", 1.0, []), "b1": ("B", 3.0, [])},
                  ["A", "A"])
    del data["nodes"]["b1"]["cost"]
    eg = load_egraph(data)
    assert (eg.num_nodes, eg.num_classes) == (3, 2)
    assert eg.root_classes == ("A",)
    assert eg.child_classes("a0") == ("B",)
    assert eg.nodes_of("B") == ("b0", "b1")
    assert eg.cost_of("b1") == 1.0  # default cost
    assert eg.class_of("a0") == "A" and eg.op_of("a0") == "a0"
    with pytest.raises(TypeError):
        eg.class_ids[0] = "x"  # type: ignore[index]


def test_loader_reads_a_path(tmp_path: Path) -> None:
    f = tmp_path / "g.json"
    f.write_text(json.dumps(egraph({"x": ("X", 1.5, [])}, ["X"])))
    assert load_egraph(f).cost_of("x") == 1.5
    assert load_egraph(str(f)).root_classes == ("X",)


@pytest.mark.parametrize("data, message", [
    ({"root_eclasses": ["A"]}, "no 'nodes'"),
    ({"nodes": {}, "root_eclasses": ["A"]}, "no nodes"),
    (egraph({"a": ("A", 1, ["zz"])}, ["A"]), "child 'zz'"),
    (egraph({"a": ("A", 1, [])}, ["B"]), "root class 'B' has no nodes"),
    (egraph({"a": ("A", 1, [])}, []), "root_eclasses"),
    ({"nodes": {"a": {"op": "a", "cost": 1}}, "root_eclasses": ["A"]}, "eclass"),
    (egraph({"a": ("A", "cheap", [])}, ["A"]), "non-numeric cost"),  # type: ignore[dict-item]
    (egraph({"a": ("A", float("nan"), [])}, ["A"]), "non-finite cost"),
    ([1, 2], "must be an object"),
])
def test_loader_rejects_malformed_input(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_egraph(data)  # type: ignore[arg-type]


def test_loader_reports_bad_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        load_egraph(bad)
    with pytest.raises(FileNotFoundError):
        load_egraph(tmp_path / "missing.json")


# ---------------------------------------------------------------------------------- synthetic cases
CHAIN = egraph({"a": ("A", 1, ["b"]), "b": ("B", 2, ["c"]), "c": ("C", 4, [])}, ["A"])
# sharing s (cost 3) between x and y is cheaper for the DAG, but each class alone prefers its leaf
DIAMOND = egraph({"r": ("R", 0, ["x0", "y0"]), "x0": ("X", 1, ["s"]), "x1": ("X", 3, []),
                  "y0": ("Y", 1, ["s"]), "y1": ("Y", 3, []), "s": ("S", 3, [])}, ["R"])
CYCLE = egraph({"a0": ("A", 1, ["b0"]), "a1": ("A", 10, []), "b0": ("B", 0, ["a0"]), "b1": ("B", 5, [])},
               ["A"])
SELF_LOOP = egraph({"a0": ("A", 0, ["a0"]), "a1": ("A", 3, [])}, ["A"])
MULTI_ROOT = egraph({"p": ("P", 2, ["s"]), "q": ("Q", 1, ["s", "s", "s"]), "s": ("S", 5, []),
                     "s2": ("S", 4, ["p"])}, ["P", "Q", "P", "Q"])
# the unreachable class Z must not lower the cost; choosing r1 pulls in y's negative cost
NEGATIVE = egraph({"r0": ("R", 0, ["x"]), "r1": ("R", 0, ["x", "y"]), "x": ("X", 1, []), "y": ("Y", -5, []),
                   "z": ("Z", -100, [])}, ["R"])
# a negative class is worth reaching through the dearer d1; it must not be "activated" for free
NEGATIVE_PULL = egraph({"r": ("R", 0, ["d0"]), "d0": ("D", 0, []), "d1": ("D", 1, ["n"]),
                        "n": ("N", -10, [])}, ["R"])
# found by a random search: faster-greedy-dag's per-class choices form a cycle here (negative costs)
GREEDY_CYCLE = egraph({
    "0.0": ("0", -1, ["1.1", "2.1"]), "0.1": ("0", 1, ["2.1", "1.1", "1.1"]), "1.0": ("1", 2, ["0.0"]),
    "1.1": ("1", 0, []), "2.0": ("2", -3, ["3.1"]), "2.1": ("2", 4, ["1.1", "1.1"]), "2.2": ("2", 0, []),
    "3.0": ("3", -1, ["0.1", "3.2"]), "3.1": ("3", 2, []), "3.2": ("3", -3, ["0.1"])}, ["2"])

CASES = {"chain": (CHAIN, 7), "diamond": (DIAMOND, 5), "cycle": (CYCLE, 6), "self_loop": (SELF_LOOP, 3),
         "multi_root": (MULTI_ROOT, 8), "negative": (NEGATIVE, -4),
         "negative_pull": (NEGATIVE_PULL, -9), "greedy_cycle": (GREEDY_CYCLE, None)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_synthetic_cases_match_brute_force(name: str) -> None:
    data, expected = CASES[name]
    optimum = brute_force(data)
    if expected is not None:
        assert optimum == expected
    eg = load_egraph(data)
    exact = extract_cpsat(eg, **FAST)
    greedy = extract_greedy(eg)
    check(eg, exact)
    check(eg, greedy)
    assert exact.status == "optimal"
    assert exact.cost == pytest.approx(optimum)
    assert greedy.cost >= optimum
    assert exact.greedy_cost == pytest.approx(greedy.cost)
    assert exact.bound == pytest.approx(optimum) and exact.gap == 0.0


def test_greedy_repairs_cyclic_choices() -> None:
    eg = load_egraph(GREEDY_CYCLE)
    fifo = greedy_module._fifo_greedy(eg, greedy_module.reachable_class_mask(eg))
    assert greedy_module._selection_from_choices(eg, fifo) is None  # the first pass really is cyclic here
    ext = extract_greedy(eg)
    check(eg, ext)
    assert ext.cost >= brute_force(GREEDY_CYCLE)


def test_strongly_connected_components_children_first() -> None:
    succ = {0: [1], 1: [2, 0], 2: [3], 3: [2], 4: [4], 5: []}
    comps = greedy_module.strongly_connected_components(succ)
    assert sorted(sorted(c) for c in comps) == [[0, 1], [2, 3], [4], [5]]
    position = {v: i for i, c in enumerate(comps) for v in c}
    assert position[2] < position[0]  # {2, 3} is reachable from {0, 1}, so it comes first


def test_diamond_exact_beats_greedy() -> None:
    eg = load_egraph(DIAMOND)
    exact, greedy = extract_cpsat(eg, **FAST), extract_greedy(eg)
    assert greedy.cost == 6 and exact.cost == 5
    assert exact.selection == {"R": "r", "X": "x0", "Y": "y0", "S": "s"}


def test_cycle_and_self_loop_choices_are_avoided() -> None:
    assert extract_cpsat(load_egraph(CYCLE), **FAST).selection == {"A": "a0", "B": "b1"}
    assert extract_cpsat(load_egraph(SELF_LOOP), **FAST).selection == {"A": "a1"}
    assert extract_greedy(load_egraph(SELF_LOOP)).selection == {"A": "a1"}


def test_negative_costs_count_only_reachable_nodes() -> None:
    ext = extract_cpsat(load_egraph(NEGATIVE), **FAST)
    assert ext.cost == -4
    assert "Z" not in ext.selection


def test_float_costs_are_recomputed_exactly() -> None:
    data = egraph({"r": ("R", 0.1, ["a", "b"]), "a": ("A", 0.2, []), "b": ("B", 1e-7, []),
                   "b2": ("B", 3e-7, [])}, ["R"])
    ext = extract_cpsat(load_egraph(data), **FAST)
    assert ext.cost == math.fsum([0.1, 0.2, 1e-7])
    assert ext.selection["B"] == "b"


def test_no_finite_choice_names_the_class() -> None:
    data = egraph({"r": ("R", 1, ["a"]), "a": ("A", 1, ["a"]), "b": ("A", 1, ["r"])}, ["R"])
    eg = load_egraph(data)
    for run in (extract_greedy, lambda g: extract_cpsat(g, **FAST)):
        with pytest.raises(NoFiniteChoice) as info:
            run(eg)
        assert info.value.class_id == "R"
        assert "'R'" in str(info.value) and "'A'" in str(info.value)


def test_no_finite_choice_only_when_needed() -> None:
    # Z has no acyclic choice but is not reachable from the root; an alternative avoids W
    data = egraph({"r0": ("R", 1, ["w"]), "r1": ("R", 5, []), "w": ("W", 0, ["w"]), "z": ("Z", 1, ["z"])},
                  ["R"])
    eg = load_egraph(data)
    assert extract_greedy(eg).selection == {"R": "r1"}
    assert extract_cpsat(eg, **FAST).cost == 5


def test_extract_dispatch_and_options() -> None:
    eg = load_egraph(CHAIN)
    assert extract(eg, solver="greedy").solver == "greedy"
    assert extract(CHAIN, time_limit=5, num_workers=1).cost == 7  # a dict is loaded first
    with pytest.raises(ValueError, match="unknown extraction solver"):
        extract(eg, solver="cplex")
    with pytest.raises(TypeError, match="bogus"):
        extract(eg, bogus=1)
    with pytest.raises(ValueError, match="status"):
        Extraction({}, 0.0, "maybe", None, None, 0.0, "x", None)


def test_cpsat_with_tiny_time_limit_is_never_worse_than_greedy() -> None:
    rng = random.Random(7)
    spec = {}
    for c in range(40):  # layered graph with many alternatives
        for j in range(3):
            later = rng.sample(range(c + 1, 40), min(2, 39 - c))
            kids = [f"{d}.{rng.randrange(3)}" for d in later]
            spec[f"{c}.{j}"] = (str(c), rng.randint(1, 9), kids)
    eg = load_egraph(egraph(spec, ["0"]))
    ext = extract_cpsat(eg, time_limit=0.001, num_workers=1, random_seed=3)
    check(eg, ext)
    assert ext.cost <= ext.greedy_cost
    assert ext.status in ("optimal", "feasible", "greedy")


def test_progress_lines_end_with_the_final_cost() -> None:
    """The shared-leaf e-graph: greedy pays 6, the solver finds 5.5; the lines name the model, a solution and
    the outcome, the last with the cost returned."""
    lines: list[str] = []
    ext = extract(_shared_leaf_egraph(), time_limit=10, num_workers=1, random_seed=1, progress=lines.append)
    assert ext.cost == 5.5 and ext.status == "optimal"
    assert lines[0].startswith("cpsat: 6 e-nodes, 4 e-classes") and "start cost 6 (greedy)" in lines[0]
    assert any(line.startswith("cpsat: cost ") for line in lines[1:-1])
    assert lines[-1].startswith("cpsat: done, cost 5.5 (optimal; bound 5.5, gap 0.0%)"), lines
    assert extract(_shared_leaf_egraph(), solver="greedy", progress=lines.append).cost == 6.0  # accepted, unused


def test_cpsat_off_the_main_thread_gives_the_same_answer() -> None:
    """Outside the main thread the solve runs where it is called (no worker thread for Ctrl-C)."""
    eg = load_egraph(DIAMOND)
    here = extract_cpsat(eg, **FAST)
    there: list[Extraction] = []
    worker = threading.Thread(target=lambda: there.append(extract_cpsat(eg, **FAST)))
    worker.start()
    worker.join()
    assert (there[0].selection, there[0].cost, there[0].status) == (here.selection, here.cost, here.status)
    assert there[0].found_after is not None and here.found_after is not None


# --------------------------------------------------------------------------------------------- fuzz
@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_cpsat_equals_brute_force(seed: int) -> None:
    rng = random.Random(1000 + seed)
    for i in range(40):
        data = random_egraph(rng, negative=(i % 3 == 0), floats=(i % 4 == 1))
        optimum = brute_force(data)
        eg = load_egraph(data)
        if optimum is None:
            with pytest.raises(NoFiniteChoice):
                extract_greedy(eg)
            with pytest.raises(NoFiniteChoice):
                extract_cpsat(eg, **FAST)
            continue
        greedy = extract_greedy(eg)
        exact = extract_cpsat(eg, time_limit=10.0, num_workers=(1, 2, 8)[i % 3], random_seed=seed)
        check(eg, greedy)
        check(eg, exact)
        assert exact.status == "optimal", data
        assert exact.cost == pytest.approx(optimum, abs=1e-9), data
        assert greedy.cost >= optimum - 1e-9, data


# ---------------------------------------------------------------------------------------- validator
VALID = {"R": "r", "X": "x0", "Y": "y0", "S": "s"}


@pytest.mark.parametrize("selection, message", [
    ({"X": "x1"}, "root class 'R' is not selected"),
    ({"R": "r", "X": "x0", "Y": "y1"}, "needs child class 'S'"),
    ({"R": "r", "X": "y0", "Y": "y0", "S": "s"}, "belongs to class 'Y'"),
    ({"R": "r", "X": "nope", "Y": "y0", "S": "s"}, "'nope', which is not in the e-graph"),
    ({**VALID, "Q": "s"}, "class 'Q', which is not in the e-graph"),
])
def test_validator_rejects_invalid_selections(selection: dict, message: str) -> None:
    eg = load_egraph(DIAMOND)
    assert validate_selection(eg, VALID) == 5
    with pytest.raises(InvalidExtraction, match=message):
        validate_selection(eg, selection)


def test_validator_rejects_cycles_and_self_loops() -> None:
    with pytest.raises(InvalidExtraction, match=r"cycle: A\[a0\] -> B\[b0\] -> A"):
        validate_selection(load_egraph(CYCLE), {"A": "a0", "B": "b0"})
    with pytest.raises(InvalidExtraction, match="self-loop"):
        validate_selection(load_egraph(SELF_LOOP), {"A": "a0"})
    assert validate_selection(load_egraph(CYCLE), {"A": "a0", "B": "b1"}) == 6


def test_validator_counts_shared_and_reachable_nodes_once() -> None:
    eg = load_egraph(MULTI_ROOT)
    # P and Q share S; an unreachable extra entry is allowed but not counted
    assert validate_selection(eg, {"P": "p", "Q": "q", "S": "s"}) == 8
    assert isinstance(InvalidExtraction("x"), ValueError)


# --------------------------------------------------------------------------------------- data files
def _data_files(sub: str) -> list[Path]:
    folder = DATA / "test_data" / sub
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _node_product(data: dict) -> int:
    counts: dict[str, int] = {}
    for node in data["nodes"].values():
        counts[node["eclass"]] = counts.get(node["eclass"], 0) + 1
    return math.prod(counts.values())


@pytest.mark.parametrize("sub", ["crafted", "fuzz"])
def test_extraction_gym_test_data(sub: str) -> None:
    files = _data_files(sub)
    if not files:
        pytest.skip(f"shared extraction data not found at {DATA / 'test_data' / sub}")
    for f in files:
        data = json.loads(f.read_text())
        eg = load_egraph(data)
        greedy = extract_greedy(eg)
        exact = extract_cpsat(eg, **FAST)
        check(eg, greedy)
        check(eg, exact)
        assert exact.cost <= greedy.cost, f.name
        assert exact.status == "optimal", f.name
        if _node_product(data) <= 20000:
            assert exact.cost == pytest.approx(brute_force(data)), f.name


@pytest.mark.parametrize("name, optimum", [("vgg_acyclic", 4.866774948), ("resnet50_acyclic", 4.415993008)])
def test_tensat_acyclic_optima(name: str, optimum: float) -> None:
    path = DATA / "data" / "tensat" / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"shared extraction data not found at {path}")
    eg = load_egraph(path)
    ext = extract_cpsat(eg, **FAST)
    check(eg, ext)
    assert ext.status == "optimal"
    assert ext.cost == pytest.approx(optimum, abs=1e-8)
    assert ext.cost <= ext.greedy_cost

# ---------------------------------------------------------------------------------------------- CLI
def test_cli_main_writes_selection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "g.json", tmp_path / "sub" / "sel.json"
    src.write_text(json.dumps(DIAMOND))
    assert extract_cli.main([str(src), "--time-limit", "5", "--workers", "1", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "greedy cost  6.000000" in printed and "final cost   5.000000" in printed and "optimal" in printed
    written = json.loads(out.read_text())
    assert written == {"selection": VALID, "cost": 5.0, "status": "optimal"}
    assert extract_cli.main([str(src), "--solver", "greedy"]) == 0
    assert "status       greedy" in capsys.readouterr().out


def test_cli_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert extract_cli.main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nodes": {"a": {"eclass": "A", "children": ["x"]}}, "root_eclasses": ["A"]}))
    assert extract_cli.main([str(bad)]) == 2
    assert "child 'x'" in capsys.readouterr().err


def test_cli_register_adds_subcommand(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="eqsat")
    extract_cli.register(parser.add_subparsers(dest="cmd"))
    src = tmp_path / "g.json"
    src.write_text(json.dumps(CHAIN))
    args = parser.parse_args(["extract", str(src), "--solver", "greedy", "--out", str(tmp_path / "o.json")])
    assert args.func(args) == 0
    assert json.loads((tmp_path / "o.json").read_text())["cost"] == 7.0


@pytest.mark.parametrize("argv, message", [
    (["--time-limit", "0"], "give a positive number of seconds, e.g. --time-limit 60"),
    (["--time-limit", "nan"], "give a positive number of seconds"),
    (["--workers", "0"], "give a whole number of workers >= 1"),
])
def test_cli_refused_values_say_what_to_give(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                             message: str) -> None:
    src = tmp_path / "g.json"
    src.write_text(json.dumps(CHAIN))
    with pytest.raises(SystemExit) as e:
        extract_cli.main([str(src), *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_cli_out_is_checked_first_and_a_special_file_written_through(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import stat

    # a path nothing can be created in is refused before the e-graph is read (it does not even exist here)
    assert extract_cli.main([str(tmp_path / "missing.json"), "--out", "/proc/eqsat-x/o.json"]) == 2
    err = capsys.readouterr().err
    assert "--out /proc/eqsat-x/o.json" in err and "missing.json" not in err
    src = tmp_path / "g.json"
    src.write_text(json.dumps(CHAIN))
    assert extract_cli.main([str(src), "--solver", "greedy", "--out", "/dev/null"]) == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)  # still the device, not a file renamed over it


# --- a start selection (the input graph's own term): the answer is never costlier ---------------------------------

def _shared_leaf_egraph() -> SerializedEGraph:
    """R = h(X, Y); X and Y each a leaf of cost 3 or a node of cost 1 over a shared S of cost 3.5. Greedy
    compares each class alone (3 < 4.5) and pays 6; sharing S costs 5.5."""
    return load_egraph({"nodes": {
        "r": {"op": "h", "children": ["x2", "y2"], "eclass": "R", "cost": 0.0},
        "x1": {"op": "x", "children": [], "eclass": "X", "cost": 3.0},
        "x2": {"op": "u", "children": ["s"], "eclass": "X", "cost": 1.0},
        "y1": {"op": "y", "children": [], "eclass": "Y", "cost": 3.0},
        "y2": {"op": "v", "children": ["s"], "eclass": "Y", "cost": 1.0},
        "s": {"op": "s", "children": [], "eclass": "S", "cost": 3.5},
    }, "root_eclasses": ["R"]})


SHARED_START = {"R": "r", "X": "x2", "Y": "y2", "S": "s"}


def test_a_start_cheaper_than_greedy_is_returned_by_greedy() -> None:
    eg = _shared_leaf_egraph()
    plain = extract(eg, solver="greedy")
    assert plain.cost == 6.0  # the premise: greedy's own choice is costlier than the start
    res = extract(eg, solver="greedy", start=SHARED_START)
    assert (res.cost, res.status, res.greedy_cost) == (5.5, "start", 6.0)
    assert res.selection == SHARED_START and validate_selection(eg, res.selection) == 5.5


@pytest.mark.parametrize("time_limit", [0.0, 5.0])
def test_cpsat_is_never_worse_than_its_start(time_limit: float) -> None:
    eg = _shared_leaf_egraph()
    res = extract(eg, solver="cpsat", time_limit=time_limit, start=SHARED_START)
    assert res.cost <= 5.5 and res.status in ("optimal", "feasible", "start")
    assert validate_selection(eg, res.selection) == res.cost


def test_a_start_may_name_unreachable_classes_but_must_be_valid() -> None:
    eg = _shared_leaf_egraph()
    # x1 and y1 chosen: S is no longer reachable, and the start's choice for it is left out
    res = extract(eg, solver="greedy", start={"R": "r", "X": "x1", "Y": "y1", "S": "s"})
    assert res.cost == 6.0 and "S" not in res.selection
    with pytest.raises(InvalidExtraction):
        extract(eg, solver="greedy", start={"R": "r", "X": "x2"})  # Y unchosen
    with pytest.raises(InvalidExtraction):
        extract(eg, solver="cpsat", start={"R": "r", "X": "x2", "Y": "y2", "S": "x1"})  # a node of another class


def test_the_input_graphs_term_is_a_valid_start_that_bounds_the_extraction() -> None:
    from eqsat import engine, models
    from eqsat.onnx_io import load_model
    from eqsat.rules import starter_rules

    graph = load_model(models.nasrnn_cell(hidden=16))
    sat = engine.saturate(graph, starter_rules(), engine.Limits(iter_limit=3, time_limit=30))
    costs = {n.id: 1.0 + len(n.children) for n in sat.egraph.nodes}  # any positive costs
    eg = sat.egraph.with_costs(costs).to_serialized()
    start = engine.input_terms(sat.egraph, graph).selection
    start_cost = validate_selection(eg, reachable_part(eg, start))
    for solver in ("greedy", "cpsat"):
        res = extract(eg, solver=solver, start=start, **({"time_limit": 10.0} if solver == "cpsat" else {}))
        assert res.cost <= start_cost + 1e-9
