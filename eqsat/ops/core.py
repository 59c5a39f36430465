
"""The registry's core: :class:`OpSpec` (one operator, described once), the cost key, the import/export
contexts, and the table every family module registers into."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from eqsat.ops.dims import dim
from eqsat.ops.failures import OpError, require
from eqsat.ops.shapes import ShapeRule

Shape = tuple[int, ...]
"""A tensor's shape: ints, and :class:`~eqsat.ops.dims.Sym` entries for sizes given by symbols."""
ParamValue = int | float | str | tuple[int, ...]
Params = dict[str, Any]

#: Prime used for exact fingerprints (2^31 - 1).
PRIME = 2_147_483_647

ACT_NONE = 0
ACT_RELU = 1

#: the highest tensor rank the e-graph's rank-indexed shape rules cover
MAX_RANK = 6


# ---------------------------------------------------------------------------------------------------------
# ONNX mapping interfaces (implemented by eqsat.onnx_io)


OnnxNode = tuple[str, list[str], list[str], dict[str, Any]]
"""An ONNX node as plain data: (op_type, input names, output names, attributes)."""

IRNode = tuple[str, Params, list[str], list[str]]
"""An IR node as plain data, produced by importers: (op, params, input names, output names)."""


class ImportContext(Protocol):
    """What an ONNX importer may ask about the model being imported."""

    opset: int

    def shape(self, name: str) -> Shape: ...

    def is_float(self, name: str) -> bool: ...

    def given_dtype(self, name: str) -> str:
        """The numpy dtype name of a float tensor in the model as given, where a mixed-precision model is
        imported as its float32 copy (:mod:`eqsat.onnx_io.precision`); ``""`` where it is unknown or the model
        is not mixed."""
        ...

    def is_static(self, size: int) -> bool:
        """Whether a size read from :meth:`shape` is a number fixed by the model, not a dynamic dimension (or one
        computed from one) standing at its generic value (:mod:`eqsat.ir.symbols`): only a fixed size may be
        baked into a constant. Conservative: with dynamic axes, a size the model states nowhere counts as
        dynamic."""
        ...

    def const(self, name: str) -> np.ndarray | None: ...

    def add_weight(self, array: np.ndarray, hint: str) -> str: ...

    def fresh(self, hint: str) -> str: ...

    def unsupported(self, reason: str) -> None:
        """Record why this node stays opaque (what the importer cannot map); returns None for ``return``."""
        ...


class ExportContext(Protocol):
    """What an exporter may ask for while writing ONNX."""

    opset: int

    def add_initializer(self, array: np.ndarray, hint: str) -> str: ...

    def fresh(self, hint: str) -> str: ...

    def shape(self, name: str) -> Shape | None:
        """The shape of a tensor the node being written reads (None when unknown)."""
        ...

    def constant(self, name: str) -> np.ndarray | None:
        """The value of a tensor the node being written reads where the model stores it (a weight, or weight-only
        work export precomputed); None for one computed at run time."""
        ...


# ---------------------------------------------------------------------------------------------------------
# The spec


@dataclass(frozen=True)
class CostKey:
    """What a cost model measures: one operator configuration on concrete shapes."""

    op: str
    params: tuple[tuple[str, ParamValue], ...]
    input_shapes: tuple[Shape, ...]
    output_shape: Shape
    dtype: str = "float32"
    layout: str = "default"
    #: positions of the inputs that are weights (constant at run time): runtimes pre-pack constant matrix
    #: operands, so the same product costs differently with a weight or an activation in a given slot
    weights: tuple[int, ...] = ()
    #: a binary element-wise operator to time this one behind (``OpSpec.measure_after``), or ""
    after: str = ""

    @property
    def is_opaque(self) -> bool:
        """Whether this prices an opaque node (``OpSpec.opaque``), whose key holds the ONNX node, not shapes alone."""
        return is_opaque(self.op)

    def as_str(self) -> str:
        """A stable, human-readable string form (used as a cache key)."""
        ps = ",".join(f"{k}={v}" for k, v in self.params)
        ins = ";".join("x".join(map(str, s)) for s in self.input_shapes)
        out = "x".join(map(str, self.output_shape))
        consts = f":w={','.join(map(str, self.weights))}" if self.weights else ""
        after = f":after={self.after}" if self.after else ""
        return f"{self.op}({ps})[{ins}]->[{out}]:{self.dtype}:{self.layout}{consts}{after}"


