"""Partition one graph for distributed encoding: ``dgl.distributed.partition_graph`` plus our metadata.

The partitioned graph is the one a one-process encode uses: the simple undirected version of the input
(:func:`~gpse_dgl.utils.graph.as_simple_undirected`; ``undirected=False`` keeps the edges as given), with
no node or edge data. Besides DGL's files (``<name>.json``, ``part<i>/``) the output directory holds
``gpse_partition.json`` (the graph's size, the structural key that seeds its random input features, the
source file) and ``part<i>/orig_ids.npy`` (the original id of each node partition ``i`` owns, in DGL's
new-id order), so trainers draw every node the features one process draws for it.

The input is checked before anything is written: one graph with at least one edge (an edgeless graph
has nothing to exchange: encode it in one process) and at least one node per partition. ``method="random"``
deals the nodes out in a seeded random order (``seed``), so every partition gets ``N / parts`` nodes
(rounded) and the cut is the same on every machine (DGL's own draw depends on its thread count and may
leave a partition empty). The directory is written atomically
(:func:`~gpse_dgl.utils.io.atomic_directory`): an existing one is replaced only with ``overwrite``, and
then as a whole, so no ``part<i>/`` of an earlier cut into more partitions survives.

Example
-------
>>> import dgl, tempfile
>>> from gpse_dgl.distributed.partition import partition, read_partition_info
>>> out = tempfile.mkdtemp()
>>> info = partition(dgl.rand_graph(60, 240), out, parts=2, method="random")
>>> info["num_parts"], read_partition_info(out)["num_nodes"]
(2, 60)
"""
from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import numpy as np
import torch

from .. import _env, _private  # noqa: F401
import dgl

from ..nn.random_features import structure_keys
from ..utils.errors import GPSEError, InputDataError
from ..utils.graph import as_simple_undirected
from ..utils.io import atomic_directory

__all__ = ["INFO_FILE", "METHODS", "partition", "read_partition_info", "orig_ids_path"]

INFO_FILE = "gpse_partition.json"
METHODS = ("metis", "random")


def orig_ids_path(directory, part: int) -> Path:
    """File of the original ids of the nodes partition ``part`` owns."""
    return Path(directory) / f"part{part}" / "orig_ids.npy"


def partition(g: dgl.DGLGraph, out_dir, parts: int, method: str = "metis", undirected: bool = True,
              name: str = "graph", source: str | None = None, balance_edges: bool = True,
              quiet: bool = True, overwrite: bool = False, seed: int = 0) -> dict:
    """Cut ``g`` into ``parts`` partitions under ``out_dir``; returns the metadata written.

    Parameters
    ----------
    g : DGLGraph
        One graph (not a batch), on the CPU.
    out_dir : path
        Output directory (created); DGL's partition config is ``out_dir/<name>.json``.
    parts : int
        Number of partitions (one graph server each).
    method : str
        ``"metis"`` (fewer cut edges: smaller halos, less traffic) or ``"random"``.
    undirected : bool
        Partition the simple undirected version of ``g`` (what GPSE encodes by default).
    name : str
        DGL's graph name (the servers and trainers refer to it).
    source : str, optional
        Path of the input file, recorded so that gathered encodings can be attached to it.
    balance_edges : bool
        Ask METIS to balance in-edges as well as nodes.
    quiet : bool
        Swallow DGL's progress prints.
    overwrite : bool
        Replace an existing, non-empty ``out_dir`` (else a one-line error).
    seed : int
        Seed of ``method="random"``'s assignment.
    """
    if method not in METHODS:
        raise GPSEError(f"partition method {method!r}: expected one of {', '.join(METHODS)}")
    if parts < 1:
        raise GPSEError(f"--parts must be at least 1, got {parts}")
    if g.batch_size != 1:
        raise InputDataError(f"partitioning needs one graph, got a batch of {g.batch_size}")
    if g.num_nodes() < parts:
        raise InputDataError(f"a graph of {g.num_nodes()} nodes cannot be cut into {parts} partitions")
    prepared = as_simple_undirected(g) if undirected else g
    if prepared.num_edges() == 0:
        raise InputDataError(f"the graph ({g.num_nodes():,} nodes) has no edges{' besides self-loops' if g.num_edges() else ''}: "
                             f"nothing to exchange between machines; encode it in one process (gpse-dgl encode)")
    key = structure_keys(prepared)[0]
    bare = dgl.graph(prepared.edges(), num_nodes=prepared.num_nodes())
    dealt = _random_assignment(bare.num_nodes(), parts, seed) if method == "random" else None
    with atomic_directory(out_dir, overwrite) as out:
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext(), \
                _private.dgl_random_partition(dealt) if dealt is not None else contextlib.nullcontext() as fixed:
            if dealt is not None and not fixed:
                raise GPSEError("--method random: this DGL release draws the assignment itself; use --method metis")
            orig_nids, _ = dgl.distributed.partition_graph(
                bare, name, parts, str(out), part_method=method, balance_edges=balance_edges and method == "metis",
                return_mapping=True)
        config = json.loads((out / f"{name}.json").read_text())
        ranges = config["node_map"]["_N"]
        orig_nids = np.asarray(orig_nids, dtype=np.int64)
        for part, (start, stop) in enumerate(ranges):
            np.save(orig_ids_path(out, part), orig_nids[start:stop])
        info = {"format": 1, "graph_name": name, "part_config": f"{name}.json", "num_parts": parts,
                "method": method, "num_nodes": int(bare.num_nodes()), "num_edges": int(bare.num_edges()),
                "undirected": bool(undirected), "feature_key": int(key),
                "source": None if source is None else os.path.abspath(source),
                "part_nodes": [int(stop - start) for start, stop in ranges]}
        (out / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")
    return info


def _random_assignment(num_nodes: int, parts: int, seed: int) -> torch.Tensor:
    """Partition of each node: ``0, 1, ..., parts - 1, 0, 1, ...`` dealt in a seeded random node order."""
    order = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(seed))
    assignment = torch.empty(num_nodes, dtype=torch.int64)
    assignment[order] = torch.arange(num_nodes) % parts
    return assignment


def read_partition_info(directory) -> dict:
    """The metadata :func:`partition` wrote in ``directory`` (one-line error if it is not there)."""
    path = Path(directory) / INFO_FILE
    if not path.is_file():
        raise GPSEError(f"{directory}: not a gpse-dgl partition directory (no {INFO_FILE}; "
                        f"make one with `gpse-dgl partition GRAPH --parts N --out {directory}`)")
    info = json.loads(path.read_text())
    info["directory"] = str(Path(directory).resolve())
    info["part_config_path"] = str(Path(directory).resolve() / info["part_config"])
    return info


def orig_ids(directory, part: int) -> torch.Tensor:
    """Original ids of partition ``part``'s nodes, in DGL's new-id order."""
    return torch.from_numpy(np.load(orig_ids_path(directory, part)))
