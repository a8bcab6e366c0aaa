"""Graph generators and comparison helpers shared by the ``test_pse_*`` modules."""
from __future__ import annotations

import numpy as np
import torch

import gpse_dgl  # noqa: F401  (DGLBACKEND)
import dgl

NODE_PSES = ("ElstaticPE", "LapPE", "RWSE", "HKdiagSE")
GRAPH_PSES = ("EigVals", "CycleGE")


def graph(n: int, edges, bidirected: bool = True) -> dgl.DGLGraph:
    """DGLGraph with ``n`` nodes from an iterable of (u, v) pairs (both directions unless told)."""
    edges = np.asarray(list(edges), dtype=np.int64).reshape(-1, 2)
    src, dst = edges[:, 0], edges[:, 1]
    if bidirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    return dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=n, idtype=torch.int64)


def path(n):
    return graph(n, [(i, i + 1) for i in range(n - 1)])


def cycle(n):
    return graph(n, [(i, (i + 1) % n) for i in range(n)])


def star(leaves):
    return graph(leaves + 1, [(0, i) for i in range(1, leaves + 1)])


def complete(n):
    return graph(n, [(i, j) for i in range(n) for j in range(i + 1, n)])


def random_tree(n, rng):
    return graph(n, [(i, int(rng.integers(i))) for i in range(1, n)])


def erdos_renyi(n, p, rng):
    iu, ju = np.triu_indices(n, 1)
    keep = rng.random(iu.shape[0]) < p
    return graph(n, zip(iu[keep], ju[keep]))


def multi_component(rng):
    """Disjoint union of 1-3 random pieces (tree, cycle, ER) plus 0-3 isolated nodes, labels shuffled."""
    pieces, n = [], 0
    for _ in range(int(rng.integers(1, 4))):
        kind, size = int(rng.integers(3)), int(rng.integers(2, 9))
        if kind == 0:
            e = [(i, int(rng.integers(i))) for i in range(1, size)]
        elif kind == 1:
            size = max(size, 3)
            e = [(i, (i + 1) % size) for i in range(size)]
        else:
            iu, ju = np.triu_indices(size, 1)
            keep = rng.random(iu.shape[0]) < 0.5
            e = list(zip(iu[keep], ju[keep]))
        pieces += [(a + n, b + n) for a, b in e]
        n += size
    n += int(rng.integers(0, 4))  # isolated nodes
    perm = rng.permutation(n)
    return graph(n, [(perm[a], perm[b]) for a, b in pieces])


def permute(g, perm):
    """Copy of ``g`` with node ``i`` renamed ``perm[i]``."""
    src, dst = g.edges()
    perm = torch.as_tensor(perm)
    return dgl.graph((perm[src], perm[dst]), num_nodes=g.num_nodes(), idtype=torch.int64)


def random_graphs(seed=0, trees=100, er=100, multi=100):
    rng = np.random.default_rng(seed)
    out = [random_tree(int(rng.integers(1, 30)), rng) for _ in range(trees)]
    out += [erdos_renyi(int(rng.integers(2, 16)), float(rng.uniform(0.1, 0.45)), rng) for _ in range(er)]
    out += [multi_component(rng) for _ in range(multi)]
    return out


def sym_spectrum(g) -> np.ndarray:
    """Ascending eigenvalues of I - D^-1/2 A D^-1/2 (numpy, float64), isolated nodes with L_ii = 1."""
    from gpse_dgl.pse.reference import dense_adjacency

    adj = dense_adjacency(g)
    deg = adj.sum(1)
    s = np.zeros_like(deg)
    s[deg > 0] = deg[deg > 0] ** -0.5
    return np.linalg.eigvalsh(np.eye(len(deg)) - s[:, None] * adj * s[None, :])


def lap_pe_clusters(evals: np.ndarray, k: int = 4, tol: float = 1e-6):
    """Groups of LapPE column indices whose eigenvalues coincide, and whether each group is complete.

    A group is *complete* when its whole eigenspace lies inside the k kept columns: then the sum of squared
    entries over the group's columns (the diagonal of the eigenspace projector) is basis independent and
    must match between two correct implementations, even though the individual columns need not (any
    rotation inside a repeated eigenvalue's eigenspace is an equally valid set of eigenvectors). A group
    cut by the k-th column is incomplete and cannot be compared.
    """
    n = evals.shape[0]
    offset = int((np.abs(evals) < tol).sum())
    kept = list(range(offset, min(offset + k, n)))
    groups, current = [], []
    for idx in kept:
        if current and abs(evals[idx] - evals[current[-1]]) > tol:
            groups.append(current)
            current = []
        current.append(idx)
    if current:
        groups.append(current)
    out = []
    for grp in groups:
        nxt = grp[-1] + 1
        complete_ = nxt >= n or abs(evals[nxt] - evals[grp[-1]]) > tol
        out.append(([i - offset for i in grp], complete_))
    return out


def assert_lap_pe_equivalent(ours: np.ndarray, ref: np.ndarray, evals: np.ndarray, atol: float = 1e-5):
    """Compare LapPE up to the rotation freedom of repeated eigenvalues (see :func:`lap_pe_clusters`).

    Returns the number of columns compared one to one (simple eigenvalues).
    """
    ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert ours.shape == ref.shape
    used = set()
    simple = 0
    for cols, complete_ in lap_pe_clusters(evals, k=ours.shape[1]):
        used.update(cols)
        if not complete_:
            continue
        if len(cols) == 1:
            simple += 1
            np.testing.assert_allclose(ours[:, cols[0]], ref[:, cols[0]], atol=atol)
        else:
            np.testing.assert_allclose((ours[:, cols] ** 2).sum(1), (ref[:, cols] ** 2).sum(1), atol=atol)
    padding = [c for c in range(ours.shape[1]) if c not in used]
    np.testing.assert_array_equal(ours[:, padding], 0.0)
    np.testing.assert_array_equal(ref[:, padding], 0.0)
    return simple
