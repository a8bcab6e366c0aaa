"""Graph families that colour refinement (1-WL) cannot tell apart, built from their definitions (no files).

Every family is a set of non-isomorphic graphs with the same size and degree (inside a family 1-WL sees
one graph), so a structural encoding separates its classes only through what 1-WL misses:

* strongly regular graphs (srg(n, k, lambda, mu): every pair of adjacent nodes has lambda common
  neighbours, every non-adjacent pair mu; even 2-WL cannot split graphs with the same parameters):
  :func:`paley_graph`, :func:`rook_graph` (the lattice graph L2(n)), :func:`shrikhande_graph` and
  :func:`latin_square_graph`; :func:`srg_parameters` checks the definition;
* circulant graphs (vertex-transitive): :func:`circulant_graph`; :func:`circulant_jump_sets` picks jump
  sets that give pairwise non-isomorphic circulants of prime order.

:data:`FAMILIES` names the families of ``benchmarks/expressivity.py``; :func:`family_graphs` builds one
(class name -> graph) and :func:`family_dataset` its randomly relabelled copies as a labelled
:class:`~gpse_dgl.data.dataset.GraphDataset` (registry name ``graph-family``).
:data:`EVALUATION_SETS` / :func:`evaluation_graphs` list every graph of an evaluation set (the 1-WL pairs,
CSL and the families) so pretraining can leave them out (recipe key ``data.exclude_graphs``).

Example
-------
>>> from gpse_dgl.data.families import rook_graph, shrikhande_graph, srg_parameters
>>> from gpse_dgl.utils.graph import graph_simple_edges
>>> [srg_parameters(g.num_nodes(), *graph_simple_edges(g)) for g in (rook_graph(4), shrikhande_graph())]
[(16, 6, 2, 2), (16, 6, 2, 2)]
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl

from ..utils.graph import graph_simple_edges, undirected_graph
from .dataset import GraphDataset
from .synthetic import csl_graph, CSL_SKIPS, wl_pair_graphs

__all__ = ["srg_parameters", "paley_graph", "rook_graph", "shrikhande_graph", "latin_square_graph",
           "random_latin_square", "latin_square_classes", "circulant_graph", "circulant_jump_sets",
           "FAMILIES", "family_graphs", "family_dataset", "EVALUATION_SETS", "evaluation_graphs"]


# ---------------------------------------------------------------------------------------------------------
# strongly regular graphs

def srg_parameters(num_nodes: int, u, v) -> tuple[int, int, int, int] | None:
    """``(n, k, lambda, mu)`` when the simple graph ``(u, v)`` is strongly regular, else None.

    Complete and empty graphs count as not strongly regular (mu or lambda would be undefined).
    """
    adj = np.zeros((num_nodes, num_nodes), dtype=np.int64)
    adj[u, v] = adj[v, u] = 1
    degrees = adj.sum(1)
    common = adj @ adj
    off = ~np.eye(num_nodes, dtype=bool)
    edge, non_edge = (adj == 1) & off, (adj == 0) & off
    if not (degrees == degrees[0]).all() or not edge.any() or not non_edge.any():
        return None
    lam, mu = np.unique(common[edge]), np.unique(common[non_edge])
    if len(lam) != 1 or len(mu) != 1:
        return None
    return num_nodes, int(degrees[0]), int(lam[0]), int(mu[0])


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def paley_graph(q: int):
    """Paley graph on GF(q): ``x ~ y`` when ``x - y`` is a non-zero square; srg(q, (q-1)/2, (q-5)/4, (q-1)/4).

    ``q`` is a prime ``= 1 (mod 4)``, or ``p**2`` with ``p`` a prime ``= 3 (mod 4)``: then GF(q) is
    GF(p)[i] with ``i**2 = -1`` (irreducible exactly when ``p = 3 mod 4``), element ``a + b i`` = node
    ``a + p b``.
    """
    if _is_prime(q) and q % 4 == 1:
        squares = {(x * x) % q for x in range(1, q)}
        pairs = [(x, y) for x in range(q) for y in range(x + 1, q) if (y - x) % q in squares]
    else:
        p = int(round(q ** 0.5))
        if p * p != q or not _is_prime(p) or p % 4 != 3:
            raise ValueError(f"paley_graph: q = {q} is neither a prime = 1 mod 4 nor p**2 with p = 3 mod 4")
        elements = [(a, b) for b in range(p) for a in range(p)]  # node a + p b
        squares = {((a * a - b * b) % p, (2 * a * b) % p) for a, b in elements if (a, b) != (0, 0)}
        pairs = [(x, y) for x in range(q) for y in range(x + 1, q)
                 if (((elements[y][0] - elements[x][0]) % p, (elements[y][1] - elements[x][1]) % p) in squares)]
    return _graph(q, pairs)


def rook_graph(n: int):
    """Rook's graph on an ``n x n`` board (lattice graph L2(n), K_n x K_n): srg(n**2, 2(n-1), n-2, 2)."""
    cells = list(itertools.product(range(n), repeat=2))
    pairs = [(i, j) for i, j in itertools.combinations(range(n * n), 2)
             if cells[i][0] == cells[j][0] or cells[i][1] == cells[j][1]]
    return _graph(n * n, pairs)


