r"""Batched computation of explicit PSEs for many graphs at once.

The reference computes every PSE graph by graph (one dense eigendecomposition per PSE and graph, cycles
by a pure-Python DFS). Here:

1. All graphs are reduced once to one simple undirected edge list over a disjoint union
   (:class:`~gpse_dgl.pse.spectral.EdgeCollection`; directed input symmetrised, self-loops and
   multi-edges dropped).
2. Graphs are grouped by **exact** node count (an isolated padding node would add an eigenvalue).
   Each group, split into chunks that fit ``chunk_bytes``, becomes one float64 ``(B, n, n)`` stack
   built by a single scatter (:class:`~gpse_dgl.pse.spectral.DenseBatch`). When every requested PSE
   reads only the lowest eigenpairs of ``L_sym`` (LapPE, EigVals: ``PSESpec.padded``), graphs below 64
   nodes of nearby sizes (within ~25 %) share a padded chunk instead: padding nodes carry an eigenvalue
   above the spectrum and drop out exactly, and a few chunks replace dozens of small ones.
3. Per chunk, each Laplacian is decomposed at most once (``torch.linalg.eigh`` on the stack) and shared:
   the normalised Laplacian serves LapPE, EigVals and RWSE; the combinatorial one ElstaticPE and
   HKdiagSE. Decompositions no requested PSE needs are not computed: EigVals alone uses ``eigvalsh``,
   and LapPE / EigVals without RWSE only the lowest eigenpairs: from a half-size Gram eigenproblem for
   bipartite graphs below 64 nodes (most molecules, :mod:`.bipartite`), from a partial solver for
   graphs of 64+ nodes.
4. Chunks of small graphs (< 128 nodes): the calling thread builds their matrices and post-processes
   them while a thread pool (``num_workers``) runs their decompositions, single-threaded, on groups of
   chunks a few groups ahead; larger chunks run one after the other with torch's intra-op threads.
5. Graphs above ``dense_limit`` nodes take the sparse path of the PSEs that have one
   (LapPE, EigVals, RWSE via :mod:`gpse_dgl.pse.sparse`; its RWSE is exact up to a work bound and a
   seeded stochastic estimate beyond, see that module); requesting a dense-only PSE (ElstaticPE,
   HKdiagSE) for such a graph raises :class:`~gpse_dgl.utils.errors.GraphTooLargeError` before any work.
6. Whole-collection PSEs (CycleGE) run once over the edge list of all graphs.

Node-level values can be standardised per graph (``normalize=True``, see :mod:`.standardize`); this
happens on the float64 values of each batch before they are stored as float32. NaN never reaches the
output (it is set to 0, as the reference does).

Example
-------
>>> import dgl, torch
>>> from gpse_dgl.pse import compute_pses
>>> g = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])))  # a triangle, one direction
>>> graphs, graph_level = compute_pses([g], names=["RWSE", "CycleGE"])
>>> graphs[0].ndata["RWSE"].shape, graph_level["CycleGE"][0, :2].tolist()
(torch.Size([3, 20]), [3.0, 1.0])
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import os
from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np
import torch

from .. import _env  # noqa: F401
from ..utils.errors import GraphTooLargeError
from . import spectral
from .registry import PSE_REGISTRY, resolve_pse_names
from .spectral import DenseBatch, EdgeCollection, SparseGraph
from .standardize import per_graph_standardize, standardize_stack

__all__ = ["compute_pses", "compute_pse_tensors", "PSEResult", "DEFAULT_DENSE_LIMIT", "DEFAULT_CHUNK_BYTES"]

#: Graphs with more nodes than this use sparse solvers (or are refused by dense-only PSEs).
DEFAULT_DENSE_LIMIT = 5000
#: Memory budget of one dense chunk (all float64 n x n matrices alive at once). Small enough that the
#: elementwise passes over a chunk stay mostly in cache (256 MiB chunks were ~25 % slower at n = 300).
DEFAULT_CHUNK_BYTES = 32 * 2**20
# Upper bound on the float64 n x n matrices alive per graph while a chunk is processed: adjacency, two
# Laplacians, eigh workspace and two eigenvector sets, squared eigenvectors, L+, Q and its weighted copy.
_MATRICES_PER_GRAPH = 12
#: Below this many nodes per graph the dense work runs with one intra-op thread (see _intra_op_threads).
SINGLE_THREAD_BELOW = 128
# padded buckets (see _size_buckets) start at size s and span s + max(2, s // _BUCKET_SPAN)
_BUCKET_SPAN = 4


@contextlib.contextmanager
def _intra_op_threads(num: Optional[int]):
    """Temporarily cap torch's intra-op threads (restored afterwards).

    The per-chunk kernels on small matrices (molecules: n ~ 20) are far too small to gain from threads,
    but each op still opens an OpenMP parallel region; on a machine whose cores are busy the region's
    barrier waits for descheduled threads, which made the molecule workload ~10x slower with 2 threads
    than with 1 on a loaded 2-core machine. Large matrices keep torch's setting (threaded LAPACK pays).
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


