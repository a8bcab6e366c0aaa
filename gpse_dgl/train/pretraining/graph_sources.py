"""Pretraining source graphs: read, de-duplicated, subset and split (steps 1 and 2 of :mod:`.data`).

* :func:`load_source_graphs`: ``embedded-molecules``, ``smiles`` or a dataset name known to
  :func:`gpse_dgl.data.registry.load_dataset`; molecules become unique bare skeletons, other graph datasets
  lose repeated structures (:func:`unique_structures`) and graphs with <= 1 node or no edge.
* :func:`subset_and_split`: evaluation graphs removed (``data.exclude_graphs``, :func:`exclude_evaluation_graphs`),
  an optional seeded ``max_graphs`` subset, then split codes (0 train, 1 val, 2 test): a seeded random split,
  or for :data:`HASH_SPLIT_SOURCES` a hash of each skeleton.
* :func:`find_evaluation_graphs`: which graphs of an evaluation set (:data:`gpse_dgl.data.families.EVALUATION_SETS`)
  occur in a corpus, and in which split.
* :func:`add_skeleton_edits`: ring-edited copies of training graphs, in the training split only.
* :func:`add_regular_graphs`: random connected regular graphs, in the training split only.
* :func:`add_cayley_graphs`: random connected Cayley graphs of non-cyclic groups, in the training split only.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl.train.pretraining.graph_sources import unique_structures
>>> ring = dgl.graph(([0, 1, 2], [1, 2, 0]))
>>> graphs, stats = unique_structures([ring, dgl.graph(([1, 2, 0], [2, 0, 1])), dgl.graph(([], []), num_nodes=1)])
>>> len(graphs), stats["duplicates"], stats["too_small"]
(1, 1, 1)
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ... import _env  # noqa: F401
import dgl

from ...data.cayley import non_cyclic_groups, random_cayley_edges
from ...data.dataset import random_split
from ...data.families import evaluation_graphs
from ...data.ogb import ogb_dir_name, ogb_meta
from ...data.rdkit_corpus import hash_split_codes
from ...data.registry import default_root, load_dataset
from ...data.skeleton_edits import MAX_NEW_ATOMS, edit_skeleton
from ...data.synthetic import connected_regular_edges
from ...utils.errors import RecipeError
from ...utils.graph import graph_simple_edges, structure_only, undirected_graph
from ..runtime import progress_bar

SPLIT_NAMES = ("train", "val", "test")
# sources whose split is a hash of each skeleton (data.split fractions, no seed), not a seeded draw
HASH_SPLIT_SOURCES = ("rdkit-molecules",)


def load_source_graphs(data_recipe: dict, progress: bool = False) -> tuple[list[dgl.DGLGraph], dict]:
    """Unique, non-trivial graphs of the recipe's source, and counts describing the clean-up."""
    source = data_recipe["source"]
    if source in ("embedded-molecules", "smiles"):
        from ...data import molecules  # rdkit (through .molecules): a heavy import, for molecules only

        path = (molecules.embedded_smiles_path() if source == "embedded-molecules"
                else data_recipe["smiles_file"])
        graphs, stats = molecules.unique_skeleton_graphs(molecules.read_smiles_file(path),
                                                         progress=progress)
        return graphs, {"source": source, "path": str(path), **_counts(stats)}
    return _dataset_graphs(source, data_recipe.get("root"), progress)


def _dataset_graphs(name: str, root: str | None, progress: bool) -> tuple[list, dict]:
    smiles = _ogb_smiles(name, root)
    if smiles is not None:
        from ...data import molecules  # rdkit (through .molecules): a heavy import, for molecules only

        # molecules: pretraining uses unique bare skeletons (paper: 323,555 for ogbg-molpcba)
        graphs, stats = molecules.unique_skeleton_graphs(smiles, progress=progress)
        return graphs, {"source": name, **_counts(stats)}
    dataset = load_dataset(name, root)
    if dataset.task != "graph":
        raise RecipeError(f"data.source: {name} is a node-level dataset (one graph); pretraining "
                          f"needs a set of graphs")
    if name in HASH_SPLIT_SOURCES:  # unique featureless skeletons already: nothing to de-duplicate
        return list(dataset.graphs), {"source": name, "kept": len(dataset.graphs)}
    graphs, stats = unique_structures(dataset.graphs)
    return graphs, {"source": name, **stats}