def shrikhande_graph():
    """Shrikhande graph: Cayley graph of Z4 x Z4 with jumps +-(1, 0), +-(0, 1), +-(1, 1); srg(16, 6, 2, 2),
    the same parameters as the 4 x 4 rook's graph but not isomorphic to it (its neighbourhoods are
    6-cycles, the rook's graph's two triangles)."""
    jumps = {(1, 0), (3, 0), (0, 1), (0, 3), (1, 1), (3, 3)}
    pairs = [(4 * a + b, 4 * c + d) for a, b, c, d in itertools.product(range(4), repeat=4)
             if 4 * a + b < 4 * c + d and ((c - a) % 4, (d - b) % 4) in jumps]
    return _graph(16, pairs)


def latin_square_graph(square) -> dgl.DGLGraph:
    """Latin square graph of an ``n x n`` Latin square: cells adjacent when they share a row, a column or a
    symbol; srg(n**2, 3(n-1), n, 6). Squares of different main classes give non-isomorphic graphs (n >= 5)."""
    square = np.asarray(square)
    n = len(square)
    cells = [(r, c, int(square[r, c])) for r in range(n) for c in range(n)]
    pairs = [(i, j) for i, j in itertools.combinations(range(n * n), 2)
             if any(a == b for a, b in zip(cells[i], cells[j]))]
    return _graph(n * n, pairs)


def random_latin_square(n: int, rng: np.random.Generator) -> np.ndarray:
    """A Latin square of order ``n`` filled cell by cell with symbols in random order, backtracking on dead
    ends (not uniform over Latin squares; it only has to reach many main classes)."""
    square = -np.ones((n, n), dtype=np.int64)
    orders = [rng.permutation(n) for _ in range(n * n)]

    def fill(cell: int) -> bool:
        if cell == n * n:
            return True
        r, c = divmod(cell, n)
        for s in orders[cell]:
            if s not in square[r, :c] and s not in square[:r, c]:
                square[r, c] = s
                if fill(cell + 1):
                    return True
        square[r, c] = -1
        return False

    fill(0)
    return square


def latin_square_classes(n: int, count: int, seed: int = 0, max_draws: int = 2000) -> list[np.ndarray]:
    """``count`` Latin squares of order ``n`` whose Latin square graphs are pairwise non-isomorphic.

    Random squares are kept when their graph's :func:`_walk_signature` differs from every kept one; a
    different signature proves non-isomorphism (equal ones are skipped, even if the graphs differ).
    """
    rng = np.random.default_rng([seed, n])
    kept, seen = [], set()
    for _ in range(max_draws):
        square = random_latin_square(n, rng)
        g = latin_square_graph(square)
        signature = _walk_signature(g.num_nodes(), *graph_simple_edges(g))
        if signature not in seen:
            seen.add(signature)
            kept.append(square)
            if len(kept) == count:
                return kept
    raise ValueError(f"latin_square_classes: only {len(kept)} of {count} distinct classes of order {n} "
                     f"in {max_draws} draws")


