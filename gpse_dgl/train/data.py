"""Pretraining data: source graphs -> unique skeletons -> fixed split -> targets, cached on disk.

Steps (``build_pretraining_data``):

1. **Source.** ``embedded-molecules`` (RDKit's NCI set, no download), ``smiles`` (a SMILES file) or a
   dataset name known to :func:`gpse_dgl.data.registry.load_dataset` (e.g. ``ogbg-molpcba`` read from
   OGB's on-disk layout). Molecules become unique bare skeletons (``data.molecules``); other graph
   datasets are used as they are, minus graphs with <= 1 node or no edge.
2. **Subset and split.** An optional seeded ``max_graphs`` subset, then a seeded random split
   (90 / 5 / 5 by default, fixed across runs as in the paper); ``rdkit-molecules`` is split by a hash
   of each skeleton instead (:data:`HASH_SPLIT_SOURCES`), so a graph's split never depends on the others. With ``skeleton_edits`` > 0, ring-edited
   copies of training graphs (:mod:`gpse_dgl.data.skeleton_edits`) join the training split only
   (:func:`add_skeleton_edits`).
3. **Targets.** ``pse.pretraining_targets`` computes the standardised node targets and raw graph
   targets once. The result is cached in DGL's binary format (one batched graph whose
   ``ndata["gpse_node_target"]`` holds the node targets; labels hold the graph targets, the per-graph
   node/edge counts and the split of every graph) and reused only when its fingerprint matches. The
   fingerprint covers the source's content, every data setting that changes the graphs or targets, and
   the source code of ``gpse_dgl.pse``, so editing a PSE invalidates old caches.

Graphs are held as a :class:`GraphCollection`: flat edge and target tensors plus offsets. Building a
training batch from it is a few vectorised gathers and one ``dgl.graph`` call, several times faster
than ``dgl.batch`` over a list of small graphs (which merges per-graph frames one by one).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from .. import _env  # noqa: F401
import dgl

from ..utils import distributed as dist_utils
from ..utils.errors import RecipeError
from ..data.cache import code_digest, default_cache_dir, file_sha256, json_digest
from ..pse.targets import NODE_TARGET_KEY
CACHE_FORMAT_VERSION = 1
SPLIT_NAMES = ("train", "val", "test")
# sources whose split is a hash of each skeleton (data.split fractions, no seed), not a seeded draw
HASH_SPLIT_SOURCES = ("rdkit-molecules",)


# ----------------------------------------------------------------------------------------------
# compact graph storage with fast batching


@dataclass
class GraphCollection:
    """Many small graphs as flat tensors: local edge ids, offsets, node and graph targets.

    ``src``/``dst`` hold each graph's edges with node ids local to that graph, graphs one after the
    other; ``edge_offsets[i]:edge_offsets[i+1]`` are graph ``i``'s edges and
    ``node_offsets[i]:node_offsets[i+1]`` its rows of ``node_targets``.
    """

    num_nodes: torch.Tensor
    num_edges: torch.Tensor
    src: torch.Tensor
    dst: torch.Tensor
    node_targets: torch.Tensor
    graph_targets: torch.Tensor
    node_offsets: torch.Tensor = field(init=False)
    edge_offsets: torch.Tensor = field(init=False)

    def __post_init__(self):
        self.node_offsets = _offsets(self.num_nodes)
        self.edge_offsets = _offsets(self.num_edges)

    def __len__(self) -> int:
        return len(self.num_nodes)

    @classmethod
    def from_batched_graph(cls, graph: dgl.DGLGraph, num_nodes: torch.Tensor, num_edges: torch.Tensor,
                           node_targets: torch.Tensor, graph_targets: torch.Tensor) -> "GraphCollection":
        """Split a batched graph (global node ids) into local-id edge lists."""
        src, dst = (t.to(torch.int64) for t in graph.edges())
        node_base = torch.repeat_interleave(_offsets(num_nodes)[:-1], num_edges)
        return cls(num_nodes.long(), num_edges.long(), src - node_base, dst - node_base,
                   node_targets.float(), graph_targets.float())

    def subset(self, indices: torch.Tensor) -> "GraphCollection":
        """The graphs at ``indices`` (in that order) as a new collection."""
        indices = torch.as_tensor(indices, dtype=torch.int64)
        node_rows = _ranges(self.node_offsets[indices], self.num_nodes[indices])
        edge_rows = _ranges(self.edge_offsets[indices], self.num_edges[indices])
        return GraphCollection(self.num_nodes[indices], self.num_edges[indices], self.src[edge_rows],
                               self.dst[edge_rows], self.node_targets[node_rows],
                               self.graph_targets[indices])

    def batch(self, indices: torch.Tensor) -> tuple[dgl.DGLGraph, torch.Tensor, torch.Tensor]:
        """``(batched graph, node targets (N, C), graph targets (B, C'))`` of the graphs at ``indices``.

        The graph is a proper DGL batch (``batch_num_nodes``/``batch_num_edges`` set), so
        ``dgl.unbatch`` and readouts work on it.
        """
        indices = torch.as_tensor(indices, dtype=torch.int64)
        num_nodes, num_edges = self.num_nodes[indices], self.num_edges[indices]
        edge_rows = _ranges(self.edge_offsets[indices], num_edges)
        node_rows = _ranges(self.node_offsets[indices], num_nodes)
        shift = torch.repeat_interleave(_offsets(num_nodes)[:-1], num_edges)
        graph = dgl.graph((self.src[edge_rows] + shift, self.dst[edge_rows] + shift),
                          num_nodes=int(num_nodes.sum()), idtype=torch.int64)
        graph.set_batch_num_nodes(num_nodes)
        graph.set_batch_num_edges(num_edges)
        return graph, self.node_targets[node_rows], self.graph_targets[indices]

    def batches(self, batch_size: int, generator: torch.Generator | None = None,
                shuffle: bool = False) -> Iterator[tuple[dgl.DGLGraph, torch.Tensor, torch.Tensor]]:
        """Consecutive batches; ``shuffle`` draws the order from ``generator``."""
        order = (torch.randperm(len(self), generator=generator) if shuffle
                 else torch.arange(len(self)))
        for start in range(0, len(self), batch_size):
            yield self.batch(order[start:start + batch_size])

    def num_batches(self, batch_size: int) -> int:
        return -(-len(self) // batch_size)

    @classmethod
    def concatenate(cls, parts: Sequence["GraphCollection"]) -> "GraphCollection":
        """The graphs of ``parts``, one part after the other."""
        return cls(*(torch.cat([getattr(p, name) for p in parts])
                     for name in ("num_nodes", "num_edges", "src", "dst", "node_targets", "graph_targets")))


def _offsets(counts: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts.long(), 0)])


def _ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Concatenation of ``arange(s, s + l)`` for every (start, length) pair, vectorised."""
    lengths = lengths.long()
    total = int(lengths.sum())
    block_start = torch.repeat_interleave(starts.long() - _offsets(lengths)[:-1], lengths)
    return torch.arange(total, dtype=torch.int64) + block_start


# ----------------------------------------------------------------------------------------------
# the assembled data set


@dataclass
class PretrainingData:
    """Train / val / test collections plus what the model and the metrics need to know."""

    splits: dict[str, GraphCollection]
    node_names: list[str]
    graph_names: list[str]
    columns: list[tuple[str, int]]
    info: dict
    graph_target_scaling: dict[str, torch.Tensor] | None = None  # {"mean", "std"} when standardised

    @property
    def num_node_columns(self) -> int:
        return int(self.splits["train"].node_targets.shape[1])

    @property
    def num_graph_columns(self) -> int:
        return int(self.splits["train"].graph_targets.shape[1])


def build_pretraining_data(data_recipe: dict, progress: bool = False, log=print) -> PretrainingData:
    """Assemble (or load from cache) the pretraining data described by a recipe's ``data`` section."""
    from ..pse.targets import target_columns

    started = time.perf_counter()
    node_names, graph_names = list(data_recipe["node_targets"]), list(data_recipe["graph_targets"])
    cache_path, fingerprint = _cache_location(data_recipe)
    cached = _load_cache(cache_path, fingerprint)
    if not all(dist_utils.gather_objects(cached is not None)):  # torchrun: compute unless all ranks read it
        cached = None
    if cached is not None:
        collection, split_of_graph, info = cached
        info["cache"] = "reused"
        log(f"data: reusing cached targets {cache_path}")
    else:
        graphs, info = load_source_graphs(data_recipe, progress)
        graphs, split_of_graph = _subset_and_split(graphs, data_recipe)
        if data_recipe["skeleton_edits"] > 0:
            graphs, split_of_graph, info["skeleton_edits"] = add_skeleton_edits(
                graphs, split_of_graph, data_recipe["skeleton_edits"], data_recipe["split_seed"], progress)
            log(f"data: added {info['skeleton_edits']['added']:,} ring-edited training graphs "
                f"(data.skeleton_edits = {data_recipe['skeleton_edits']:g})")
        log(f"data: computing targets of {len(graphs)} graphs "
            f"({', '.join(node_names + graph_names)})")
        collection = _compute_targets_sharded(graphs, node_names, graph_names, data_recipe, progress)
        if dist_utils.current().is_main:
            _save_cache(cache_path, fingerprint, collection, split_of_graph, info)
        info["cache"] = "written"
    splits = {name: collection.subset(torch.nonzero(split_of_graph == code).flatten())
              for code, name in enumerate(SPLIT_NAMES)}
    info.update(cache_path=str(cache_path), fingerprint=fingerprint,
                seconds=round(time.perf_counter() - started, 2),
                **{f"num_{name}": len(part) for name, part in splits.items()})
    scaling = None
    if data_recipe["graph_target_scaling"] == "standardize":
        scaling = standardize_graph_targets(splits)
    return PretrainingData(splits, node_names, graph_names,
                           list(target_columns(node_names, graph_names)), info, scaling)


def standardize_graph_targets(splits: dict[str, GraphCollection]) -> dict[str, torch.Tensor]:
    """Turn every split's graph targets into z-scores with the training split's mean and std.

    Raw graph targets differ in scale by orders of magnitude (edge counts ~20, eigenvalues ~0.1), so
    with raw targets the L1 term is dominated by the large columns and the heads need large weights
    before they can fit them. R^2 is invariant to the same affine map applied to targets and
    predictions, so scores stay comparable with raw-target runs. Returns ``{"mean", "std"}``
    (constant columns get std 1).
    """
    train = splits["train"].graph_targets
    mean = train.mean(0)
    std = train.std(0) if len(train) > 1 else torch.ones_like(mean)
    std = torch.where(std > 1e-8, std, torch.ones_like(std))
    for part in splits.values():
        part.graph_targets = (part.graph_targets - mean) / std
    return {"mean": mean, "std": std}


# ----------------------------------------------------------------------------------------------
# sources


def load_source_graphs(data_recipe: dict, progress: bool = False) -> tuple[list[dgl.DGLGraph], dict]:
    """Unique, non-trivial graphs of the recipe's source, and counts describing the clean-up."""
    source = data_recipe["source"]
    if source in ("embedded-molecules", "smiles"):
        from ..data import molecules

        path = (molecules.embedded_smiles_path() if source == "embedded-molecules"
                else data_recipe["smiles_file"])
        graphs, stats = molecules.unique_skeleton_graphs(molecules.read_smiles_file(path),
                                                         progress=progress)
        return graphs, {"source": source, "path": str(path), **_counts(stats)}
    return _dataset_graphs(source, data_recipe.get("root"), progress)


def _dataset_graphs(name: str, root: str | None, progress: bool) -> tuple[list, dict]:
    from ..data import molecules

    smiles = _ogb_smiles(name, root)
    if smiles is not None:
        # molecules: pretraining uses unique bare skeletons (paper: 323,555 for ogbg-molpcba)
        graphs, stats = molecules.unique_skeleton_graphs(smiles, progress=progress)
        return graphs, {"source": name, **_counts(stats)}
    from ..data.registry import load_dataset

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
    from ..utils.graph import graph_simple_edges

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
        kept.append(_structure_only(graph))
    stats["kept"] = len(kept)
    return kept, stats


def _skeleton_key(num_nodes: int, u: np.ndarray, v: np.ndarray) -> str:
    from rdkit import Chem

    mol = Chem.RWMol()
    for _ in range(num_nodes):
        mol.AddAtom(Chem.Atom(6))
    for i, j in zip(u.tolist(), v.tolist()):
        mol.AddBond(i, j, Chem.BondType.SINGLE)
    mol = mol.GetMol()
    mol.UpdatePropertyCache(strict=False)  # hypervalent "carbons" are fine for a canonical key
    return Chem.MolToSmiles(mol, canonical=True)


def add_skeleton_edits(graphs: list, split_of_graph: torch.Tensor, per_graph: float, seed: int,
                       progress: bool = False, max_nodes: int = 1000):
    """Append ``round(per_graph * num_train)`` ring-edited training graphs to the training split.

    Each is one :func:`~gpse_dgl.data.skeleton_edits.edit_skeleton` edit of a random training graph
    of at most ``max_nodes`` nodes (the size up to which graphs are compared, as in
    :func:`unique_structures`). Edits that repeat any source graph (validation and test included) or
    another edit are drawn again, so held-out graphs never leak into training; after 20 draws per
    wanted graph it stops with fewer. Returns ``(graphs, split_of_graph, stats)``.
    """
    from ..data.skeleton_edits import MAX_NEW_ATOMS, edit_skeleton
    from ..utils.graph import graph_simple_edges
    from ..data.synthetic import undirected_graph
    from .runtime import progress_bar

    # every graph an edit could equal (an edit adds at most MAX_NEW_ATOMS atoms) is compared against
    comparable = [i for i, g in enumerate(graphs) if g.num_nodes() <= max_nodes + MAX_NEW_ATOMS]
    simple = {i: (graphs[i].num_nodes(), *graph_simple_edges(graphs[i])) for i in comparable}
    seen = {_skeleton_key(*edges) for edges in simple.values()}
    train = [i for i in torch.nonzero(split_of_graph == 0).flatten().tolist()
             if i in simple and graphs[i].num_nodes() <= max_nodes]
    wanted = int(round(per_graph * len(train)))
    rng = np.random.default_rng([seed, 0x5E1E])
    added, attempts = [], 0
    bar = progress_bar(None, progress and wanted > 0, total=wanted, desc="ring edits", unit="graph",
                       leave=False)
    while len(added) < wanted and attempts < 20 * wanted:
        attempts += 1
        edited = edit_skeleton(*simple[train[int(rng.integers(len(train)))]], rng)
        if edited is None:
            continue
        key = _skeleton_key(*edited)
        if key not in seen:
            seen.add(key)
            added.append(undirected_graph(*edited))
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    codes = torch.cat([split_of_graph, torch.zeros(len(added), dtype=split_of_graph.dtype)])
    return graphs + added, codes, {"wanted": wanted, "added": len(added), "attempts": attempts}


def _ogb_folder(name: str, root: str | None) -> Path | None:
    """Folder of an ``ogbg-*`` dataset in OGB's on-disk layout under ``root``, if there is one."""
    if not name.startswith("ogbg-"):
        return None
    from ..data.ogb import ogb_dir_name, ogb_meta

    try:
        candidates = [ogb_dir_name(name), ogb_meta(name).get("download_name", ogb_dir_name(name))]
    except KeyError:
        return None
    base = Path(root) if root else _default_data_root()
    for candidate in candidates:
        if (base / candidate / "raw").is_dir() or (base / candidate / "mapping").is_dir():
            return base / candidate
    return None


def _default_data_root() -> Path:
    try:
        from ..data.registry import default_root
    except ImportError:
        return Path("data")
    return Path(default_root())


def _ogb_smiles(name: str, root: str | None) -> list[str] | None:
    """SMILES of an ogbg-mol* dataset from ``mapping/mol.csv.gz`` (None when not a molecule set or
    the mapping file is absent: then the graphs themselves are read)."""
    folder = _ogb_folder(name, root)
    if folder is None or not (folder / "mapping" / "mol.csv.gz").is_file():
        return None
    import pandas as pd

    return pd.read_csv(folder / "mapping" / "mol.csv.gz", usecols=["smiles"])["smiles"].astype(str).tolist()


def _structure_only(graph: dgl.DGLGraph) -> dgl.DGLGraph:
    src, dst = graph.edges()
    return dgl.graph((src, dst), num_nodes=graph.num_nodes(), idtype=torch.int64)


def _counts(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "smiles"}


def _subset_and_split(graphs: list, data_recipe: dict) -> tuple[list, torch.Tensor]:
    """Seeded ``max_graphs`` subset, then split codes (0 train, 1 val, 2 test) per kept graph."""
    from ..data.dataset import random_split

    seed = data_recipe["split_seed"]
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
    from ..data.rdkit_corpus import hash_split_codes
    from ..utils.graph import graph_simple_edges

    return hash_split_codes([_skeleton_key(g.num_nodes(), *graph_simple_edges(g)) for g in graphs], fractions)


def _compute_targets(graphs: list, node_names: list, graph_names: list, data_recipe: dict,
                     progress: bool) -> GraphCollection:
    from ..pse.targets import pretraining_targets

    device = data_recipe["target_device"]
    graph_targets = pretraining_targets(graphs, node_names, graph_names, progress=progress,
                                        device=None if device in (None, "cpu") else device)
    num_nodes = torch.tensor([g.num_nodes() for g in graphs], dtype=torch.int64)
    num_edges = torch.tensor([g.num_edges() for g in graphs], dtype=torch.int64)
    node_targets = (torch.cat([g.ndata[NODE_TARGET_KEY] for g in graphs]) if node_names
                    else torch.zeros(int(num_nodes.sum()), 0))
    src = torch.cat([g.edges()[0].long() for g in graphs])
    dst = torch.cat([g.edges()[1].long() for g in graphs])
    graph_targets = torch.as_tensor(graph_targets, dtype=torch.float32).reshape(len(graphs), -1)
    return GraphCollection(num_nodes, num_edges, src, dst, node_targets, graph_targets)


def _compute_targets_sharded(graphs: list, node_names: list, graph_names: list, data_recipe: dict,
                             progress: bool) -> GraphCollection:
    """:func:`_compute_targets` with the graphs shared out among torchrun's ranks.

    Each rank computes a contiguous share; every rank receives all shares, joined in graph order.
    Targets are per-graph functions, so the result (and the cache fingerprint, which does not see the
    world size) is the one-process result.
    """
    ctx = dist_utils.current()
    if not ctx.is_distributed:
        return _compute_targets(graphs, node_names, graph_names, data_recipe, progress)
    start, stop = dist_utils.shard_range(len(graphs), ctx.rank, ctx.world_size)
    part = (_compute_targets(graphs[start:stop], node_names, graph_names, data_recipe, progress and ctx.is_main)
            if stop > start else None)
    return GraphCollection.concatenate([p for p in dist_utils.gather_objects(part) if p is not None])


# ----------------------------------------------------------------------------------------------
# on-disk cache


def _cache_location(data_recipe: dict) -> tuple[Path, str]:
    """Cache file and fingerprint. The file name hashes the settings only, so a cache made stale by
    changed source data or PSE code is overwritten in place instead of piling up next to the new one."""
    root = Path(data_recipe["cache_dir"]) if data_recipe["cache_dir"] else default_cache_dir()
    safe_source = "".join(c if c.isalnum() or c in "-_" else "_" for c in data_recipe["source"])
    name = f"{safe_source}-{json_digest(_data_settings(data_recipe))[:16]}.bin"
    return root / "pretrain_targets" / name, data_fingerprint(data_recipe)


def _data_settings(data_recipe: dict) -> dict:
    settings = {key: data_recipe[key] for key in
                ("source", "max_graphs", "split", "split_seed", "node_targets", "graph_targets")}
    if data_recipe["skeleton_edits"]:  # absent from older fingerprints: their caches stay valid
        settings["skeleton_edits"] = data_recipe["skeleton_edits"]
    if data_recipe["source"] == "smiles":
        settings["smiles_file"] = str(Path(data_recipe["smiles_file"]).resolve())
    elif data_recipe["source"] != "embedded-molecules":
        settings["root"] = str(Path(data_recipe["root"]).resolve()) if data_recipe.get("root") else None
    return settings


def data_fingerprint(data_recipe: dict) -> str:
    """Hex digest of everything that determines the cached graphs and targets."""
    settings = _data_settings(data_recipe)
    settings.update(cache_format=CACHE_FORMAT_VERSION, source_content=_source_digest(data_recipe),
                    target_code=code_digest("pse"),
                    skeleton_code=file_sha256(Path(__file__).parent.parent / "data" / "molecules.py"))
    if data_recipe["skeleton_edits"]:  # the edits module and the code here that picks and dedups edits
        import inspect

        settings["edit_code"] = json_digest([file_sha256(Path(__file__).parent.parent / "data" / "skeleton_edits.py"),
                                         inspect.getsource(add_skeleton_edits), inspect.getsource(_skeleton_key)])
    return json_digest(settings)


def _source_digest(data_recipe: dict) -> str:
    source = data_recipe["source"]
    if source == "embedded-molecules":
        from ..data.molecules import embedded_smiles_path

        return file_sha256(Path(embedded_smiles_path()))
    if source == "smiles":
        path = Path(data_recipe["smiles_file"])
        if not path.is_file():
            from ..utils.errors import DatasetNotFoundError

            raise DatasetNotFoundError(f"SMILES file not found: {path}")
        return file_sha256(path)
    return _dataset_digest(source, data_recipe.get("root"))


def _dataset_digest(name: str, root: str | None) -> str:
    """Digest of an OGB dataset's source files (``raw/`` and ``mapping/``: never the folders our own
    loaders write into); other datasets are identified by the digest of their loaded edge lists."""
    folder = _ogb_folder(name, root)
    if folder is not None:
        digest = hashlib.sha256()
        for path in sorted(p for sub in ("raw", "mapping") for p in (folder / sub).rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(file_sha256(path).encode())
        return digest.hexdigest()
    from ..data.registry import load_dataset

    digest = hashlib.sha256()
    for graph in load_dataset(name, root).graphs:
        src, dst = graph.edges()
        digest.update(np.int64(graph.num_nodes()).tobytes())
        digest.update(src.numpy().astype(np.int64).tobytes())
        digest.update(dst.numpy().astype(np.int64).tobytes())
    return digest.hexdigest()


def _save_cache(path: Path, fingerprint: str, collection: GraphCollection, split_of_graph: torch.Tensor,
                info: dict) -> None:
    from ..data.cache import save_graphs_cached

    everything = collection.batch(torch.arange(len(collection)))[0]
    everything.ndata[NODE_TARGET_KEY] = collection.node_targets
    labels = {"graph_targets": collection.graph_targets, "num_nodes": collection.num_nodes,
              "num_edges": collection.num_edges, "split": split_of_graph,
              "info": torch.tensor(list(json.dumps(info).encode()), dtype=torch.uint8)}
    save_graphs_cached(str(path), [everything], labels, {"pretraining_data": fingerprint})


def _load_cache(path: Path, fingerprint: str):
    from ..data.cache import load_graphs_cached

    if not path.exists():
        return None
    loaded = load_graphs_cached(str(path), {"pretraining_data": fingerprint})
    if loaded is None:
        return None
    graphs, labels = loaded
    graph = graphs[0]
    collection = GraphCollection.from_batched_graph(graph, labels["num_nodes"], labels["num_edges"],
                                                    graph.ndata[NODE_TARGET_KEY],
                                                    labels["graph_targets"])
    info = json.loads(bytes(labels["info"].tolist()).decode())
    return collection, labels["split"].long(), info


def describe_sizes(data: PretrainingData) -> str:
    """``"3070 graphs (train 2763 / val 153 / test 154), 71,234 nodes"``."""
    sizes = {name: len(part) for name, part in data.splits.items()}
    nodes = sum(int(part.num_nodes.sum()) for part in data.splits.values())
    return (f"{sum(sizes.values())} graphs (train {sizes['train']} / val {sizes['val']} / "
            f"test {sizes['test']}), {nodes:,} nodes")


def split_sizes(data: PretrainingData) -> Sequence[int]:
    return [len(data.splits[name]) for name in SPLIT_NAMES]
