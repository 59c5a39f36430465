"""TASO-style rule generator: enumerate small operator graphs, fingerprint them modulo a prime, pair equivalents.

Algorithm (TASO §2, Algorithm 1, re-done from the paper's description), one module per step:

1. **Enumeration** (:mod:`~eqsat.rules.enumeration`). In each *domain* (:mod:`~eqsat.rules.domains`: matrices;
   NCHW activations with conv kernels; attention heads) a depth-first search builds every acyclic graph of at
   most ``max_ops`` operators over a few typed input variables, without duplicated computation. Operators are
   applied through *templates* (:mod:`~eqsat.rules.templates`), which every operator declares in the registry
   (``OpSpec.generator_forms``); constants (C_pool, I_conv, I_matmul, I_ewmul and zero biases) are created in
   context by the templates that use them, with their shape parameters taken from their co-operand.
2. **Fingerprints** (:mod:`~eqsat.rules.fingerprints`). Every tensor is evaluated with the registry's exact
   integer semantics modulo ``ops.PRIME`` (relu, sigmoid and tanh are fixed non-linear polynomials there). A
   graph's fingerprint is the sorted tuple of its outputs' hashes, so it does not depend on output order.
   Graphs with one or two outputs are kept; a split piece that nothing consumes may be dropped from the outputs.
3. **Candidates** (:mod:`~eqsat.rules.candidates`). Graphs with equal fingerprints are paired with the smallest
   graph of their bucket (its outputs are matched by hash: the input/output mapping), giving a candidate rule
   ``graph => smallest``.
4. **Pruning** (TASO §4, same module): input renaming (rules equal up to a renaming of variables), common
   subgraph (both sides share an operator applied to the same arguments) and common supergraph (both roots are
   the same operator and differ in one argument). Counts are reported per stage.
5. **Confirmation** (:mod:`~eqsat.rules.confirmation`). Each remaining candidate is evaluated in float64 on a
   second shape set and on random shape assignments where both sides are well-shaped with equal shapes (this is
   also what checks that the generalisation of concrete shapes to ``(dim ?x k)`` expressions is sound);
   failures are dropped.

A conv kernel variable ``?k1`` always travels with its bias variable ``?bk1``: operators applied to kernels
are applied to their biases too (concat along output channels concatenates biases, a sum of kernels sums
them, a constant kernel has a zero bias), and these bias operators are not counted.

The work is cut into independent units (one per domain and first operator) that :func:`generate` runs on
an executor of :mod:`eqsat.rules.distributed` (a process pool, or Ray tasks on this machine or a cluster); a
unit is a pure function of its description, and its result is stored by content hash, so an interrupted run
resumes. Each unit's graphs are split into shards by fingerprint; pairing and pruning then run shard by
shard (memory bounded by a shard, not by all graphs) and their outputs merge into the order a single
in-memory pass gives, so the candidates do not depend on the workers, their order or the shard counts.
This module runs the stages; the names of the step modules are re-exported here.
"""

from __future__ import annotations

import hashlib
import pickle
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eqsat import ops
from eqsat.ir import rule as rule_language
from eqsat.ops.layout import TRANSPOSES3
from eqsat.rules import distributed
from eqsat.rules.candidates import (
    Candidate,
    candidates_from,
    canonical,
    common_subgraph,
    common_supergraph,
    keyed_candidates,
    orient_multi,
    parse_vars,
    prune_instances,
)
from eqsat.rules.confirmation import check_numeric, confirm, random_env, shape_conditions
from eqsat.rules.distributed import Executor, ResultStore, run_stage
from eqsat.rules.domains import (
    CONV,
    DOMAINS,
    HEADS,
    MAT,
    SHAPE_SETS,
    Domain,
    VarType,
    evaluate_sym,
    is_param_var,
    var_prefix,
    var_shape,
)
from eqsat.rules.enumeration import (
    Enumerator,
    GraphRecord,
    WorkUnit,
    least_records,
    merge_unit_results,
    run_unit,
    work_units,
)
from eqsat.rules.fingerprints import PRIME, Evaluator, Tensor
from eqsat.rules.templates import TEMPLATES, Templates

