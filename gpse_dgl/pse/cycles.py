"""Exact simple-cycle counts by length (the ``CycleGE`` graph-level target), vectorised over a batch.

``CycleGE`` (``docs/PSE.md``) is, per graph, the number of simple cycles of each length k = 2..8 of the
simple undirected graph, where a "2-cycle" is an undirected edge. The reference enumerates cycles with a
pure-Python depth-first search from every node; here all graphs of a batch are handled at once with
array operations:

1. **2-core.** Every cycle lies in the 2-core (what is left after repeatedly deleting nodes of degree
   <= 1), which is tiny for molecules (their rings). Peeling works frontier by frontier.
2. **Canonical start.** Each cycle is enumerated only from its smallest node s: the paths grown from s
   visit only nodes with id > s. A path ``s, x_1, ..., x_{m-1}`` whose last node is adjacent to s closes
   a cycle of length m (m >= 3); each such cycle is found exactly twice, once per direction, so the
   closed-path counts are halved. Core nodes are numbered by decreasing degree, so hubs are starts early
   and are excluded from the many longer searches started elsewhere.
3. **Breadth-first path expansion.** All partial paths of the same length, for all starts and graphs,
   form one integer matrix (a row per path: s, x_1, ..., last). One step gathers every row's CSR
   neighbours with ``np.repeat``, and keeps a candidate y only if y > s, y is not on the row already, and
   y can still get back to s in time (below).
4. **Distance pruning.** Let dist_s(y) be the length of the shortest path from s to y through nodes > s
   only. A path with m nodes ending at y can close a cycle of length <= K only if
   dist_s(y) <= K - m + 1. Since y lies m - 1 hops along the path, the test can only fail for
   m > (K + 2) / 2, so the balls {(s, y): dist_s(y) <= r} are needed only for r <= K - floor(K/2) - 1
   (3 for K = 8) and are built once by a restricted breadth-first search. At the last step (m = K) it
   means "y adjacent to s", so the longest paths are never kept beyond the count.

Work is bounded by ``max_paths`` (rows of a frontier, or pairs of a distance ball): beyond it a
:class:`~gpse_dgl.utils.errors.GraphTooLargeError` is raised instead of exhausting memory. Counting is
exponential in the worst case (dense graphs); for sparse graphs such as molecules the frontiers stay small.
"""
from __future__ import annotations

import numpy as np

from ..utils.errors import GraphTooLargeError
from ..utils.graph import simple_edges

__all__ = ["count_cycles", "two_core_mask"]

# Candidate (row, neighbour) pairs materialised at once while expanding a frontier; bounds peak memory
# independently of max_paths (about 40 bytes per candidate).
_CHUNK = 1 << 21
# Below this many nodes per peeling round, the 2-core peel continues in plain Python (see two_core_mask).
_SMALL_FRONTIER = 64


