"""Graph shapes that stress PSE solvers: hubs, chains, meshes, power laws, fragments (the families of
the sparse path's tests and `benchmarks/pse_families.py`; the 1-WL-hard families are :mod:`.families`).

:func:`family_edges` returns ``(num_nodes, src, dst)`` numpy edge lists (each undirected edge once, except
where a family adds duplicates on purpose), vectorised so that 10^6-node members take about a second;
:func:`family_graph` wraps them as a bidirected DGLGraph. Families (``n`` is the requested node count;
the actual count can differ slightly, e.g. a grid rounds to a square):

=====================  =====================================================================================
``star``               one hub joined to ``n - 1`` leaves (one eigenvalue 1 of multiplicity ``n - 2``)
``star+isolated``      a star of ``n - 100`` nodes plus 100 isolated nodes
``double_star``        two joined hubs, each with half of the leaves
``path``               ``n`` nodes in a line (smallest eigenvalues ~ (pi j / n)^2 / 2, clustered)
``cycle``              a ring (double eigenvalues)
``grid``               a ``side x side`` 2-D grid, ``side = round(sqrt(n))`` (double eigenvalues)
``complete_bipartite`` K(4, n - 4): four hubs shared by all other nodes
``barabasi_albert``    preferential attachment, 2 edges per new node (power-law degrees, hubs)
``tiny_components``    triangles, single edges and 4-node paths in turn, ``n // 3`` pieces or so
``isolated``           a Barabasi-Albert graph on half the nodes, the other half isolated
``loops_multi``        a cycle given with every edge twice (both directions) and a self-loop per node
=====================  =====================================================================================

Example
-------
>>> n, u, v = family_edges("double_star", 6)
>>> n, sorted(zip(u.tolist(), v.tolist()))
(6, [(0, 1), (0, 2), (0, 4), (1, 3), (1, 5)])
"""
from __future__ import annotations

import numpy as np
import torch

from .. import _env  # noqa: F401
import dgl

__all__ = ["FAMILIES", "family_edges", "family_graph", "barabasi_albert_edges"]


def _star(n, rng):
    return n, np.zeros(n - 1, np.int64), np.arange(1, n, dtype=np.int64)


def _star_isolated(n, rng):
    m, u, v = _star(max(n - 100, 2), rng)
    return m + 100, u, v


def _double_star(n, rng):
    leaves = np.arange(2, n, dtype=np.int64)
    return n, np.concatenate([[0], leaves % 2]), np.concatenate([[1], leaves])


def _path(n, rng):
    return n, np.arange(n - 1, dtype=np.int64), np.arange(1, n, dtype=np.int64)


def _cycle(n, rng):
    return n, np.arange(n, dtype=np.int64), (np.arange(n, dtype=np.int64) + 1) % n


def _grid(n, rng):
    side = max(2, int(round(np.sqrt(n))))
    ids = np.arange(side * side, dtype=np.int64).reshape(side, side)
    u = np.concatenate([ids[:, :-1].ravel(), ids[:-1, :].ravel()])
    v = np.concatenate([ids[:, 1:].ravel(), ids[1:, :].ravel()])
    return side * side, u, v


def _complete_bipartite(n, rng):
    hubs = min(4, n // 2)
    others = np.arange(hubs, n, dtype=np.int64)
    return n, np.repeat(np.arange(hubs, dtype=np.int64), others.size), np.tile(others, hubs)


def barabasi_albert_edges(n: int, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Preferential attachment: node ``t >= m`` joins ``m`` earlier nodes drawn proportionally to their
    degree (uniformly from the list of edge end points so far; repeats merge into one edge later), the
    first new node to nodes ``0 .. m - 1``."""
    ends = np.empty(2 * m * n, dtype=np.int64)  # end points of the edges so far, in pairs
    src = np.repeat(np.arange(m, n, dtype=np.int64), m)
    dst = np.empty_like(src)
    dst[:m] = np.arange(m)
    ends[0:2 * m:2], ends[1:2 * m:2] = src[:m], dst[:m]
    draws = rng.random(src.size)
    filled = 2 * m
    for t in range(1, n - m):  # per node: its m picks come from the list as it was before it joined
        lo = t * m
        picks = ends[(draws[lo:lo + m] * filled).astype(np.int64)]
        dst[lo:lo + m] = picks
        ends[filled:filled + 2 * m:2], ends[filled + 1:filled + 2 * m:2] = src[lo:lo + m], picks
        filled += 2 * m
    return src, dst


def _barabasi_albert(n, rng):
    return (n, *barabasi_albert_edges(n, 2, rng))


def _tiny_components(n, rng):
    pieces = [np.array([[0, 1], [1, 2], [2, 0]]), np.array([[0, 1]]), np.array([[0, 1], [1, 2], [2, 3]])]
    sizes = [3, 2, 4]
    u, v, start, i = [], [], 0, 0
    while start + sizes[i % 3] <= n:
        edges = pieces[i % 3] + start
        u.append(edges[:, 0])
        v.append(edges[:, 1])
        start += sizes[i % 3]
        i += 1
    return n, np.concatenate(u).astype(np.int64), np.concatenate(v).astype(np.int64)


def _isolated(n, rng):
    half = max(n // 2, 3)
    return (n, *barabasi_albert_edges(half, 2, rng))


def _loops_multi(n, rng):
    _, u, v = _cycle(n, rng)
    loops = np.arange(n, dtype=np.int64)
    return n, np.concatenate([u, v, u, loops]), np.concatenate([v, u, v, loops])


FAMILIES = {
    "star": _star, "star+isolated": _star_isolated, "double_star": _double_star, "path": _path,
    "cycle": _cycle, "grid": _grid, "complete_bipartite": _complete_bipartite,
    "barabasi_albert": _barabasi_albert, "tiny_components": _tiny_components, "isolated": _isolated,
    "loops_multi": _loops_multi,
}


def family_edges(name: str, n: int, seed: int = 0) -> tuple[int, np.ndarray, np.ndarray]:
    """``(num_nodes, src, dst)`` of family ``name`` (see the module docstring) at about ``n`` nodes."""
    if name not in FAMILIES:
        raise ValueError(f"unknown graph family {name!r}; choose from {', '.join(FAMILIES)}")
    if n < 6:
        raise ValueError(f"graph families start at 6 nodes, got {n}")
    return FAMILIES[name](int(n), np.random.default_rng(seed))


def family_graph(name: str, n: int, seed: int = 0) -> dgl.DGLGraph:
    """Family ``name`` as a DGLGraph with both directions of every listed edge (self-loops once)."""
    num_nodes, u, v = family_edges(name, n, seed)
    loop = u == v
    src = np.concatenate([u, v[~loop]])
    dst = np.concatenate([v, u[~loop]])
    return dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=num_nodes, idtype=torch.int64)