def _walk_signature(num_nodes: int, u, v, lengths=(3, 4, 5, 6)) -> tuple:
    """Sorted per-node closed-walk counts (exact integers) of each node's neighbourhood subgraph: an
    isomorphism invariant that, unlike degrees or srg parameters, differs between many Latin square graphs."""
    adj = np.zeros((num_nodes, num_nodes), dtype=np.int64)
    adj[u, v] = adj[v, u] = 1
    rows = []
    for node in range(num_nodes):
        hood = np.flatnonzero(adj[node])
        sub, power, counts = adj[np.ix_(hood, hood)], np.eye(len(hood), dtype=np.int64), []
        for length in range(1, max(lengths) + 1):
            power = power @ sub
            if length in lengths:
                counts.append(int(np.trace(power)))
        rows.append(tuple(counts))
    return tuple(sorted(rows))


# ---------------------------------------------------------------------------------------------------------
# circulant graphs

def circulant_graph(num_nodes: int, jumps) -> dgl.DGLGraph:
    """Circulant graph C_n(jumps): node ``i`` adjacent to ``i +- j (mod n)`` for every jump ``j``
    (CSL's graphs are C_41(1, skip))."""
    i = np.arange(num_nodes)
    pairs = np.concatenate([np.stack([i, (i + j) % num_nodes], 1) for j in jumps])
    return undirected_graph(num_nodes, pairs[:, 0], pairs[:, 1])


def _orbit_key(num_nodes: int, jumps) -> tuple:
    """Smallest image of a jump set under the multipliers ``a`` in Z_n^* (jumps read up to sign)."""
    return min(tuple(sorted(min(a * j % num_nodes, -a * j % num_nodes) for j in jumps))
               for a in range(1, num_nodes) if np.gcd(a, num_nodes) == 1)