def _as_graph_list(graphs) -> tuple[list, bool]:
    import dgl

    if isinstance(graphs, dgl.DGLGraph):
        return [graphs], True
    graphs = list(graphs)
    for g in graphs:
        if not isinstance(g, dgl.DGLGraph):
            raise TypeError(f"expected DGLGraph objects, got {type(g).__name__}")
    return graphs, False


def _dense_chunks(num_nodes: np.ndarray, dense_limit: int, chunk_bytes: int, pad_below: int = 0):
    """Yield ``(n, graph ids)`` for every chunk of the graphs with ``1 <= n <= dense_limit``: same-size
    chunks, except that sizes below ``pad_below`` are bucketed (``n`` is then the bucket's largest size,
    see :func:`_size_buckets`)."""
    order = np.argsort(num_nodes, kind="stable")
    sizes = num_nodes[order]
    bucket = _size_buckets(sizes, min(pad_below, dense_limit + 1))  # no bucket reaches past the limit
    bounds = np.flatnonzero(np.diff(bucket)) + 1
    for group in np.split(order, bounds):
        if group.size == 0:
            continue
        n = int(num_nodes[group[-1]])
        if num_nodes[group[0]] == 0 or n > dense_limit:
            continue
        per_chunk = max(1, int(chunk_bytes // (_MATRICES_PER_GRAPH * 8 * n * n)))
        for start in range(0, group.size, per_chunk):
            yield n, group[start:start + per_chunk]


def _size_buckets(sizes: np.ndarray, pad_below: int) -> np.ndarray:
    """Bucket label of each (ascending) size: sizes below ``pad_below`` are grouped from the smallest up,
    each bucket spanning ``[s, s + max(2, s // _BUCKET_SPAN)]``; other sizes are buckets of their own."""
    labels = sizes.astype(np.int64).copy()
    start = None
    for size in np.unique(sizes[(sizes > 0) & (sizes < pad_below)]):
        if start is None or size > start + max(2, start // _BUCKET_SPAN):
            start = int(size)
        labels[sizes == size] = start
    return labels


def _chunk_groups(chunks, budget_bytes: int):
    """Consecutive chunks grouped until their dense matrices reach ``budget_bytes``: one thread-pool task
    per group, because every task start and end needs the GIL, which the busy main thread holds."""
    group, size = [], 0
    for n, gids in chunks:
        group.append((n, gids))
        size += _MATRICES_PER_GRAPH * 8 * n * n * len(gids)
        if size >= budget_bytes:
            yield group
            group, size = [], 0
    if group:
        yield group


_POOLS: dict = {}  # (process id, workers) -> ThreadPoolExecutor, see _worker_pool


def _worker_pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """A thread pool of ``workers`` single-threaded workers, kept for the life of the process.

    Starting two threads costs the calling thread ~3 ms (each start waits until the new thread holds
    the GIL), about 6 % of LapPE for 3,000 molecules, so pools are reused across calls. Keyed by
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
    installed; a no-op context otherwise or for ``num=None`` (the cap costs ~2 ms, so it is only used
    when scipy's LAPACK actually runs inside the single-threaded phase)."""
    if num is None:
        return contextlib.nullcontext()
    try:
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


def _check_dense_limit(specs, num_nodes: np.ndarray, dense_limit: int) -> np.ndarray:
    """Ids of graphs above ``dense_limit``; raise if a requested PSE cannot handle them."""
    large = np.flatnonzero(num_nodes > dense_limit)
    if large.size:
        dense_only = [s.name for s in specs if not s.has_sparse_path]
        if dense_only:
            gid = int(large[np.argmax(num_nodes[large])])
            n = int(num_nodes[gid])
            gib = _MATRICES_PER_GRAPH * 8 * n * n / 2**30
            raise GraphTooLargeError(
                f"graph {gid} has {n} nodes, above dense_limit={dense_limit}; {', '.join(dense_only)} "
                f"need dense {n}x{n} eigendecompositions (about {gib:.1f} GiB) and have no sparse path: "
                f"raise the limit (dense_limit= / --dense-limit) or leave them out")
    return large


def compute_pse_tensors(
    graphs,
    names: Optional[Iterable[str] | str] = None,
    *,
    normalize: bool = False,
    progress: bool = False,
    dense_limit: int = DEFAULT_DENSE_LIMIT,
    max_cycle_paths: Optional[int] = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    device=None,
    num_workers: int = 0,
    collection: Optional[EdgeCollection] = None,
) -> PSEResult:
    """Compute PSEs of many graphs and return them as stacked tensors (graphs are not modified).

    Parameters are those of :func:`compute_pses`; ``collection`` may pass a prebuilt
    :class:`~gpse_dgl.pse.spectral.EdgeCollection` of ``graphs`` (then ``graphs`` may be None).

    Returns
    -------
    PSEResult
    """
    names = resolve_pse_names(names)
    specs = [PSE_REGISTRY[name] for name in names]
    if dense_limit < 1:
        raise ValueError(f"dense_limit must be >= 1, got {dense_limit}")
    if collection is None:
        glist, _ = _as_graph_list(graphs)
        collection = EdgeCollection.from_graphs(glist) if glist else EdgeCollection.from_edges([], [], [])
    coll = collection
    num_nodes = coll.num_nodes
    G, N = coll.num_graphs, coll.total_nodes

    per_graph = [s for s in specs if s.edges is None]
    whole = [s for s in specs if s.edges is not None]
    large = _check_dense_limit(per_graph, num_nodes, dense_limit)
    needs = set().union(*(s.needs for s in per_graph)) if per_graph else set()

    result = PSEResult(num_nodes=torch.from_numpy(num_nodes.copy()))
    for s in specs:
        shape = (N, s.dim) if s.level == "node" else (G, s.dim)
        (result.node if s.level == "node" else result.graph)[s.name] = torch.zeros(shape, dtype=torch.float32)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=G, unit="graph", desc="PSEs", leave=False)

    def store(spec, gids: np.ndarray, n: int, value: torch.Tensor, sizes=None):
        """Write a float32 ``(B, n, dim)`` / ``(B, dim)`` result of graphs ``gids`` (of ``sizes`` nodes
        each, when padded)."""
        if spec.level == "node":
            rows = coll.node_offset[gids][:, None] + np.arange(n)
            if sizes is not None:  # padded chunk: real rows only
                real = np.arange(n) < sizes[:, None]
                rows, value = rows[real], value[torch.from_numpy(real)]
            result.node[spec.name][torch.from_numpy(rows.reshape(-1))] = value.reshape(-1, spec.dim)
        else:
            result.graph[spec.name][torch.from_numpy(np.asarray(gids))] = value

    def new_batch(n: int, gids: np.ndarray) -> DenseBatch:
        sizes = num_nodes[gids]
        return DenseBatch.from_collection(coll, gids, n, needs, device=device,
                                          sizes=None if sizes.min() == n else sizes)

    def finish_chunk(n: int, gids: np.ndarray, batch: DenseBatch) -> None:
        for s in per_graph:
            standardize = s.level == "node" and normalize
            store(s, gids, n, _finish(s.dense(batch), standardize, batch.sizes), batch.sizes)
        if bar is not None:
            bar.update(len(gids))

    def finish_group(batches, future) -> None:
        future.result()
        for n, gids, batch in batches:
            finish_chunk(n, gids, batch)

    def run_whole(spec) -> torch.Tensor:
        value = torch.as_tensor(spec.edges(coll, {"max_cycle_paths": max_cycle_paths})).to(torch.float64)
        if spec.level == "node" and normalize:
            value = per_graph_standardize(value, num_nodes)
        return value.to(torch.float32)

    on_cpu = device is None or torch.device(device).type == "cpu"
    # padded chunks only where every requested PSE reads nothing but L_sym's lowest eigenpairs, on the CPU
    pad_below = spectral.GRAM_MAX_N if per_graph and all(s.padded for s in per_graph) and on_cpu else 0
    chunks = list(_dense_chunks(num_nodes, dense_limit, chunk_bytes, pad_below)) if per_graph else []
    small = [c for c in chunks if on_cpu and c[0] < SINGLE_THREAD_BELOW]
    big = [c for c in chunks if not (on_cpu and c[0] < SINGLE_THREAD_BELOW)]
    workers = num_workers if num_workers > 0 else torch.get_num_threads()
    workers = max(1, min(workers, len(small) + len(whole)))

    # 1) whole-collection PSEs (cycles) and small same-size chunks. Tiny matrices gain nothing from
    #    intra-op threads, so the thread budget goes to running decompositions side by side instead:
    #    this thread builds the matrices and post-processes them (many small GIL-bound ops) while the
    #    pool runs the LAPACK calls (which release the GIL) on groups of chunks, a few groups ahead.
    partial_blas = (workers == 1 and bool(needs & {"sym_low", "sym_low_values"}) and "sym" not in needs
                    and any(n >= spectral.PARTIAL_MIN_N for n, _ in small))
    with _intra_op_threads(1 if on_cpu else None), _blas_threads(1 if partial_blas else None):
        if workers > 1:
            pool = _worker_pool(workers)
            whole_futures = [pool.submit(run_whole, s) for s in whole]
            in_flight = collections.deque()
            try:
                for group in _chunk_groups(small, chunk_bytes // 4):
                    batches = [(n, gids, new_batch(n, gids).prepare()) for n, gids in group]
                    in_flight.append((batches, pool.submit(_precompute_all, [b for _, _, b in batches])))
                    if len(in_flight) > workers:
                        finish_group(*in_flight.popleft())
                while in_flight:
                    finish_group(*in_flight.popleft())
                whole_values = [f.result() for f in whole_futures]
            finally:  # after an error too, no task of this call outlives it
                concurrent.futures.wait([f for _, f in in_flight] + whole_futures)
        else:
            for n, gids in small:
                finish_chunk(n, gids, new_batch(n, gids))
            whole_values = [run_whole(s) for s in whole]
    for s, value in zip(whole, whole_values):
        (result.node if s.level == "node" else result.graph)[s.name] = value

    # 2) larger chunks, one after the other with torch's intra-op threads (threaded LAPACK pays there).
    #    When only the lowest eigenpairs are needed, scipy's partial solver (OpenBLAS) does the work and
    #    torch only builds and post-processes small arrays; torch's OpenMP threads, spinning after each op,
    #    then compete with OpenBLAS's own (2.4x slower at n = 300, 2 cores), so torch runs on one thread.
    partial_only = on_cpu and bool(needs) and needs <= {"sym_low", "sym_low_values"}
    with _intra_op_threads(1 if partial_only else None):
        for n, gids in big:
            finish_chunk(n, gids, new_batch(n, gids))

    # 3) graphs above the dense limit, one by one through the sparse paths
    for gid in large:
        sg = SparseGraph(int(num_nodes[gid]), *coll.graph_edges(int(gid)))
        for s in per_graph:
            value = torch.as_tensor(np.asarray(s.sparse(sg)))[None]
            store(s, np.array([gid]), sg.n, _finish(value, s.level == "node" and normalize))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.update(int((num_nodes == 0).sum()))
    if bar is not None:
        bar.close()
    for table in (result.node, result.graph):
        for key, value in table.items():
            # in place, in numpy: torch's version would wake its OpenMP team (ms) for one small pass
            np.nan_to_num(value.numpy(), copy=False, nan=0.0, posinf=0.0, neginf=0.0)
    return result


@functools.lru_cache(maxsize=1)
def _column_factory():
    """``(Frame, Column, Scheme)`` of DGL's frame module, or None if its layout is not the known one."""
    try:
        from dgl.frame import Column, Frame, Scheme

        frame = Frame(num_rows=1)
        frame._columns["_probe"] = Column(torch.zeros(1, 1), Scheme((1,), torch.float32))
        if frame["_probe"].shape != (1, 1):
            return None
        return Frame, Column, Scheme
    except Exception:  # noqa: BLE001 - any mismatch: use the public API
        return None


def write_ndata(graphs: list, node_values: dict, counts=None) -> None:
    """Split ``(N, dim)`` tensors by input graph and store them as ``g.ndata[name]``.

    ``g.ndata.update`` costs ~30 us per field and graph (device and shape bookkeeping for every call),
    which for four PSEs of 3,000 molecules exceeded their whole computation. When the graph's node frame
    is DGL's plain ``Frame`` (DGL 1.x and 2.x), the column is inserted directly with a scheme built once
    per field; our tensors already have the right length, dtype and device. Otherwise, and for graphs
    on a non-CPU device, the public API is used.
    """
    if not node_values or not graphs:
        return
    if counts is None:
        counts = [g.num_nodes() for g in graphs]
    counts = [int(c) for c in counts]
    parts = {name: (torch.split(value, counts) if len(graphs) > 1 else (value,))
             for name, value in node_values.items()}
    fast = _column_factory()
    if fast is not None:
        frame_cls, column_cls, scheme_cls = fast
        schemes = {name: scheme_cls(tuple(value.shape[1:]), value.dtype) for name, value in node_values.items()}
    check_device = torch.cuda.is_available()  # a CPU-only DGL build has CPU graphs only
    for i, g in enumerate(graphs):
        frames = getattr(g, "_node_frames", None)
        if (fast is not None and frames is not None and len(frames) == 1 and type(frames[0]) is frame_cls
                and frames[0].num_rows == counts[i] and not (check_device and g.device.type != "cpu")):
            columns = frames[0]._columns
            for name, chunks in parts.items():
                columns[name] = column_cls(chunks[i], schemes[name])
        else:
            g.ndata.update({name: chunks[i] for name, chunks in parts.items()})


def compute_pses(
    graphs,
    names: Optional[Iterable[str] | str] = None,
    normalize: bool = False,
    progress: bool = False,
    dense_limit: int = DEFAULT_DENSE_LIMIT,
    num_workers: int = 0,
    *,
    max_cycle_paths: Optional[int] = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    device=None,
):
    """Compute explicit PSEs for a collection of graphs, batched.

    Parameters
    ----------
    graphs : dgl.DGLGraph or list of dgl.DGLGraph
        Homogeneous graphs. Edges are read as an undirected simple graph: direction ignored, self-loops
        and multi-edges dropped. A batched graph counts as its member graphs.
    names : str or list of str, optional
        PSE names (see :data:`gpse_dgl.pse.PSE_REGISTRY`), a list or a comma-separated string;
        default: all six (``ElstaticPE, LapPE, RWSE, HKdiagSE, EigVals, CycleGE``).
    normalize : bool
        Standardise node-level PSEs per graph and column (:mod:`.standardize`), as the reference does
        for pretraining targets. Graph-level PSEs are always raw.
    progress : bool
        Show a tqdm progress bar.
    dense_limit : int
        Graphs with more nodes use the sparse paths (LapPE, EigVals, RWSE); dense-only PSEs
        (ElstaticPE, HKdiagSE) raise :class:`~gpse_dgl.utils.errors.GraphTooLargeError` for them.
    num_workers : int
        Threads that process small same-size chunks (and the cycle count) side by side; 0 (default)
        uses ``torch.get_num_threads()``, 1 runs everything in the calling thread. Chunks of small graphs
        run with one intra-op thread each, so the process never uses more threads than torch is allowed.
        Threads, not processes: the work is in LAPACK / tensor kernels that release the GIL, and a process
        pool's start-up and transfer cost did not pay for ~3,000 molecules on two cores.
    max_cycle_paths : int, optional
        Work bound passed to the cycle counter (``CycleGE``); None uses its default.
    chunk_bytes : int
        Memory budget of one dense same-size chunk.
    device : torch.device or str, optional
        Where the dense linear algebra runs (e.g. ``"cuda"``); results come back to the CPU.

    Returns
    -------
    graphs : dgl.DGLGraph or list of dgl.DGLGraph
        The input object(s), with node-level PSEs written in place to ``g.ndata[name]``
        (float32, ``(num_nodes, dim)``).
    graph_level : dict[str, torch.Tensor]
        float32 ``(G, dim)`` per requested graph-level PSE (``G`` graphs in input order, batched graphs
        expanded into their members). Save them with ``dgl.save_graphs(path, graphs, graph_level)``.
    """
    glist, single = _as_graph_list(graphs)
    result = compute_pse_tensors(glist, names, normalize=normalize, progress=progress,
                                 dense_limit=dense_limit, max_cycle_paths=max_cycle_paths,
                                 chunk_bytes=chunk_bytes, device=device, num_workers=num_workers)
    # one member graph per input graph (nothing batched): the per-graph counts are known already
    counts = result.num_nodes.tolist() if result.num_nodes.shape[0] == len(glist) else None
    write_ndata(glist, result.node, counts)
    return (glist[0] if single else glist), result.graph

