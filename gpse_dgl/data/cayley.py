"""Cayley graphs of small non-cyclic groups: vertex-transitive graphs rich in short cycles.

The Cayley graph of a group ``G`` with an inverse-closed connection set ``S`` (identity excluded) joins
``g`` to ``g s`` for every ``s`` in ``S``: it is ``|S|``-regular and vertex-transitive (left
multiplication by any element is an automorphism), so colour refinement (1-WL) sees every node, and every
such graph of the same size and degree, alike. Unlike random regular graphs, whose neighbourhoods look like
trees, Cayley graphs of abelian and dihedral groups are full of short cycles whose counts, return
probabilities and spectra differ from one connection set to the next: exactly what an encoder can only
read from its random input. They are pretraining graphs of that kind (recipe key ``data.cayley_graphs``).

Only non-cyclic groups are used: a Cayley graph of a cyclic group is a circulant graph, the family that
``benchmarks/expressivity.py`` holds out (and CSL's graphs are circulants). A group of prime order is
cyclic, so no graph drawn here has the prime order of CSL's or the held-out circulants' graphs.

* :func:`abelian_group` (``Z_d1 x ... x Z_dk``) and :func:`dihedral_group` (``D_m``, order ``2m``) give a
  group as its multiplication table and inverses;
* :func:`non_cyclic_groups` lists those of a range of orders;
* :func:`cayley_edges` builds the graph of a connection set, :func:`random_cayley_edges` a random
  connected one.

Example
-------
>>> import numpy as np
>>> mul, inv = dihedral_group(4)                   # the symmetries of a square, order 8
>>> n, u, v = cayley_edges(mul, inv, [1, 3, 4])    # a rotation, its inverse and a reflection
>>> n, len(u), np.bincount(np.concatenate([u, v])).tolist() == [3] * 8
(8, 12, True)
"""
from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from .synthetic import is_connected

__all__ = ["abelian_group", "dihedral_group", "non_cyclic_groups", "cayley_edges", "random_cayley_edges"]


def abelian_group(orders: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``Z_d1 x ... x Z_dk`` as ``(mul, inv)``: ``mul[a, b]`` is the index of ``a + b``, ``inv[a]`` of
    ``-a``; element ``0`` is the identity."""
    orders = np.asarray(orders, dtype=np.int64)
    coords = np.array(list(itertools.product(*(range(d) for d in orders))), dtype=np.int64)
    radix = np.concatenate([np.cumprod(orders[::-1])[::-1][1:], [1]])

    def index(c):
        return (c % orders) @ radix

    return index(coords[:, None, :] + coords[None, :, :]), index(-coords)


def dihedral_group(m: int) -> tuple[np.ndarray, np.ndarray]:
    """The dihedral group ``D_m`` of order ``2m`` as ``(mul, inv)``: element ``k + m e`` is ``r^k s^e``
    (rotation ``r``, reflection ``s``, ``s r s = r^-1``); element ``0`` is the identity."""
    if m < 3:
        raise ValueError(f"dihedral_group: need m >= 3 (D_{m} is abelian), got {m}")
    k, e = np.arange(2 * m) % m, np.arange(2 * m) // m
    # (k1, e1)(k2, e2) = (k1 + (-1)^e1 k2, e1 xor e2)
    rotation = (k[:, None] + np.where(e[:, None] == 1, -1, 1) * k[None, :]) % m
    mul = rotation + m * (e[:, None] ^ e[None, :])
    inv = np.where(e == 1, np.arange(2 * m), (-k) % m)
    return mul, inv


def _invariant_factors(order: int, smallest: int = 2) -> list[list[int]]:
    """Every ``[d1, d2, ...]`` with ``d1 | d2 | ...``, ``d1 >= smallest`` and product ``order``."""
    if order == 1:
        return [[]]
    out = []
    for first in range(smallest, order + 1):
        if order % first == 0:
            out += [[first, *rest] for rest in _invariant_factors(order // first, first)
                    if not rest or rest[0] % first == 0]
    return out


def non_cyclic_groups(low: int, high: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``(name, mul, inv)`` of every non-cyclic abelian group and every dihedral group of order ``low`` to
    ``high`` (inclusive), one per isomorphism class."""
    groups = []
    for order in range(max(low, 4), high + 1):
        for factors in _invariant_factors(order):
            if len(factors) >= 2:  # one invariant factor = the cyclic group
                groups.append(("Z" + "xZ".join(map(str, factors)), *abelian_group(factors)))
        if order % 2 == 0 and order >= 6:
            groups.append((f"D{order // 2}", *dihedral_group(order // 2)))
    return groups


def cayley_edges(mul: np.ndarray, inv: np.ndarray, connection: Sequence[int]
                 ) -> tuple[int, np.ndarray, np.ndarray]:
    """The Cayley graph of the group ``(mul, inv)`` with connection set ``connection`` (element indices) as
    ``(num_nodes, u, v)``, each edge once with ``u < v``. The set must leave out the identity and hold the
    inverse of each of its elements."""
    connection = np.unique(np.asarray(connection, dtype=np.int64))
    if (connection == 0).any() or not np.isin(inv[connection], connection).all():
        raise ValueError("cayley_edges: the connection set must be inverse-closed and leave out the identity")
    n = len(inv)
    u = np.repeat(np.arange(n), len(connection))
    v = mul[u, np.tile(connection, n)]
    u, v = np.minimum(u, v), np.maximum(u, v)
    pairs = np.unique(np.stack([u, v], 1), axis=0)
    return n, pairs[:, 0], pairs[:, 1]


def random_cayley_edges(mul: np.ndarray, inv: np.ndarray, degree: int, rng: np.random.Generator,
                        max_tries: int = 50) -> tuple[int, np.ndarray, np.ndarray] | None:
    """A random connected ``degree``-regular Cayley graph of the group ``(mul, inv)``, or None.

    The connection set is grown from random elements, each with its inverse (an involution is its own);
    a set that overshoots ``degree`` or does not generate the group (a disconnected graph) is drawn again,
    at most ``max_tries`` times.
    """
    n = len(inv)
    elements = np.arange(1, n)
    for _ in range(max_tries):
        chosen: set[int] = set()
        for g in rng.permutation(elements).tolist():
            pair = {g, int(inv[g])}
            if len(chosen | pair) <= degree:
                chosen |= pair
            if len(chosen) == degree:
                break
        if len(chosen) != degree:
            continue
        edges = cayley_edges(mul, inv, sorted(chosen))
        if is_connected(n, edges[1], edges[2]):
            return edges
    return None

