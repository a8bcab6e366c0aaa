"""How :func:`~gpse_dgl.pse.compute_pses` groups graphs for the dense path.

Graphs are grouped by **exact** node count (an isolated padding node would add an eigenvalue) and cut into
chunks whose float64 ``(B, n, n)`` matrices fit a memory budget (:func:`dense_chunks`). When every requested
PSE reads only the lowest eigenpairs of ``L_sym`` (``PSESpec.padded``), graphs below a size share a padded
chunk with graphs of nearby sizes instead (:func:`size_buckets`). Consecutive chunks are grouped into one
thread-pool task each (:func:`chunk_groups`), and graphs above the dense limit are checked against the
requested PSEs and the sparse path's size limit before any work (:func:`check_dense_limit`).

Example
-------
>>> import numpy as np
>>> from gpse_dgl.pse.chunks import dense_chunks
>>> [(n, gids.tolist()) for n, gids in dense_chunks(np.array([3, 5, 3, 0, 9]), dense_limit=6, chunk_bytes=2**20)]
[(3, [0, 2]), (5, [1])]
"""
from __future__ import annotations

import numpy as np

from ..utils.errors import GraphTooLargeError

# Upper bound on the float64 n x n matrices alive per graph while a chunk is processed: adjacency, two
# Laplacians, eigh workspace and two eigenvector sets, squared eigenvectors, L+, Q and its weighted copy.
MATRICES_PER_GRAPH = 12
#: Graphs above the dense limit with more nodes than this are refused by the sparse PSEs before any work.
DEFAULT_SPARSE_LIMIT = 1_000_000
# Peak bytes per node of the sparse LapPE / RWSE path (process peak 1.06-1.26 GB on 10^6-node paths, stars and
# cycles, 1.7 GB on K(4, 10^6 - 4), benchmarks/pse_families.py); only quoted in the sparse_limit message.
SPARSE_BYTES_PER_NODE = 1500
# padded buckets (see size_buckets) start at size s and span s + max(2, s // BUCKET_SPAN)
BUCKET_SPAN = 4


def dense_chunks(num_nodes: np.ndarray, dense_limit: int, chunk_bytes: int, pad_below: int = 0):
    """Yield ``(n, graph ids)`` for every chunk of the graphs with ``1 <= n <= dense_limit``: same-size
    chunks, except that sizes below ``pad_below`` are bucketed (``n`` is then the bucket's largest size,
    see :func:`size_buckets`)."""
    order = np.argsort(num_nodes, kind="stable")
    sizes = num_nodes[order]
    bucket = size_buckets(sizes, min(pad_below, dense_limit + 1))  # no bucket reaches past the limit
    bounds = np.flatnonzero(np.diff(bucket)) + 1
    for group in np.split(order, bounds):
        if group.size == 0:
            continue
        n = int(num_nodes[group[-1]])
        if num_nodes[group[0]] == 0 or n > dense_limit:
            continue
        per_chunk = max(1, int(chunk_bytes // (MATRICES_PER_GRAPH * 8 * n * n)))
        for start in range(0, group.size, per_chunk):
            yield n, group[start:start + per_chunk]


def size_buckets(sizes: np.ndarray, pad_below: int) -> np.ndarray:
    """Bucket label of each (ascending) size: sizes below ``pad_below`` are grouped from the smallest up,
    each bucket spanning ``[s, s + max(2, s // BUCKET_SPAN)]``; other sizes are buckets of their own."""
    labels = sizes.astype(np.int64).copy()
    start = None
    for size in np.unique(sizes[(sizes > 0) & (sizes < pad_below)]):
        if start is None or size > start + max(2, start // BUCKET_SPAN):
            start = int(size)
        labels[sizes == size] = start
    return labels


def chunk_groups(chunks, budget_bytes: int):
    """Consecutive chunks grouped until their dense matrices reach ``budget_bytes``: one thread-pool task
    per group, because every task start and end needs the GIL, which the busy main thread holds."""
    group, size = [], 0
    for n, gids in chunks:
        group.append((n, gids))
        size += MATRICES_PER_GRAPH * 8 * n * n * len(gids)
        if size >= budget_bytes:
            yield group
            group, size = [], 0
    if group:
        yield group


def check_dense_limit(specs, num_nodes: np.ndarray, dense_limit: int, sparse_limit: int | None = None) -> np.ndarray:
    """Ids of graphs above ``dense_limit``; raise if a requested PSE cannot handle them, or if one is above
    ``sparse_limit`` nodes (the documented bound of the sparse path; None: no bound)."""
    large = np.flatnonzero(num_nodes > dense_limit)
    if large.size:
        gid = int(large[np.argmax(num_nodes[large])])
        n = int(num_nodes[gid])
        dense_only = [s.name for s in specs if not s.has_sparse_path]
        if dense_only:
            gib = MATRICES_PER_GRAPH * 8 * n * n / 2**30
            raise GraphTooLargeError(
                f"graph {gid} has {n} nodes, above dense_limit={dense_limit}; {', '.join(dense_only)} "
                f"need dense {n}x{n} eigendecompositions (about {gib:.1f} GiB) and have no sparse path: "
                f"raise the limit (dense_limit= / --dense-limit) or leave them out")
        sparse = [s.name for s in specs if s.sparse is not None]
        if sparse and sparse_limit is not None and n > sparse_limit:
            raise GraphTooLargeError(
                f"graph {gid} has {n:,} nodes, above sparse_limit={sparse_limit:,} (the largest graph the sparse "
                f"{', '.join(sparse)} path takes, about {SPARSE_BYTES_PER_NODE * sparse_limit / 2**30:.1f} GiB "
                f"there): raise the limit (sparse_limit= / --sparse-limit) or leave them out")
    return large
