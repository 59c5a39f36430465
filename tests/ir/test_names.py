"""Fresh names (``eqsat.ir.names.NameAllocator``): the schemes the importer, exporter, engine, rewrites and
fuzzer name tensors by (tests and dumps compare names, so they must not change)."""

from __future__ import annotations

from eqsat.ir.names import NameAllocator


def test_a_free_hint_is_used_as_it_is_then_numbered_per_hint() -> None:
    names = NameAllocator(["t", "w"])
    assert [names.fresh(h) for h in ("t", "t", "x", "x", "w")] == ["t_1", "t_2", "x", "x_1", "w_1"]
    assert "t_2" in names and "t_3" not in names


def test_numbering_can_start_at_two() -> None:
    names = NameAllocator(["y_bnfold_w"], start=2)  # fold_weights: name, name_2, name_3, ...
    assert [names.fresh("y_bnfold_w"), names.fresh("y_bnfold_w"), names.fresh("z")] == \
        ["y_bnfold_w_2", "y_bnfold_w_3", "z"]


def test_numbered_names_share_one_counter_and_skip_taken_ones() -> None:
    names = NameAllocator(["_r_1"], numbered=True, start=0)  # rewrites: _r_0, _r_2 (the counter moves on)
    assert [names.fresh("_r"), names.fresh("_r"), names.fresh("x_cat")] == ["_r_0", "_r_2", "x_cat_3"]
    fuzz = NameAllocator(sep="", numbered=True)
    assert [fuzz.fresh("g0_x"), fuzz.fresh("g0_w"), fuzz.fresh("g0_t")] == ["g0_x1", "g0_w2", "g0_t3"]


def test_names_taken_elsewhere_are_avoided() -> None:
    weights: dict[str, int] = {}
    names = NameAllocator(also=(weights,))
    weights["c"] = 1  # filled after the allocator was made, looked up at each call
    names.take("d")
    assert [names.fresh("c"), names.fresh("d")] == ["c_1", "d_1"]
