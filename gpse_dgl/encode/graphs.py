"""Graph preparation for encoding: the simple undirected view GPSE expects, and per-draw seeds.

GPSE was pretrained on simple undirected graphs (``docs/PSE.md``, "Pretraining targets"). A directed
graph such as ogbn-arxiv's citation graph therefore goes through :func:`as_simple_undirected` before it
is encoded: edges are symmetrised, self-loops and duplicate edges dropped, exactly as every PSE sees it
(:func:`gpse_dgl.utils.graph.simple_edges`). Graphs that already are simple and symmetric, such as
every molecule skeleton, are returned unchanged (same object, same edge order).

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

import numpy as np
import torch

from .. import _env  # noqa: F401
import dgl

from ..utils.graph import simple_edges

__all__ = ["is_simple_undirected", "as_simple_undirected", "sample_seed"]

_KEY_MASK = (1 << 63) - 1


def _edges_numpy(g: dgl.DGLGraph) -> tuple[np.ndarray, np.ndarray]:
    src, dst = g.edges()
    return src.cpu().numpy().astype(np.int64, copy=False), dst.cpu().numpy().astype(np.int64, copy=False)


def is_simple_undirected(g: dgl.DGLGraph) -> bool:
    """Whether ``g`` has no self-loop, no duplicate edge, and ``v -> u`` for every ``u -> v``.

    Parameters
    ----------
    g : DGLGraph
        A graph or a batched graph (batched graphs never have edges between members, so the test is
        the same).

    Examples
    --------
    >>> import dgl
    >>> is_simple_undirected(dgl.graph(([0, 1], [1, 0])))
    True
    >>> is_simple_undirected(dgl.graph(([0], [1])))
    False
    """
    src, dst = _edges_numpy(g)
    if src.size == 0:
        return True
    if np.any(src == dst):
        return False
    n = np.int64(max(g.num_nodes(), 1))
    fwd = np.sort(src * n + dst)
    if np.any(fwd[1:] == fwd[:-1]):
        return False
    return bool(np.array_equal(fwd, np.sort(dst * n + src)))


def as_simple_undirected(g: dgl.DGLGraph) -> dgl.DGLGraph:
    """The simple undirected version of ``g`` (both directions of every edge), keeping node data.

    ``g`` itself is returned when it already is simple and undirected. Batched graphs stay batched
    with the same members (each member is made simple and undirected on its own). Edge data is dropped
    when the edge set has to change, because edges no longer correspond one to one.

    Parameters
    ----------
    g : DGLGraph
        Graph or batched graph, on the CPU.

    Returns
    -------
    DGLGraph

    Examples
    --------
    >>> import dgl
    >>> h = as_simple_undirected(dgl.graph(([0, 0, 2], [1, 1, 2]), num_nodes=3))
    >>> sorted(zip(*[t.tolist() for t in h.edges()]))
    [(0, 1), (1, 0)]
    """
    if is_simple_undirected(g):
        return g
    src, dst = _edges_numpy(g)
    u, v = simple_edges(src, dst, g.num_nodes())
    # Interleave (u, v), (v, u) so each member's edges stay contiguous after sorting by member below.
    new_src = np.stack([u, v], axis=1).reshape(-1)
    new_dst = np.stack([v, u], axis=1).reshape(-1)
    out = dgl.graph((torch.from_numpy(new_src), torch.from_numpy(new_dst)), num_nodes=g.num_nodes(),
                    idtype=g.idtype)
    for key, value in g.ndata.items():
        out.ndata[key] = value
    if g.batch_size > 1:
        counts = g.batch_num_nodes()
        offsets = np.concatenate([[0], np.cumsum(counts.numpy())])
        member = np.searchsorted(offsets, new_src, side="right") - 1
        # simple_edges sorts by u, and members occupy consecutive node ranges: edges are grouped by member.
        out.set_batch_num_nodes(counts)
        out.set_batch_num_edges(torch.from_numpy(np.bincount(member, minlength=g.batch_size)).to(counts.dtype))
    return out


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
