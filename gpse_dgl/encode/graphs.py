"""Graph preparation for encoding: the simple undirected view GPSE expects, and per-draw seeds.

GPSE was pretrained on simple undirected graphs (``docs/PSE.md``, "Pretraining targets"). A directed
graph such as ogbn-arxiv's citation graph therefore goes through :func:`as_simple_undirected` (from
:mod:`gpse_dgl.utils.graph`, re-exported here) before it is encoded: edges are symmetrised, self-loops
and duplicate edges dropped, exactly as every PSE sees it. Graphs that already are simple and symmetric,
such as every molecule skeleton, are returned unchanged (same object, same edge order).

Random input features are drawn per graph from a generator seeded by ``(seed, structure key)``
(:func:`gpse_dgl.nn.random_features.random_node_features`); :func:`sample_seed` gives the seeds of
further draws when several are averaged.

Example
-------
>>> import dgl
>>> from gpse_dgl.encode.graphs import as_simple_undirected
>>> g = dgl.graph(([0, 1, 1], [1, 2, 2]))        # directed, with a duplicate edge
>>> as_simple_undirected(g).num_edges()
4
"""
from __future__ import annotations

import hashlib

from ..utils.graph import as_simple_undirected, is_simple_undirected

__all__ = ["is_simple_undirected", "as_simple_undirected", "sample_seed"]

_KEY_MASK = (1 << 63) - 1


def sample_seed(seed: int, sample: int) -> int:
    """Seed of the ``sample``-th draw of random features: ``seed`` itself for draw 0, a hash otherwise.

    Draw 0 keeps the caller's seed so ``samples=1`` equals a plain call with that seed.

    Examples
    --------
    >>> sample_seed(7, 0)
    7
    >>> sample_seed(7, 1) != sample_seed(7, 2)
    True
    """
    if sample == 0:
        return int(seed)
    digest = hashlib.blake2b(f"gpse-sample:{int(seed)}:{int(sample)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _KEY_MASK