def circulant_jump_sets(num_nodes: int, degree: int, count: int = 10) -> list[tuple[int, ...]]:
    """``count`` jump sets ``(1, j2, ...)`` giving pairwise non-isomorphic ``degree``-regular circulants.

    ``num_nodes`` must be a prime: then C_n(S) and C_n(T) are isomorphic exactly when ``T = a S`` for a
    multiplier ``a`` (Turner 1967, Adam's conjecture for prime orders), so one jump set per multiplier orbit
    gives distinct graphs. Sets are taken in lexicographic order, the first of each new orbit kept.
    """
    if not _is_prime(num_nodes) or degree % 2 or not 2 <= degree < num_nodes - 1:
        raise ValueError(f"circulant_jump_sets: need a prime order (got {num_nodes}) and an even degree "
                         f"between 2 and n - 2 (got {degree})")
    kept, seen = [], set()
    for rest in itertools.combinations(range(2, num_nodes // 2 + 1), degree // 2 - 1):
        key = _orbit_key(num_nodes, (1, *rest))
        if key not in seen:
            seen.add(key)
            kept.append((1, *rest))
            if len(kept) == count:
                return kept
    raise ValueError(f"circulant_jump_sets: only {len(kept)} distinct {degree}-regular circulants of order "
                     f"{num_nodes}")


# ---------------------------------------------------------------------------------------------------------
# families and evaluation sets

def _rook_shrikhande() -> dict:
    return {"rook-4x4": rook_graph(4), "shrikhande": shrikhande_graph()}


def _latin_squares(n: int, count: int = 10):
    return lambda: {f"latin-{n}-{i}": latin_square_graph(s) for i, s in enumerate(latin_square_classes(n, count))}


def _circulants(num_nodes: int, degree: int, count: int = 10):
    return lambda: {f"C{num_nodes}({','.join(map(str, s))})": circulant_graph(num_nodes, s)
                    for s in circulant_jump_sets(num_nodes, degree, count)}


#: name -> (builder of {class name: graph}, one-line description). No added pretraining graph of the
#: default model has a family's size and degree together (its fourth stage drew degree 3 to 5 and 8 to 64
#: nodes, its fifth degree 3 to 10 and 17 to 40 nodes); the 12-regular circulants are outside both ranges.
#: The last three were fixed after the fifth stage was shipped and before any model was scored on them.
FAMILIES = {
    "srg-16-6-2-2": (_rook_shrikhande, "4 x 4 rook's graph vs Shrikhande graph, srg(16, 6, 2, 2)"),
    "latin-squares-7": (_latin_squares(7), "Latin square graphs of 10 main classes of order 7, srg(49, 18, 7, 6)"),
    "circulant-83-deg4": (_circulants(83, 4), "10 circulants C_83(1, j), 4-regular, 83 nodes"),
    "circulant-127-deg4": (_circulants(127, 4), "10 circulants C_127(1, j), 4-regular, 127 nodes"),
    "circulant-41-deg6": (_circulants(41, 6), "10 circulants C_41(1, j, k), 6-regular, 41 nodes"),
    "circulant-61-deg8": (_circulants(61, 8), "10 circulants C_61(1, j, k, l), 8-regular, 61 nodes"),
    "circulant-73-deg12": (_circulants(73, 12), "10 circulants C_73(1, 2, 3, 4, 5, j), 12-regular, 73 nodes"),
    "circulant-89-deg6": (_circulants(89, 6), "10 circulants C_89(1, 2, j), 6-regular, 89 nodes"),
    "circulant-97-deg8": (_circulants(97, 8), "10 circulants C_97(1, 2, 3, j), 8-regular, 97 nodes"),
    "circulant-53-deg10": (_circulants(53, 10), "10 circulants C_53(1, 2, 3, 4, j), 10-regular, 53 nodes"),
}


def family_graphs(name: str) -> dict:
    """The classes of family ``name`` of :data:`FAMILIES`: ``{class name: graph}``."""
    if name not in FAMILIES:
        raise KeyError(f"unknown graph family {name!r}; choose from {', '.join(FAMILIES)}")
    return FAMILIES[name][0]()


def family_dataset(family: str = "srg-16-6-2-2", copies: int = 8, seed: int = 0, graphs: dict | None = None
                   ) -> GraphDataset:
    """``copies`` randomly relabelled copies of every class of a family, labelled by class.

    Relabelling keeps a method from reading the class off node order (as CSL's permuted copies do).
    ``graphs`` (``{class name: graph}``) replaces the registered family, e.g. CSL's skip-link graphs.
    """
    graphs = family_graphs(family) if graphs is None else graphs
    rng = np.random.default_rng([seed, copies])
    out, labels = [], []
    for label, graph in enumerate(graphs.values()):
        u, v = graph_simple_edges(graph)
        n = graph.num_nodes()
        for _ in range(copies):
            perm = rng.permutation(n)
            out.append(undirected_graph(n, perm[u], perm[v]))
            labels.append(label)
    return GraphDataset(graphs=out, labels=torch.tensor(labels, dtype=torch.long), splits={},
                        name="graph-family", task="graph", task_type="multiclass", metric="accuracy",
                        num_tasks=1, num_classes=len(graphs),
                        info={"family": family, "class_names": list(graphs), "copies": copies, "seed": seed})


def _csl_graphs() -> dict:
    return {f"csl-skip{s}": csl_graph(s) for s in CSL_SKIPS}


#: evaluation set name -> builder of {graph name: graph}: the graphs pretraining can leave out
EVALUATION_SETS = {"wl-pairs": wl_pair_graphs, "csl": _csl_graphs,
                   **{name: builder for name, (builder, _) in FAMILIES.items()}}


def evaluation_graphs(name: str) -> dict:
    """Every distinct graph of evaluation set ``name`` (:data:`EVALUATION_SETS`): ``{graph name: graph}``."""
    if name not in EVALUATION_SETS:
        raise KeyError(f"unknown evaluation set {name!r}; choose from {', '.join(EVALUATION_SETS)}")
    return EVALUATION_SETS[name]()


def _graph(num_nodes: int, pairs) -> dgl.DGLGraph:
    e = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return undirected_graph(num_nodes, e[:, 0], e[:, 1])
