"""Measured CPU costs: each operator configuration runs as a one-node ONNX model in onnxruntime."""

from __future__ import annotations

import copy
import functools
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from eqsat import ops
from eqsat.costs.analytic import AnalyticCostModel
from eqsat.costs.base import CostModel
from eqsat.ir.names import NameAllocator
from eqsat.onnx_io import inference_session, kernel_opsets, opaque_node, written_node
from eqsat.ops import ONNX_FLOAT_TYPES, CostKey


class _OneNodeExport:
    """The export context a one-node model needs: opset 20, where every registry operator has an ONNX node of
    its own (Gelu is one from 20; below it exports as its decomposition, which a whole model's session fuses)."""

    opset = 20

    def __init__(self, shapes: dict[str, tuple[int, ...]] | None = None) -> None:
        self.initializers: dict[str, np.ndarray] = {}
        self._names = NameAllocator(sep="__", numbered=True)
        self.shapes = dict(shapes or {})

    def shape(self, name: str) -> tuple[int, ...] | None:
        return self.shapes.get(name)

    def constant(self, name: str) -> np.ndarray | None:
        return self.initializers.get(name)

    def add_initializer(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.initializers[name] = np.asarray(array)
        return name

    def fresh(self, hint: str) -> str:
        return self._names.fresh(hint)


def one_node_model(key: CostKey, replicas: int = 1, after: bool = False):
    """The ONNX model eqsat's exporter would write for this configuration: activations as graph inputs
    ``in{k}``, weights (``key.weights``) as seeded random initializers, so that onnxruntime pre-packs them as
    it does in the whole model. With ``replicas`` > 1 the node is repeated over the same activations, each
    copy with weights of its own (outputs ``out0``, ``out1``, ...): one run then reads as many distinct
    weights as a whole model does, instead of one weight kept hot in the cache. With ``after``, the first input is
    computed by ``key.after`` from graph inputs ``in0`` and ``in0_b`` (the context the operator is timed in). An
    operand of :data:`BLOCKED_OPERANDS` is computed from ``in{k}`` by a 1x1 MaxPool (``in{k}_blocked``), once:
    an identity onnxruntime runs in NCHWc, so the operand arrives blocked as it does inside a model."""

    spec = ops.get(key.op)
    params = dict(key.params)
    dt = helper.np_dtype_to_tensor_dtype(np.dtype(key.dtype))
    rng = np.random.default_rng(0)
    graph_inputs = [(f"in{k}", sh) for k, sh in enumerate(key.input_shapes) if k not in key.weights]
    ctx = _OneNodeExport(dict(graph_inputs))
    nodes, inits, outs = [], {}, []
    if after:  # the producer's node, once, before the replicas
        graph_inputs.append(("in0_b", key.input_shapes[0]))
        ctx.shapes["in0_ctx"] = key.input_shapes[0]
        prod = ops.get(key.after)
        nodes += [written_node(t, i, o, **a) for t, i, o, a in prod.export_fn({}, ["in0", "in0_b"], ["in0_ctx"], ctx)]
    blocked = [k for k in BLOCKED_OPERANDS.get(key.op, ()) if k not in key.weights]
    nodes += [helper.make_node("MaxPool", [f"in{k}"], [f"in{k}_blocked"], kernel_shape=[1, 1]) for k in blocked]
    for r in range(replicas):
        ins = [f"in{k}" if k not in key.weights else f"w{k}_{r}" for k in range(len(key.input_shapes))]
        for k in blocked:
            ins[k] = f"in{k}_blocked"
        if after:
            ins[0] = "in0_ctx"
        inits.update({ins[k]: rng.standard_normal(key.input_shapes[k]).astype(key.dtype) for k in key.weights})
        ctx.shapes.update({ins[k]: key.input_shapes[k] for k in key.weights})
        out = "out" if replicas == 1 else f"out{r}"
        outs.append(out)
        nodes += [written_node(t, i, o, **a) for t, i, o, a in spec.export_fn(params, ins, [out], ctx)]
    inits.update(ctx.initializers)
    # an operator that changes the precision (a cast) writes its output in the precision it names
    out_dt = ONNX_FLOAT_TYPES[params[spec.precision_param]] if spec.precision_param else dt
    g = helper.make_graph(nodes, "one", [helper.make_tensor_value_info(n, dt, list(sh)) for n, sh in graph_inputs],
                          [helper.make_tensor_value_info(o, out_dt, list(key.output_shape)) for o in outs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", ctx.opset), *kernel_opsets(nodes, ())])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


#: Operands that inside a model come from an operator onnxruntime runs blocked, which its NCHWc convolution
#: then reads in place (Conv + Add fuse only when the added tensor is blocked): op -> input positions.
BLOCKED_OPERANDS: dict[str, tuple[int, ...]] = {"conv2d_add": (3,)}
#: Operators onnxruntime's CPU provider runs in its blocked NCHWc layout inside a model (where channel counts
#: allow): their one-node measurements are taken net of the layout conversions at the model's boundary.
NCHWC_OPS = frozenset({"conv2d", "conv2d_add", "maxpool", "avgpool"})
_NCHWC_DOMAIN = "com.microsoft.nchwc"


def _nchwc_reorders(model, threads: int) -> dict[str, list[str]]:
    """The inputs of the ReorderInput nodes and outputs of the ReorderOutput nodes in the graph onnxruntime
    optimizes ``model`` to (none where it keeps the NCHW kernels)."""


    found: dict[str, list[str]] = {"ReorderInput": [], "ReorderOutput": []}
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for n in onnx.load(so.optimized_model_filepath).graph.node:
            if n.domain == _NCHWC_DOMAIN and n.op_type == "ReorderInput":
                found["ReorderInput"].append(n.input[0])
            elif n.domain == _NCHWC_DOMAIN and n.op_type == "ReorderOutput":
                found["ReorderOutput"].append(n.output[0])
    return found


def _reorder_model(kind: str, shape: tuple[int, ...], block: int):
    """One NCHWc ``ReorderInput`` (NCHW ``shape`` -> blocked) or ``ReorderOutput`` (blocked -> NCHW ``shape``);
    the blocked tensor has the channels rounded up to a whole number of ``block``. A ReorderOutput reads its
    input as blocked whatever its values."""

    blocked = [shape[0], -(-shape[1] // block) * block, *shape[2:]]
    attrs = {"channels": shape[1]} if kind == "ReorderOutput" else {}
    node = helper.make_node(kind, ["in0"], ["out"], domain=_NCHWC_DOMAIN, **attrs)
    src, dst = (list(shape), blocked) if kind == "ReorderInput" else (blocked, list(shape))
    g = helper.make_graph([node], "reorder", [helper.make_tensor_value_info("in0", 1, src)],
                          [helper.make_tensor_value_info("out", 1, dst)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_NCHWC_DOMAIN, 1)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@functools.lru_cache(maxsize=1)
def nchwc_block_size() -> int:
    """Channels per block of onnxruntime's NCHWc layout on this CPU (8 with AVX2, 16 with AVX-512): the
    channel count a ReorderInput pads four channels (its least) to."""

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(_reorder_model("ReorderInput", (1, 4, 1, 1), 1).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return int(sess.run(None, {"in0": np.zeros((1, 4, 1, 1), np.float32)})[0].shape[1])


def _opaque_model(key: CostKey, int_inputs: frozenset[int] = frozenset()):
    """The one-node ONNX model of an opaque cost key: the node's operator and attributes over graph inputs
    ``in{k}`` (weights as seeded random initializers) in the key's dtype, or int64 for the graph inputs in
    ``int_inputs`` (index operands), returning the output the key prices."""


    p = dict(key.params)
    dt = helper.np_dtype_to_tensor_dtype(np.dtype(key.dtype))
    rng = np.random.default_rng(0)
    names = [f"in{k}" if k not in key.weights else f"w{k}" for k in range(len(key.input_shapes))]
    outs = [f"out{k}" for k in range(p["n_outputs"])]
    node = opaque_node(p, names, outs)
    inits = [numpy_helper.from_array(rng.standard_normal(key.input_shapes[k]).astype(key.dtype), names[k])
             for k in key.weights]
    graph_inputs = [helper.make_tensor_value_info(n, TensorProto.INT64 if k in int_inputs else dt, list(s))
                    for k, (n, s) in enumerate(zip(names, key.input_shapes, strict=True)) if k not in key.weights]
    # the output the key prices is returned (its dtype is the key's); the node's other outputs are computed too
    g = helper.make_graph([node], "opaque", graph_inputs,
                          [helper.make_tensor_value_info(outs[p["index"]], dt, list(key.output_shape))], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(p["domain"], 1)] if p["domain"] else [])
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    return m


def _bound_runs(sess, copies: list[dict[str, np.ndarray]]) -> tuple[list[Callable[[], None]], list[Any]]:
    """One call per feed copy that runs the session on it with inputs and outputs bound in place (an I/O
    binding), and the output values (OrtValues) every call writes into: no output is allocated or handed back
    to numpy per run. Inside a whole model an operator's output
    is an arena buffer its reader takes as it is; a one-node model that returned its outputs would charge each
    operator (and each replica, and each piece of a Split) that graph-boundary work."""
    names = [o.name for o in sess.get_outputs()]
    first = sess.io_binding()
    for k, v in copies[0].items():
        first.bind_cpu_input(k, v)
    for n in names:
        first.bind_output(n, "cpu")
    sess.run_with_iobinding(first)  # allocates the outputs once; every later run writes into them
    outputs = first.get_outputs()
    runs = []
    for c in copies:
        b = sess.io_binding()
        for k, v in c.items():
            b.bind_cpu_input(k, v)
        for n, v in zip(names, outputs, strict=True):
            b.bind_ortvalue_output(n, v)
        runs.append(functools.partial(sess.run_with_iobinding, b))
    return runs, outputs


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


DEFAULT_WORKING_SET_MB = 64
MAX_REPLICAS = 512  # copies of a node with weights, to reach the working set with small weights
MAX_RUN_MS = 10.0  # ... as long as the copies take at most this long per run (analytic estimate)


class OnnxRuntimeCostModel(CostModel):
    """Median wall time of a run (inputs and outputs bound in place) of a one-node model (CPU provider, ``threads``
    intra-op threads, one by default so that timings repeat on a machine doing other work, 0 = onnxruntime's
    default of one per physical core; one inter-op thread), less the fixed per-call overhead measured on
    a one-element Identity model. Activations rotate through copies whose total exceeds ``working_set_mb`` (0:
    always the same inputs), so they come from memory rather than from a cache kept hot by the benchmark loop. By
    default the working set is the weights of the model being optimized (:meth:`in_context`): the 4 MB of a small
    RNN cell stay in the caches run after run, the 100 MB of a ResNet-50 do not, and a product over merged weights
    is only cheaper than the separate ones if it is timed in the same conditions.

    Weight operands (``CostKey.weights``) are initializers, as in the whole model, so onnxruntime pre-packs
    them, and the node is replicated with distinct weights (:meth:`replicas`) so they are read from memory,
    not from a cache kept hot by the loop. A product with a constant right operand is thus measured as the
    deployed model runs it, and a layout variant that moves an activation into that slot pays for losing the
    pre-packing.

    Graph optimizations are enabled (as a deployment would run), so e.g. Conv followed by Relu is measured
    as onnxruntime fuses it. Opaque operators fall back to the analytic model: eqsat never rewrites them, so
    any consistent value works.
    """

    name = "onnxruntime-cpu"
    is_measured = True
    times_end_to_end = True  # whole models run in the same onnxruntime, with the same threads

    def __init__(self, threads: int = 1, warmup: int = 3, repeats: int = 7, working_set_mb: int | None = None) -> None:
        if threads < 0:
            raise ValueError(f"threads must be >= 0 (0: onnxruntime's default), got {threads}")
        self.threads = threads  # intra-op threads; 0 = onnxruntime's default (one per physical core)
        #: bytes in play per measured run, MB; None: fitted to each model (:meth:`in_context`), 64 outside one
        self.auto_working_set = working_set_mb is None
        self.working_set_mb = DEFAULT_WORKING_SET_MB if working_set_mb is None else working_set_mb
        self.warmup = warmup
        self.repeats = repeats
        self._fallback = AnalyticCostModel()
        self._overhead: dict[int, float] = {}
        self._reorders: dict[tuple[str, tuple[int, ...]], float] = {}

    def in_context(self, weight_bytes: int) -> OnnxRuntimeCostModel:
        """With an automatic working set: a copy whose working set is the model's weights, rounded up to a
        power of two MB (at least 1 MB), so models of similar size share cached measurements."""
        if not self.auto_working_set:
            return self
        mb = 1
        while mb * 2**20 < weight_bytes and mb < 1024:
            mb *= 2
        if mb == self.working_set_mb:
            return self
        other = copy.copy(self)
        other.working_set_mb = mb
        other._overhead = {}
        other._reorders = {}
        return other

    def _feed_copies(self, feeds: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        # a whole model reads each weight once per run, from memory rather than a hot cache: rotate through
        # enough copies of the inputs that the working set exceeds the caches (working_set_mb)
        nbytes = sum(v.nbytes for v in feeds.values()) or 1
        copies = max(1, min(64, int(self.working_set_mb * 2**20 // nbytes)))
        rng = np.random.default_rng(1)
        return [feeds] + [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}
                          for _ in range(copies - 1)]

    def _median_run_ms(self, model, feeds: dict[str, np.ndarray], optimize: bool = True,
                       rotate: bool = True) -> float:

        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 4  # a configuration that does not run raises; its caller estimates it instead
        if not optimize:  # run as written (a model of onnxruntime's own layout operators)
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        copies = self._feed_copies(feeds) if self.working_set_mb and rotate else [feeds]
        runs, _ = _bound_runs(sess, copies)
        for k in range(self.warmup):
            runs[k % len(runs)]()
        # time batches long enough (>= 2 ms) for microsecond kernels; the median over batches resists noise
        t = time.perf_counter()
        runs[0]()
        once = max(time.perf_counter() - t, 1e-6)
        batch = max(1, min(1000, int(0.002 / once)))
        times = []
        i = 0
        for _ in range(self.repeats):
            t = time.perf_counter()
            for _ in range(batch):
                runs[i % len(runs)]()
                i += 1
            times.append((time.perf_counter() - t) * 1e3 / batch)
        return float(statistics.median(times))

    def run_overhead_ms(self, n_inputs: int = 1) -> float:
        """The fixed cost of one ``session.run`` call with ``n_inputs`` one-element inputs (a Sum, or Identity for
        one), subtracted from every measurement: inside a whole model that cost is paid once, not per operator."""
        if n_inputs not in self._overhead:

            names = [f"in{k}" for k in range(n_inputs)]
            node = helper.make_node("Identity" if n_inputs == 1 else "Sum", names, ["out"])
            g = helper.make_graph([node], "overhead", [helper.make_tensor_value_info(n, 1, [1]) for n in names],
                                  [helper.make_tensor_value_info("out", 1, [1])])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
            m.ir_version = 8
            self._overhead[n_inputs] = self._median_run_ms(m, {n: np.zeros(1, np.float32) for n in names})
        return self._overhead[n_inputs]

    def cost(self, key: CostKey) -> float:
        """Measure one configuration (ms), net of the per-call overhead (at least 1 µs)."""
        if key.is_opaque:
            return self._cost_opaque(key)
        spec = ops.get(key.op)
        if spec.view:  # no kernel runs
            return 0.0
        rng = np.random.default_rng(0)
        feeds = {f"in{k}": rng.standard_normal(s).astype(key.dtype) for k, s in enumerate(key.input_shapes)
                 if k not in key.weights}
        if key.after:
            return self._cost_after(key, feeds)
        if spec.export_pieces is not None:  # a piece of what export writes as one node
            return self._cost_piece(key, feeds)
        overhead = self.run_overhead_ms(max(1, len(feeds)))
        replicas = self.replicas(key)
        model = one_node_model(key, replicas)
        total = self._median_run_ms(model, feeds)
        if key.op in NCHWC_OPS:  # inside a model it runs blocked, between blocked neighbours: no reorders
            total -= self._boundary_reorders_ms(key, model)
        for k in BLOCKED_OPERANDS.get(key.op, ()):  # the 1x1 MaxPool that blocks the operand, run once
            if k not in key.weights:
                pool = ops.get("maxpool")
                shape = key.input_shapes[k]
                p = pool.normalize({"kernel": (1, 1), "strides": (1, 1), "pads": (0, 0, 0, 0)})
                total -= self.cost(pool.cost_key(p, [shape], shape))
        return max((total - overhead) / replicas, 0.001)

    def _boundary_reorders_ms(self, key: CostKey, model) -> float:
        """What the one-node model spends converting its activations to and from onnxruntime's blocked NCHWc
        layout: a ReorderInput per activation input, a ReorderOutput per replica (found in the graph onnxruntime
        optimizes it to; each timed alone with its output returned, so the returned output's handling goes too).
        In a whole model the operator reads and writes blocked tensors: its neighbours (convolutions, pools,
        element-wise operators, concatenations) run blocked too, and reorders happen once at the edges."""
        shapes = {f"in{k}": s for k, s in enumerate(key.input_shapes) if k not in key.weights}
        reorders = _nchwc_reorders(model, self.threads)
        return (sum(self._reorder_ms("ReorderInput", shapes[i]) for i in reorders["ReorderInput"] if i in shapes)
                + len(reorders["ReorderOutput"]) * self._reorder_ms("ReorderOutput", key.output_shape))

    def _reorder_ms(self, kind: str, shape: tuple[int, ...]) -> float:
        """One onnxruntime NCHWc reorder of a tensor of this (NCHW) shape, as a one-node model, net of the run
        overhead (memoized per shape). A ReorderInput reads a graph input, from memory as the measured operator
        does; a ReorderOutput reads what the operator has just written, so its input stays in the caches."""
        if (kind, shape) not in self._reorders:
            model = _reorder_model(kind, shape, nchwc_block_size())
            src = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
            feeds = {"in0": np.random.default_rng(0).standard_normal(src).astype(np.float32)}
            ms = self._median_run_ms(model, feeds, optimize=False,
                                     rotate=kind == "ReorderInput")
            self._reorders[kind, shape] = max(ms - self.run_overhead_ms(1), 0.0)
        return self._reorders[kind, shape]

    def _cost_opaque(self, key: CostKey) -> float:
        """A node eqsat does not model, timed as a one-node model of the node as the graph holds it (its share,
        for one of several outputs). Where the key names no content (an e-graph's opaque node: extraction never
        changes it, so any consistent value works) or onnxruntime cannot run the node alone (inputs of another
        dtype than the two tried, an operator of an older opset), the analytic estimate.

        The key has one dtype; where the node refuses it for its later graph inputs, they are tried as int64
        indices (zeros: valid for any axis), as a Gather of token ids from an embedding table takes them. The
        analytic estimate would charge that Gather the whole table (9.4 ms for BERT-base's, which runs in
        0.05 ms)."""
        p = dict(key.params)
        if "op_type" not in p:
            return self._fallback.cost(key)
        later = frozenset(k for k in range(1, len(key.input_shapes)) if k not in key.weights)
        for int_inputs in (frozenset(), later) if later else (frozenset(),):
            try:
                model = _opaque_model(key, int_inputs)
                rng = np.random.default_rng(0)
                feeds = {f"in{k}": np.zeros(s, np.int64) if k in int_inputs else
                         rng.standard_normal(s).astype(key.dtype)
                         for k, s in enumerate(key.input_shapes) if k not in key.weights}
                total = self._median_run_ms(model, feeds) - self.run_overhead_ms(max(1, len(feeds)))
            except Exception:  # onnxruntime refused the model or the feeds
                continue
            return max(total / p["n_outputs"], 0.001)
        return self._fallback.cost(key)  # priced as the analytic model does

    def _cost_piece(self, key: CostKey, feeds: dict[str, np.ndarray]) -> float:
        """A piece's share, by size, of the one node that cuts the tensor at the piece's bounds (``OpSpec.
        export_pieces``: an ONNX Split): export writes the pieces that tile a tensor as one node, so n pieces cost
        one Split, not n Slice nodes."""
        spec = ops.get(key.op)
        start, size = spec.piece_params
        p = dict(key.params)
        axis, shape = p[spec.piece_axis], key.input_shapes[0]
        dim = shape[axis]
        sizes = [s for s in (p[start], p[size], dim - p[start] - p[size]) if s > 0]
        dt = helper.np_dtype_to_tensor_dtype(np.dtype(key.dtype))
        outs = [f"out{k}" for k in range(len(sizes))]
        out_shapes = [[*shape[:axis], s, *shape[axis + 1:]] for s in sizes]
        outputs = [helper.make_tensor_value_info(o, dt, sh) for o, sh in zip(outs, out_shapes, strict=True)]
        ctx = _OneNodeExport({"in0": shape})
        ctx.opset = 17
        nodes = [written_node(t, i, o, **a) for t, i, o, a in spec.export_pieces(axis, sizes, "in0", outs, ctx)]
        g = helper.make_graph(nodes, "split", [helper.make_tensor_value_info("in0", dt, list(shape))], outputs,
                              [numpy_helper.from_array(v, k) for k, v in ctx.initializers.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", ctx.opset)])
        m.ir_version = 8
        total = self._median_run_ms(m, feeds) - self.run_overhead_ms(1)
        return max(total * p[size] / dim, 1e-4)

    def _cost_after(self, key: CostKey, feeds: dict[str, np.ndarray]) -> float:
        """The operator timed behind the element-wise producer ``key.after`` (see ``OpSpec.measure_after``),
        less that producer's own time: what it adds to a model where the runtime may fuse the pair."""
        shape = key.input_shapes[0]
        prod = ops.get(key.after)
        alone = self.cost(prod.cost_key(prod.normalize({}), [shape, shape], shape))
        feeds = {**feeds, "in0_b": np.random.default_rng(1).standard_normal(shape).astype(key.dtype)}
        total = self._median_run_ms(one_node_model(key, 1, after=True), feeds)
        return max(total - self.run_overhead_ms(len(feeds)) - alone, 0.001)

    def replicas(self, key: CostKey) -> int:
        """How many copies of a node with weights one measurement runs: enough that their weights exceed
        ``working_set_mb``, as a whole model's do (at most ``MAX_REPLICAS``; 1 without weights or working set),
        but no more than fit in ``MAX_RUN_MS`` by the analytic estimate: an operator with that much work per
        weight byte (a convolution over a large image) reuses each weight many times, so where the weights
        come from hardly matters, while hundreds of copies would make measuring a large model take minutes."""
        nbytes = sum(int(np.prod(key.input_shapes[k])) * np.dtype(key.dtype).itemsize for k in key.weights)
        if not nbytes or not self.working_set_mb:
            return 1
        by_time = int(MAX_RUN_MS / max(self._fallback.cost(key), 1e-6))
        return max(1, min(MAX_REPLICAS, by_time, int(self.working_set_mb * 2**20 // nbytes)))

    def device_identity(self) -> dict[str, str]:
        """CPU model, core count, onnxruntime version and thread count."""

        return {"model": self.name, "cpu": _cpu_name(), "cores": str(os.cpu_count()),
                "onnxruntime": ort.__version__,
                "threads": str(self.threads) if self.threads else "onnxruntime-default",
                "method": f"batched-net-of-run-overhead-ws{self.working_set_mb}-weights-replicated-global-pools"
                          f"-max{MAX_REPLICAS}-{MAX_RUN_MS:g}ms-split-share-nchwc-inside-iobound-opaque-timed-int-indices"}


def end_to_end_latency(models: list, feeds: list[dict[str, np.ndarray]], *, threads: int = 0, rounds: int = 15,
                       warmup: int = 5, budget_s: float | None = None, min_rounds: int = 7) -> list[float]:
    """Median per-run wall time (ms) of whole models in onnxruntime: the medians of :func:`end_to_end_rounds`."""
    return [float(statistics.median(t)) for t in end_to_end_rounds(
        models, feeds, threads=threads, rounds=rounds, warmup=warmup, budget_s=budget_s, min_rounds=min_rounds)]


def end_to_end_rounds(models: list, feeds: list[dict[str, np.ndarray]], *, threads: int = 0, rounds: int = 15,
                      warmup: int = 5, budget_s: float | None = None, min_rounds: int = 7,
                      inter_op: Sequence[int] | None = None, intra_op: Sequence[int] | None = None
                      ) -> list[list[float]]:
    """Per-round wall time per run (ms) of whole models in onnxruntime (CPU, ``threads`` intra-op threads, 0 for
    onnxruntime's default; full graph optimizations), one list per model. Runs are batched (>= 5 ms per batch)
    and interleaved across models, so that machine noise and drift hit every model of a round alike (compare
    models by their per-round ratios). With ``budget_s``, large models get fewer rounds (at least
    ``min_rounds``) and warm-up runs (at least 2) so the timing takes about that long. ``inter_op`` gives each
    model's inter-op threads: above 1, it runs under onnxruntime's parallel executor (``ORT_PARALLEL``) with that
    many; else (and by default) under the sequential one. ``intra_op`` gives each model's intra-op threads in place
    of ``threads``."""

    sessions, alive = [], []  # alive: the weights a model left on disk, given to its session from memory
    for k, m in enumerate(models):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads if intra_op is None else int(intra_op[k])
        n = 1 if inter_op is None else max(1, int(inter_op[k]))
        so.inter_op_num_threads = n
        if n > 1:
            so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        so.log_severity_level = 3
        sess, weights = inference_session(m, so)
        sessions.append(sess)
        alive.append(weights)
    once = []
    for s, f in zip(sessions, feeds, strict=True):
        s.run(None, f)  # the first run allocates: not timed
        t = time.perf_counter()
        s.run(None, f)
        once.append(max(time.perf_counter() - t, 1e-6))
    batches = [max(1, min(1000, int(0.005 / o))) for o in once]
    per_round = sum(b * o for b, o in zip(batches, once, strict=True))
    if budget_s is not None:
        rounds = max(min(rounds, min_rounds), min(rounds, int(0.8 * budget_s / per_round)))
        warmup = max(min(warmup, 2), min(warmup, int(0.2 * budget_s / per_round)))
    for s, f in zip(sessions, feeds, strict=True):
        for _ in range(warmup):
            s.run(None, f)
    times: list[list[float]] = [[] for _ in models]
    for r in range(rounds):
        # each round starts at the next model, so that no model always runs right after the same other one
        for k in ((r + j) % len(models) for j in range(len(models))):
            s, f = sessions[k], feeds[k]
            t = time.perf_counter()
            for _ in range(batches[k]):
                s.run(None, f)
            times[k].append((time.perf_counter() - t) * 1e3 / batches[k])
    return times