__all__ = [
    "CONFIRM_CHUNK", "CONV", "DOMAINS", "HEADS", "MAT", "PRIME", "SHAPE_SETS", "SHARDS", "TEMPLATES", "TRANSPOSES3",
    "Candidate", "Domain", "Enumerator", "Evaluator", "GenerationReport", "GraphRecord", "Templates", "Tensor",
    "VarType", "WorkUnit", "candidates_from", "canonical", "check_numeric", "common_subgraph", "common_supergraph",
    "confirm", "confirm_chunk", "enumerate_unit", "evaluate_sym", "generate", "generator_salt", "is_param_var",
    "keyed_candidates", "merge_unit_results", "orient_multi", "pair_shard", "parse_vars", "prune_instances",
    "prune_shard", "random_env", "run_unit", "shape_conditions", "var_prefix", "var_shape", "work_units",
]


@dataclass
class GenerationReport:
    """Counts per stage (TASO's Table 3) and times."""

    max_ops: int
    units: int = 0
    states: int = 0
    graphs: int = 0
    buckets: int = 0
    candidates: int = 0
    after_renaming: int = 0
    after_common_subgraph: int = 0
    after_common_supergraph: int = 0
    after_instances: int = 0
    after_float: int = 0
    after_generalisation: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    #: Per stage (enumerate, pair, prune, confirm): units in all, computed in this run, reused from the folder.
    stages: dict[str, Any] = field(default_factory=dict)
    #: Each enumeration unit with the seconds it took (when it was computed, possibly in an earlier run).
    unit_seconds: list[tuple[WorkUnit, float]] = field(default_factory=list)

    def table(self) -> list[tuple[str, int]]:
        """The stage counts as (stage, count) rows."""
        return [("search states", self.states), ("graphs (<= 2 outputs)", self.graphs),
                ("fingerprint buckets (>= 2 graphs)", self.buckets), ("candidate rules", self.candidates),
                ("after input renaming", self.after_renaming),
                ("after common subgraph", self.after_common_subgraph),
                ("after common supergraph", self.after_common_supergraph),
                ("after instances / implied two-output rules", self.after_instances),
                ("after float confirmation", self.after_float),
                ("after generalisation check", self.after_generalisation)]


#: Shards by fingerprint (pairing) and by canonical rule text (deduplication) per enumeration size: each
#: pairing unit holds one fingerprint shard's graphs, never all of them. Results do not depend on these.
SHARDS = {1: 2, 2: 4, 3: 16, 4: 256}


