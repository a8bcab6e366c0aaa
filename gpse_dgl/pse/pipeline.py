"""The threaded pipeline behind :func:`~gpse_dgl.pse.compute_pses` (steps 2-6 of :mod:`.compute`).

A :class:`Job` is one call: its requested PSEs, options and the consecutive parts of its input. Each part
(:class:`_Part`) reads its graphs into an :class:`~gpse_dgl.pse.spectral.EdgeCollection`, plans its dense
chunks (:mod:`.chunks`) and fills a :class:`PSEResult`.

Threading contract (see ``docs/ARCHITECTURE.md``): the calling thread builds every matrix
(:meth:`DenseBatch.prepare`) and runs every PSE's post-processing; pool threads only run
:meth:`DenseBatch.precompute` (LAPACK, which releases the GIL) on groups of chunks, and the
whole-collection PSEs (CycleGE). Chunks of small graphs run with one intra-op thread each, so the process
never uses more threads than torch is allowed.

Example
-------
>>> import dgl
>>> from gpse_dgl.pse.pipeline import Job
>>> job = Job(["LapPE"], normalize=False, progress=False, dense_limit=5000, max_cycle_paths=None,
...           chunk_bytes=2**25, device=None, num_workers=1)
>>> result, = job.run(job.parts([dgl.graph(([0, 1], [1, 2]))]))
>>> result.node["LapPE"].shape, result.num_nodes.tolist()
(torch.Size([3, 4]), [3])
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from .. import _env  # noqa: F401
from .. import _private
from ..utils.progress import progress as progress_bar
from . import spectral
from .chunks import DEFAULT_SPARSE_LIMIT, check_dense_limit, chunk_groups, dense_chunks
from .registry import PSE_REGISTRY, resolve_pse_names
from .spectral import DenseBatch, EdgeCollection, SparseGraph
from .standardize import per_graph_standardize, standardize_stack

#: Seconds a graph on the sparse path runs before it reports progress.
SPARSE_PROGRESS_DELAY = 3.0
#: Below this many nodes per graph the dense work runs with one intra-op thread (see _intra_op_threads).
SINGLE_THREAD_BELOW = 128
#: With the thread pool, inputs of at least twice this many graphs are computed in consecutive parts of
#: about this size, pipelined (see Job). Smaller parts cost more per-chunk work than the overlap gains.
PART_GRAPHS = 1024
# Groups of chunks queued per worker thread before the calling thread waits for the oldest: enough
# that the workers stay busy while this thread reads the next part.
_IN_FLIGHT_PER_WORKER = 3


@contextlib.contextmanager
def _intra_op_threads(num: Optional[int]):
    """Temporarily cap torch's intra-op threads (restored afterwards).

    The per-chunk kernels on small matrices (molecules: n ~ 20) are far too small to gain from threads,
    but each op still opens an OpenMP parallel region; on a machine whose cores are busy the region's
    barrier waits for descheduled threads, so several threads make such work much slower than one on a
    loaded machine. Large matrices keep torch's setting (threaded LAPACK pays).
    """
    prev = torch.get_num_threads()
    if num is None or num >= prev:
        yield
        return
    torch.set_num_threads(num)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


@dataclass
class PSEResult:
    """Raw output of :func:`compute_pse_tensors`.

    Attributes
    ----------
    node : dict[str, torch.Tensor]
        float32 ``(N, dim)`` per node-level PSE, rows of all graphs concatenated in input order.
    graph : dict[str, torch.Tensor]
        float32 ``(G, dim)`` per graph-level PSE.
    num_nodes : torch.Tensor
        int64 ``(G,)`` nodes per graph (``G`` counts the members of batched input graphs).
    """

    node: dict = field(default_factory=dict)
    graph: dict = field(default_factory=dict)
    num_nodes: torch.Tensor = None


_POOLS: dict = {}  # (process id, workers) -> ThreadPoolExecutor, see _worker_pool


def _worker_pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """A thread pool of ``workers`` single-threaded workers, kept for the life of the process.

    Starting threads costs the calling thread time (each start waits until the new thread holds the
    GIL), a noticeable share of a fast PSE over thousands of molecules, so pools are reused across calls. Keyed by
    process id: a forked child (a DataLoader worker, say) inherits the dict but not the threads, and
    gets pools of its own.
    """
    key = (os.getpid(), workers)
    pool = _POOLS.get(key)
    if pool is None:
        for stale in [k for k in _POOLS if k[0] != key[0]]:
            del _POOLS[stale]
        pool = _POOLS[key] = concurrent.futures.ThreadPoolExecutor(
            workers, thread_name_prefix="gpse-dgl-pse", initializer=torch.set_num_threads, initargs=(1,))
    return pool


def _precompute_all(batches) -> None:
    for batch in batches:
        batch.precompute()


def _blas_threads(num: Optional[int]):
    """Cap the threads of numpy/scipy's BLAS (the partial eigensolver runs there) when threadpoolctl is
    installed; a no-op context otherwise or for ``num=None`` (the cap itself has a cost, so it is only
    used when scipy's LAPACK actually runs inside the single-threaded phase)."""
    if num is None:
        return contextlib.nullcontext()
    try:  # threadpoolctl: optional (not a declared dependency)
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(num, user_api="blas")


def _finish(value: torch.Tensor, standardize: bool, sizes=None) -> torch.Tensor:
    """float64 result of a chunk -> optionally standardised per graph -> float32 on the CPU."""
    value = value.detach().to("cpu", torch.float64)
    if standardize:
        value = standardize_stack(value, sizes)
    return value.to(torch.float32)


def _graph_parts(glist: list, workers: int) -> list:
    """Consecutive slices of ``glist`` computed one after the other (see :class:`Job`): one slice
    unless the thread pool is used and there are enough graphs to share out."""
    if workers < 2 or len(glist) < 2 * PART_GRAPHS:
        return [glist]
    num = len(glist) // PART_GRAPHS
    bounds = np.linspace(0, len(glist), num + 1).astype(int)
    return [glist[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def concat_results(results: list) -> PSEResult:
    """The parts' results end to end (the parts' tensors are released key by key, so the peak memory
    is the whole result plus one PSE's parts)."""
    if len(results) == 1:
        return results[0]
    merged = PSEResult(num_nodes=torch.cat([r.num_nodes for r in results]))
    for table in ("node", "graph"):
        for key in list(getattr(results[0], table)):
            getattr(merged, table)[key] = torch.cat([getattr(r, table).pop(key) for r in results])
    return merged


class Job:
    """One call's PSE computation over consecutive parts of the input (lists of graphs, or a prebuilt
    :class:`EdgeCollection`).

    With the thread pool, the parts form one pipeline: while the workers decompose the matrices of
    part ``i``, the calling thread already reads part ``i + 1`` (disjoint union, two-colouring) and
    writes out the finished part ``i - 1``. With a single part these steps at both ends would leave
    one of two cores idle before the first decomposition starts and after the last ends.
    """

    def __init__(self, names, normalize, progress, dense_limit, max_cycle_paths, chunk_bytes, device,
                 num_workers, sparse_limit=DEFAULT_SPARSE_LIMIT):
        names = resolve_pse_names(names)
        self.specs = [PSE_REGISTRY[name] for name in names]
        if dense_limit < 1:
            raise ValueError(f"dense_limit must be >= 1, got {dense_limit}")
        self.per_graph = [s for s in self.specs if s.edges is None]
        self.whole = [s for s in self.specs if s.edges is not None]
        self.needs = set().union(*(s.needs for s in self.per_graph)) if self.per_graph else set()
        self.normalize, self.dense_limit, self.chunk_bytes = normalize, dense_limit, chunk_bytes
        self.sparse_limit = sparse_limit
        self.max_cycle_paths, self.device, self.num_workers = max_cycle_paths, device, num_workers
        self.on_cpu = device is None or torch.device(device).type == "cpu"
        # padded chunks only where every requested PSE reads nothing but L_sym's lowest eigenpairs, on the CPU
        self.pad_below = (spectral.GRAM_MAX_N if self.per_graph and all(s.padded for s in self.per_graph)
                          and self.on_cpu else 0)
        self.progress = progress
        self.bar = None

    def workers_for(self, num_graphs: int) -> int:
        """Threads of the pool: ``num_workers`` (0: torch's thread count), 1 when there is nothing to share."""
        workers = self.num_workers if self.num_workers > 0 else torch.get_num_threads()
        return max(1, min(workers, num_graphs)) if self.on_cpu or self.whole else 1

    def parts(self, glist: list) -> list:
        """``glist`` as consecutive slices (:func:`_graph_parts`), checked against the dense limit first.

        With several parts the per-part check would come too late: earlier parts would already be
        computed (and, in :func:`compute_pses`, written out) when a later one fails.
        """
        parts = _graph_parts(glist, self.workers_for(len(glist)))
        if len(parts) > 1 and self.per_graph:
            totals = _private.node_frame_rows(glist)  # bounds every member's size; exact sizes only if needed
            if totals is None or totals.max() > self.dense_limit:
                sizes = np.concatenate([g.batch_num_nodes().numpy() for g in glist])
                check_dense_limit(self.per_graph, sizes, self.dense_limit, self.sparse_limit)
        return parts

    def run(self, parts: list, on_part=None) -> list:
        """Compute every part; return their :class:`PSEResult` in order. ``on_part(graphs, result)``
        receives each part as soon as it is finished (in the calling thread, not necessarily in order;
        ``graphs`` is None for a part given as an :class:`EdgeCollection`)."""
        results = [None] * len(parts)

        def finished(index, graphs, result):
            results[index] = result
            if on_part is not None:
                on_part(graphs, result)

        if self.progress:
            # input graphs; corrected as parts open (a batched input graph counts its members)
            self.bar = progress_bar(total=sum(_num_inputs(p) for p in parts), unit="graph", desc="PSEs")
        try:
            self._run(parts, finished)
        finally:
            if self.bar is not None:
                self.bar.close()
        return results

    def _open(self, part) -> "_Part":
        if isinstance(part, EdgeCollection):
            return _Part(self, part, None)
        coll = EdgeCollection.from_graphs(part) if part else EdgeCollection.from_edges([], [], [])
        if self.bar is not None and coll.num_graphs != len(part):
            self.bar.total += coll.num_graphs - len(part)
            self.bar.refresh()
        return _Part(self, coll, part)

    def _run(self, parts: list, on_part) -> None:
        workers = self.workers_for(sum(_num_inputs(p) for p in parts))
        # Phase 1: small chunks and whole-collection PSEs. Tiny matrices gain nothing from intra-op
        # threads, so the thread budget goes to running decompositions side by side instead: this thread
        # builds the matrices and post-processes them (many small GIL-bound ops) while the pool runs the
        # LAPACK calls (which release the GIL) on groups of chunks, a few groups ahead.
        opened, waiting = [], collections.deque()  # waiting: parts whose groups were all submitted
        with _intra_op_threads(1 if self.on_cpu else None):
            if workers > 1:
                pool = _worker_pool(workers)
                in_flight = collections.deque()
                try:
                    for index, raw in enumerate(parts):
                        part = self._open(raw)
                        opened.append((index, part))
                        part.whole_futures = [pool.submit(part.run_whole, s) for s in self.whole]
                        for batches in part.groups():
                            in_flight.append((part, batches, pool.submit(_precompute_all, [b for _, _, b in batches])))
                            if len(in_flight) > _IN_FLIGHT_PER_WORKER * workers:
                                _pop_group(in_flight)
                            self._close_finished(waiting, in_flight, on_part)
                        waiting.append((index, part))
                    while in_flight:
                        _pop_group(in_flight)
                        self._close_finished(waiting, in_flight, on_part)
                    for _, part in opened:
                        part.whole_values = [f.result() for f in part.whole_futures]
                finally:  # after an error too, no task of this call outlives it
                    concurrent.futures.wait([f for _, _, f in in_flight]
                                            + [f for _, p in opened for f in p.whole_futures])
            else:
                for index, raw in enumerate(parts):
                    part = self._open(raw)
                    opened.append((index, part))
                    part.run_small_here()
                    part.whole_values = [part.run_whole(s) for s in self.whole]
        # Phase 2, outside the single-thread section: the rest of every part not closed yet
        for index, part in opened:
            if not part.closed:
                on_part(index, part.graphs, part.close())

    def _close_finished(self, waiting, in_flight, on_part) -> None:
        """Close the oldest waiting parts whose work is all done (writing them out overlaps the
        decompositions of later parts); parts with large chunks wait for phase 2 (threaded LAPACK)."""
        busy = {id(part) for part, _, _ in in_flight}
        while waiting:
            index, part = waiting[0]
            if part.big or part.large.size:
                waiting.popleft()  # closed in phase 2; later parts need not wait for it
                continue
            if id(part) in busy or not all(f.done() for f in part.whole_futures):
                return
            waiting.popleft()
            part.whole_values = [f.result() for f in part.whole_futures]
            on_part(index, part.graphs, part.close())


def _num_inputs(part) -> int:
    return part.num_graphs if isinstance(part, EdgeCollection) else len(part)


def _pop_group(in_flight) -> None:
    part, batches, future = in_flight.popleft()
    part.finish_group(batches, future)


class _Part:
    """One part of a :class:`Job`: its edge collection, result tensors and chunk plan."""

    def __init__(self, job: Job, coll: EdgeCollection, graphs):
        self.job, self.coll, self.graphs = job, coll, graphs
        self.num_nodes = num_nodes = coll.num_nodes
        G, N = coll.num_graphs, coll.total_nodes
        self.large = check_dense_limit(job.per_graph, num_nodes, job.dense_limit, job.sparse_limit)
        self.result = result = PSEResult(num_nodes=torch.from_numpy(num_nodes.copy()))
        for s in job.specs:
            shape = (N, s.dim) if s.level == "node" else (G, s.dim)
            (result.node if s.level == "node" else result.graph)[s.name] = torch.zeros(shape, dtype=torch.float32)
        chunks = (list(dense_chunks(num_nodes, job.dense_limit, job.chunk_bytes, job.pad_below))
                  if job.per_graph else [])
        single = job.on_cpu
        self.small = [c for c in chunks if single and c[0] < SINGLE_THREAD_BELOW]
        self.big = [c for c in chunks if not (single and c[0] < SINGLE_THREAD_BELOW)]
        self.whole_futures, self.whole_values = [], []
        self.closed = False

    def groups(self):
        """Lists ``[(n, gids, prepared DenseBatch), ...]`` of the small chunks, one per pool task."""
        for group in chunk_groups(self.small, self.job.chunk_bytes // 4):
            yield [(n, gids, self.new_batch(n, gids).prepare()) for n, gids in group]

    def run_small_here(self) -> None:
        """The small chunks one by one in this thread (no pool). The partial eigensolver (scipy /
        OpenBLAS, for chunks of 64+ nodes when only the lowest eigenpairs are needed) then runs in this
        single-threaded phase, so its BLAS gets one thread."""
        job = self.job
        capped = (bool(job.needs & {"sym_low", "sym_low_values"}) and "sym" not in job.needs
                  and any(n >= spectral.PARTIAL_MIN_N for n, _ in self.small))
        with _blas_threads(1 if capped else None):
            for n, gids in self.small:
                self.finish_chunk(n, gids, self.new_batch(n, gids))

    def new_batch(self, n: int, gids: np.ndarray) -> DenseBatch:
        sizes = self.num_nodes[gids]
        return DenseBatch.from_collection(self.coll, gids, n, self.job.needs, device=self.job.device,
                                          sizes=None if sizes.min() == n else sizes)

    def store(self, spec, gids: np.ndarray, n: int, value: torch.Tensor, sizes=None) -> None:
        """Write a float32 ``(B, n, dim)`` / ``(B, dim)`` result of graphs ``gids`` (of ``sizes`` nodes
        each, when padded)."""
        # in numpy: for these small arrays its fancy indexing costs a fraction of torch's
        value = value.numpy()
        if spec.level == "node":
            rows = self.coll.node_offset[gids][:, None] + np.arange(n)
            if sizes is not None:  # padded chunk: real rows only
                real = np.arange(n) < sizes[:, None]
                rows, value = rows[real], value[real]
            self.result.node[spec.name].numpy()[rows.reshape(-1)] = value.reshape(-1, spec.dim)
        else:
            self.result.graph[spec.name].numpy()[np.asarray(gids)] = value

    def finish_chunk(self, n: int, gids: np.ndarray, batch: DenseBatch) -> None:
        for s in self.job.per_graph:
            standardize = s.level == "node" and self.job.normalize
            self.store(s, gids, n, _finish(s.dense(batch), standardize, batch.sizes), batch.sizes)
        if self.job.bar is not None:
            self.job.bar.update(len(gids))

    def finish_group(self, batches, future) -> None:
        future.result()
        for n, gids, batch in batches:
            self.finish_chunk(n, gids, batch)

    def run_whole(self, spec) -> torch.Tensor:
        value = torch.as_tensor(spec.edges(self.coll, {"max_cycle_paths": self.job.max_cycle_paths}))
        value = value.to(torch.float64)
        if spec.level == "node" and self.job.normalize:
            value = per_graph_standardize(value, self.num_nodes)
        return value.to(torch.float32)

    def run_sparse(self, gid: int) -> None:
        """The requested PSEs of graph ``gid`` (above the dense limit) through their sparse paths, with a
        progress line per tenth of the work once the graph has taken :data:`SPARSE_PROGRESS_DELAY` seconds
        (``n`` nodes per PSE; silent under ``--quiet``)."""
        job = self.job
        sg = SparseGraph(int(self.num_nodes[gid]), *self.coll.graph_edges(gid))
        names = ", ".join(s.name for s in job.per_graph)
        sg.report = progress_bar(total=sg.n * len(job.per_graph), unit="node", delay=SPARSE_PROGRESS_DELAY,
                                 desc=f"{names} of graph {gid} ({sg.n:,} nodes)")
        # One BLAS thread: the sparse products and SuperLU run single-threaded anyway, and ARPACK's thin
        # BLAS-2 calls (n x ~24) gain little from a second thread but stall in its barrier when a core is busy.
        try:
            with _blas_threads(1):
                for i, s in enumerate(job.per_graph):
                    value = torch.as_tensor(np.asarray(s.sparse(sg)))[None]
                    self.store(s, np.array([gid]), sg.n, _finish(value, s.level == "node" and job.normalize))
                    sg.report.update(max(0, (i + 1) * sg.n - sg.report.n))  # a PSE served from a cache: at once
        finally:
            sg.report.close()

    def close(self) -> PSEResult:
        """Whole-collection values in, then the large chunks (torch's intra-op threads: threaded LAPACK
        pays there) and graphs above the dense limit; returns the finished result."""
        job, result = self.job, self.result
        for s, value in zip(job.whole, self.whole_values):
            (result.node if s.level == "node" else result.graph)[s.name] = value
        # When only the lowest eigenpairs are needed, scipy's partial solver (OpenBLAS) does the work and
        # torch only builds and post-processes small arrays; torch's OpenMP threads, spinning after each
        # op, then compete with OpenBLAS's own, so torch runs on one thread.
        partial_only = job.on_cpu and bool(job.needs) and job.needs <= {"sym_low", "sym_low_values"}
        with _intra_op_threads(1 if partial_only else None):
            for n, gids in self.big:
                self.finish_chunk(n, gids, self.new_batch(n, gids))
        # graphs above the dense limit, one by one through the sparse paths
        for gid in self.large:
            self.run_sparse(int(gid))
            if job.bar is not None:
                job.bar.update(1)
        if job.bar is not None:
            job.bar.update(int((self.num_nodes == 0).sum()))
        for table in (result.node, result.graph):
            for value in table.values():
                # in place, in numpy: torch's version would wake its OpenMP team (ms) for one small pass
                np.nan_to_num(value.numpy(), copy=False, nan=0.0, posinf=0.0, neginf=0.0)
        self.closed = True
        return result
