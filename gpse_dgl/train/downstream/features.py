"""Per-node encodings fed to downstream models: explicit PSEs, random features or GPSE, cached on disk.

One recipe key, ``model.pe.source``, picks the encoding (see :data:`SOURCES`):

==============  =====  ==================================================================================
source          width  what every node gets
==============  =====  ==================================================================================
``none``        0      nothing (no PE encoder is built)
``random``      r      N(0, 1) features, fixed per graph (seeded by ``(random_seed, graph index)``)
``LapPE``       4      absolute eigenvectors of the normalised Laplacian
``RWSE``        20     random-walk return probabilities, k = 2..21
``LapPE+RWSE``  24     both, in this order
``AllPSE``      62     LapPE 4, EigVals 4, ElstaticPE 7, RWSE 20, HKdiagSE 20, CycleGE 7; the graph-level
                       EigVals and CycleGE are repeated on every node of their graph
``GPSE``        d      the encoding of a pretrained GPSE (d = its width, 512 for the paper's model)
==============  =====  ==================================================================================

Encodings are computed once per dataset and cached in DGL's binary format under
``<cache_dir>/downstream_features/`` (one edgeless graph whose ``ndata["pe"]`` holds the rows of all
graphs, plus their ``offsets``). The cache is keyed by the dataset name, a digest of the graphs'
structure, the source and every setting that changes the values (for GPSE: the checkpoint's content,
seed, number of draws, sampling), and the code version of the PSEs; :mod:`gpse_dgl.data.cache` makes
writes atomic and rebuilds torn or stale files. Random features are cheap and never cached.

Example
-------
>>> from gpse_dgl.data.synthetic import csl_dataset
>>> from gpse_dgl.train.downstream.features import compute_features
>>> table = compute_features(csl_dataset().graphs, "RWSE")
>>> len(table), table.dim, table.graph(0).shape
(150, 20, torch.Size([41, 20]))
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from ... import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl

from ...data.cache import (code_digest, default_cache_dir, file_sha256, fingerprint_of, json_digest,
                           load_graphs_cached, save_graphs_cached, structure_digest)
from ...encode import default_checkpoint_path, encode_dataset, load_gpse
from ...encode.models import resolve_checkpoint
from ...nn.random_features import random_node_features
from ...pse import compute_pse_tensors
from ...pse.registry import PSE_REGISTRY
from ...utils.errors import CheckpointError


__all__ = ["SOURCES", "PSE_COMPONENTS", "NodeTable", "source_width", "compute_features", "load_features",
           "feature_settings", "pse_features", "random_features", "gpse_features", "checkpoint_identity"]

SOURCES = ("none", "random", "LapPE", "RWSE", "LapPE+RWSE", "AllPSE", "GPSE")
#: Explicit PSEs of each PSE source, in column order.
PSE_COMPONENTS = {
    "LapPE": ("LapPE",),
    "RWSE": ("RWSE",),
    "LapPE+RWSE": ("LapPE", "RWSE"),
    "AllPSE": ("LapPE", "EigVals", "ElstaticPE", "RWSE", "HKdiagSE", "CycleGE"),
}
_CACHE_VERSION = 1


@dataclass
class NodeTable:
    """Node rows of many graphs stored contiguously: graph ``i`` owns ``values[offsets[i]:offsets[i+1]]``.

    Parameters
    ----------
    values : torch.Tensor
        ``(total_nodes, dim)``.
    offsets : torch.LongTensor
        ``(num_graphs + 1,)`` cumulative node counts, starting at 0.
    """

    values: torch.Tensor
    offsets: torch.Tensor

    @classmethod
    def from_list(cls, tensors: Sequence[torch.Tensor]) -> "NodeTable":
        """Stack per-graph ``(n_i, dim)`` tensors."""
        counts = torch.tensor([len(t) for t in tensors], dtype=torch.long)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
        return cls(torch.cat(list(tensors)) if len(tensors) else torch.zeros(0, 0), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def dim(self) -> int:
        return int(self.values.shape[1])

    def graph(self, index: int) -> torch.Tensor:
        """Rows of graph ``index`` (a view)."""
        return self.values[self.offsets[index]:self.offsets[index + 1]]

    def gather(self, indices: Sequence[int]) -> torch.Tensor:
        """Rows of the graphs ``indices`` concatenated in that order (as ``dgl.batch`` orders nodes)."""
        return torch.cat([self.graph(int(i)) for i in indices])


# ----------------------------------------------------------------------------------------------
# widths and settings


def source_width(source: str, random_dim: int = 20, gpse_dim: int | None = None) -> int:
    """Columns of ``source``'s encoding (``gpse_dim`` must be given for ``"GPSE"``)."""
    _check_source(source)
    if source == "none":
        return 0
    if source == "random":
        return random_dim
    if source == "GPSE":
        if gpse_dim is None:
            raise ValueError("the width of GPSE encodings depends on the checkpoint: pass gpse_dim")
        return gpse_dim

    return sum(PSE_REGISTRY[name].dim for name in PSE_COMPONENTS[source])


