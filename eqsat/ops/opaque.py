"""The opaque operator: any ONNX node eqsat does not model, kept verbatim."""

from __future__ import annotations

import math

import numpy as np

from eqsat.ops.core import (
    OpError,
    OpSpec,
    Params,
    Shape,
    register,
)

# -- opaque ----------------------------------------------------------------------------------------------

def _opaque_shape(p: Params, *xs: Shape) -> Shape:
    return tuple(p["shape"])


def _opaque_np(p: Params, *xs: np.ndarray) -> np.ndarray:
    raise OpError(f"opaque node {p['key']!r} ({p['op_type']}) has no numpy semantics; evaluate the graph "
                  "with an opaque evaluator (eqsat.onnx_io.onnx_opaque_evaluator)")


OPAQUE = register(OpSpec(
    name="opaque", inputs=(), variadic=False,
    params=(("key", "str"), ("index", "int"), ("op_type", "str"), ("domain", "str"), ("attrs", "any"),
            ("shape", "ints"), ("dtype", "str"), ("n_outputs", "int"), ("slots", "str"), ("outer", "any")),
    defaults={"domain": "", "index": 0, "n_outputs": 1, "slots": "", "outer": ()},
    doc="any other ONNX node, kept verbatim (attributes as serialized protobuf) with inferred output shapes; "
        "never optimized across, never dropped. One IR node per output (index); key identifies the node; "
        "slots marks which ONNX input positions are present ('1' present, '0' empty; '' = all present); "
        "outer names the tensors a control-flow node's subgraphs read from around it (If, Loop, Scan): the IR "
        "node's last inputs, written back into the subgraphs under their exported names.",
    shape_fn=_opaque_shape, numpy_fn=_opaque_np, modular_fn=None,
    flops_fn=lambda p, ins, out: math.prod(out),
    export_fn=None,  # written by eqsat.onnx_io (it needs the original attributes and all outputs at once)
    shape_rules=(),  # shapes of opaque outputs are set as facts when the graph is loaded
    opaque=True,
))