def unique_structures(graphs: Sequence[dgl.DGLGraph], max_nodes_to_compare: int = 1000):
    """Structure-only copies of ``graphs`` without repeats, trivial graphs (<= 1 node, no edge) dropped.

    Repeats are found by the canonical SMILES of the all-carbon, single-bond skeleton (RDKit's
    canonical atom ranking), the same key molecules are de-duplicated by. Graphs above
    ``max_nodes_to_compare`` nodes are kept without comparison.
    """
    kept, seen = [], set()
    stats = {"total": len(graphs), "too_small": 0, "duplicates": 0}
    for graph in graphs:
        u, v = graph_simple_edges(graph)
        if graph.num_nodes() <= 1 or len(u) == 0:
            stats["too_small"] += 1
            continue
        if graph.num_nodes() <= max_nodes_to_compare:
            key = _skeleton_key(graph.num_nodes(), u, v)
            if key in seen:
                stats["duplicates"] += 1
                continue
            seen.add(key)
        kept.append(structure_only(graph, torch.int64))
    stats["kept"] = len(kept)
    return kept, stats


def _skeleton_key(num_nodes: int, u: np.ndarray, v: np.ndarray) -> str:
    from rdkit import Chem  # rdkit: a heavy import, for skeleton keys only

    mol = Chem.RWMol()
    for _ in range(num_nodes):
        mol.AddAtom(Chem.Atom(6))
    for i, j in zip(u.tolist(), v.tolist()):
        mol.AddBond(i, j, Chem.BondType.SINGLE)
    mol = mol.GetMol()
    mol.UpdatePropertyCache(strict=False)  # hypervalent "carbons" are fine for a canonical key
    return Chem.MolToSmiles(mol, canonical=True)


def evaluation_triples(set_names: Sequence[str]) -> list[tuple]:
    """``(num_nodes, u, v)`` of every graph of the named evaluation sets (added training graphs must not
    repeat them either)."""
    return [triple for _, triple in _evaluation_entries(set_names)]


def _evaluation_entries(set_names: Sequence[str]) -> list[tuple[str, tuple]]:
    return [(f"{name}/{graph_name}", (g.num_nodes(), *graph_simple_edges(g)))
            for name in set_names for graph_name, g in evaluation_graphs(name).items()]


def find_evaluation_graphs(graphs: Sequence[dgl.DGLGraph], set_names: Sequence[str],
                           split_of_graph: torch.Tensor | None = None) -> list[dict]:
    """Graphs of ``graphs`` isomorphic to a graph of the named evaluation sets.

    Isomorphism is read off the canonical skeleton key (:func:`_skeleton_key`, RDKit's canonical SMILES
    of the all-carbon graph), computed only for graphs whose node and edge counts match an evaluation
    graph. Returns one ``{"index", "graph" ("set/graph"), "split" (name or None)}`` per match, in corpus order.
    """
    entries = _evaluation_entries(set_names)
    sizes = {(n, len(u)) for _, (n, u, _) in entries}
    candidates = [(i, g.num_nodes(), *graph_simple_edges(g)) for i, g in enumerate(graphs)]
    candidates = [c for c in candidates if (c[1], len(c[2])) in sizes]
    if not candidates:  # keys cost RDKit time: none for sets no graph could match
        return []
    present = {(c[1], len(c[2])) for c in candidates}
    keys = {}
    for label, triple in entries:
        if (triple[0], len(triple[1])) in present:
            keys.setdefault(_skeleton_key(*triple), label)
    found = []
    for index, n, u, v in candidates:
        match = keys.get(_skeleton_key(n, u, v))
        if match is not None:
            split = None if split_of_graph is None else SPLIT_NAMES[int(split_of_graph[index])]
            found.append({"index": index, "graph": match, "split": split})
    return found