def feature_settings(pe_recipe: dict) -> dict:
    """The keys of a recipe's ``model.pe`` section that change the values of its source's encoding."""
    source = pe_recipe["source"]
    if source == "random":
        return {"random_dim": pe_recipe["random_dim"], "random_seed": pe_recipe["random_seed"]}
    if source == "GPSE":
        keys = ["checkpoint", "gpse_seed", "gpse_samples", "gpse_sampled"]
        settings = {key: pe_recipe[key] for key in keys}
        if pe_recipe["gpse_sampled"]:
            settings["gpse_fanouts"] = [int(f) for f in pe_recipe["gpse_fanouts"]]
        settings["storage"] = pe_recipe["storage"]
        precision = pe_recipe.get("gpse_precision")  # decided by the job (None: fp32)
        if precision is not None and precision.autocast_enabled:  # fp32 keys stay those of earlier caches
            settings["precision"] = precision.name
        return settings
    return {"storage": pe_recipe.get("storage", "float32")} if source != "none" else {}


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ValueError(f"unknown PE source {source!r}; choose one of {', '.join(SOURCES)}")


# ----------------------------------------------------------------------------------------------
# computing


def pse_features(graphs: Sequence, names: Sequence[str], progress: bool = False) -> NodeTable:
    """Explicit PSEs ``names`` of every graph, concatenated per node; graph-level ones broadcast.

    Node-level PSEs are raw (not standardised), as GraphGPS feeds them downstream.
    """
    result = compute_pse_tensors(list(graphs), list(names), progress=progress)
    counts = result.num_nodes.long()
    columns = []
    for name in names:
        if name in result.node:
            columns.append(result.node[name])
        else:  # graph-level: one row per graph, repeated on its nodes
            columns.append(torch.repeat_interleave(result.graph[name], counts, dim=0))
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
    return NodeTable(torch.cat(columns, dim=1).float(), offsets)


def random_features(graphs: Sequence, dim: int = 20, seed: int = 0) -> NodeTable:
    """N(0, 1) features, graph ``i`` drawn from its own generator seeded by ``(seed, i)``.

    Keyed by the graph's index, not its structure, so identical copies of a graph get different
    features (as they would with a fresh draw) while every run sees the same features.
    """
    graphs = list(graphs)
    values = []
    chunk = 4096  # bound the batched graph's size
    for start in range(0, len(graphs), chunk):
        part = graphs[start:start + chunk]
        batch = dgl.batch([dgl.graph(([], []), num_nodes=g.num_nodes()) for g in part])
        keys = list(range(start, start + len(part)))
        values.append(random_node_features(batch, dim=dim, seed=seed, graph_keys=keys))
    counts = torch.tensor([g.num_nodes() for g in graphs], dtype=torch.long)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
    return NodeTable(torch.cat(values) if values else torch.zeros(0, dim), offsets)