# ---------------------------------------------------------------------------------------------------------
# What the rule generator and the rule verifier read (eqsat.rules implements these interfaces: eqsat.ops never
# imports eqsat.rules, nor z3)

SymDim = Any
"""A dimension as a rule writes it: an int, or an expression ``["dim", "?x1", 0]``, ``["+", a, b]``, ``["-", a, b]``
over the rule variables' dimensions (a pattern's S-expression)."""
SymShape = tuple[Any, ...]
"""A shape of :data:`SymDim` entries (a tensor's shape over the rule variables' dimensions)."""


def dim_add(a: SymDim, b: SymDim) -> SymDim:
    """``a + b`` as a dimension expression (folded where both are numbers)."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return ["+", a, b]


def dim_sub(a: SymDim, b: SymDim) -> SymDim:
    """``a - b`` as a dimension expression (folded where both are numbers, or where ``a`` is ``b + c``)."""
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    if isinstance(a, list) and a[0] == "+" and a[1] == b:
        return a[2]
    return ["-", a, b]


class GenTensor(Protocol):
    """A tensor of a graph the rule generator builds: what a generator form reads, and sets on its outputs."""

    #: its shape in the domain's first shape set, and the same shape over the variables' dimensions
    shape: Shape
    sym: SymShape
    #: its pattern text, and whether it is an input variable
    key: str
    is_var: bool
    #: a convolution kernel's bias, which travels with it (operators on kernels apply to their biases too)
    bias: GenTensor | None
    #: where a concatenation joined two tensors: axis -> the first piece's size (a split may cut it there)
    bounds: dict[int, SymDim]


class GenContext(Protocol):
    """What a generator form (:class:`GeneratorForm`) may ask of the rule generator (``eqsat.rules.templates``)."""

    def apply(self, op: str, params: Params, ins: Sequence[GenTensor], *, pattern: Params | None = None
              ) -> GenTensor | None:
        """``op`` with ``params`` applied to ``ins``, or None where that is ill-shaped. ``pattern``: parameters
        the rule writes otherwise than as their value (a dimension expression, a parameter variable)."""
        ...

    def common_bounds(self, a: GenTensor, b: GenTensor) -> dict[int, SymDim]:
        """The split boundaries ``a`` and ``b`` share (an element-wise result keeps them)."""
        ...

    def dim_value(self, e: SymDim) -> int:
        """The value of a dimension expression on the domain's first shape set."""
        ...

    def shape_parameter(self, x: GenTensor) -> tuple[str, Shape] | None:
        """The domain's parameter variable for a target shape of ``x`` (name, value), or None where it has none."""
        ...


@dataclass(frozen=True)
class GeneratorForm:
    """A template of the rule generator: how it applies an operator to ``arity`` candidate tensors, in ``domains``
    (names of ``eqsat.rules.domains``: ``mat``, ``conv``, ``heads``).

    ``apply(g, args)`` returns the outputs (two for a split), or None where the template does not apply; it
    builds them with ``g.apply`` (constants in context included) and keeps the generator's bookkeeping on them
    (a kernel's ``bias``, split ``bounds``). An operator that only needs parameters for its first operand's
    shape gives ``params`` instead (shape -> parameters, or None where it does not apply): the operator is then
    applied to tensors, not kernels, and ``arity`` is its number of inputs.
    """

    apply: Callable[[GenContext, Sequence[GenTensor]], list[GenTensor] | None] | None = None
    arity: int = 1
    domains: tuple[str, ...] = ()
    params: Callable[[Shape], Params | None] | None = None


class Z3Context(Protocol):
    """What an operator's Z3 semantics (``OpSpec.z3_fn``) may use: Z3 reals, without importing z3 here."""

    def real(self, v: Any) -> Any:
        """A number (or a Z3 term) as a Z3 real."""
        ...

    def reals(self, a: np.ndarray) -> np.ndarray:
        """Every entry of an array as a Z3 real."""
        ...

    def if_then_else(self, cond: Any, a: Any, b: Any) -> Any:
        """``a`` where the Z3 condition holds, else ``b``."""
        ...


@dataclass(frozen=True)
class Ranks:
    """Ranks the verifier may assume when it draws small shapes to validate axioms: a fixed rank per input
    (``None``: free), whether free inputs have the output's rank (``same``), and a tuple parameter whose
    length is that rank (a transpose's ``perm``)."""

    inputs: tuple[int | None, ...] = ()
    same: bool = False
    param: str = ""


