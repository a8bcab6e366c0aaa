"""EXP (Abboud et al. 2021): 600 pairs of 1-WL (and 2-WL) indistinguishable graphs, read from disk.

Layout: ``GRAPHSAT.txt`` from the ``Data/EXP`` folder of https://github.com/ralphabb/GNN-RNI (the text
version of the dataset, in the PPGN / GIN text format), at either of::

    <root>/EXP/raw/GRAPHSAT.txt
    <root>/SyntheticWL/exp/raw/GRAPHSAT.txt      (GPSE's ``SyntheticWL`` loader layout)

Format: first line the number of graphs; then per graph a line ``num_nodes label`` followed by one line
per node ``tag num_neighbours nbr_1 ... nbr_k`` (0-based neighbour ids). Graphs are stored bidirected and
simple; ``ndata["feat"]`` is the node tag (int64 ``(n, 1)``). Labels are 0/1 (``(G,)`` int64, 2 classes,
metric accuracy). Evaluation is stratified 5-fold CV: ``dataset.folds``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
from ..utils.graph import undirected_graph
from ._io import DatasetFormatError, find_dir, not_found
from .dataset import GraphDataset
from .splits import stratified_kfold

__all__ = ["load_exp", "read_graphsat_txt", "EXP_URL"]

EXP_URL = "https://github.com/ralphabb/GNN-RNI (folder Data/EXP)"


def read_graphsat_txt(path) -> tuple[list, list[int]]:
    """Graphs and labels of a PPGN/GIN-format text file (see the module docstring)."""
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        lines = [ln.split() for ln in f if ln.strip()]
    graphs, labels = [], []
    try:
        num_graphs, pos = int(lines[0][0]), 1
        for _ in range(num_graphs):
            n, label = int(lines[pos][0]), int(lines[pos][1])
            rows = lines[pos + 1: pos + 1 + n]
            if len(rows) != n:
                raise IndexError("file ends inside a graph")
            tags = np.array([int(r[0]) for r in rows], dtype=np.int64)
            src = [i for i, r in enumerate(rows) for _ in range(int(r[1]))]
            dst = [int(x) for r in rows for x in r[2: 2 + int(r[1])]]
            graphs.append(undirected_graph(n, np.asarray(src, np.int64), np.asarray(dst, np.int64),
                                           {"feat": torch.from_numpy(tags).reshape(-1, 1)}))
            labels.append(label)
            pos += 1 + n
    except (IndexError, ValueError) as exc:
        raise DatasetFormatError(f"cannot read {path}: {exc}") from exc
    return graphs, labels


def load_exp(root, seed: int = 0, k: int = 5) -> GraphDataset:
    """EXP from ``<root>/EXP/raw/GRAPHSAT.txt``; ``folds`` is stratified ``k``-fold CV seeded by ``seed``."""
    root = Path(root)
    cands = [root / "EXP" / "raw", root / "SyntheticWL" / "exp" / "raw", root / "EXP"]
    folder = find_dir(cands, ["GRAPHSAT.txt"])
    if folder is None:
        raise not_found("exp", cands[0] / "GRAPHSAT.txt",
                        f"on a machine with internet get GRAPHSAT.txt from {EXP_URL} and copy it there")
    graphs, labels = read_graphsat_txt(folder / "GRAPHSAT.txt")
    labels = torch.tensor(labels, dtype=torch.long)
    return GraphDataset(
        graphs=graphs, labels=labels, splits={}, name="exp", task="graph", task_type="multiclass",
        metric="accuracy", num_tasks=1, num_classes=2, node_feat_key="feat",
        folds=stratified_kfold(labels, k=k, seed=seed),
        info={"source": str(folder), "node_feat_kind": "categorical", "evaluation": f"stratified {k}-fold CV"})
