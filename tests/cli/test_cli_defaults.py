"""Every default and choice list is written once: the command line's are those of ``OptimizeOptions``, the
choice tables of ``eqsat.pipeline.choices``, the engine's ``Limits`` and the functions the commands call; and
``eqsat.optimize`` shows its options, typed and with their defaults."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import typing

import eqsat
from eqsat import engine, extract
from eqsat.cli.app import build_parser, optimize_options, rule_set
from eqsat.extract import cli as extract_cli
from eqsat.pipeline import OptimizeKeywords, OptimizeOptions
from eqsat.pipeline.candidates import DEFAULT_CANDIDATES
from eqsat.pipeline.choices import RULE_SETS, SOLVERS, TARGETS
from eqsat.search.comparison import compare

#: the options the command line leaves at optimize's defaults (and what it sets itself: the dump and progress)
NOT_ON_THE_COMMAND_LINE = {"multi_iters", "memory_limit_mb", "layouts", "verify_latency", "latency_margin",
                           "dump_egraph", "progress"}


def _subparser(name: str, parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _action(parser: argparse.ArgumentParser, dest: str) -> argparse.Action:
    return next(a for a in parser._actions if a.dest == dest)


def test_eqsat_optimize_takes_the_defaults_of_optimize_options() -> None:
    given = optimize_options(build_parser().parse_args(["optimize", "m.onnx", "-o", "m.opt.onnx"]))
    assert set(given) | NOT_ON_THE_COMMAND_LINE == {f.name for f in dataclasses.fields(OptimizeOptions)}
    assert OptimizeOptions(**{**given, "rules": rule_set(given["rules"])}) == OptimizeOptions()


def test_every_flag_of_eqsat_optimize_reaches_its_option() -> None:
    args = build_parser().parse_args(
        ["optimize", "m.onnx", "-o", "x.onnx", "--static", "--no-check", "--no-anytime", "--no-block-reuse",
         "--no-first-answer",
         "--time-limit", "7", "--node-limit", "9", "--iter-limit", "2", "--solver", "greedy", "--target",
         "onnxruntime", "--candidates", "3", "--costs", "gpu-sim", "--provenance", "--dim", "b=2", "--as-written"])
    given = optimize_options(args)
    assert (given["dynamic"], given["check"], given["anytime"], given["reuse_blocks"], given["first_answer"]) == \
        (False,) * 5
    assert (given["time_limit"], given["node_limit"], given["iter_limit"], given["candidates"]) == (7, 9, 2, 3)
    assert (given["solver"], given["target"], given["cost_model"]) == ("greedy", "onnxruntime", "gpu-sim")
    assert given["provenance"] and given["dims"] == {"b": 2} and given["as_written"]


def test_the_choices_of_eqsat_optimize_are_the_choice_tables() -> None:
    o = _subparser("optimize")
    assert list(_action(o, "solver").choices) == list(SOLVERS) == list(extract.SOLVERS)
    assert list(_action(o, "target").choices) == list(TARGETS)
    assert list(_action(o, "rules").choices) == list(RULE_SETS)
    assert RULE_SETS[_action(o, "rules").default].rules() is None  # the default set is optimize's own default
    assert "(default 4;" in _action(o, "candidates").help and DEFAULT_CANDIDATES == 4
    for name, solver in SOLVERS.items():  # each choice's help is its table's description, the default's marked
        default = "default: " if name == OptimizeOptions().solver else ""
        assert f"{name} ({default}{solver.help})" in _action(o, "solver").help


def test_demo_and_compare_take_the_defaults_of_what_they_run() -> None:
    d = OptimizeOptions()
    demo = build_parser().parse_args(["demo"])
    assert (demo.time_limit, demo.costs) == (d.time_limit, d.cost_model)
    c = build_parser().parse_args(["compare", "taso_bert"])
    sig = {k: p.default for k, p in inspect.signature(compare).parameters.items()}
    assert (c.budget, c.alpha, c.seed, c.check) == (sig["budget"], sig["alpha"], sig["seed"], sig["check"])
    assert c.as_written == sig["as_written"] and build_parser().parse_args(["compare", "m", "--as-written"]).as_written
    assert c.methods.split(",") == list(sig["methods"])


def test_the_limits_defaults_are_the_engines() -> None:
    limits, options = engine.Limits(), OptimizeOptions()
    from_options = options.saturation_limits()
    for f in dataclasses.fields(engine.Limits):
        if f.name != "time_limit":  # optimize gives saturation a share of the run's time limit
            assert getattr(from_options, f.name) == getattr(limits, f.name), f.name
    measure = _subparser("measure", _subparser("costs"))
    assert (_action(measure, "iter_limit").default, _action(measure, "time_limit").default) == (
        limits.iter_limit, limits.time_limit)


def test_eqsat_extract_takes_the_extractors_defaults() -> None:
    p = argparse.ArgumentParser()
    extract_cli._add_arguments(p)
    cpsat = inspect.signature(extract.extract_cpsat).parameters
    assert _action(p, "time_limit").default == cpsat["time_limit"].default
    assert _action(p, "workers").default == cpsat["num_workers"].default
    assert _action(p, "solver").default == inspect.signature(extract.extract).parameters["solver"].default


def test_optimize_is_typed_with_every_option_and_its_default() -> None:
    assert typing.get_type_hints(OptimizeKeywords) == typing.get_type_hints(OptimizeOptions)  # the same types
    params = inspect.signature(eqsat.optimize).parameters
    assert list(params)[:2] == ["model_or_path", "options"]
    defaults = OptimizeOptions()
    for f in dataclasses.fields(OptimizeOptions):
        assert params[f.name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[f.name].default == getattr(defaults, f.name), f.name
    assert eqsat.optimize is eqsat.pipeline.optimize and "OptimizeOptions" in eqsat.optimize.__doc__