def exclude_evaluation_graphs(graphs: list, set_names: Sequence[str]) -> tuple[list, dict]:
    """``graphs`` without those of the named evaluation sets, and ``{"sets", "removed": ["set/graph", ...]}``.

    Run before the split, so a removed graph leaves every split (a benchmark graph in validation or test
    would still steer checkpoint choice).
    """
    found = find_evaluation_graphs(graphs, set_names)
    drop = {item["index"] for item in found}
    kept = [g for i, g in enumerate(graphs) if i not in drop]
    return kept, {"sets": list(set_names), "removed": [item["graph"] for item in found]}


def add_skeleton_edits(graphs: list, split_of_graph: torch.Tensor, per_graph: float, seed: int,
                       progress: bool = False, max_nodes: int = 1000, avoid: Sequence[tuple] = ()):
    """Append ``round(per_graph * num_train)`` ring-edited training graphs to the training split.

    Each is one :func:`~gpse_dgl.data.skeleton_edits.edit_skeleton` edit of a random training graph
    of at most ``max_nodes`` nodes (the size up to which graphs are compared, as in
    :func:`unique_structures`). Edits that repeat any source graph (validation and test included) or
    another edit are drawn again, so held-out graphs never leak into training; so are edits that repeat
    one of ``avoid`` (``(num_nodes, u, v)`` triples, e.g. :func:`evaluation_triples`). After 20 draws per
    wanted graph it stops with fewer. Returns ``(graphs, split_of_graph, stats)``.
    """
    # every graph an edit could equal (an edit adds at most MAX_NEW_ATOMS atoms) is compared against
    comparable = [i for i, g in enumerate(graphs) if g.num_nodes() <= max_nodes + MAX_NEW_ATOMS]
    simple = {i: (graphs[i].num_nodes(), *graph_simple_edges(graphs[i])) for i in comparable}
    train = [i for i in torch.nonzero(split_of_graph == 0).flatten().tolist()
             if i in simple and graphs[i].num_nodes() <= max_nodes]
    wanted = int(round(per_graph * len(train)))

    def draw(rng):
        return edit_skeleton(*simple[train[int(rng.integers(len(train)))]], rng)

    return _append_training_graphs(graphs, split_of_graph, wanted, draw, list(simple.values()) + list(avoid),
                                   np.random.default_rng([seed, 0x5E1E]), "ring edits", progress)


#: default degrees and sizes (inclusive; recipe keys ``data.added_graph_degrees`` and
#: ``data.added_graph_nodes``) of the added regular and Cayley graphs (:func:`add_regular_graphs`,
#: :func:`add_cayley_graphs`)
REGULAR_DEGREES = (3, 5)
REGULAR_NODES = (8, 64)


def add_regular_graphs(graphs: list, split_of_graph: torch.Tensor, per_graph: float, seed: int,
                       progress: bool = False, avoid: Sequence[tuple] = (), nodes: Sequence[int] | None = None,
                       degrees: Sequence[int] | None = None):
    """Append ``round(per_graph * num_train)`` random connected regular graphs to the training split.

    Degrees are drawn uniformly from ``degrees`` and sizes from ``nodes`` (both inclusive ranges; defaults
    :data:`REGULAR_DEGREES` and :data:`REGULAR_NODES`). Inside a regular graph every node looks the same to
    colour refinement, so only the random input lets the encoder tell nodes and graphs apart: these graphs
    train exactly what molecules, where 1-WL already explains almost all of the targets, rarely ask of it.
    Graphs that repeat a source graph (validation and test included), one of ``avoid`` or an earlier one are
    drawn again, as with :func:`add_skeleton_edits`. Returns ``(graphs, split_of_graph, stats)``.
    """
    low, high = (int(n) for n in (nodes or REGULAR_NODES))
    degree_choices = _degree_choices(degrees)

    def draw(rng):
        degree = int(rng.choice(degree_choices))
        num_nodes = int(rng.integers(max(low, degree + 1), high + 1))
        num_nodes -= (num_nodes * degree) % 2  # an odd number of stubs cannot be paired
        return connected_regular_edges(num_nodes, degree, rng) if num_nodes > degree else None

    return _append_regular(graphs, split_of_graph, per_graph, draw, high, degree_choices, avoid, [seed, 0x4E6A],
                           "regular graphs", progress)


