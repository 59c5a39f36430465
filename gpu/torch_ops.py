"""ONNX's operators in PyTorch, for :mod:`eqsat.gpu.torch_run`: one function per ONNX operator type (``OPS``),
taking ``(torch, inputs, attributes, context)`` and returning a tensor or a tuple of them, and the inputs each
reads on the host rather than as data (``HOST_INPUTS``: sizes, axes, bounds). These are ONNX's semantics as the
exporters and eqsat's export write them, not eqsat's operators (those are described once, in ``eqsat.ops``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from eqsat.errors import EqsatError


class UnsupportedModel(EqsatError):
    """The model has an operator (or an attribute value) this interpreter does not run."""


# Inputs that must be known on the host (shapes, axes, bounds of a slice) are read with _ints; the plan keeps
# them on the CPU (HOST_INPUTS), so reading them costs nothing and no run reads back from the device.

Op = Callable[..., Any]
OPS: dict[str, Op] = {}
#: the inputs (by position) an operator reads on the host, not as data: sizes, axes, bounds, a clip's range.
#: They stay on the CPU, so a planned run reads nothing back from the device (and can be captured).
HOST_INPUTS: dict[str, frozenset[int]] = {
    op: frozenset(pos) for op, pos in {
        "Reshape": (1,), "Expand": (1,), "Slice": (1, 2, 3, 4), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,),
        "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "CumSum": (1,),
        "ConstantOfShape": (0,), "Range": (0, 1, 2), "Trilu": (1,), "Clip": (1, 2)}.items()}


def _op(*names: str) -> Callable[[Op], Op]:
    def add(fn: Op) -> Op:
        for n in names:
            OPS[n] = fn
        return fn
    return add


def _ints(t: Any) -> list[int]:
    """A host-known integer tensor as a list (shapes, axes, slice bounds)."""
    return [int(v) for v in t.reshape(-1).tolist()]


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sqrt": "sqrt", "Exp": "exp",
          "Log": "log", "Neg": "neg", "Abs": "abs", "Reciprocal": "reciprocal", "Cos": "cos", "Sin": "sin",
          "Not": "logical_not", "IsNaN": "isnan", "Floor": "floor", "Ceil": "ceil"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Equal": "eq", "Greater": "gt", "Less": "lt",
           "GreaterOrEqual": "ge", "LessOrEqual": "le", "And": "logical_and", "Or": "logical_or",
           "Xor": "logical_xor", "Pow": "pow"}


def _unary(name: str) -> Op:
    return lambda torch, x, a, c: getattr(torch, name)(x[0])


def _binary(name: str) -> Op:
    return lambda torch, x, a, c: getattr(torch, name)(x[0], x[1])


for _onnx_name, _torch_name in _UNARY.items():
    OPS[_onnx_name] = _unary(_torch_name)
for _onnx_name, _torch_name in _BINARY.items():
    OPS[_onnx_name] = _binary(_torch_name)


@_op("Div")
def _div(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    if x[0].is_floating_point():
        return x[0] / x[1]
    return torch.div(x[0], x[1], rounding_mode="trunc")  # ONNX's integer division truncates


@_op("Max", "Min", "Sum", "Mean")
def _variadic(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    fn = {"Max": torch.maximum, "Min": torch.minimum, "Sum": torch.add, "Mean": torch.add}[c.op]
    out = x[0]
    for t in x[1:]:
        out = fn(out, t)
    return out / len(x) if c.op == "Mean" else out


@_op("Identity")
def _identity(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    return x[0]


@_op("Gelu")
def _gelu(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    return torch.nn.functional.gelu(x[0], approximate=a.get("approximate", "none"))


@_op("Clip")
def _clip(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    lo = x[1] if len(x) > 1 and x[1] is not None else a.get("min")
    hi = x[2] if len(x) > 2 and x[2] is not None else a.get("max")
    lo = lo.item() if hasattr(lo, "item") else lo
    hi = hi.item() if hasattr(hi, "item") else hi
    return torch.clamp(x[0], lo, hi)


@_op("Softmax")
def _softmax(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    return torch.softmax(x[0], dim=a.get("axis", -1))


@_op("MatMul")
def _matmul(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    return torch.matmul(x[0], x[1])


@_op("Gemm")
def _gemm(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    p = x[0].T if a.get("transA", 0) else x[0]
    q = x[1].T if a.get("transB", 0) else x[1]
    out = torch.matmul(p, q)
    if a.get("alpha", 1.0) != 1.0:
        out = out * a["alpha"]
    if len(x) > 2 and x[2] is not None:
        bias = x[2] if a.get("beta", 1.0) == 1.0 else x[2] * a["beta"]
        out = out + bias
    return out


def _conv_pads(a: dict[str, Any], spatial: int) -> tuple[list[int], bool]:
    """(pads per side, symmetric) of a convolution or pool; SAME_* auto padding is not run."""
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise UnsupportedModel(f"auto_pad={a['auto_pad']} is not run")
    pads = list(a.get("pads", [0] * 2 * spatial))
    return pads, pads[:spatial] == pads[spatial:]


def _pad_input(torch: Any, x: Any, pads: list[int], spatial: int, value: float = 0.0) -> Any:
    flat = []  # torch's F.pad lists the last axis first, each as (begin, end)
    for k in reversed(range(spatial)):
        flat += [pads[k], pads[k + spatial]]
    return torch.nn.functional.pad(x, flat, value=value)


@_op("Conv")
def _conv(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    spatial = x[1].dim() - 2
    if spatial != 2:
        raise UnsupportedModel(f"Conv over {spatial} spatial axes is not run")
    pads, symmetric = _conv_pads(a, spatial)
    inp = x[0] if symmetric else _pad_input(torch, x[0], pads, spatial)
    return torch.nn.functional.conv2d(inp, x[1], x[2] if len(x) > 2 else None, stride=a.get("strides", 1),
                                      padding=pads[:spatial] if symmetric else 0,
                                      dilation=a.get("dilations", 1), groups=a.get("group", 1))


def _trim_ceil(out: Any, sizes: Sequence[int], pads: list[int], strides: Sequence[int]) -> Any:
    """Drop the windows ceil mode starts past the input and its leading padding (onnxruntime and PyTorch
    both leave them out; pooling an explicitly padded input would keep them)."""
    spatial = len(sizes)
    for k in range(spatial):
        n = out.shape[2 + k]
        while n > 1 and (n - 1) * strides[k] >= sizes[k] + pads[k]:
            n -= 1
        out = out.narrow(2 + k, 0, n)
    return out


@_op("MaxPool", "AveragePool")
def _pool(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    kernel = a["kernel_shape"]
    spatial = len(kernel)
    if spatial != 2 or a.get("storage_order", 0) or any(d != 1 for d in a.get("dilations", [1] * spatial)):
        raise UnsupportedModel(f"{c.op} with {a} is not run")
    pads, symmetric = _conv_pads(a, spatial)
    ceil = bool(a.get("ceil_mode", 0))
    strides = a.get("strides", [1] * spatial)
    if c.op == "MaxPool":
        if symmetric:
            return torch.nn.functional.max_pool2d(x[0], kernel, strides, pads[:spatial], ceil_mode=ceil)
        out = torch.nn.functional.max_pool2d(_pad_input(torch, x[0], pads, spatial, value=-math.inf), kernel,
                                             strides, 0, ceil_mode=ceil)
        return _trim_ceil(out, x[0].shape[2:], pads, strides) if ceil else out
    include = bool(a.get("count_include_pad", 0))
    if symmetric and all(2 * p <= k for p, k in zip(pads[:spatial], kernel, strict=True)):
        return torch.nn.functional.avg_pool2d(x[0], kernel, strides, pads[:spatial], ceil_mode=ceil,
                                              count_include_pad=include)
    # uneven or wide padding: sum over the padded input, divided by the count of real (or all) elements
    inp = _pad_input(torch, x[0], pads, spatial)
    total = torch.nn.functional.avg_pool2d(inp, kernel, strides, 0, ceil_mode=ceil) * (kernel[0] * kernel[1])
    if include:
        out = total / (kernel[0] * kernel[1])
    else:
        ones = _pad_input(torch, torch.ones_like(x[0][:1, :1]), pads, spatial)
        out = total / (torch.nn.functional.avg_pool2d(ones, kernel, strides, 0, ceil_mode=ceil) *
                       (kernel[0] * kernel[1]))
    return _trim_ceil(out, x[0].shape[2:], pads, strides) if ceil else out


@_op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    dims = tuple(range(2, x[0].dim()))
    if c.op == "GlobalAveragePool":
        return x[0].mean(dim=dims, keepdim=True)
    return x[0].amax(dim=dims, keepdim=True)


@_op("BatchNormalization")
def _batchnorm(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    return torch.nn.functional.batch_norm(x[0], x[3], x[4], x[1], x[2], training=False,
                                          eps=a.get("epsilon", 1e-5))


@_op("LayerNormalization")
def _layernorm(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    axis = _axis(a.get("axis", -1), x[0].dim())
    shape = tuple(x[0].shape[axis:])
    scale = x[1].expand(shape) if tuple(x[1].shape) != shape else x[1]
    bias = None if len(x) < 3 or x[2] is None else (x[2].expand(shape) if tuple(x[2].shape) != shape else x[2])
    if any(c.outputs[1:]):
        raise UnsupportedModel("LayerNormalization's mean and inverse deviation outputs are not run")
    return torch.nn.functional.layer_norm(x[0], shape, scale, bias, eps=a.get("epsilon", 1e-5))


@_op("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin")
def _reduce(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    axes = a.get("axes")
    if axes is None and len(x) > 1 and x[1] is not None:
        axes = _ints(x[1])
    keep = bool(a.get("keepdims", 1))
    if not axes:
        if a.get("noop_with_empty_axes", 0):
            return x[0]
        axes = list(range(x[0].dim()))
    fn = {"ReduceMean": torch.mean, "ReduceSum": torch.sum, "ReduceMax": torch.amax, "ReduceMin": torch.amin}[c.op]
    return fn(x[0], dim=tuple(axes), keepdim=keep)


@_op("CumSum")
def _cumsum(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    if a.get("exclusive", 0) or a.get("reverse", 0):
        raise UnsupportedModel("CumSum with exclusive or reverse is not run")
    return torch.cumsum(x[0], dim=_ints(x[1])[0]).to(x[0].dtype)


@_op("Concat")
def _concat(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    parts = [t for t in x if t is not None and (t.dim() != 1 or t.shape[0] != 0 or len(x) == 1)]
    return torch.cat(parts, dim=a["axis"])


@_op("Split")
def _split(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    axis = _axis(a.get("axis", 0), x[0].dim())
    sizes = _ints(x[1]) if len(x) > 1 and x[1] is not None else a.get("split")
    if sizes is None:
        n = a.get("num_outputs", len(c.outputs))
        size = -(-x[0].shape[axis] // n)
        sizes = [size] * (n - 1) + [x[0].shape[axis] - size * (n - 1)]
    return tuple(torch.split(x[0], list(sizes), dim=axis))


@_op("Reshape")
def _reshape(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    shape = _ints(x[1])
    if not a.get("allowzero", 0):  # 0 copies the input's size on that axis
        shape = [x[0].shape[k] if s == 0 else s for k, s in enumerate(shape)]
    return x[0].reshape(shape)


@_op("Flatten")
def _flatten(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    axis = _axis(a.get("axis", 1), x[0].dim())
    return x[0].reshape(math.prod(x[0].shape[:axis]), -1)


@_op("Transpose")
def _transpose(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    perm = a.get("perm", list(reversed(range(x[0].dim()))))
    return x[0].permute(*perm)


def _axes(x: list[Any], a: dict[str, Any]) -> list[int] | None:
    if "axes" in a:
        return list(a["axes"])
    return _ints(x[1]) if len(x) > 1 and x[1] is not None else None


@_op("Unsqueeze")
def _unsqueeze(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    axes = _axes(x, a) or []
    rank = x[0].dim() + len(axes)
    out = x[0]
    for ax in sorted(_axis(k, rank) for k in axes):
        out = out.unsqueeze(ax)
    return out


@_op("Squeeze")
def _squeeze(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    axes = _axes(x, a)
    if axes is None:
        return x[0].squeeze()
    return x[0].squeeze(tuple(_axis(k, x[0].dim()) for k in axes))


@_op("Slice")
def _slice(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    starts, ends = _ints(x[1]), _ints(x[2])
    axes = _ints(x[3]) if len(x) > 3 and x[3] is not None else list(range(len(starts)))
    steps = _ints(x[4]) if len(x) > 4 and x[4] is not None else [1] * len(starts)
    out = x[0]
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
        ax = _axis(ax, out.dim())
        n = out.shape[ax]
        s, e = s + n if s < 0 else s, e + n if e < 0 else e
        if st > 0:  # bounds clamped to [0, n], as ONNX does (ends of INT64_MAX mean "to the end")
            s, e = min(max(s, 0), n), min(max(e, 0), n)
            out = out[(slice(None),) * ax + (slice(s, max(s, e), st),)]
        else:  # torch slices forwards only: pick the positions
            s, e = min(max(s, -1), n - 1), min(max(e, -1), n - 1)
            picked = torch.tensor(list(range(s, e, st)), dtype=torch.long, device=out.device)
            out = out.index_select(ax, picked)
    return out


@_op("Gather")
def _gather(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    data, idx = x[0], x[1].long()
    axis = _axis(a.get("axis", 0), data.dim())
    idx = torch.where(idx < 0, idx + data.shape[axis], idx)
    out = torch.index_select(data, axis, idx.reshape(-1))
    return out.reshape((*data.shape[:axis], *idx.shape, *data.shape[axis + 1:]))


@_op("GatherElements")
def _gather_elements(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    axis = _axis(a.get("axis", 0), x[0].dim())
    idx = x[1].long()
    return torch.gather(x[0], axis, torch.where(idx < 0, idx + x[0].shape[axis], idx))


@_op("GatherND")
def _gather_nd(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    batch = a.get("batch_dims", 0)
    if batch:
        raise UnsupportedModel("GatherND with batch_dims is not run")
    data, idx = x[0], x[1].long()
    k = idx.shape[-1]
    flat = idx.reshape(-1, k)
    out = data[tuple(flat[:, j] for j in range(k))]
    return out.reshape((*idx.shape[:-1], *data.shape[k:]))


@_op("Where")
def _where(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    return torch.where(x[0].bool(), x[1], x[2])


@_op("Expand")
def _expand(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    shape = _ints(x[1])
    rank = max(len(shape), x[0].dim())
    have = [1] * (rank - x[0].dim()) + list(x[0].shape)
    want = [1] * (rank - len(shape)) + shape
    target = [h if w == 1 else w for h, w in zip(have, want, strict=True)]  # ONNX broadcasts both ways
    return x[0].reshape(have).expand(target)


@_op("Shape")
def _shape(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    dims = list(x[0].shape)[a.get("start", 0):a.get("end", None)]
    return torch.tensor(dims, dtype=torch.int64)


@_op("Size")
def _size(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    return torch.tensor(x[0].numel(), dtype=torch.int64)


@_op("ConstantOfShape")
def _constant_of_shape(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    value = a.get("value")
    fill = c.tensor(value) if value is not None else torch.zeros(1, dtype=c.float_dtype)
    return torch.full(_ints(x[0]), fill.reshape(-1)[0].item(), dtype=fill.dtype)


@_op("Constant")
def _constant(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    if "value" in a:
        return c.tensor(a["value"])
    for key, dtype in (("value_float", torch.float32), ("value_int", torch.int64)):
        if key in a:
            return c.cast(torch.tensor(a[key], dtype=dtype))
    for key, dtype in (("value_floats", torch.float32), ("value_ints", torch.int64)):
        if key in a:
            return c.cast(torch.tensor(list(a[key]), dtype=dtype))
    raise UnsupportedModel(f"Constant {c.outputs[0]!r} has none of the attributes this interpreter reads")


@_op("Cast")
def _cast(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    return x[0].to(c.dtype_of(a["to"]))


@_op("Range")
def _range(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    start, limit, delta = (t.reshape(-1)[0].item() for t in x)
    return torch.arange(start, limit, delta, dtype=x[0].dtype)


@_op("Trilu")
def _trilu(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    k = _ints(x[1])[0] if len(x) > 1 and x[1] is not None else 0
    return torch.triu(x[0], k) if a.get("upper", 1) else torch.tril(x[0], k)


@_op("Mod")
def _mod(torch: Any, x: list[Any], a: dict[str, Any], c: Ctx) -> Any:
    return torch.fmod(x[0], x[1]) if a.get("fmod", 0) else torch.remainder(x[0], x[1])


@dataclass
class Ctx:
    """What an operator may ask of the model: its node's name and outputs, and the float type it computes in."""

    op: str
    outputs: list[str]
    float_dtype: Any
    torch: Any

    def dtype_of(self, onnx_type: int) -> Any:
        """The torch type of an ONNX element type, float32 becoming the model's float type."""
        if onnx_type == onnx.TensorProto.FLOAT:
            return self.float_dtype
        np_type = helper.tensor_dtype_to_np_dtype(onnx_type)
        return self.torch.from_numpy(np.zeros(0, dtype=np_type)).dtype

    def cast(self, t: Any) -> Any:
        return t.to(self.float_dtype) if t.dtype == self.torch.float32 else t

    def tensor(self, proto: onnx.TensorProto) -> Any:
        return self.cast(self.torch.from_numpy(numpy_helper.to_array(proto).copy()))
