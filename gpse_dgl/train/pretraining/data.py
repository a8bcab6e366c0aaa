"""Pretraining data: source graphs -> unique skeletons -> fixed split -> targets, cached on disk.

Steps (``build_pretraining_data``):

1. **Source.** ``embedded-molecules`` (RDKit's NCI set, no download), ``smiles`` (a SMILES file) or a
   dataset name known to :func:`gpse_dgl.data.registry.load_dataset` (e.g. ``ogbg-molpcba`` read from
   OGB's on-disk layout). Molecules become unique bare skeletons (``data.molecules``); other graph
   datasets are used as they are, minus graphs with <= 1 node or no edge.
2. **Subset and split.** Graphs of the evaluation sets named in ``exclude_graphs`` removed
   (:func:`~.graph_sources.exclude_evaluation_graphs`; added graphs never repeat them either), an optional
   seeded ``max_graphs`` subset, then a seeded random split
   (90 / 5 / 5 by default, fixed across runs as in the paper); ``rdkit-molecules`` is split by a hash
   of each skeleton instead (:data:`HASH_SPLIT_SOURCES`), so a graph's split never depends on the
   others. With ``skeleton_edits`` > 0, ring-edited copies of training graphs
   (:mod:`gpse_dgl.data.skeleton_edits`) join the training split only (:func:`add_skeleton_edits`);
   with ``regular_graphs`` > 0, so do random connected regular graphs (:func:`add_regular_graphs`), and
   with ``cayley_graphs`` > 0 random Cayley graphs of non-cyclic groups (:func:`add_cayley_graphs`).
3. **Targets.** ``pse.pretraining_targets`` computes the standardised node targets and raw graph
   targets once. The result is cached in DGL's binary format (one batched graph whose
   ``ndata["gpse_node_target"]`` holds the node targets; labels hold the graph targets, the per-graph
   node/edge counts and the split of every graph) and reused only when its fingerprint matches. The
   fingerprint covers the source's content, every data setting that changes the graphs or targets, and
   the source code of ``gpse_dgl.pse``, so editing a PSE invalidates old caches.

Graphs are held as a :class:`~gpse_dgl.train.pretraining.graph_collection.GraphCollection`: flat edge and target
tensors plus offsets, batched without ``dgl.batch``. Steps 1 and 2 live in :mod:`.graph_sources`; this
module assembles them, computes the targets and owns the cache.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ...data.cache import (code_digest, default_cache_dir, file_sha256, json_digest, load_graphs_cached,
                           save_graphs_cached)
from ...data.registry import load_dataset
from ...pse.targets import NODE_TARGET_KEY, pretraining_targets, target_columns
from ...utils import distributed as dist_utils
from ...utils.errors import DatasetNotFoundError
from .graph_collection import GraphCollection
from .graph_sources import (HASH_SPLIT_SOURCES, REGULAR_DEGREES, REGULAR_NODES, SPLIT_NAMES, add_cayley_graphs,
                            add_regular_graphs, add_skeleton_edits, evaluation_triples, load_source_graphs, ogb_folder,
                            subset_and_split, unique_structures)

__all__ = ["GraphCollection", "PretrainingData", "build_pretraining_data", "standardize_graph_targets",
           "load_source_graphs", "unique_structures", "add_skeleton_edits", "add_regular_graphs", "add_cayley_graphs",
           "add_training_graphs", "data_fingerprint", "describe_sizes", "split_sizes", "NODE_TARGET_KEY",
           "CACHE_FORMAT_VERSION", "SPLIT_NAMES", "HASH_SPLIT_SOURCES", "OFF_SCALE_ON_REGULAR_GRAPHS"]

CACHE_FORMAT_VERSION = 1
# the package's source files whose code the cache fingerprint covers (gpse_dgl/data/*.py)
_DATA_CODE = Path(__file__).resolve().parents[2] / "data"


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
        graphs, split_of_graph = subset_and_split(graphs, data_recipe, info)
        graphs, split_of_graph, first_regular = add_training_graphs(graphs, split_of_graph, data_recipe, info,
                                                                     progress, log)
        log(f"data: computing targets of {len(graphs)} graphs "
            f"({', '.join(node_names + graph_names)})")
        collection = _targets_with_unknowns(graphs, node_names, graph_names, data_recipe, progress, first_regular)
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


def add_training_graphs(graphs: list, split_of_graph: torch.Tensor, data_recipe: dict, info: dict,
                         progress: bool, log) -> tuple[list, torch.Tensor, int]:
    """Ring edits (``data.skeleton_edits``), then regular graphs (``data.regular_graphs``), then Cayley graphs
    (``data.cayley_graphs``), all in the training split only. Returns the graphs, their split codes and the
    index of the first added regular or Cayley graph."""
    edits = data_recipe["skeleton_edits"]
    added = {"regular_graphs": (add_regular_graphs, "random regular"),
             "cayley_graphs": (add_cayley_graphs, "random Cayley")}
    wanted = {key: data_recipe.get(key, 0) for key in added}  # absent from older recipes
    # excluded evaluation graphs must not come back as an edit or an added graph
    avoid = (evaluation_triples(data_recipe.get("exclude_graphs") or [])
             if edits > 0 or any(wanted.values()) else [])
    if edits > 0:
        graphs, split_of_graph, info["skeleton_edits"] = add_skeleton_edits(
            graphs, split_of_graph, edits, data_recipe["split_seed"], progress, avoid=avoid)
        log(f"data: added {info['skeleton_edits']['added']:,} ring-edited training graphs "
            f"(data.skeleton_edits = {edits:g})")
    first_regular = len(graphs)
    for key, (add, words) in added.items():
        if wanted[key] > 0:
            graphs, split_of_graph, info[key] = add(graphs, split_of_graph, wanted[key], data_recipe["split_seed"],
                                                    progress, avoid=avoid, nodes=data_recipe.get("added_graph_nodes"),
                                                    degrees=data_recipe.get("added_graph_degrees"))
            log(f"data: added {info[key]['added']:,} {words} training graphs (data.{key} = {wanted[key]:g})")
    return graphs, split_of_graph, first_regular


#: graph-level PSEs left unknown (NaN) on added regular graphs: cycle counts grow like (degree - 1)^k, so a
#: random 4-regular graph has hundreds of 8-cycles where a molecule has none, and such counts would set the
#: scale of the standardised column (and of the loss) for every molecule
OFF_SCALE_ON_REGULAR_GRAPHS = ("CycleGE",)


def _targets_with_unknowns(graphs: list, node_names: list, graph_names: list, data_recipe: dict, progress: bool,
                           first: int) -> GraphCollection:
    """Targets of ``graphs``, with the :data:`OFF_SCALE_ON_REGULAR_GRAPHS` columns of graphs ``first:`` (the
    added regular and Cayley graphs) NaN, unknown to the loss. Those columns are never computed there: a
    dense regular graph has more short paths than cycle counting can hold in memory."""
    collection = _compute_targets_sharded(graphs[:first], node_names, graph_names, data_recipe, progress)
    if first >= len(graphs):
        return collection
    known = [name for name in graph_names if name not in OFF_SCALE_ON_REGULAR_GRAPHS]
    added = _compute_targets_sharded(graphs[first:], node_names, known, data_recipe, progress)
    columns, start = [], 0
    for name in graph_names:
        width = len(target_columns([], [name]))
        if name in OFF_SCALE_ON_REGULAR_GRAPHS:
            columns.append(torch.full((len(graphs) - first, width), float("nan")))
        else:
            columns.append(added.graph_targets[:, start:start + width])
            start += width
    added.graph_targets = torch.cat(columns, dim=1)
    return GraphCollection.concatenate([collection, added])


def standardize_graph_targets(splits: dict[str, GraphCollection]) -> dict[str, torch.Tensor]:
    """Turn every split's graph targets into z-scores with the training split's mean and std.

    Raw graph targets differ in scale by orders of magnitude (edge counts ~20, eigenvalues ~0.1), so
    with raw targets the L1 term is dominated by the large columns and the heads need large weights
    before they can fit them. R^2 is invariant to the same affine map applied to targets and
    predictions, so scores stay comparable with raw-target runs. Unknown (NaN) targets are left out of
    the statistics and stay NaN. Returns ``{"mean", "std"}`` (constant columns get std 1).
    """
    train = splits["train"].graph_targets
    known = (~torch.isnan(train)).sum(0)
    mean = torch.nan_to_num(train.nanmean(0))
    squares = torch.where(torch.isnan(train), 0.0, (train - mean) ** 2).sum(0)
    std = (squares / (known - 1).clamp(min=1)).sqrt()
    std = torch.where((std > 1e-8) & (known > 1), std, torch.ones_like(std))
    for part in splits.values():
        part.graph_targets = (part.graph_targets - mean) / std
    return {"mean": mean, "std": std}


def _compute_targets(graphs: list, node_names: list, graph_names: list, data_recipe: dict,
                     progress: bool) -> GraphCollection:
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
    for key in ("regular_graphs", "cayley_graphs"):  # absent from older recipes and fingerprints
        if data_recipe.get(key, 0):
            settings[key] = data_recipe[key]
    for key, default in (("added_graph_nodes", REGULAR_NODES), ("added_graph_degrees", REGULAR_DEGREES)):
        values = [int(n) for n in data_recipe.get(key) or default]
        if _adds_regular(data_recipe) and values != list(default):  # absent from older fingerprints
            settings[key] = values
    if data_recipe.get("exclude_graphs"):  # absent from older recipes and fingerprints
        settings["exclude_graphs"] = list(data_recipe["exclude_graphs"])
    if data_recipe["source"] == "smiles":
        settings["smiles_file"] = str(Path(data_recipe["smiles_file"]).resolve())
    elif data_recipe["source"] != "embedded-molecules":
        settings["root"] = str(Path(data_recipe["root"]).resolve()) if data_recipe.get("root") else None
    return settings


def _adds_regular(data_recipe: dict) -> bool:
    return bool(data_recipe.get("regular_graphs", 0) or data_recipe.get("cayley_graphs", 0))


def data_fingerprint(data_recipe: dict) -> str:
    """Hex digest of everything that determines the cached graphs and targets."""
    settings = _data_settings(data_recipe)
    settings.update(cache_format=CACHE_FORMAT_VERSION, source_content=_source_digest(data_recipe),
                    target_code=code_digest("pse"),
                    skeleton_code=file_sha256(_DATA_CODE / "molecules.py"))
    if data_recipe["skeleton_edits"] or _adds_regular(data_recipe):  # the code that draws and dedups them
        cayley = ("cayley.py",) if data_recipe.get("cayley_graphs") else ()
        code_files = ("skeleton_edits.py", "synthetic.py", *cayley)
        settings["edit_code"] = json_digest([file_sha256(_DATA_CODE / name) for name in code_files]
                                            + [file_sha256(Path(__file__).parent / "graph_sources.py"),
                                               inspect.getsource(add_training_graphs),
                                               inspect.getsource(_targets_with_unknowns),
                                               list(OFF_SCALE_ON_REGULAR_GRAPHS)])
    if data_recipe.get("exclude_graphs"):  # the code that builds the evaluation graphs and matches them
        settings["exclude_code"] = json_digest([file_sha256(_DATA_CODE / name)
                                                for name in ("families.py", "synthetic.py")]
                                               + [file_sha256(Path(__file__).parent / "graph_sources.py")])
    return json_digest(settings)


def _source_digest(data_recipe: dict) -> str:
    source = data_recipe["source"]
    if source == "embedded-molecules":
        from ...data.molecules import embedded_smiles_path  # rdkit (through .molecules): a heavy import

        return file_sha256(Path(embedded_smiles_path()))
    if source == "smiles":
        path = Path(data_recipe["smiles_file"])
        if not path.is_file():
            raise DatasetNotFoundError(f"SMILES file not found: {path}")
        return file_sha256(path)
    return _dataset_digest(source, data_recipe.get("root"))


def _dataset_digest(name: str, root: str | None) -> str:
    """Digest of an OGB dataset's source files (``raw/`` and ``mapping/``: never the folders our own
    loaders write into); other datasets are identified by the digest of their loaded edge lists."""
    folder = ogb_folder(name, root)
    if folder is not None:
        digest = hashlib.sha256()
        for path in sorted(p for sub in ("raw", "mapping") for p in (folder / sub).rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(file_sha256(path).encode())
        return digest.hexdigest()
    digest = hashlib.sha256()
    for graph in load_dataset(name, root).graphs:
        src, dst = graph.edges()
        digest.update(np.int64(graph.num_nodes()).tobytes())
        digest.update(src.numpy().astype(np.int64).tobytes())
        digest.update(dst.numpy().astype(np.int64).tobytes())
    return digest.hexdigest()


def _save_cache(path: Path, fingerprint: str, collection: GraphCollection, split_of_graph: torch.Tensor,
                info: dict) -> None:
    everything = collection.batch(torch.arange(len(collection)))[0]
    everything.ndata[NODE_TARGET_KEY] = collection.node_targets
    labels = {"graph_targets": collection.graph_targets, "num_nodes": collection.num_nodes,
              "num_edges": collection.num_edges, "split": split_of_graph,
              "info": torch.tensor(list(json.dumps(info).encode()), dtype=torch.uint8)}
    save_graphs_cached(str(path), [everything], labels, {"pretraining_data": fingerprint})


def _load_cache(path: Path, fingerprint: str):
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
