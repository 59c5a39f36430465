"""A model's grouped convolutions written with fewer groups, for timing TASO's regrouping on a real GPU.

TASO's gain on ResNeXt-50 is merging its 32-group convolutions into 8 groups: ``k`` adjacent groups are one group
whose kernel is zero off its ``k`` diagonal blocks (the rule ``conv-group-regroup`` of ``rules/grouped.py``). This
writes that rewrite over a whole ONNX model at one factor, so the variants can be timed as whole models beside
the original (``benchmarks/gpu_e2e.py prepare --regroup``) and their convolutions measured as operators.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def regrouped(model: Any, factor: int) -> Any:
    """A copy of ``model`` whose every ``Conv`` of ``g`` groups, ``g`` a multiple of ``factor``, has ``g / factor``
    groups: each ``factor`` adjacent groups become one with a block-diagonal kernel (the same function)."""
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name: t for t in out.graph.initializer}
    uses: dict[str, int] = {}
    for node in out.graph.node:
        for i in node.input:
            uses[i] = uses.get(i, 0) + 1
    changed = 0
    for node in out.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: a for a in node.attribute}
        groups = attrs["group"].i if "group" in attrs else 1
        if groups <= 1 or groups % factor:
            continue
        if node.input[1] not in inits or uses[node.input[1]] != 1:
            raise ValueError(f"Conv {node.name!r}: its kernel is not an initializer of its own")
        w = numpy_helper.to_array(inits[node.input[1]])
        out_per, in_per = w.shape[0] // groups, w.shape[1]
        dense = np.zeros((w.shape[0], in_per * factor, *w.shape[2:]), dtype=w.dtype)
        for o in range(w.shape[0]):
            r = (o // out_per) % factor  # the position of the old group within its new one
            dense[o, r * in_per:(r + 1) * in_per] = w[o]
        inits[node.input[1]].CopyFrom(numpy_helper.from_array(dense, node.input[1]))
        node.attribute.remove(attrs["group"])
        node.attribute.append(helper.make_attribute("group", groups // factor))
        changed += 1
    if not changed:
        raise ValueError(f"no grouped Conv of a group count divisible by {factor}")
    return out


def group_counts(model: Any) -> list[int]:
    """The distinct group counts above one of ``model``'s convolutions, in increasing order."""
    found = {a.i for n in model.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"}
    return sorted(g for g in found if g > 1)
