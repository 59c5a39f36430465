"""Whole ONNX models run in PyTorch, eagerly or captured in a CUDA graph, in float32 or float16.

The cost models price a graph as the sum of its operators, each timed alone; a deployment runs the whole model,
and on a GPU usually replays it as one CUDA graph, which removes the launch gaps between kernels. This module
runs an ONNX file as a whole model on any device PyTorch has, so the benchmark ``benchmarks/gpu_e2e.py`` can time
the original and the optimized graphs end to end, the same way on the CPU (where CI tests it against onnxruntime)
and on the GPU.

It is an interpreter of ONNX's operators, not of eqsat's: it runs what export wrote (and what the exporters
wrote), node by node, in the graph's order. :meth:`TorchModel.plan` runs the model once at given input shapes and
computes, once and for all, every value that does not depend on the inputs' data (weights, constants, shape
arithmetic, masks built from sizes): what is left runs on the device with no reads back to the host, so the run
can be captured in a CUDA graph. With ``half=True`` float32 weights, inputs and casts become float16.

Imports PyTorch only when a model is built (it is not a dependency of eqsat's: ``pip install torch``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from eqsat.gpu.torch_ops import HOST_INPUTS, OPS, Ctx, Op, UnsupportedModel

__all__ = ["OPS", "TorchModel", "Timing", "UnsupportedModel", "relative_error", "time_calls", "unsupported_ops"]


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise UnsupportedModel("running ONNX models in PyTorch needs PyTorch: pip install torch") from e
    return torch


@dataclass
class _Step:
    op: Op
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    ctx: Ctx


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for at in node.attribute:
        if at.type == onnx.AttributeProto.GRAPH or at.type == onnx.AttributeProto.GRAPHS:
            raise UnsupportedModel(f"{node.op_type} {node.name!r} has a subgraph, which is not run")
        out[at.name] = at.t if at.type == onnx.AttributeProto.TENSOR else helper.get_attribute_value(at)
        if isinstance(out[at.name], bytes):
            out[at.name] = out[at.name].decode()
    return out


def unsupported_ops(model: onnx.ModelProto) -> list[str]:
    """The operator types of ``model`` this interpreter has no implementation for (empty: it can run it)."""
    return sorted({f"{n.domain + ':' if n.domain else ''}{n.op_type}" for n in model.graph.node
                   if n.domain not in ("", "ai.onnx") or n.op_type not in OPS})


@dataclass
class TorchModel:
    """An ONNX model run in PyTorch on ``device``, float32 (or float16 with ``half``): call :meth:`plan` with
    inputs once, then :meth:`run` (or :meth:`captured`, a CUDA graph of it) as often as needed."""

    model: onnx.ModelProto
    device: str = "cpu"
    half: bool = False
    _steps: list[_Step] = field(default_factory=list, init=False)
    _live: list[tuple[_Step, list[Any]]] = field(default_factory=list, init=False)  # steps that read the inputs
    _planned: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        torch = _torch()
        missing = unsupported_ops(self.model)
        if missing:
            raise UnsupportedModel(f"no PyTorch implementation here for {', '.join(missing)}")
        self.torch = torch
        self.float_dtype = torch.float16 if self.half else torch.float32
        g = self.model.graph
        self.input_names = [i.name for i in g.input if i.name not in {t.name for t in g.initializer}]
        self.output_names = [o.name for o in g.output]
        for n in g.node:
            ctx = Ctx(n.op_type, list(n.output), self.float_dtype, torch)
            self._steps.append(_Step(OPS[n.op_type], list(n.input), list(n.output), _attributes(n), ctx))
        self._weights = {t.name: t for t in g.initializer}

    # -- inputs ------------------------------------------------------------------------------------------------
    def feeds(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Numpy inputs as tensors on the device (float32 ones in the model's float type)."""
        out = {}
        for name in self.input_names:
            t = self.torch.from_numpy(np.ascontiguousarray(arrays[name]))
            out[name] = (t.to(self.float_dtype) if t.dtype == self.torch.float32 else t).to(self.device)
        return out

    # -- running -----------------------------------------------------------------------------------------------
    def plan(self, feeds: Mapping[str, Any]) -> list[Any]:
        """Run once at these inputs' shapes, keeping every value that does not depend on the inputs' data (it is
        computed on the CPU once: weights, constants, shape arithmetic); later runs at the same shapes compute
        only the rest, on the device. Returns the outputs. ``host_reads`` counts the values the live steps read
        back from the device (none: the run can be captured in a CUDA graph)."""
        torch = self.torch
        cpu = Ctx("", [], self.float_dtype, torch)
        fixed: dict[str, Any] = {"": None, **{n: cpu.tensor(p) for n, p in self._weights.items()}}
        env: dict[str, Any] = dict(feeds)
        live: list[tuple[_Step, list[Any]]] = []  # each live step with its fixed arguments (None: read from env)
        self.host_reads = 0
        for step in self._steps:
            host = HOST_INPUTS.get(step.ctx.op, frozenset())
            if step.ctx.op in ("Shape", "Size") or not any(i in env for i in step.inputs):
                # computed once on the CPU: only the inputs' shapes are read
                args = [torch.empty(env[i].shape, device="meta") if i in env else fixed[i] for i in step.inputs]
                res = step.op(torch, args, step.attrs, step.ctx)
                fixed.update(zip(step.outputs, res if isinstance(res, tuple) else (res,), strict=False))
                continue
            self.host_reads += sum(1 for k, i in enumerate(step.inputs) if k in host and i in env)
            bound = [None if i in env else (fixed[i] if k in host or fixed[i] is None else fixed[i].to(self.device))
                     for k, i in enumerate(step.inputs)]
            live.append((step, bound))
            self._call(step, bound, env)
        self._live, self._shapes, self._planned = live, {k: tuple(v.shape) for k, v in feeds.items()}, True
        self._outputs_fixed = {o: fixed[o].to(self.device) for o in self.output_names if o not in env}
        return [env[o] if o in env else self._outputs_fixed[o] for o in self.output_names]

    def _call(self, step: _Step, bound: list[Any], env: dict[str, Any]) -> None:
        args = [env[i] if b is None and i in env else b for i, b in zip(step.inputs, bound, strict=True)]
        res = step.op(self.torch, args, step.attrs, step.ctx)
        if isinstance(res, tuple):
            env.update(zip(step.outputs, res, strict=False))
        else:
            env[step.outputs[0]] = res

    def run(self, feeds: Mapping[str, Any]) -> list[Any]:
        """The outputs at ``feeds`` (planned again where their shapes differ from the last plan's)."""
        if not self._planned or {k: tuple(v.shape) for k, v in feeds.items()} != self._shapes:
            return self.plan(feeds)
        env = dict(feeds)
        for step, bound in self._live:
            self._call(step, bound, env)
        return [env[o] if o in env else self._outputs_fixed[o] for o in self.output_names]

    def captured(self, feeds: Mapping[str, Any], warmup: int = 3) -> Callable[[], list[Any]]:
        """A CUDA graph of :meth:`run` at ``feeds``: call the result to replay it (on the same input tensors,
        which the caller may overwrite in place); its outputs are the graph's own buffers."""
        torch = self.torch
        self.plan(feeds)
        if self.host_reads:
            raise UnsupportedModel(f"{self.host_reads} value(s) the model computes from its inputs' data are read "
                                   "as sizes or bounds: it cannot be captured in a CUDA graph")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up off the default stream, as capture requires
            for _ in range(warmup):
                self.run(feeds)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = self.run(feeds)

        def replay() -> list[Any]:
            graph.replay()
            return outs
        return replay