def _shard(text: str, k: int) -> int:
    """A shard index from a text, the same in every process (unlike ``hash`` of a str)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % k


def _pack(obj: Any) -> bytes:
    return zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), 1)


def _unpack(blob: bytes) -> Any:
    return pickle.loads(zlib.decompress(blob))


def enumerate_unit(args: tuple[WorkUnit, int]) -> tuple[tuple[int, int, float], list[bytes]]:
    """A distributed enumeration unit: run ``unit`` and split its graphs into ``shards`` parts by fingerprint.

    Returns ``((states, graphs, seconds), parts)``; a graph with the same outputs as another has the same
    fingerprint, so deduplication across units happens within a shard.
    """
    unit, shards = args
    t = time.perf_counter()
    recs, states = run_unit(unit)
    graphs: dict[tuple[str, tuple[str, ...]], GraphRecord] = {}
    least_records(recs, graphs)
    del recs
    parts: list[list[tuple[Any, ...]]] = [[] for _ in range(shards)]
    for g in graphs.values():
        parts[_shard(repr((g.domain, g.fingerprint)), shards)].append((g.outputs, g.hashes, g.op_keys, g.n_ops))
    n = len(graphs)
    del graphs
    blobs = [_pack((unit.domain, p)) for p in parts]
    return (states, n, time.perf_counter() - t), blobs


def pair_shard(args: tuple[list[bytes], int]) -> tuple[tuple[int, int, int], list[bytes]]:
    """A pairing unit: the graphs of one fingerprint shard (one part per enumeration unit) are merged, paired
    into candidates, renamed canonically and deduplicated (the first of each text kept). The candidates, with
    their global order keys, are split into ``text_shards`` parts by canonical text.

    Returns ``((graphs, buckets, candidates), parts)``.
    """
    blobs, text_shards = args
    graphs: dict[tuple[str, tuple[str, ...]], GraphRecord] = {}
    for blob in blobs:
        domain, rows = _unpack(blob)
        least_records((GraphRecord(o, h, k, n, domain) for o, h, k, n in rows), graphs)
    n_graphs = len(graphs)
    keyed, n_buckets = keyed_candidates([graphs[k] for k in sorted(graphs)])
    del graphs
    parts: list[list[tuple[Any, Candidate]]] = [[] for _ in range(text_shards)]
    seen: set[str] = set()
    for key, c in keyed:
        cc = canonical(c)
        text = cc.text()
        if text not in seen:
            seen.add(text)
            parts[_shard(text, text_shards)].append((key, cc))
    return (n_graphs, n_buckets, len(keyed)), [_pack(p) for p in parts]


def prune_shard(blobs: list[bytes]) -> tuple[int, int, int, list[tuple[Any, Candidate]]]:
    """A pruning unit: the candidates of one text shard, in global order, keep the first of each canonical
    text (input renaming), then lose the common subgraph and supergraph candidates.

    Returns ``(after renaming, after common subgraph, after common supergraph, survivors with order keys)``.
    """
    rows: list[tuple[Any, Candidate]] = []
    for blob in blobs:
        rows += _unpack(blob)
    rows.sort(key=lambda r: r[0])
    first: dict[str, tuple[Any, Candidate]] = {}
    for key, c in rows:
        first.setdefault(c.text(), (key, c))
    kept = list(first.values())
    n_renamed = len(kept)
    kept = [r for r in kept if not common_subgraph(r[1])]
    n_sub = len(kept)
    kept = [r for r in kept if not common_supergraph(r[1])]
    return n_renamed, n_sub, len(kept), kept


def confirm_chunk(cands: Sequence[Candidate]) -> list[tuple[str | None, str | None, tuple[str, ...]]]:
    """A confirmation unit: :func:`confirm` over a chunk of candidates."""
    return [confirm(c) for c in cands]


def generator_salt() -> str:
    """The version of the code that generation results depend on (generator, patterns, operator registry)."""
    here = Path(__file__).parent
    modules = ("generator", "domains", "fingerprints", "templates", "enumeration", "candidates", "confirmation")
    return distributed.source_salt(*(here / f"{m}.py" for m in modules), Path(rule_language.__file__),
                                   Path(ops.__file__).parent)


def generate(max_ops: int = 3, workers: int = 2, domains: Sequence[str] = tuple(DOMAINS), seed: int = 0,
             progress: Callable[[str], None] | None = None, executor: str = "auto", address: str | None = None,
             results_dir: str | Path | None = None, fresh: bool = False,
             shards: tuple[int, int] | None = None) -> tuple[list[Candidate], GenerationReport]:
    """Enumerate, fingerprint, pair, prune and confirm; returns the surviving candidates and the report.

    Units run on :class:`eqsat.rules.distributed.Executor` (``executor``: auto, ray, pool or serial;
    ``address``: a Ray cluster). Every unit's result is stored in ``results_dir`` (a temporary folder when
    None) under a hash of its description and of the code, so a rerun with the same folder redoes only the
    units that did not finish (``fresh``: forget stored results first). Pairing runs per fingerprint shard
    and deduplication per canonical-text shard (``shards``: their counts, default :data:`SHARDS`), so no
    process holds every graph. The result does not depend on the workers, the backend or the shards.
    """

    say = progress or (lambda m: None)
    rep = GenerationReport(max_ops)
    ex = Executor(workers=workers, backend=executor, address=address)
    store = ResultStore(results_dir)
    if fresh:
        store.clear()
    salt = generator_salt()
    k_fp, k_text = shards or (SHARDS.get(max_ops, SHARDS[4]),) * 2
    try:
        t0 = time.perf_counter()
        units = work_units(max_ops, domains, seed)
        rep.units = len(units)
        keys = [store.key("enumerate", salt, (u, k_fp)) for u in units]
        summaries, rep.stages["enumerate"] = run_stage(ex, store, enumerate_unit, keys, lambda i: (units[i], k_fp),
                                                       save=lambda r: r, label="enumerate", say=progress)
        rep.states = sum(s[0] for s in summaries)
        rep.unit_seconds = [(u, s[2]) for u, s in zip(units, summaries, strict=True)]
        rep.seconds["enumerate"] = time.perf_counter() - t0
        say(f"enumerated {sum(s[1] for s in summaries)} graphs in units ({rep.states} states, {len(units)} units)")

        t = time.perf_counter()
        pkeys = [store.key("pair", salt, (keys, s, k_text)) for s in range(k_fp)]
        psum, rep.stages["pair"] = run_stage(ex, store, pair_shard, pkeys,
                                             lambda s: ([store.part(k, s) for k in keys], k_text),
                                             save=lambda r: r, label="pair", say=progress)
        rep.graphs = sum(s[0] for s in psum)
        rep.buckets = sum(s[1] for s in psum)
        rep.candidates = sum(s[2] for s in psum)
        qkeys = [store.key("prune", salt, (pkeys, q)) for q in range(k_text)]
        qsum, rep.stages["prune"] = run_stage(ex, store, prune_shard, qkeys,
                                              lambda q: [store.part(k, q) for k in pkeys], label="prune",
                                              say=progress)
        rep.after_renaming = sum(s[0] for s in qsum)
        rep.after_common_subgraph = sum(s[1] for s in qsum)
        rep.after_common_supergraph = sum(s[2] for s in qsum)
        cands = [c for _, c in sorted((r for s in qsum for r in s[3]), key=lambda r: r[0])]
        del qsum
        cands = [m for m in (orient_multi(c) if c.multi else c for c in cands) if m is not None]
        cands = prune_instances(cands)
        rep.after_instances = len(cands)
        rep.seconds["pair+prune"] = time.perf_counter() - t
        say(f"{rep.graphs} graphs, {rep.candidates} candidates, {rep.after_common_supergraph} after pruning")

        t = time.perf_counter()
        chunks = [cands[i:i + CONFIRM_CHUNK] for i in range(0, len(cands), CONFIRM_CHUNK)]
        ckeys = [store.key("confirm", salt, [(c.lhs, c.rhs) for c in ch]) for ch in chunks]
        cres, rep.stages["confirm"] = run_stage(ex, store, confirm_chunk, ckeys, chunks.__getitem__,
                                                label="confirm", say=progress)
    finally:
        store.close()
    results = [r for ch in cres for r in ch]
    kept: list[Candidate] = []
    n_float = 0
    for c, (stage, reason, conds) in zip(cands, results, strict=True):
        if stage != "float":
            n_float += 1
        if stage is None:
            c.conditions = conds
            kept.append(c)
        else:
            rep.dropped.append((c.text(), f"{stage}: {reason}"))
    rep.after_float = n_float
    rep.after_generalisation = len(kept)
    rep.seconds["confirm"] = time.perf_counter() - t
    say(f"{len(kept)} candidates confirmed numerically")
    kept.sort(key=lambda c: (c.domain, c.n_lhs + c.n_rhs, c.text()))
    return kept, rep


#: Candidates per confirmation unit.
CONFIRM_CHUNK = 32
