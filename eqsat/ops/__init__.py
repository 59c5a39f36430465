"""The operator registry: the single description of every operator eqsat knows.

Each operator is one :class:`OpSpec`, declared once in the module of its family (``eqsat/ops/<family>.py``):
its tensor inputs, its parameters, its shape function and its shape rules as data (:mod:`eqsat.ops.shapes`,
rendered for the e-graph by :mod:`eqsat.engine.compile`), a float numpy reference, an exact integer reference modulo
a prime (for rule fingerprints) and its symbolic form for the verifier where it is not a polynomial, its FLOP
count, how ONNX nodes import to it and how it exports back, the multi-node ONNX spellings that collapse to it
before import (:mod:`eqsat.ops.fusion`), the key a cost model measures, and what it is to the rest of eqsat (a
product, glue, a view, opaque; what the import folds into it). Everything else in eqsat (IR validation and
passes, the e-graph compiler, ONNX I/O, cost models, the rule generator and verifier) reads this table and
compares no operator's name. A family module registers with the public :func:`register`, :func:`importer` and
:func:`~eqsat.ops.fusion.register_fusion`; ``docs/adding-an-operator.md`` is the recipe: which fields to fill,
and which tests to add.

This package imports neither onnx nor egglog: ONNX mappings are plain ``(op_type, inputs, outputs,
attributes)`` tuples that :mod:`eqsat.onnx_io` turns into protobuf.
"""

# Importing a family module registers its operators (and ONNX importers), in this order.
# isort: off
from eqsat.ops import elementwise, matmul, conv, layout, broadcast, pool, norm, lrn, softmax, reduce, opaque, consts  # noqa: E402
from eqsat.ops import cast  # noqa: E402,F401
from eqsat.ops import contrib  # noqa: E402,F401  (importers only: onnxruntime's fused kernels)
from eqsat.ops import ort_kernels  # noqa: E402,F401  (those kernels as operators, for target onnxruntime)
# isort: on
from eqsat.ops.cast import ONNX_FLOAT_TYPES
from eqsat.ops.chains import runs_as_keys, runs_as_nodes, runs_as_operands
from eqsat.ops.core import (
    ACT_NONE,
    ACT_RELU,
    MAX_RANK,
    ONNX_IMPORTERS,
    PRIME,
    REGISTRY,
    CostKey,
    DimAxiom,
    ExportContext,
    GenContext,
    GeneratorForm,
    GenTensor,
    ImportContext,
    Importer,
    IRNode,
    OnnxNode,
    OpError,
    OpSpec,
    Params,
    ParamValue,
    Ranks,
    Shape,
    SymDim,
    SymShape,
    TransposeFlags,
    Uninterpreted,
    WeightFold,
    Z3Context,
    get,
    importer,
    is_opaque,
    register,
    require,
)
from eqsat.ops.families import LAYOUT_PERMS, LAYOUT_TARGETS
from eqsat.ops.fusion import FUSIONS, Fusion, FusionMatch  # noqa: E402

__all__ = ["ONNX_FLOAT_TYPES",
    "ACT_NONE", "ACT_RELU", "FUSIONS", "Fusion", "FusionMatch", "MAX_RANK", "ONNX_IMPORTERS", "PRIME", "REGISTRY",
    "CostKey", "DimAxiom", "ExportContext",
    "GenContext", "GenTensor", "GeneratorForm", "ImportContext", "Importer", "IRNode",
    "LAYOUT_PERMS", "LAYOUT_TARGETS", "OnnxNode", "OpError", "OpSpec", "ParamValue", "Params", "Ranks", "Shape",
    "SymDim", "SymShape", "TransposeFlags", "Uninterpreted", "WeightFold", "Z3Context",
    "get", "importer", "is_opaque", "register", "require", "runs_as_keys", "runs_as_nodes", "runs_as_operands",
    "ops_for_generator", "flagged_form", "broadcast", "conv", "consts", "elementwise", "layout",
    "matmul", "lrn", "norm", "opaque", "pool", "reduce", "softmax",
]


def ops_for_generator() -> list[str]:
    """Operators with exact modular semantics (usable by the rule generator)."""
    return [n for n, s in REGISTRY.items() if s.modular_fn is not None]


def flagged_form(op: str) -> OpSpec | None:
    """The operator that computes ``op`` with transpose flags on its operands (``OpSpec.transpose_flags``:
    ``matmul_t`` for ``matmul``), or None where there is none."""
    return next((s for s in REGISTRY.values() if s.transpose_flags and s.transpose_flags.plain == op), None)
