"""The one in-memory container every loader returns.

A :class:`GraphDataset` is a plain record: DGL graphs, their targets, named index splits and the task
description a trainer needs (level, task type, metric, number of tasks/classes, feature keys).

Conventions (all loaders follow them, so trainers need no per-dataset code):

* ``task == "graph"``: ``labels`` has one row per graph, ``splits`` hold graph indices, and
  ``dataset[i]`` is ``(graphs[i], labels[i])``.
* ``task == "node"``: there is exactly one graph, ``labels`` has one row per node, ``splits`` hold node
  indices, and ``dataset[0]`` is ``(graph, labels)``.
* ``task_type`` is ``"binary"`` (possibly multi-task, float32 0/1 labels of shape ``(*, T)``, NaN where a
  label is missing), ``"multiclass"`` (int64 labels of shape ``(*,)``), ``"regression"`` (float32
  ``(*, T)``) or ``"none"`` (unlabelled graphs, e.g. pretraining sources; ``labels is None``).
* ``metric`` is one of ``"rocauc"``, ``"ap"``, ``"accuracy"``, ``"mae"``, ``"rmse"`` or None.
* Node / edge input features, when a dataset has them, are ``g.ndata["feat"]`` / ``g.edata["feat"]``
  (``node_feat_key`` / ``edge_feat_key`` say so, else they are None). ``info["node_feat_kind"]`` tells how
  to embed them: ``"ogb-atom"`` / ``"ogb-bond"`` (OGB's 9 / 3 categorical columns, use OGB's
  Atom/BondEncoder vocabularies), ``"categorical"`` (int64 ids, one column) or ``"float"``.
* ``groups`` names subsets of the graphs as boolean masks over all graphs (e.g. MoleculeACE's
  activity-cliff compounds, ``{"cliff": mask}``); the downstream trainer scores every split on each
  group's members too.
* Datasets evaluated by cross-validation (CSL, EXP) have empty ``splits`` and a list ``folds`` of
  ``{"train", "val", "test"}`` index dicts instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = ["GraphDataset", "TASK_TYPES", "METRICS", "random_split"]

TASK_TYPES = ("binary", "multiclass", "regression", "none")
METRICS = ("rocauc", "ap", "accuracy", "mae", "rmse", None)


@dataclass
class GraphDataset:
    """Graphs, targets, splits and task description of one dataset.

    Parameters
    ----------
    graphs : list of dgl.DGLGraph
        The graphs; a node-level dataset holds exactly one.
    labels : torch.Tensor or None
        Graph-level: ``(G, T)`` float32 or ``(G,)`` int64; node-level: ``(N, T)`` or ``(N,)``; None when
        unlabelled.
    splits : dict of str to torch.LongTensor
        Named index sets (usually ``"train"``, ``"val"``, ``"test"``) of graph or node indices.
    name : str
        Registered dataset name.
    task : {"graph", "node"}
        Prediction level.
    task_type : {"binary", "multiclass", "regression", "none"}
        See the module docstring.
    metric : str or None
        Evaluation metric name, see the module docstring.
    num_tasks : int
        Number of target columns (1 for multiclass).
    num_classes : int or None
        Classes of a multiclass task (2 for binary tasks, None for regression).
    node_feat_key, edge_feat_key : str or None
        ``"feat"`` when graphs carry input features under that key, else None.
    folds : list of dict or None
        Cross-validation folds (each ``{"train", "val", "test"}`` -> LongTensor) for CV datasets.
    groups : dict of str to torch.BoolTensor
        Named subsets of the graphs, one mask over all graphs each (module docstring).
    info : dict
        Free-form metadata: source path, target names, feature kinds, ...
    """

    graphs: list
    labels: torch.Tensor | None
    splits: dict[str, torch.Tensor]
    name: str
    task: str = "graph"
    task_type: str = "multiclass"
    metric: str | None = "accuracy"
    num_tasks: int = 1
    num_classes: int | None = None
    node_feat_key: str | None = None
    edge_feat_key: str | None = None
    folds: list[dict[str, torch.Tensor]] | None = None
    groups: dict[str, torch.Tensor] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.task not in ("graph", "node"):
            raise ValueError(f"task must be 'graph' or 'node', got {self.task!r}")
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"task_type must be one of {TASK_TYPES}, got {self.task_type!r}")
        if self.task == "node" and len(self.graphs) != 1:
            raise ValueError(f"a node-level dataset holds one graph, got {len(self.graphs)}")
        if self.labels is not None and self.task == "graph" and len(self.labels) != len(self.graphs):
            raise ValueError(f"{len(self.labels)} label rows for {len(self.graphs)} graphs")
        self.splits = {k: torch.as_tensor(v, dtype=torch.long) for k, v in self.splits.items()}
        self.groups = {k: torch.as_tensor(v, dtype=torch.bool) for k, v in self.groups.items()}
        for key, mask in self.groups.items():
            if mask.shape != (len(self.graphs),):
                raise ValueError(f"group {key!r}: a mask over the {len(self.graphs)} graphs is needed, "
                                 f"got shape {tuple(mask.shape)}")

    def __len__(self) -> int:
        """Number of graphs (1 for node-level datasets)."""
        return len(self.graphs)

    def __getitem__(self, idx: int):
        """``(graph, label)``; for node-level datasets ``(graph, all node labels)``."""
        graph = self.graphs[idx]
        if self.labels is None:
            return graph, None
        if self.task == "node":
            return graph, self.labels
        return graph, self.labels[idx]

    @property
    def graph(self):
        """The single graph of a node-level dataset."""
        if self.task != "node":
            raise AttributeError(f"{self.name} is a graph-level dataset; use .graphs")
        return self.graphs[0]

    def subset(self, split: str) -> "GraphDataset":
        """Graph-level dataset restricted to the graphs of ``splits[split]`` (labels follow; no splits)."""
        if self.task != "graph":
            raise ValueError(f"{self.name} is node-level: index its labels with splits[{split!r}] instead")
        if split not in self.splits:
            raise KeyError(f"{self.name} has no split {split!r} (has {sorted(self.splits)})")
        idx = self.splits[split]
        return GraphDataset(
            graphs=[self.graphs[i] for i in idx.tolist()],
            labels=None if self.labels is None else self.labels[idx],
            splits={}, name=f"{self.name}[{split}]", task=self.task, task_type=self.task_type,
            metric=self.metric, num_tasks=self.num_tasks, num_classes=self.num_classes,
            node_feat_key=self.node_feat_key, edge_feat_key=self.edge_feat_key,
            groups={k: m[idx] for k, m in self.groups.items()}, info=dict(self.info))

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v)}" for k, v in self.splits.items())
        folds = f", folds={len(self.folds)}" if self.folds else ""
        return (f"GraphDataset({self.name!r}, {len(self.graphs)} graphs, task={self.task}/{self.task_type}, "
                f"metric={self.metric}, num_tasks={self.num_tasks}, splits=({sizes}){folds})")


def random_split(num_items: int, fractions=(0.8, 0.1, 0.1), seed: int = 0,
                 names=("train", "val", "test")) -> dict[str, torch.Tensor]:
    """Seeded random partition of ``range(num_items)`` into named parts of the given fractions.

    Parameters
    ----------
    num_items : int
        Number of items to split.
    fractions : sequence of float
        One fraction per name; they are normalised, the last part takes the rounding remainder.
    seed : int
        Seed of the permutation (``numpy.random.default_rng``).
    names : sequence of str
        Names of the parts.
    """
    if len(fractions) != len(names):
        raise ValueError("one fraction per split name is needed")
    frac = np.asarray(fractions, dtype=np.float64)
    frac = frac / frac.sum()
    perm = np.random.default_rng(seed).permutation(num_items)
    bounds = np.floor(np.cumsum(frac)[:-1] * num_items).astype(np.int64)
    parts = np.split(perm, bounds)
    return {n: torch.from_numpy(np.sort(p)).long() for n, p in zip(names, parts)}