def add_cayley_graphs(graphs: list, split_of_graph: torch.Tensor, per_graph: float, seed: int,
                      progress: bool = False, avoid: Sequence[tuple] = (), nodes: Sequence[int] | None = None,
                      degrees: Sequence[int] | None = None):
    """Append ``round(per_graph * num_train)`` random connected Cayley graphs to the training split.

    Groups are the non-cyclic abelian and the dihedral groups with ``nodes`` elements (inclusive; default
    :data:`REGULAR_NODES`), connection sets random with a size from ``degrees`` (inclusive; default
    :data:`REGULAR_DEGREES`; :mod:`gpse_dgl.data.cayley`). Vertex-transitive like the regular graphs of
    :func:`add_regular_graphs`, so 1-WL sees every node alike, but full of short cycles, whose counts set
    their return probabilities and spectra apart: a signal only the random input can carry. Cyclic groups
    (whose Cayley graphs are the circulants CSL and ``benchmarks/expressivity.py`` hold out) are never used.
    Repeats are drawn again as in :func:`add_regular_graphs`; the regular graphs already added count as
    repeats. Returns ``(graphs, split_of_graph, stats)``.
    """
    low, high = (int(n) for n in (nodes or REGULAR_NODES))
    groups = non_cyclic_groups(low, high)
    degree_choices = _degree_choices(degrees)
    if not groups:
        raise RecipeError(f"data.added_graph_nodes = [{low}, {high}]: no non-cyclic group of that order (the "
                          f"smallest has 4 elements)")

    def draw(rng):
        _, mul, inv = groups[int(rng.integers(len(groups)))]
        degree = int(rng.choice(degree_choices))
        return random_cayley_edges(mul, inv, degree, rng, max_tries=5) if degree < len(inv) else None

    return _append_regular(graphs, split_of_graph, per_graph, draw, high, degree_choices, avoid, [seed, 0xCA7E],
                           "Cayley graphs", progress, key=_spectral_key)


def _degree_choices(degrees: Sequence[int] | None) -> tuple[int, ...]:
    low, high = (int(d) for d in (degrees or REGULAR_DEGREES))
    return tuple(range(low, high + 1))


def _append_regular(graphs: list, split_of_graph: torch.Tensor, per_graph: float, draw, max_nodes: int,
                    degrees: tuple[int, ...], avoid: Sequence[tuple], rng_seed: list, desc: str, progress: bool,
                    key=None):
    wanted = int(round(per_graph * int((split_of_graph == 0).sum())))
    # only a regular graph of one of those degrees can equal a drawn graph
    regular = [(g.num_nodes(), *edges) for g in graphs if g.num_nodes() <= max_nodes
               for edges in [graph_simple_edges(g)] if _is_regular(g.num_nodes(), *edges, degrees)]
    return _append_training_graphs(graphs, split_of_graph, wanted, draw, regular + list(avoid),
                                   np.random.default_rng(rng_seed), desc, progress, key or _skeleton_key)


def _spectral_key(num_nodes: int, u: np.ndarray, v: np.ndarray) -> tuple:
    """Node count and rounded adjacency spectrum: equal for isomorphic graphs, and for the rare cospectral
    pair too (then one is skipped). RDKit's canonical ranking (:func:`_skeleton_key`) can take minutes and
    gigabytes on a vertex-transitive graph of 64 nodes, whose nodes all tie."""
    adjacency = np.zeros((num_nodes, num_nodes))
    adjacency[u, v] = adjacency[v, u] = 1.0
    return num_nodes, tuple(np.round(np.linalg.eigvalsh(adjacency), 6) + 0.0)


def _is_regular(num_nodes: int, u: np.ndarray, v: np.ndarray, allowed: tuple[int, ...]) -> bool:
    degrees = np.bincount(np.concatenate([u, v]), minlength=num_nodes)
    return int(degrees[0]) in allowed and bool((degrees == degrees[0]).all())