def gpse_features(graphs: Sequence, checkpoint: str | None = None, *, model=None, seed: int = 0,
                  samples: int = 1, batch_size: int = 256, sampled: bool = False,
                  fanouts: Sequence[int] | None = None, device=None, progress: bool = False,
                  precision: str = "fp32") -> NodeTable:
    """Encodings of a pretrained GPSE (``model``, or loaded from ``checkpoint``; None = shipped default).

    Seeded per graph (:func:`gpse_dgl.encode.encode_dataset`), so the result does not depend on the
    batch size or the order of ``graphs``; ``precision`` as in :func:`gpse_dgl.encode.encode`.
    """
    if model is None:
        model = load_gpse(checkpoint, device=device or "cpu")
    encodings = encode_dataset(model, list(graphs), batch_size=batch_size, seed=seed, samples=samples,
                               progress=progress, device=device, sampled=sampled,
                               fanouts=[int(f) for f in fanouts] if fanouts else None, precision=precision)
    return NodeTable.from_list(encodings)


def compute_features(graphs: Sequence, source: str, *, random_dim: int = 20, random_seed: int = 0,
                     checkpoint: str | None = None, gpse_seed: int = 0, gpse_samples: int = 1,
                     gpse_batch_size: int = 256, gpse_sampled: bool = False, gpse_fanouts=None,
                     device=None, progress: bool = False, gpse_precision: str = "fp32") -> NodeTable | None:
    """The encoding ``source`` of every graph (None for ``"none"``), without caching.

    Parameters
    ----------
    graphs : sequence of DGLGraph
        The graphs (a node-level dataset has one).
    source : str
        One of :data:`SOURCES`.
    random_dim, random_seed
        Width and seed of ``"random"`` features.
    checkpoint, gpse_seed, gpse_samples, gpse_batch_size, gpse_sampled, gpse_fanouts, gpse_precision
        ``"GPSE"``: checkpoint path (None = shipped default) and the options of
        :func:`gpse_dgl.encode.encode_dataset`.
    device : str or torch.device, optional
        Where GPSE runs.
    progress : bool
        Progress bars.
    """
    _check_source(source)
    if source == "none":
        return None
    if source == "random":
        return random_features(graphs, random_dim, random_seed)
    if source == "GPSE":
        return gpse_features(graphs, checkpoint, seed=gpse_seed, samples=gpse_samples,
                             batch_size=gpse_batch_size, sampled=gpse_sampled, fanouts=gpse_fanouts,
                             device=device, progress=progress, precision=gpse_precision)
    return pse_features(graphs, PSE_COMPONENTS[source], progress=progress)


# ----------------------------------------------------------------------------------------------
# cached entry point