# -- timing --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Median and spread (ms) of one way of running a model."""

    median_ms: float
    low_ms: float
    high_ms: float
    runs: int


def time_calls(fn: Callable[[], Any], device: str, budget_s: float = 0.5, min_runs: int = 10,
               max_runs: int = 2000) -> Timing:
    """Time ``fn`` (after warm-up): each run between device events on a GPU, on the host clock on the CPU; as
    many runs as fit ``budget_s``, within [min_runs, max_runs]. Returns the median and the quartiles."""
    import time

    torch = _torch()
    cuda = device.startswith("cuda")
    for _ in range(3):
        fn()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    once = max(time.perf_counter() - t0, 1e-6)
    runs = int(min(max_runs, max(min_runs, budget_s / once)))
    times = []
    if cuda:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in events]
    else:
        for _ in range(runs):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return Timing(statistics.median(times), q[0], q[2], len(times))


def relative_error(out: Sequence[Any], ref: Sequence[np.ndarray]) -> float:
    """The largest ``|out - ref| / |ref|`` (norms over each output) of ``out`` against ``ref``, in float64;
    infinite where shapes differ or a value is NaN."""
    worst = 0.0
    for o, r in zip(out, ref, strict=True):
        a = o.detach().float().cpu().numpy().astype(np.float64) if hasattr(o, "detach") else np.asarray(o, float)
        b = np.asarray(r, dtype=np.float64)
        if a.shape != b.shape or np.isnan(a).any() != np.isnan(b).any():
            return math.inf
        a, b = np.nan_to_num(a, posinf=0, neginf=0), np.nan_to_num(b, posinf=0, neginf=0)
        worst = max(worst, float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)))
    return worst
