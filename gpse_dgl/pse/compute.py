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
   Many graphs (2 x ``PART_GRAPHS`` or more) are taken in consecutive parts of ~1,000 that form one
   pipeline: the calling thread reads part ``i + 1`` and writes out part ``i - 1`` while the pool
   decomposes part ``i``, instead of leaving a core idle at both ends.
5. Graphs above ``dense_limit`` nodes take the sparse path of the PSEs that have one
   (LapPE, EigVals, RWSE via :mod:`gpse_dgl.pse.sparse`; its RWSE is exact up to a work bound and a
   seeded stochastic estimate beyond, see that module); requesting a dense-only PSE (ElstaticPE,
   HKdiagSE) for such a graph, or any PSE for a graph above ``sparse_limit`` nodes, raises
   :class:`~gpse_dgl.utils.errors.GraphTooLargeError` before any work.
6. Whole-collection PSEs (CycleGE) run once over the edge list of all graphs.

Steps 2-6 run in :mod:`.pipeline` (chunk planning in :mod:`.chunks`); this module holds the public entry
points and writes the results into the graphs.

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

from typing import Iterable, Optional

import torch

from .. import _private
from ..utils.graph import graph_list
from .chunks import DEFAULT_SPARSE_LIMIT
from .pipeline import Job, PSEResult, concat_results
from .spectral import EdgeCollection

__all__ = ["compute_pses", "compute_pse_tensors", "PSEResult", "DEFAULT_DENSE_LIMIT", "DEFAULT_SPARSE_LIMIT",
           "DEFAULT_CHUNK_BYTES"]

#: Graphs with more nodes than this use sparse solvers (or are refused by dense-only PSEs).
DEFAULT_DENSE_LIMIT = 5000
#: Memory budget of one dense chunk (all float64 n x n matrices alive at once). Small enough that the
#: elementwise passes over a chunk stay mostly in cache.
DEFAULT_CHUNK_BYTES = 32 * 2**20


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
    sparse_limit: Optional[int] = DEFAULT_SPARSE_LIMIT,
) -> PSEResult:
    """Compute PSEs of many graphs and return them as stacked tensors (graphs are not modified).

    Parameters are those of :func:`compute_pses`; ``collection`` may pass a prebuilt
    :class:`~gpse_dgl.pse.spectral.EdgeCollection` of ``graphs`` (then ``graphs`` may be None).

    Returns
    -------
    PSEResult
    """
    job = Job(names, normalize, progress, dense_limit, max_cycle_paths, chunk_bytes, device, num_workers,
              sparse_limit)
    parts = [collection] if collection is not None else job.parts(graph_list(graphs)[0])
    return concat_results(job.run(parts))


def write_ndata(graphs: list, node_values: dict, counts=None) -> None:
    """Split ``(N, dim)`` tensors by input graph and store them as ``g.ndata[name]``.

    ``g.ndata.update`` does device and shape bookkeeping on every call, which for a few PSEs of thousands
    of molecules costs more than computing them. Our tensors already have the right length, dtype and
    device, so where DGL's node frame is the known one they go in directly
    (:class:`gpse_dgl._private.NodeColumnWriter`); otherwise through the public API.
    """
    if not node_values or not graphs:
        return
    if counts is None:
        counts = [g.num_nodes() for g in graphs]
    counts = [int(c) for c in counts]
    parts = {name: (torch.split(value, counts) if len(graphs) > 1 else (value,))
             for name, value in node_values.items()}
    writer = _private.NodeColumnWriter.create(node_values)
    for i, g in enumerate(graphs):
        columns = {name: chunks[i] for name, chunks in parts.items()}
        if writer is None or not writer.write(g, columns, counts[i]):
            g.ndata.update(columns)


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
    sparse_limit: Optional[int] = DEFAULT_SPARSE_LIMIT,
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
        (ElstaticPE, HKdiagSE) raise :class:`~gpse_dgl.utils.errors.GraphTooLargeError` for them. A graph
        on the sparse path that takes more than a few seconds prints a progress line per tenth of its work
        (unless :func:`gpse_dgl.utils.progress.configure` was told ``quiet``).
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
    sparse_limit : int, optional
        Largest graph (nodes) the sparse paths take (default 1,000,000: memory ~1.5 kB per node there); a
        larger one raises :class:`~gpse_dgl.utils.errors.GraphTooLargeError` before any work. None: no limit.

    Returns
    -------
    graphs : dgl.DGLGraph or list of dgl.DGLGraph
        The input object(s), with node-level PSEs written in place to ``g.ndata[name]``
        (float32, ``(num_nodes, dim)``).
    graph_level : dict[str, torch.Tensor]
        float32 ``(G, dim)`` per requested graph-level PSE (``G`` graphs in input order, batched graphs
        expanded into their members). Save them with ``dgl.save_graphs(path, graphs, graph_level)``.
    """
    glist, single = graph_list(graphs)
    job = Job(names, normalize, progress, dense_limit, max_cycle_paths, chunk_bytes, device, num_workers,
              sparse_limit)

    def write(part_graphs, result):
        # one member graph per input graph (nothing batched): the per-graph counts are known already
        counts = result.num_nodes.tolist() if result.num_nodes.shape[0] == len(part_graphs) else None
        write_ndata(part_graphs, result.node, counts)
        result.node.clear()  # now held by the graphs; only the graph-level values are joined below

    results = job.run(job.parts(glist), on_part=write)
    return (glist[0] if single else glist), concat_results(results).graph
