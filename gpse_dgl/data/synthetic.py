"""Synthetic graphs, built from their definitions and fully seeded (no files needed).

* :func:`csl_dataset`: the 150 Circular Skip Link graphs (Murphy et al. 2019; benchmarking-gnns' CSL).
* :func:`wl_pairs_dataset`: 1-WL-indistinguishable, non-isomorphic graph pairs (GPSE paper appendix
  "Visualization of GPSE encodings on 1-WL indistinguishable graph pairs").
* generators for scaling and large-graph demos: :func:`erdos_renyi_graphs`, :func:`random_regular_graphs`,
  :func:`knn_graphs`, :func:`chain_graphs`, :func:`cycle_graphs`, :func:`random_graph` (arXiv-sized graphs
  in about a second) and :func:`synthetic_node_dataset`.

All graphs are DGLGraphs with int64 ids and, unless said otherwise, both directions of every undirected
edge (``u -> v`` and ``v -> u``), no self-loops and no multi-edges.
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl

from ..utils.graph import simple_edges, undirected_graph
from .dataset import GraphDataset, random_split
from .splits import stratified_kfold

__all__ = [
    "CSL_SKIPS", "CSL_NUM_NODES", "csl_graph", "csl_dataset", "WL_PAIRS", "wl_pair_graphs",
    "wl_pairs_dataset", "undirected_graph", "erdos_renyi_graphs", "random_regular_graphs", "connected_regular_edges",
    "is_connected", "knn_graphs",
    "chain_graphs", "cycle_graphs", "random_graph", "synthetic_node_dataset", "ARXIV_SIZE", "PROTEINS_SIZE",
]

CSL_NUM_NODES = 41
CSL_SKIPS = (2, 3, 4, 5, 6, 9, 11, 12, 13, 16)  # skip lengths of benchmarking-gnns' 10 CSL classes

#: (num_nodes, num_edges as stored) of ogbn-arxiv (directed) and ogbn-proteins (undirected edge list).
ARXIV_SIZE = (169_343, 1_166_243)
PROTEINS_SIZE = (132_534, 39_561_252)


def _permuted(num_nodes: int, u: np.ndarray, v: np.ndarray, rng: np.random.Generator):
    perm = rng.permutation(num_nodes)
    return perm[u], perm[v]


# ---------------------------------------------------------------------------------------------------------
# CSL

def csl_graph(skip: int, num_nodes: int = CSL_NUM_NODES):
    """Circular skip link graph: the cycle ``i - i+1`` plus skip links ``i - i+skip`` (mod ``num_nodes``).

    For ``1 < skip < num_nodes - 1`` and ``2 * skip != num_nodes`` it is 4-regular with ``2 * num_nodes``
    undirected edges.
    """
    i = np.arange(num_nodes)
    u = np.concatenate([i, i])
    v = np.concatenate([(i + 1) % num_nodes, (i + skip) % num_nodes])
    return undirected_graph(num_nodes, u, v)


def csl_dataset(seed: int = 0, graphs_per_class: int = 15, num_nodes: int = CSL_NUM_NODES,
                skips=CSL_SKIPS, k: int = 5) -> GraphDataset:
    """The CSL benchmark: 10 isomorphism classes (skip lengths ``skips``) x 15 graphs of 41 nodes.

    As in benchmarking-gnns, the graphs of a class are random node permutations of the class's skip-link
    graph (here drawn from ``numpy.random.default_rng(seed)``), so a model cannot use node order. All
    graphs are 4-regular, hence 1-WL cannot tell the classes apart. Nodes have no features.

    Parameters
    ----------
    seed : int
        Seed of the node permutations and of the CV folds.
    graphs_per_class : int
        Graphs per class (15 in the benchmark).
    num_nodes : int
        Cycle length (41 in the benchmark).
    skips : sequence of int
        Skip length of each class; label ``c`` is ``skips[c]``.
    k : int
        Number of stratified CV folds in ``dataset.folds``.

    Returns
    -------
    GraphDataset
        150 graphs, labels ``(150,)`` int64 in 0..9, no fixed splits, ``folds`` = stratified 5-fold CV.
    """
    rng = np.random.default_rng(seed)
    graphs, labels = [], []
    for c, skip in enumerate(skips):
        base = csl_graph(skip, num_nodes)
        u, v = (x.numpy() for x in base.edges())
        for _ in range(graphs_per_class):
            pu, pv = _permuted(num_nodes, u, v, rng)
            graphs.append(undirected_graph(num_nodes, pu, pv))
            labels.append(c)
    labels = torch.tensor(labels, dtype=torch.long)
    return GraphDataset(
        graphs=graphs, labels=labels, splits={}, name="csl", task="graph", task_type="multiclass",
        metric="accuracy", num_tasks=1, num_classes=len(skips), folds=stratified_kfold(labels, k=k, seed=seed),
        info={"skip_lengths": list(skips), "seed": seed, "evaluation": f"stratified {k}-fold CV"})


# ---------------------------------------------------------------------------------------------------------
# 1-WL indistinguishable pairs

def _ring(nodes):
    return [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]


def _wl_pair_edges():
    # (a) two 4-cycles sharing the edge 0-1  vs  two triangles joined by the edge 0-3 (6 nodes, 7 edges,
    #     degrees 3,3,2,2,2,2 in both: every degree-3 node sees one degree-3 and two degree-2 nodes).
    squares = _ring([0, 1, 2, 3]) + [(0, 4), (4, 5), (5, 1)]
    triangles = _ring([0, 1, 2]) + _ring([3, 4, 5]) + [(0, 3)]
    # (b) the paper's HEXAGON (two hexagons sharing the edge 0-1, decalin) vs PENTAGON (two pentagons
    #     joined by the edge 0-5, bicyclopentyl); 10 nodes, 11 edges, same degree structure as (a).
    hexagon = _ring([0, 1, 2, 3, 4, 5]) + [(0, 6), (6, 7), (7, 8), (8, 9), (9, 1)]
    pentagon = _ring([0, 1, 2, 3, 4]) + _ring([5, 6, 7, 8, 9]) + [(0, 5)]
    return {"squares": (6, squares), "triangles": (6, triangles), "hexagon": (10, hexagon),
            "pentagon": (10, pentagon)}


#: Pairs of (member 0, member 1) names of :func:`wl_pair_graphs`.
WL_PAIRS = (("squares", "triangles"), ("hexagon", "pentagon"))


def wl_pair_graphs() -> dict:
    """The four graphs of :data:`WL_PAIRS` by name (bidirected, no features)."""
    out = {}
    for name, (n, edges) in _wl_pair_edges().items():
        e = np.asarray(edges, dtype=np.int64)
        out[name] = undirected_graph(n, e[:, 0], e[:, 1])
    return out


def wl_pairs_dataset(copies: int = 20) -> GraphDataset:
    """Copies of two 1-WL-indistinguishable, non-isomorphic graph pairs.

    Pair 0: two 4-cycles sharing an edge (``squares``) vs two triangles joined by an edge (``triangles``),
    6 nodes each. Pair 1: the paper's HEXAGON (two hexagons sharing an edge, 10 nodes) vs PENTAGON (two
    pentagons joined by an edge, 10 nodes); the paper embeds 20 copies of each with GPSE.

    Parameters
    ----------
    copies : int
        Copies of each of the four graphs.

    Returns
    -------
    GraphDataset
        ``4 * copies`` graphs ordered pair by pair, member by member. ``labels = 2 * pair + member``
        (0 squares, 1 triangles, 2 hexagon, 3 pentagon); ``info["pair"]`` / ``info["member"]`` give the two
        parts and ``info["class_names"]`` the names.
    """
    graphs_by_name = wl_pair_graphs()
    graphs, pair, member, names = [], [], [], []
    for p, members in enumerate(WL_PAIRS):
        for m, name in enumerate(members):
            names.append(name)
            for _ in range(copies):
                graphs.append(graphs_by_name[name].clone())
                pair.append(p)
                member.append(m)
    pair_t, member_t = torch.tensor(pair, dtype=torch.long), torch.tensor(member, dtype=torch.long)
    return GraphDataset(
        graphs=graphs, labels=2 * pair_t + member_t, splits={}, name="wl-pairs", task="graph",
        task_type="multiclass", metric="accuracy", num_tasks=1, num_classes=4,
        info={"pair": pair_t, "member": member_t, "class_names": names})


# ---------------------------------------------------------------------------------------------------------
# Random and regular generators

def _er_edges(num_nodes: int, p: float, rng: np.random.Generator):
    """G(n, p) edge list: dense upper-triangle draw for small n, sparse count-then-sample for large n."""
    num_pairs = num_nodes * (num_nodes - 1) // 2
    if num_pairs <= 4_000_000:
        iu, ju = np.triu_indices(num_nodes, k=1)
        keep = rng.random(num_pairs) < p
        return iu[keep], ju[keep]
    m = rng.binomial(num_pairs, p)
    return _sample_distinct_pairs(num_nodes, m, rng)


def _sample_distinct_pairs(num_nodes: int, num_edges: int, rng: np.random.Generator):
    """Exactly ``num_edges`` distinct unordered pairs ``u < v`` drawn uniformly (vectorised rejection)."""
    max_edges = num_nodes * (num_nodes - 1) // 2
    if num_edges > max_edges:
        raise ValueError(f"{num_edges} edges do not fit a simple graph on {num_nodes} nodes")
    keys = np.empty(0, dtype=np.int64)
    n = np.int64(num_nodes)
    while len(keys) < num_edges:
        need = num_edges - len(keys)
        draw = int(need * 1.1) + 16
        a = rng.integers(0, n, draw, dtype=np.int64)
        b = rng.integers(0, n, draw, dtype=np.int64)
        ok = a != b
        new = np.minimum(a[ok], b[ok]) * n + np.maximum(a[ok], b[ok])
        keys = np.unique(np.concatenate([keys, new]))
    # unique() sorted the keys: drop a random surplus so the kept set stays uniform.
    if len(keys) > num_edges:
        keys = np.sort(rng.choice(keys, num_edges, replace=False))
    return keys // n, keys % n


def erdos_renyi_graphs(num_graphs: int, num_nodes: int, p: float | None = None,
                       avg_degree: float | None = None, seed: int = 0) -> list:
    """``num_graphs`` G(n, p) graphs (the paper's graph-size scaling experiment uses 1000 of them).

    Parameters
    ----------
    num_graphs, num_nodes : int
        How many graphs, and nodes per graph.
    p : float, optional
        Edge probability.
    avg_degree : float, optional
        Alternative to ``p``: ``p = avg_degree / (num_nodes - 1)``.
    seed : int
        Seed of ``numpy.random.default_rng``.
    """
    if (p is None) == (avg_degree is None):
        raise ValueError("give exactly one of p and avg_degree")
    if p is None:
        p = min(1.0, avg_degree / max(num_nodes - 1, 1))
    rng = np.random.default_rng(seed)
    return [undirected_graph(num_nodes, *_er_edges(num_nodes, p, rng)) for _ in range(num_graphs)]


def random_regular_graphs(num_graphs: int, num_nodes: int, degree: int, seed: int = 0,
                          max_tries: int = 1000) -> list:
    """Uniform random ``degree``-regular simple graphs (configuration model with rejection).

    Meant for small degrees (acceptance probability is about ``exp((1 - degree**2) / 4)``).
    """
    if (num_nodes * degree) % 2 or degree >= num_nodes:
        raise ValueError(f"no {degree}-regular simple graph on {num_nodes} nodes")
    rng = np.random.default_rng(seed)
    stubs = np.repeat(np.arange(num_nodes), degree)
    graphs = []
    for _ in range(num_graphs):
        for _ in range(max_tries):
            pairs = rng.permutation(stubs).reshape(-1, 2)
            u, v = pairs[:, 0], pairs[:, 1]
            if np.all(u != v) and len(simple_edges(u, v, num_nodes)[0]) == len(u):
                graphs.append(undirected_graph(num_nodes, u, v))
                break
        else:
            raise RuntimeError(f"no simple {degree}-regular graph after {max_tries} tries; use a smaller degree")
    return graphs


def connected_regular_edges(num_nodes: int, degree: int, rng: np.random.Generator,
                            max_tries: int = 100) -> tuple[int, np.ndarray, np.ndarray] | None:
    """A random connected ``degree``-regular simple graph as ``(num_nodes, u, v)`` (each edge once), or None.

    Stubs are paired one by one, each with a random stub it can still join without a self-loop or a
    repeated edge; a dead end or a disconnected result starts over (at most ``max_tries`` times). Unlike
    :func:`random_regular_graphs` this stays fast for degrees above 4, at the price of exact uniformity.

    >>> n, u, v = connected_regular_edges(10, 3, np.random.default_rng(0))
    >>> n, len(u), np.bincount(np.concatenate([u, v])).tolist() == [3] * 10
    (10, 15, True)
    """
    if (num_nodes * degree) % 2 or not 0 < degree < num_nodes:
        raise ValueError(f"no {degree}-regular simple graph on {num_nodes} nodes")
    for _ in range(max_tries):
        edges = _pair_stubs(num_nodes, degree, rng)
        if edges is not None and is_connected(num_nodes, *edges):
            return num_nodes, *edges
    return None


def _pair_stubs(num_nodes: int, degree: int, rng: np.random.Generator):
    free = np.full(num_nodes, degree)
    joined = np.zeros((num_nodes, num_nodes), dtype=bool)
    u, v = [], []
    for _ in range(num_nodes * degree // 2):
        a = int(rng.choice(num_nodes, p=free / free.sum()))
        allowed = (free > 0) & ~joined[a]
        allowed[a] = False
        if not allowed.any():
            return None
        weights = np.where(allowed, free, 0)
        b = int(rng.choice(num_nodes, p=weights / weights.sum()))
        joined[a, b] = joined[b, a] = True
        free[a] -= 1
        free[b] -= 1
        u.append(min(a, b))
        v.append(max(a, b))
    return np.array(u, dtype=np.int64), np.array(v, dtype=np.int64)


def is_connected(num_nodes: int, u: np.ndarray, v: np.ndarray) -> bool:
    """Whether the undirected graph with edges ``(u, v)`` on ``num_nodes`` nodes is connected."""
    adjacency = coo_matrix((np.ones(len(u)), (u, v)), shape=(num_nodes, num_nodes))
    return connected_components(adjacency, directed=False)[0] == 1


def knn_graphs(num_graphs: int, num_nodes: int, k: int = 8, dim: int = 2, seed: int = 0) -> list:
    """Symmetrised k-nearest-neighbour graphs of uniform random points (superpixel-like geometry).

    ``ndata["pos"]`` holds the float32 points.
    """
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(num_graphs):
        pos = rng.random((num_nodes, dim))
        d2 = ((pos[:, None, :] - pos[None, :, :]) ** 2).sum(-1)
        np.fill_diagonal(d2, np.inf)
        kk = min(k, num_nodes - 1)
        nbr = np.argpartition(d2, kk - 1, axis=1)[:, :kk] if kk > 0 else np.zeros((num_nodes, 0), np.int64)
        u = np.repeat(np.arange(num_nodes), kk)
        graphs.append(undirected_graph(num_nodes, u, nbr.reshape(-1),
                                       {"pos": torch.from_numpy(pos.astype(np.float32))}))
    return graphs


def chain_graphs(lengths) -> list:
    """Path graphs with the given numbers of nodes."""
    return [undirected_graph(n, np.arange(n - 1), np.arange(1, n)) for n in lengths]


def cycle_graphs(lengths) -> list:
    """Cycle graphs with the given numbers of nodes (>= 3)."""
    return [undirected_graph(n, np.arange(n), (np.arange(n) + 1) % n) for n in lengths]


def random_graph(num_nodes: int, num_edges: int, seed: int = 0, directed: bool = False):
    """A uniform random simple graph with exactly ``num_edges`` distinct undirected edges (vectorised).

    Builds an arXiv-sized graph (``random_graph(*ARXIV_SIZE)``) in about a second.

    Parameters
    ----------
    num_nodes, num_edges : int
        Size; ``num_edges`` counts undirected edges.
    seed : int
        Seed of ``numpy.random.default_rng``.
    directed : bool
        False: both directions stored (``2 * num_edges`` DGL edges). True: each edge stored once with a
        random orientation, like ogbn-arxiv's citation edges (PSE/GPSE code symmetrises).
    """
    rng = np.random.default_rng(seed)
    u, v = _sample_distinct_pairs(num_nodes, num_edges, rng)
    if directed:
        flip = rng.random(len(u)) < 0.5
        u, v = np.where(flip, v, u), np.where(flip, u, v)
        return dgl.graph((torch.from_numpy(u), torch.from_numpy(v)), num_nodes=num_nodes)
    return dgl.graph((torch.from_numpy(np.concatenate([u, v])), torch.from_numpy(np.concatenate([v, u]))),
                     num_nodes=num_nodes)


def synthetic_node_dataset(name: str, num_nodes: int, num_edges: int, *, directed: bool, num_feat: int,
                           num_classes: int, num_tasks: int = 1, split_sizes=(0.54, 0.18, 0.28),
                           seed: int = 0) -> GraphDataset:
    """A random node-classification dataset of a given size, for offline scaling demos (labels are noise).

    Node features are standard normal float32 ``(N, num_feat)``; with ``num_tasks == 1`` labels are
    ``(N,)`` int64 in ``range(num_classes)`` (metric accuracy), otherwise ``(N, num_tasks)`` float32 0/1
    (binary, metric rocauc). Splits are a seeded random partition with the given fractions.
    """
    g = random_graph(num_nodes, num_edges, seed=seed, directed=directed)
    gen = torch.Generator().manual_seed(seed)
    if num_feat:
        g.ndata["feat"] = torch.randn(num_nodes, num_feat, generator=gen)
    if num_tasks == 1:
        labels = torch.randint(0, num_classes, (num_nodes,), generator=gen)
        task_type, metric = "multiclass", "accuracy"
    else:
        labels = torch.randint(0, 2, (num_nodes, num_tasks), generator=gen).float()
        task_type, metric = "binary", "rocauc"
    return GraphDataset(
        graphs=[g], labels=labels, splits=random_split(num_nodes, split_sizes, seed=seed), name=name,
        task="node", task_type=task_type, metric=metric, num_tasks=num_tasks,
        num_classes=num_classes if task_type == "multiclass" else 2,
        node_feat_key="feat" if num_feat else None,
        info={"directed": directed, "synthetic": True, "seed": seed, "node_feat_kind": "float" if num_feat else None})
