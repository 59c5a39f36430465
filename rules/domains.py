"""The rule generator's domains: typed input variables, their shapes per shape set, and the templates applied.

The registry's operators declare the templates (``OpSpec.generator_forms``) that the enumeration applies in
each domain (``GeneratorForm.domains``), so a domain lists only its variables. Shape set A (index 0) is the
one graphs are fingerprinted on, B (1) the one float confirmation checks, C (2) one more for tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from eqsat import ops
from eqsat.ir.rule import is_var
from eqsat.ops.core import SymDim


@dataclass(frozen=True)
class VarType:
    """A kind of input variable: name prefix, shape in each shape set, and whether it is a conv kernel."""

    prefix: str
    shapes: tuple[tuple[int, ...], ...]
    count: int
    kernel: bool = False
    #: A parameter variable (a reshape target): ``shapes`` holds its value per shape set; not a tensor.
    param: bool = False
    #: For a reshape target: the prefix of the matrix variables it reshapes (``(a, b * c)`` to ``(a, b, c)``).
    of: str = ""


@dataclass(frozen=True)
class Domain:
    """A family of operators over typed variables."""

    name: str
    types: tuple[VarType, ...]

    @property
    def templates(self) -> tuple[str, ...]:
        """The templates the registry's operators declare for this domain (``GeneratorForm.domains``), in
        registry order."""
        return tuple(name for spec in ops.REGISTRY.values() for name, form in spec.generator_forms.items()
                     if self.name in form.domains)


MAT = Domain("mat", (
    VarType("x", ((2, 4), (3, 5), (4, 3)), 2),
    VarType("w", ((4, 4), (5, 5), (3, 3)), 3),
    VarType("s", ((), (), ()), 1),
))

CONV = Domain("conv", (
    VarType("i", ((1, 4, 3, 3), (2, 3, 4, 4), (1, 2, 5, 4)), 2),
    VarType("k", ((4, 4, 3, 3), (3, 3, 3, 3), (2, 2, 3, 3)), 2, kernel=True),
    VarType("u", ((4, 4, 1, 1), (3, 3, 1, 1), (2, 2, 1, 1)), 1, kernel=True),
    VarType("s", ((), (), ()), 1),
))

#: Attention heads: rank-3 tensors (under every rank-3 transpose and batched matmul) and the reshape of a matrix
#: into heads (``?r1`` is its target shape, a parameter variable, so the rules hold for any target).
HEADS = Domain("heads", (
    VarType("q", ((2, 3, 4), (3, 2, 5), (2, 4, 3)), 2),
    VarType("v", ((2, 4, 4), (3, 5, 5), (2, 3, 3)), 1),
    VarType("m", ((3, 8), (2, 15), (4, 6)), 1),
    VarType("r", ((3, 2, 4), (2, 3, 5), (4, 2, 3)), 1, param=True, of="m"),
    VarType("s", ((), (), ()), 1),
))

DOMAINS: dict[str, Domain] = {d.name: d for d in (MAT, CONV, HEADS)}
SHAPE_SETS = 3

_VAR_TYPES = {t.prefix: t for d in DOMAINS.values() for t in d.types}
#: Prefixes of kernel variables; ``?b`` + a kernel's name is its bias (``?bk1`` for ``?k1``).
KERNELS = tuple(p for p, t in _VAR_TYPES.items() if t.kernel)
#: Kernel variables and their biases: weights, on which work is done once.
WEIGHTS = KERNELS + tuple("b" + p for p in KERNELS)



def var_shape(var: str, shape_set: int) -> tuple[int, ...]:
    """Shape of variable ``?name`` in a shape set (bias variables ``?bk1`` follow their kernel)."""
    name = var[1:]
    if name.startswith("b") and name[1:2] in KERNELS:
        return (_VAR_TYPES[name[1]].shapes[shape_set][0],)
    return _VAR_TYPES[name.rstrip("0123456789")].shapes[shape_set]


def is_param_var(var: str) -> bool:
    """True for a parameter variable of a domain (its value is a tuple, not a tensor)."""
    vt = _VAR_TYPES.get(var_prefix(var))
    return vt is not None and vt.param


def var_prefix(var: str) -> str:
    """The type prefix of a variable (``b`` + kernel prefix for biases)."""
    name = var[1:]
    if name.startswith("b") and name[1:2] in KERNELS:
        return "b" + name[1]
    return name.rstrip("0123456789")


def var_type(prefix: str) -> VarType | None:
    """The variable type of a prefix (None for a bias or an unknown prefix)."""
    return _VAR_TYPES.get(prefix)


def evaluate_sym(e: SymDim, shape_set: int) -> int:
    """Evaluate a symbolic dimension expression with the variables' shapes in a shape set."""
    if isinstance(e, int):
        return e
    if is_var(e):
        raise ValueError(f"unbound parameter {e}")
    head = e[0]
    if head == "dim":
        return var_shape(e[1], shape_set)[int(e[2])]
    a, b = evaluate_sym(e[1], shape_set), evaluate_sym(e[2], shape_set)
    return {"+": a + b, "-": a - b, "*": a * b}[head]