def load_features(graphs: Sequence, dataset_name: str, pe_recipe: dict, cache_dir=None, device=None,
                  progress: bool = False, log_fn: Callable[[str], None] | None = None
                  ) -> tuple[NodeTable | None, dict]:
    """The encoding a recipe's ``model.pe`` section asks for, from the cache or computed and cached.

    Parameters
    ----------
    graphs : sequence of DGLGraph
        The dataset's graphs, as the model will see them.
    dataset_name : str
        Part of the cache key and file name.
    pe_recipe : dict
        The validated ``model.pe`` section.
    cache_dir : path-like, optional
        Cache root (default :func:`default_cache_dir`).
    device : optional
        Where GPSE runs.
    progress : bool
        Progress bars while computing.
    log_fn : callable, optional
        Receives one-line status messages.

    Returns
    -------
    table : NodeTable or None
        None for source ``"none"``.
    info : dict
        ``source``, ``dim``, ``cache`` ("reused", "written", "not written" or None), ``path`` and
        ``seconds``.
    """
    say = log_fn or (lambda message: None)
    source = pe_recipe["source"]
    started = time.perf_counter()
    options = _compute_options(pe_recipe)
    if source in ("none", "random"):
        table = compute_features(graphs, source, device=device, progress=progress, **options)
        return table, {"source": source, "dim": table.dim if table is not None else 0, "cache": None,
                       "path": None, "seconds": round(time.perf_counter() - started, 3)}

    path, fingerprint = cache_location(graphs, dataset_name, pe_recipe, cache_dir)
    hit = load_graphs_cached(path, fingerprint)
    if hit is not None:
        table, status = NodeTable(hit[0][0].ndata["pe"], hit[1]["offsets"]), "reused"
        say(f"features: {source} reused from {path}")
    else:
        say(f"features: computing {source} for {len(graphs)} graph(s)")
        table = compute_features(graphs, source, device=device, progress=progress, **options)
        if pe_recipe.get("storage") == "float16":
            table.values = table.values.half()
        status = "written" if _save(path, table, fingerprint) else "not written"
    return table, {"source": source, "dim": table.dim, "cache": status, "path": str(path),
                   "seconds": round(time.perf_counter() - started, 3)}


def _compute_options(pe_recipe: dict) -> dict:
    return {"random_dim": pe_recipe["random_dim"], "random_seed": pe_recipe["random_seed"],
            "checkpoint": pe_recipe["checkpoint"], "gpse_seed": pe_recipe["gpse_seed"],
            "gpse_samples": pe_recipe["gpse_samples"], "gpse_batch_size": pe_recipe["gpse_batch_size"],
            "gpse_sampled": pe_recipe["gpse_sampled"], "gpse_fanouts": pe_recipe["gpse_fanouts"],
            "gpse_precision": pe_recipe.get("gpse_precision") or "fp32"}


def cache_location(graphs: Sequence, dataset_name: str, pe_recipe: dict, cache_dir=None) -> tuple[Path, dict]:
    """Cache file and fingerprint of the encoding ``pe_recipe`` asks for on ``graphs``.

    The file name hashes the dataset, source and settings (so a cache made stale by changed graphs or
    code is overwritten in place); the fingerprint adds the structure digest and code versions.
    """
    source = pe_recipe["source"]
    settings = feature_settings(pe_recipe)
    if source == "GPSE":
        settings["checkpoint"] = checkpoint_identity(pe_recipe["checkpoint"])
    key = {"dataset": dataset_name, "source": source, "settings": settings}
    safe = "".join(c if c.isalnum() or c in "-_+" else "_" for c in f"{dataset_name}-{source}")
    path = Path(cache_dir or default_cache_dir()) / "downstream_features" / f"{safe}-{json_digest(key)[:16]}.bin"
    fingerprint = fingerprint_of(kind="downstream-features", version=_CACHE_VERSION, structure=structure_digest(graphs),
                                 pse_code=code_digest("pse") if source in PSE_COMPONENTS else None, **key)
    return path, fingerprint


def _save(path: Path, table: NodeTable, fingerprint: dict) -> bool:
    holder = dgl.graph(([], []), num_nodes=table.values.shape[0])
    holder.ndata["pe"] = table.values
    return save_graphs_cached(path, [holder], {"offsets": table.offsets}, fingerprint)


def checkpoint_identity(checkpoint: str | None) -> dict:
    """The GPSE checkpoint by content (a copied or renamed file still hits the cache)."""
    path = resolve_checkpoint(checkpoint)[0] if checkpoint else default_checkpoint_path()
    if not path.is_file():
        where = "the shipped default " if checkpoint is None else ""
        raise CheckpointError(f"{where}GPSE checkpoint {path} not found; set model.pe.checkpoint to a "
                              f"gpse-dgl best.pt or an authors' gpse_model_<name>_1.0.pt")
    return {"sha256": file_sha256(path), "default": checkpoint is None}