def _csr(n: int, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(indptr, indices)`` of the symmetric adjacency of simple edges ``u < v``."""
    src = np.concatenate([u, v])
    dst = np.concatenate([v, u])
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order]


def _neighbours(indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray):
    """All (position in ``nodes``, neighbour) pairs: ``row`` and ``nbr`` arrays of equal length."""
    first = indptr[nodes]
    cnt = indptr[nodes + 1] - first
    total = int(cnt.sum())
    row = np.repeat(np.arange(nodes.shape[0], dtype=np.int64), cnt)
    # position of each pair inside its node's neighbour list, shifted to that list's start in indices
    offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return row, indices[first[row] + offset]


def two_core_mask(num_nodes: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Boolean mask of the nodes of the 2-core (nodes left after repeatedly removing degree <= 1 nodes).

    Parameters
    ----------
    num_nodes : int
        Number of nodes.
    u, v : numpy.ndarray
        Simple undirected edges, ``u < v``.
    """
    indptr, indices = _csr(num_nodes, u, v)
    deg = np.diff(indptr)
    alive = np.ones(num_nodes, dtype=bool)
    frontier = np.flatnonzero(deg <= 1)
    # One vectorised round per "layer" of pendant nodes, touching only the removed nodes' edges. Long
    # chains (a path of 10^5 nodes) would need one round each, so small frontiers finish in plain Python.
    while frontier.size >= _SMALL_FRONTIER:
        alive[frontier] = False
        _, nbr = _neighbours(indptr, indices, frontier)
        nbr, cnt = np.unique(nbr[alive[nbr]], return_counts=True)
        deg[nbr] -= cnt
        frontier = nbr[deg[nbr] <= 1]
    if frontier.size:
        _peel_queue(indptr, indices, deg, alive, frontier)
    return alive


def _peel_queue(indptr, indices, deg, alive, frontier) -> None:
    """Finish the peel with a queue (in place on ``deg`` and ``alive``); cheaper than tiny numpy rounds."""
    ptr, nbrs, d, live = indptr.tolist(), indices.tolist(), deg.tolist(), alive.tolist()
    queue = frontier.tolist()
    for x in queue:
        live[x] = False
    while queue:
        x = queue.pop()
        for y in nbrs[ptr[x]:ptr[x + 1]]:
            if live[y]:
                d[y] -= 1
                if d[y] <= 1:
                    live[y] = False
                    queue.append(y)
    alive[:] = live
    deg[:] = d


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique`` for int arrays; sort-based, which beats numpy 2's hash-based unique on large arrays."""
    a = np.sort(a)
    keep = np.empty(a.shape[0], dtype=bool)
    keep[:1] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _member(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``np.isin(keys, sorted_keys)`` for a sorted unique ``sorted_keys`` via binary search."""
    if sorted_keys.size == 0:
        return np.zeros(keys.shape, dtype=bool)
    pos = np.searchsorted(sorted_keys, keys)
    pos[pos == sorted_keys.size] = 0
    return sorted_keys[pos] == keys


class CycleLimitError(GraphTooLargeError):
    """The work bound ``max_paths`` was reached; :meth:`naming` rewords the advice for another interface."""

    def __init__(self, what: str, count: int, max_paths: int, option: str = "max_paths"):
        self.what, self.count, self.max_paths, self.option = what, count, max_paths, option
        super().__init__(self._text())

    def _text(self) -> str:
        advice = ("a larger max_paths to count_cycles (max_cycle_paths of compute_pses)"
                  if self.option == "max_paths" else f"a larger {self.option}")
        return (f"cycle counting needs {self.count:,} {self.what}, more than the limit of "
                f"{self.max_paths:,} ({self.option}); pass {advice} (memory grows ~40 bytes per path)")

    def naming(self, option: str) -> "CycleLimitError":
        """The same error, advising the setting ``option`` (e.g. the CLI flag ``--max-cycle-paths``)."""
        return CycleLimitError(self.what, self.count, self.max_paths, option)

    def __reduce__(self):  # picklable across worker processes
        return CycleLimitError, (self.what, self.count, self.max_paths, self.option)


def _too_large(what: str, count: int, max_paths: int) -> GraphTooLargeError:
    return CycleLimitError(what, count, max_paths)


def _restricted_balls(n, indptr, indices, radius, max_paths) -> list[np.ndarray]:
    """``balls[r]`` = sorted keys ``s * n + y`` of pairs with y > s and dist_s(y) <= r, r = 1..radius.

    dist_s is the hop distance through nodes > s only (the nodes a path started at s may use).
    ``balls[0]`` is empty (pairs with y == s are never needed).
    """
    balls = [np.empty(0, dtype=np.int64)]
    seen = np.empty(0, dtype=np.int64)
    s = np.arange(n, dtype=np.int64)
    x = s.copy()
    for _ in range(radius):
        row, y = _neighbours(indptr, indices, x)
        sy = s[row]
        keep = y > sy
        keys = _sorted_unique(sy[keep] * n + y[keep])
        keys = keys[~_member(seen, keys)]
        seen = np.sort(np.concatenate([seen, keys]))  # disjoint sorted sets: no de-duplication needed
        if seen.size > max_paths:
            raise _too_large("node pairs for distance pruning", seen.size, max_paths)
        balls.append(seen)
        s, x = keys // n, keys % n
    return balls


def _expand(paths, indptr, indices, n, ball, max_paths):
    """Extend every path (row) by one node: neighbour y of the last node with y > start, y not on the
    path, and (when ``ball`` is given) ``start * n + y`` in ``ball``. Processed in chunks of candidates."""
    last = paths[:, -1]
    cnt = indptr[last + 1] - indptr[last]
    bounds = np.searchsorted(np.cumsum(cnt), np.arange(_CHUNK, int(cnt.sum()) + _CHUNK, _CHUNK), "right")
    out, kept, lo = [], 0, 0
    for hi in np.unique(np.append(bounds, paths.shape[0])):
        if hi <= lo:
            continue
        block = paths[lo:hi]
        row, y = _neighbours(indptr, indices, block[:, -1])
        keep = y > block[row, 0]
        row, y = row[keep], y[keep]
        if ball is not None:
            keep = _member(ball, block[row, 0] * n + y)
            row, y = row[keep], y[keep]
        keep = np.ones(row.shape[0], dtype=bool)
        for j in range(1, block.shape[1] - 1):  # column 0 (< y) and the last node (a neighbour) are safe
            keep &= block[row, j] != y
        row, y = row[keep], y[keep]
        kept += row.shape[0]
        if kept > max_paths:
            raise _too_large(f"paths of {paths.shape[1] + 1} nodes (at least)", kept, max_paths)
        out.append(np.concatenate([block[row], y[:, None]], axis=1))
        lo = hi
    if not out:
        return np.empty((0, paths.shape[1] + 1), dtype=paths.dtype)
    return np.concatenate(out, axis=0)


def _closed_paths_per_start(n, u, v, max_length, max_paths) -> np.ndarray:
    """``(n, max_length + 1)`` counts of closed paths (= 2 x cycles) by smallest node and length."""
    indptr, indices = _csr(n, u, v)
    radius = max_length - max_length // 2 - 1
    balls = _restricted_balls(n, indptr, indices, max(radius, 1), max_paths)
    closed = np.zeros((n, max_length + 1), dtype=np.int64)
    paths = np.stack([u, v], axis=1)  # every path of 2 nodes with s < x_1, i.e. each edge once
    for m in range(2, max_length + 1):
        if m >= 3:
            end = _member(balls[1], paths[:, 0] * n + paths[:, -1])
            closed[:, m] = np.bincount(paths[end, 0], minlength=n)
        if m == max_length or paths.shape[0] == 0:
            break
        r = max_length - m  # remaining edges after adding node m + 1 bound dist_s of that node
        paths = _expand(paths, indptr, indices, n, balls[r] if r <= radius else None, max_paths)
    return closed


def count_cycles(
    num_nodes: int,
    u,
    v,
    node_graph=None,
    num_graphs: int = 1,
    max_length: int = 8,
    max_paths: int = 50_000_000,
) -> np.ndarray:
    """Number of simple cycles of each length 2..``max_length`` in each graph of a batch.

    Parameters
    ----------
    num_nodes : int
        Total number of nodes (all graphs of the batch, disjoint, ids global).
    u, v : array_like of int
        Undirected edges; expected simple with ``u < v`` but canonicalised anyway (direction, self-loops
        and multi-edges are ignored).
    node_graph : array_like of int, optional
        ``node_graph[i]`` is the graph index (0..num_graphs-1) of node i; default: all in graph 0.
    num_graphs : int
        Number of graphs (rows of the result; graphs without edges get zeros).
    max_length : int
        Longest cycle counted (>= 2).
    max_paths : int
        Largest number of partial paths held at once; beyond it :class:`GraphTooLargeError` is raised.

    Returns
    -------
    numpy.ndarray
        int64 ``(num_graphs, max_length - 1)``; column k - 2 counts the simple cycles of length k, and
        column 0 (length 2) is the number of undirected edges.
    """
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    u, v = simple_edges(u, v, num_nodes)
    if node_graph is None:
        node_graph = np.zeros(num_nodes, dtype=np.int64)
    node_graph = np.asarray(node_graph, dtype=np.int64)
    if node_graph.shape != (num_nodes,):
        raise ValueError(f"node_graph must have one entry per node ({num_nodes}), got {node_graph.shape}")
    out = np.zeros((num_graphs, max_length - 1), dtype=np.int64)
    if u.size == 0:
        return out
    out[:, 0] = np.bincount(node_graph[u], minlength=num_graphs)
    if max_length < 3:
        return out

    core = np.flatnonzero(two_core_mask(num_nodes, u, v))
    if core.size == 0:
        return out
    # Relabel the core by decreasing degree (hubs first, see module docstring).
    is_core = np.zeros(num_nodes, dtype=bool)
    is_core[core] = True
    in_core = is_core[u] & is_core[v]
    cu, cv = u[in_core], v[in_core]
    deg = np.bincount(np.concatenate([cu, cv]), minlength=num_nodes)[core]
    order = core[np.lexsort((core, -deg))]
    new_id = np.full(num_nodes, -1, dtype=np.int64)
    new_id[order] = np.arange(order.size, dtype=np.int64)
    cu, cv = new_id[cu], new_id[cv]
    cu, cv = np.minimum(cu, cv), np.maximum(cu, cv)

    closed = _closed_paths_per_start(order.size, cu, cv, max_length, max_paths)
    per_graph = np.zeros((num_graphs, max_length + 1), dtype=np.int64)
    np.add.at(per_graph, node_graph[order], closed)
    out[:, 1:] = per_graph[:, 3:] // 2
    return out
