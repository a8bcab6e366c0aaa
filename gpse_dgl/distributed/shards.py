"""The output of a distributed encoding: one shard per trainer, a manifest, a reader and a gather.

``OUT/shard-<rank>.bin`` is a DGL binary file (``dgl.load_graphs`` opens it) holding one edgeless graph
whose nodes are the trainer's nodes: ``ndata["gpse"]`` their encodings, ``ndata["orig_id"]`` their ids
in the input graph. ``OUT/manifest.json`` lists the shards with the graph's size and the seed.
:func:`read_encodings` returns the ``(N, d)`` encodings in the input graph's node order (checking that
every node appears once); :func:`gather` writes them into one ``dgl.save_graphs`` file, on the input
graph when it is given or recorded by ``gpse-dgl partition``, else on an edgeless graph of ``N`` nodes;
a graph whose structure key (:func:`~gpse_dgl.nn.random_features.structure_keys`) is not the one the
partition recorded (e.g. a source file replaced by another graph of the same size) is refused.
Shards can also be used as they are: each is a self-contained slice of the result.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from .. import _env  # noqa: F401
import dgl

from ..nn.random_features import structure_keys
from ..utils.errors import GPSEError, InputDataError
from ..utils.graph import as_simple_undirected
from ..utils.io import save_graphs_atomic

__all__ = ["MANIFEST", "shard_path", "write_shard", "write_manifest", "read_manifest", "read_shard",
           "read_encodings", "gather"]

MANIFEST = "manifest.json"


def shard_path(out_dir, rank: int) -> Path:
    return Path(out_dir) / f"shard-{rank:05d}.bin"


def write_shard(out_dir, rank: int, orig_ids: torch.Tensor, encodings: torch.Tensor) -> Path:
    """Write one trainer's encodings (rows in ``orig_ids`` order)."""
    os.makedirs(out_dir, exist_ok=True)
    g = dgl.graph(([], []), num_nodes=len(orig_ids))
    g.ndata["gpse"] = encodings
    g.ndata["orig_id"] = torch.as_tensor(orig_ids, dtype=torch.int64)
    path = shard_path(out_dir, rank)
    tmp = path.with_suffix(".tmp")
    dgl.save_graphs(str(tmp), [g])
    os.replace(tmp, path)
    return path


def write_manifest(out_dir, info: dict, shards: int, dim: int, seed: int) -> None:
    manifest = {"format": 1, "num_nodes": info["num_nodes"], "dim": dim, "seed": seed, "shards": shards,
                "files": [shard_path(".", r).name for r in range(shards)], "source": info.get("source"),
                "partition": info.get("directory"), "feature_key": info.get("feature_key"),
                "undirected": info.get("undirected", True)}
    (Path(out_dir) / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def read_manifest(out_dir) -> dict:
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        raise GPSEError(f"{out_dir}: no {MANIFEST} (not the output of a finished `gpse-dgl launch`)")
    return json.loads(path.read_text())


def read_shard(path) -> tuple:
    """``(orig_ids, encodings)`` of one shard file."""
    graphs, _ = dgl.load_graphs(str(path))
    return graphs[0].ndata["orig_id"], graphs[0].ndata["gpse"]


def read_encodings(out_dir) -> torch.Tensor:
    """All encodings, ``(N, d)`` float32 in the input graph's node order."""
    manifest = read_manifest(out_dir)
    n = manifest["num_nodes"]
    out = torch.empty(n, manifest["dim"])
    seen = torch.zeros(n, dtype=torch.bool)
    for name in manifest["files"]:
        ids, enc = read_shard(Path(out_dir) / name)
        if seen[ids].any():
            raise InputDataError(f"{out_dir}/{name}: a node appears in two shards")
        out[ids] = enc
        seen[ids] = True
    if not bool(seen.all()):
        raise InputDataError(f"{out_dir}: {int((~seen).sum())} of {n} nodes are in no shard")
    return out


def gather(out_dir, path, graph: dgl.DGLGraph | None = None, use_source: bool = True) -> Path:
    """Write the encodings as ``ndata["gpse"]`` of one graph into the DGL binary file ``path``.

    The graph is ``graph``, else the input file ``gpse-dgl partition`` recorded (when ``use_source`` and
    it still exists), else an edgeless graph of ``N`` nodes.
    """
    manifest = read_manifest(out_dir)
    encodings = read_encodings(out_dir)
    labels = {}
    if graph is None and use_source and manifest.get("source") and os.path.isfile(manifest["source"]):
        graphs, labels = dgl.load_graphs(manifest["source"])
        graph = graphs[0] if len(graphs) == 1 else None
    if graph is None:
        graph = dgl.graph(([], []), num_nodes=manifest["num_nodes"])
    if graph.num_nodes() != manifest["num_nodes"]:
        raise InputDataError(f"the graph has {graph.num_nodes()} nodes, the encodings {manifest['num_nodes']}")
    if graph.num_edges():
        _check_structure(graph, manifest, out_dir)
    graph.ndata["gpse"] = encodings
    save_graphs_atomic(path, [graph], labels or None)
    return Path(path)


def _check_structure(graph: dgl.DGLGraph, manifest: dict, out_dir) -> None:
    """The graph must be the partitioned one: its structure key is the one recorded (when recorded)."""
    recorded = manifest.get("feature_key")
    if recorded is None:
        return
    key = structure_keys(as_simple_undirected(graph) if manifest.get("undirected", True) else graph)[0]
    if int(key) != int(recorded):
        where = manifest.get("source") or "the graph"
        raise InputDataError(f"{where} is not the graph that was partitioned (structure key {int(key)}, the "
                             f"partition's {int(recorded)}): not attaching the encodings of {out_dir} to it")