@dataclass(frozen=True)
class DimAxiom:
    """``dim(term, axis) = expr``: an output dimension from the inputs' (``?k`` and the like range over ``params``),
    so that the verifier can reason about split sizes written as ``(dim ?x k)``."""

    name: str
    term: str
    axis: str | int
    expr: str
    params: dict[str, tuple] = field(default_factory=dict)


@dataclass(frozen=True)
class Uninterpreted:
    """How the rule verifier models an operator that is not a polynomial: as an uninterpreted function.

    ``kind`` is ``"elementwise"`` (``y[i] = f(x[i])``) or ``"along_axis"`` (each entry of ``y`` is a function,
    one per row length and position, of the row of ``x`` through it along the parameter ``axis_param``: a
    softmax). ``facts`` are values the function is known to take, ``f(a) = b`` (relu(0) = 0).
    """

    kind: str
    axis_param: str = "axis"
    facts: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class TransposeFlags:
    """Parameters that transpose an operator's operands, one per operand (ONNX Gemm's ``transA``, ``transB``): export
    reads a weight's 2-D transpose through them rather than computing it. ``plain`` names the operator this one
    computes with every flag off (``matmul_t``: ``matmul``), ``""`` where that is itself; an application of the plain
    operator to a weight's transpose is written as this one."""

    params: tuple[str, ...]
    plain: str = ""


@dataclass(frozen=True)
class WeightFold:
    """How the import folds an operator into ``into``, the operator computing its first input, where every other
    input of both is a weight (as onnxruntime folds a batch norm into a convolution when it loads a model): ``into``
    keeps its parameters and first input, and reads in place of each other input ``k`` the weight that operator
    ``weights[k - 1]`` computes, once, in float64 from this operator's weights. Each of ``weights`` reads its inputs
    by name among ``into``'s inputs and this operator's, and its parameters from this operator's."""

    into: str
    weights: tuple[str, ...]