def _append_training_graphs(graphs: list, split_of_graph: torch.Tensor, wanted: int, draw, existing: list,
                            rng: np.random.Generator, desc: str, progress: bool, key=None):
    """Append up to ``wanted`` graphs from ``draw(rng)`` (``(num_nodes, u, v)`` or None) to the training
    split, skipping any that repeats one of ``existing`` (``(num_nodes, u, v)`` triples) or an earlier
    draw by ``key`` (default :func:`_skeleton_key`); gives up after 20 draws per wanted graph."""
    key = key or _skeleton_key
    seen = {key(*edges) for edges in existing}
    added, attempts = [], 0
    bar = progress_bar(None, progress and wanted > 0, total=wanted, desc=desc, unit="graph", leave=False)
    while len(added) < wanted and attempts < 20 * wanted:
        attempts += 1
        drawn = draw(rng)
        if drawn is None:
            continue
        drawn_key = key(*drawn)
        if drawn_key not in seen:
            seen.add(drawn_key)
            added.append(undirected_graph(*drawn))
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    codes = torch.cat([split_of_graph, torch.zeros(len(added), dtype=split_of_graph.dtype)])
    return graphs + added, codes, {"wanted": wanted, "added": len(added), "attempts": attempts}


def ogb_folder(name: str, root: str | None) -> Path | None:
    """Folder of an ``ogbg-*`` dataset in OGB's on-disk layout under ``root``, if there is one."""
    if not name.startswith("ogbg-"):
        return None
    try:
        candidates = [ogb_dir_name(name), ogb_meta(name).get("download_name", ogb_dir_name(name))]
    except KeyError:
        return None
    base = Path(root) if root else Path(default_root())
    for candidate in candidates:
        if (base / candidate / "raw").is_dir() or (base / candidate / "mapping").is_dir():
            return base / candidate
    return None


def _ogb_smiles(name: str, root: str | None) -> list[str] | None:
    """SMILES of an ogbg-mol* dataset from ``mapping/mol.csv.gz`` (None when not a molecule set or
    the mapping file is absent: then the graphs themselves are read)."""
    folder = ogb_folder(name, root)
    if folder is None or not (folder / "mapping" / "mol.csv.gz").is_file():
        return None
    import pandas as pd  # pandas: a heavy import, for OGB's csv files only

    return pd.read_csv(folder / "mapping" / "mol.csv.gz", usecols=["smiles"])["smiles"].astype(str).tolist()


def _counts(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "smiles"}


def subset_and_split(graphs: list, data_recipe: dict, info: dict | None = None) -> tuple[list, torch.Tensor]:
    """Evaluation graphs (``data.exclude_graphs``) removed, a seeded ``max_graphs`` subset, then split codes
    (0 train, 1 val, 2 test) per kept graph; ``info["excluded_graphs"]`` says what was removed."""
    seed = data_recipe["split_seed"]
    if data_recipe.get("exclude_graphs"):
        graphs, excluded = exclude_evaluation_graphs(graphs, data_recipe["exclude_graphs"])
        if info is not None:
            info["excluded_graphs"] = excluded
    if data_recipe["max_graphs"] is not None and data_recipe["max_graphs"] < len(graphs):
        keep = np.sort(np.random.default_rng(seed).permutation(len(graphs))[:data_recipe["max_graphs"]])
        graphs = [graphs[i] for i in keep.tolist()]
    if len(graphs) < 3:
        raise RecipeError(f"data.source: only {len(graphs)} usable graphs; at least 3 are needed "
                          f"for a train / validation / test split")
    if data_recipe["source"] in HASH_SPLIT_SOURCES:
        split_of_graph = _hash_split(graphs, data_recipe["split"])
    else:
        parts = random_split(len(graphs), data_recipe["split"], seed=seed, names=SPLIT_NAMES)
        split_of_graph = torch.full((len(graphs),), -1, dtype=torch.int64)
        for code, name in enumerate(SPLIT_NAMES):
            split_of_graph[parts[name]] = code
    for code, name in enumerate(SPLIT_NAMES[:2]):
        if not (split_of_graph == code).any():
            raise RecipeError(f"data.split: the {name} split of {len(graphs)} graphs is empty; "
                              f"use more graphs or a larger fraction")
    return graphs, split_of_graph


def _hash_split(graphs: list, fractions) -> torch.Tensor:
    """Split codes fixed by a hash of each graph's canonical skeleton SMILES (``data.rdkit_corpus``):
    a graph keeps its split whatever else is in the source."""
    return hash_split_codes([_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in graphs], fractions)
