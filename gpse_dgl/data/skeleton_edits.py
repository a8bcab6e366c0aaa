"""Small ring edits of molecular skeletons: new pretraining graphs with the rare ring sizes.

Bare molecular skeletons are dominated by 5- and 6-rings; 3-, 4-, 7- and 8-rings occur in about 1 % of
them each (35, 15, 28 and 29 of the 2,763 training skeletons of the embedded set). GPSE's cycle targets
(CycleGE, the odd RWSE columns) are then learnt from a few dozen examples. :func:`edit_skeleton`
makes a new skeleton from an existing one with one edit that changes or adds a ring:

``grow``     insert a new atom into a ring bond (every ring through that bond grows by one);
``shrink``   contract a ring bond (every ring through it shrinks by one; a 3-ring becomes a bond);
``attach``   bond a new ring of 3-8 atoms to an atom through a new atom (a cyclopropyl-like substituent);
``fuse``     close a new ring of 3-8 atoms over an existing bond (a fused ring sharing that bond).

Rings are bonds that are not bridges. Every atom keeps at most ``max_degree`` (4) neighbours, and the
result is connected and simple. Pure numpy / Python on small edge lists, seeded by the caller's
``numpy.random.Generator``.

Example
-------
>>> import numpy as np
>>> from gpse_dgl.data.skeleton_edits import edit_skeleton
>>> u, v = np.array([0, 1, 2, 3, 4, 0]), np.array([1, 2, 3, 4, 5, 5])   # a 6-ring
>>> n, u2, v2 = edit_skeleton(6, u, v, np.random.default_rng(0), kind="grow")
>>> n, len(u2)                                                           # a 7-ring
(7, 7)
"""
from __future__ import annotations

import numpy as np

from ..utils.graph import simple_edges

__all__ = ["EDIT_KINDS", "RING_SIZES", "MAX_NEW_ATOMS", "ring_bond_mask", "edit_skeleton"]

EDIT_KINDS = ("grow", "shrink", "attach", "fuse")
#: sizes of the rings that ``attach`` and ``fuse`` add
RING_SIZES = (3, 4, 5, 6, 7, 8)
#: the most atoms one edit adds (``attach`` of the largest ring)
MAX_NEW_ATOMS = max(RING_SIZES)


def _adjacency(num_nodes: int, u: np.ndarray, v: np.ndarray) -> list[list[int]]:
    adj = [[] for _ in range(num_nodes)]
    for a, b in zip(u.tolist(), v.tolist()):
        adj[a].append(b)
        adj[b].append(a)
    return adj


def ring_bond_mask(num_nodes: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Boolean mask over the simple edges ``(u[i], v[i])``: True where the edge lies on a cycle (is
    not a bridge). Iterative Tarjan low-link search, so deep chains do not hit Python's recursion limit."""
    adj = _adjacency(num_nodes, u, v)
    order = [-1] * num_nodes
    low = [0] * num_nodes
    bridges = set()
    counter = 0
    for root in range(num_nodes):
        if order[root] >= 0:
            continue
        order[root] = low[root] = counter
        counter += 1
        stack = [(root, -1, iter(adj[root]))]
        while stack:
            node, parent, neighbours = stack[-1]
            advanced = False
            for nxt in neighbours:
                if nxt == parent:
                    continue
                if order[nxt] < 0:
                    order[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append((nxt, node, iter(adj[nxt])))
                    advanced = True
                    break
                low[node] = min(low[node], order[nxt])
            if advanced:
                continue
            stack.pop()
            if parent >= 0:
                low[parent] = min(low[parent], low[node])
                if low[node] > order[parent]:
                    bridges.add((min(node, parent), max(node, parent)))
    return np.array([(min(a, b), max(a, b)) not in bridges for a, b in zip(u.tolist(), v.tolist())],
                    dtype=bool)


def _pick(rng: np.random.Generator, candidates) -> int | None:
    candidates = list(candidates)
    return candidates[int(rng.integers(len(candidates)))] if candidates else None


def edit_skeleton(num_nodes: int, u: np.ndarray, v: np.ndarray, rng: np.random.Generator,
                  kind: str | None = None, max_degree: int = 4):
    """One ring edit of the simple undirected graph ``(num_nodes, u, v)``.

    Parameters
    ----------
    num_nodes : int
        Number of atoms.
    u, v : numpy.ndarray
        Simple undirected edges (each bond once).
    rng : numpy.random.Generator
        Source of every choice.
    kind : str, optional
        One of :data:`EDIT_KINDS`; default a uniform draw.
    max_degree : int
        Largest number of neighbours an atom may end up with.

    Returns
    -------
    tuple or None
        ``(num_nodes, u, v)`` of the edited graph (edges once each, ``u < v``), or None when the graph
        offers no place for that edit (e.g. ``grow`` on a tree).
    """
    kind = kind or EDIT_KINDS[int(rng.integers(len(EDIT_KINDS)))]
    if kind not in EDIT_KINDS:
        raise ValueError(f"unknown skeleton edit {kind!r}; choose one of {EDIT_KINDS}")
    u, v = np.asarray(u, dtype=np.int64), np.asarray(v, dtype=np.int64)
    degree = np.bincount(np.concatenate([u, v]), minlength=num_nodes)
    edges = list(zip(u.tolist(), v.tolist()))
    if kind in ("grow", "shrink"):
        on_ring = np.flatnonzero(ring_bond_mask(num_nodes, u, v))
        if kind == "grow":
            i = _pick(rng, on_ring)
            if i is None:
                return None
            a, b = edges.pop(i)
            edges += [(a, num_nodes), (b, num_nodes)]
            return _finish(num_nodes + 1, edges)
        # contracting (a, b) gives a deg(a) + deg(b) - 2 - (common neighbours) neighbours
        adj = _adjacency(num_nodes, u, v)
        ok = [i for i in on_ring.tolist()
              if len(set(adj[edges[i][0]]) | set(adj[edges[i][1]])) - 2 <= max_degree]
        i = _pick(rng, ok)
        if i is None:
            return None
        a, b = edges[i]
        merged = [(a if x == b else x, a if y == b else y) for x, y in edges]
        # b's id is taken by the last atom so ids stay 0..n-2
        last = num_nodes - 1
        merged = [(b if x == last else x, b if y == last else y) for x, y in merged] if b != last else merged
        return _finish(num_nodes - 1, merged)
    size = RING_SIZES[int(rng.integers(len(RING_SIZES)))]
    if kind == "attach":
        a = _pick(rng, np.flatnonzero(degree < max_degree).tolist())
        if a is None:
            return None
        ring = list(range(num_nodes, num_nodes + size))
        edges.append((a, ring[0]))
        edges += [(ring[k], ring[(k + 1) % size]) for k in range(size)]
        return _finish(num_nodes + size, edges)
    # fuse: a path of size - 2 new atoms from a to b closes a new ring of `size` over the bond (a, b)
    i = _pick(rng, [k for k, (a, b) in enumerate(edges) if degree[a] < max_degree and degree[b] < max_degree])
    if i is None:
        return None
    a, b = edges[i]
    path = [a] + list(range(num_nodes, num_nodes + size - 2)) + [b]
    edges += list(zip(path[:-1], path[1:]))
    return _finish(num_nodes + size - 2, edges)


def _finish(num_nodes: int, edges: list) -> tuple[int, np.ndarray, np.ndarray]:
    pairs = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    u, v = simple_edges(pairs[:, 0], pairs[:, 1], num_nodes)
    return num_nodes, u, v