@dataclass(frozen=True)
class OpSpec:
    """One operator, described once."""

    name: str
    inputs: tuple[str, ...]
    params: tuple[tuple[str, str], ...]  # (name, kind); kind in int | ints | float | str
    shape_fn: Callable[..., Shape]
    numpy_fn: Callable[..., np.ndarray]
    modular_fn: Callable[..., np.ndarray] | None
    flops_fn: Callable[[Params, Sequence[Shape], Shape], float]
    export_fn: Callable[[Params, list[str], list[str], ExportContext], list[OnnxNode]] | None
    #: the output shape as data (see eqsat.ops.shapes); the e-graph engine renders these as egglog rules
    shape_rules: tuple[ShapeRule, ...]
    variadic: bool = False  # inputs are a list (concat); egglog sees a binary, left-nested chain
    elementwise: bool = False
    doc: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    #: The operators this one runs as once exported, applied in a chain (``None``: itself): export writes a
    #: fused form back as those ONNX nodes. A cost model that does not see the runtime fuse them prices it as
    #: those nodes (:func:`runs_as_keys`), so it never shows as a gain; a measured one times what export writes.
    #: Each entry names its inputs, ``(op, params, positions)``: positions of this operator's inputs, ``-1`` for
    #: the previous entry's output, ``-2`` the one before, and so on (a skip norm is an add of inputs 0 and 1, then
    #: a norm of it with inputs 2, 3); each entry's output has the shape its operator gives it.
    runs_as: Callable[[Params], list[tuple[str, Params, tuple[int, ...]]] | None] | None = None
    #: The runtime whose own kernel this operator is (``"onnxruntime"``: export writes a ``com.microsoft`` node),
    #: or ``""`` for an operator of portable ONNX. Rules make such an operator only for that target
    #: (``optimize(target=...)``); a cost model that cannot see the kernel's speed prices it as its decomposition
    #: (``runs_as``) and never prefers it.
    runtime: str = ""
    #: How applications that share their first input merge into one (TASO's matmul/conv merges, n-way at
    #: once): given the parameters and input shapes, ``(concat axis of each other input, split axis of the
    #: output)``, or ``None`` where they cannot. Siblings merge when they have equal parameters and equal
    #: other-input shapes off the concat axes; the e-graph gets the merged form as an alternative.
    sibling_merge: Callable[[Params, Sequence[Shape]], tuple[tuple[int, ...], int] | None] | None = None
    #: The verifier's model where the operator is not a polynomial (its float reference is then not executed
    #: symbolically); ``None``: the numpy reference runs on Z3 reals.
    uninterpreted: Uninterpreted | None = None
    #: Properties of the operator, ``(name, lhs, rhs)`` equations in the rule pattern language (optionally with a
    #: fourth item: ``{"params": {var: values validated}, "quantified": (vars,)}``, as ``eqsat.rules.axioms.Axiom``
    #: takes them), that the verifier takes as axioms (after validating them symbolically) when it proves rules.
    axioms: tuple[tuple[Any, ...], ...] = ()
    #: A binary element-wise operator that usually computes this one's first input (the residual add before a
    #: layer norm). Measured cost models time the operator behind it and count only its own share, so that a
    #: runtime's fusion of the pair is priced where it happens (onnxruntime fuses Add + LayerNormalization on
    #: 3-D tensors into a SkipLayerNormalization that is slower on CPU than the two apart; on 2-D it does not).
    measure_after: str | None = None
    #: Where export writes the operator as several ONNX nodes of its own (a decomposition onnxruntime does not
    #: fuse back): ``params -> (nodes, intermediate tensors of the output's size)``, so the analytic model charges
    #: each node's overhead and each intermediate's write and read; ``None``: one node. Measured models time
    #: what export writes, so they need nothing.
    decomposition: Callable[[Params], tuple[int, int]] | None = None
    #: How the rule generator applies the operator: template name (unique) -> :class:`GeneratorForm`, which says
    #: how and in which of the generator's domains.
    generator_forms: dict[str, GeneratorForm] = field(default_factory=dict)
    #: The output shape over the rule variables' dimensions, for the generator (which writes split sizes and
    #: constants' shapes from it): ``(params, inputs) -> shape`` (``inputs`` are :class:`GenTensor`, with ``sym``
    #: and the concrete ``shape``; ``params`` as the rule writes them), or None where it cannot say. ``None``:
    #: the first input's where ``shape_rules`` say the output has its shape, else the concrete shape.
    sym_shape: Callable[[Params, Sequence[GenTensor]], SymShape | None] | None = None
    #: The verifier's semantics on arrays of Z3 reals where running ``numpy_fn`` on them does not give it (a max,
    #: an exact division): ``(z, params, *inputs) -> array``, ``z`` a :class:`Z3Context`.
    z3_fn: Callable[..., np.ndarray] | None = None
    #: Output dimensions from the inputs' (:class:`DimAxiom`), which the verifier always assumes.
    dim_axioms: tuple[DimAxiom, ...] = ()
    #: Ranks axiom validation assumes for the operator's inputs (:class:`Ranks`); ``None``: none.
    ranks: Ranks | None = None
    #: Its axioms (and rules) are stated for operands of equal shapes: validation executes no broadcasting.
    axioms_equal_shapes: bool = False
    #: Positions of a kernel input and its bias: the rule generator's pruning takes the pair as one operand.
    kernel_bias: tuple[int, int] | None = None
    #: Parameters that pick one piece of a multi-output operation (a split's start and size): for the rule
    #: generator's pruning, applications to one input that differ only in them are one operation.
    piece_params: tuple[str, ...] = ()
    #: False where two outputs sharing an application share no real work (a transpose, a reshape: they move
    #: data): the generator then keeps no two-output rule for that sharing.
    shares_work: bool = True
    #: The operator standing for an ONNX node the registry does not describe (``opaque``): its parameters carry
    #: the node, it takes any number of inputs, nothing evaluates or rewrites it, and the e-graph holds it by its
    #: key and output index. :func:`is_opaque` asks it of an operator's name.
    opaque: bool = False
    #: A matrix product or a convolution: the kernels whose number decides a graph's cost (the rule corpus keeps
    #: same-size rules that change it).
    heavy: bool = False
    #: The glue of merges, which moves data and computes nothing: ``"join"`` for a concatenation, ``"cut"`` for one
    #: piece of a split (``piece_params``); ``""`` for any other operator. A rule that saves only glue merges no work.
    glue: str = ""
    #: The output is the input's data read under another shape (a reshape): runtimes run no kernel for it, so a
    #: measured cost model prices it at nothing.
    view: bool = False
    #: A product of its first input's rows by a matrix, its second input (a matmul): each output row is one input
    #: row times the matrix, so export computes it on the tensor the rows were flattened from (a transformer's
    #: projection as the import reads it), the matrix viewed to that tensor's rank (``eqsat.ir.passes.written_views``).
    row_product: bool = False
    #: Its two inputs commute (an element-wise sum or product): a rule that only swaps them inside a term is
    #: commutativity applied in context, which the e-graph derives by congruence (the corpus leaves it out).
    commutative: bool = False
    #: For an operator that only permutes its input's axes (a transpose): the parameter holding the permutation.
    permutes: str = ""
    #: Parameters that transpose the operands (:class:`TransposeFlags`), where it has them.
    transpose_flags: TransposeFlags | None = None
    #: For a unary element-wise operator that an operator with a fused-activation parameter ``act`` applies to
    #: its output: that parameter's value (relu: ``ACT_RELU``). The import folds it into such an operator.
    activation: int | None = None
    #: The two operators a fused form computes in a chain, ``(producer, consumer)``, the consumer reading the
    #: producer's output and one tensor more (of the output's shape), the fused form's last input; the producer's
    #: parameters are the fused form's (conv2d_add: a conv2d, then an ewadd of a residual). The import folds such
    #: pairs into the fused form, where the producer has no fused activation.
    fuses: tuple[str, str] | None = None
    #: How the import folds this operator into the one computing its first input (:class:`WeightFold`).
    weight_fold: WeightFold | None = None
    #: For an operator that changes its input's float precision (a cast, :mod:`eqsat.ops.cast`): the parameter
    #: naming its output's precision; ``""``: the output is in its inputs' precision.
    precision_param: str = ""
    #: For a piece operator (``piece_params``): the parameter naming the axis it cuts, and how export writes the
    #: pieces that tile a tensor along it as one node, ``(axis, sizes, input, outputs, ctx) -> nodes``.
    piece_axis: str = ""
    export_pieces: Callable[[int, Sequence[int], str, list[str], ExportContext], list[OnnxNode]] | None = None

    @property
    def is_constant(self) -> bool:
        """Whether the operator is a constant: it has no tensor inputs (``const_pool``), the opaque one aside."""
        return not self.inputs and not self.variadic and not self.opaque

    # -- parameters -------------------------------------------------------------------------------------
    def param_names(self) -> tuple[str, ...]:
        """Names of the parameters, in declaration order."""
        return tuple(n for n, _ in self.params)

    def normalize(self, params: Params) -> Params:
        """Check parameter names/kinds and return a canonical dict (tuples, ints)."""
        out: Params = {}
        for name, kind in self.params:
            if name in params:
                v = params[name]
            elif name in self.defaults:
                v = self.defaults[name]
            else:
                raise OpError(f"{self.name}: missing parameter {name!r}")
            if kind == "int":
                v = dim(v)  # an int, or a symbolic size (eqsat.ops.dims.Sym)
            elif kind == "ints":
                v = tuple(dim(i) for i in v)
            elif kind == "float":
                v = float(v)
            elif kind == "str":
                v = str(v)
            elif kind == "any":
                pass
            else:  # pragma: no cover - registry bug
                raise AssertionError(kind)
            out[name] = v
        extra = set(params) - set(out)
        require(not extra, f"{self.name}: unknown parameter(s) {sorted(extra)}")
        return out

    def param_tuple(self, params: Params) -> tuple[tuple[str, ParamValue], ...]:
        """Parameters as a hashable tuple of (name, value) in declaration order."""
        return tuple((n, params[n]) for n in self.param_names())

    def templates(self) -> dict[str, GeneratorForm]:
        """The generator's templates for this operator: ``generator_forms``, each form given by ``params`` made
        the form that applies the operator to tensors (not kernels) with those parameters."""
        return {name: _params_form(self, f) if f.apply is None else f for name, f in self.generator_forms.items()}

    # -- semantics ----------------------------------------------------------------------------------------
    def check_arity(self, n: int) -> None:
        """Raise unless ``n`` tensor inputs is valid for this operator."""
        if self.variadic:
            require(n >= 1, f"{self.name}: needs at least one input")
        elif not self.opaque:
            require(n == len(self.inputs), f"{self.name}: expects {len(self.inputs)} inputs, got {n}")

    def shape(self, params: Params, in_shapes: Sequence[Shape]) -> Shape:
        """Output shape; raises :class:`OpError` on invalid inputs."""
        self.check_arity(len(in_shapes))
        return tuple(dim(d) for d in self.shape_fn(params, *[tuple(s) for s in in_shapes]))

    def evaluate(self, params: Params, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """Float reference semantics (numpy)."""
        self.check_arity(len(inputs))
        return self.numpy_fn(params, *inputs)

    def evaluate_mod(self, params: Params, inputs: Sequence[np.ndarray], p: int = PRIME) -> np.ndarray:
        """Exact integer semantics modulo ``p`` (object arrays of Python ints)."""
        require(self.modular_fn is not None, f"{self.name}: has no modular semantics")
        return self.modular_fn(params, *inputs, p)  # type: ignore[misc]

    def flops(self, params: Params, in_shapes: Sequence[Shape], out_shape: Shape) -> float:
        """Floating-point operations of one evaluation."""
        return float(self.flops_fn(params, in_shapes, out_shape))

    def cost_key(self, params: Params, in_shapes: Sequence[Shape], out_shape: Shape,
                 dtype: str = "float32", layout: str = "default", weights: Sequence[int] = ()) -> CostKey:
        """The key a cost model uses for this configuration (``weights``: positions of constant inputs)."""
        return CostKey(self.name, self.param_tuple(params), tuple(tuple(s) for s in in_shapes),
                       tuple(out_shape), dtype, layout, tuple(sorted(weights)), self.measure_after or "")

    def cost_keys(self, params: Params, in_shapes: Sequence[Shape], out_shape: Shape,
                  weights: Sequence[int] = ()) -> tuple[CostKey, ...]:
        """The keys a cost model prices this configuration by: one, its own (a fused form is one key; a cost
        model that does not fuse splits it with :func:`runs_as_keys`)."""
        if self.opaque:
            if "op_type" not in params:  # an e-graph's opaque node names only the node it stands for
                return (CostKey("opaque", (("key", params["key"]), ("index", params["index"])), (),
                                tuple(out_shape)),)
            # a graph's opaque node, by content (so a measured model can run it): what the node computes, its
            # output, the input shapes and which inputs are weights
            content = tuple((k, params[k]) for k in ("op_type", "domain", "attrs", "index", "n_outputs", "slots"))
            return (CostKey("opaque", content, tuple(tuple(s) for s in in_shapes), tuple(out_shape),
                            str(params["dtype"]), weights=tuple(sorted(weights))),)
        return (self.cost_key(params, in_shapes, out_shape, weights=weights),)


def _params_form(spec: OpSpec, form: GeneratorForm) -> GeneratorForm:
    """The template applying ``spec`` with the parameters ``form.params`` gives for the first operand's shape."""
    params_for = form.params
    assert params_for is not None, f"{spec.name}: a generator form needs apply or params"

    def apply(g: GenContext, args: Sequence[GenTensor]) -> list[GenTensor] | None:
        if any(t.bias is not None for t in args) or (p := params_for(args[0].shape)) is None:
            return None
        t = g.apply(spec.name, spec.normalize(p), args)
        return [t] if t is not None else None

    return GeneratorForm(apply, arity=len(spec.inputs), domains=form.domains)


REGISTRY: dict[str, OpSpec] = {}
#: ONNX op_type -> importer(ctx, onnx_node) -> list of IR nodes, or None to keep the node opaque.
ONNX_IMPORTERS: dict[str, Callable[[ImportContext, OnnxNode], list[IRNode] | None]] = {}


def get(name: str) -> OpSpec:
    """Look up an operator by name, with a clear error."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise OpError(f"unknown operator {name!r}; known: {sorted(REGISTRY)}") from None


def is_opaque(op: str) -> bool:
    """Whether ``op`` names the operator standing for an ONNX node the registry does not describe
    (``OpSpec.opaque``); False for any other name, an e-graph's leaves and lists included."""
    spec = REGISTRY.get(op)
    return spec is not None and spec.opaque


def register(spec: OpSpec) -> OpSpec:
    """Add an operator to the registry (once per name) and return it: a family module's
    ``NAME = register(OpSpec(...))``."""
    assert spec.name not in REGISTRY, f"operator {spec.name!r} registered twice"
    REGISTRY[spec.name] = spec
    return spec


Importer = Callable[[ImportContext, OnnxNode], list[IRNode] | None]
"""An ONNX importer: ``(ctx, node)`` -> the IR nodes the ONNX node becomes, or None (``ctx.unsupported(why)``) to
keep it opaque."""


def importer(*op_types: str) -> Callable[[Importer], Importer]:
    """Decorate the function that imports the ONNX nodes of these op types (``"Conv"``; another domain's as
    ``"com.microsoft:FusedConv"``), registering it in :data:`ONNX_IMPORTERS`."""
    def deco(fn: Importer) -> Importer:
        for t in op_types:
            assert t not in ONNX_IMPORTERS, f"ONNX op type {t!r} has two importers"
            ONNX_IMPORTERS[t] = fn
        return fn

    return deco
