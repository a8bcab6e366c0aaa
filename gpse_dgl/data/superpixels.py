"""MNIST / CIFAR10 superpixel graphs (benchmarking-gnns, Dwivedi et al.), read from disk, never downloading.

Layout: the benchmarking-gnns data as re-released for PyG (``MNIST_v2.zip`` / ``CIFAR10_v2.zip`` at
https://data.pyg.org/datasets/benchmarking-gnns, used by ``GNNBenchmarkDataset(root, "MNIST")``)::

    <root>/MNIST/raw/MNIST_v2.pt          <root>/CIFAR10/raw/CIFAR10_v2.pt

Each file is ``torch.save`` of ``[train, val, test]``, each a list of dicts of tensors with ``x``
(superpixel intensity / RGB, ``(n, 1)`` / ``(n, 3)``), ``pos`` (``(n, 2)`` centroid), ``edge_index``
(``(2, e)``, 8 nearest neighbours per node, stored one direction per k-NN relation), ``edge_attr``
(``(e,)`` or ``(e, 1)`` weight) and ``y`` (class). Read with ``torch.load(weights_only=True)``. (The
original benchmarking-gnns ``.pkl`` files pickle DGL-0.4 objects and are not supported.)

Graphs keep the stored edge directions (PSE/GPSE code symmetrises); ``ndata["feat"]`` is ``x`` and ``pos``
concatenated (float32, 3 / 5 columns, as GraphGPS' ``concat_x_and_pos``), ``ndata["pos"]`` the centroids,
``edata["feat"]`` the float32 edge weight ``(e, 1)``. Splits 55k/5k/10k (MNIST), 45k/5k/10k (CIFAR10);
10 classes, metric accuracy.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
from ._io import DatasetFormatError, find_dir, graph_from_edges, not_found, safe_torch_load
from .dataset import GraphDataset

__all__ = ["load_superpixels", "SUPERPIXEL_URL"]

SUPERPIXEL_URL = "https://data.pyg.org/datasets/benchmarking-gnns/{name}_v2.zip"
_SPLITS = ("train", "val", "test")


def _graph(d: dict):
    x = [torch.as_tensor(d[k]).float().reshape(len(d[k]), -1) for k in ("x", "pos") if d.get(k) is not None]
    if not x:
        raise KeyError("x/pos")
    ndata = {"feat": torch.cat(x, dim=1)}
    if d.get("pos") is not None:
        ndata["pos"] = torch.as_tensor(d["pos"]).float()
    ei = torch.as_tensor(d["edge_index"]).long()
    edata = {}
    if d.get("edge_attr") is not None:
        edata["feat"] = torch.as_tensor(d["edge_attr"]).float().reshape(ei.shape[1], -1)
    return graph_from_edges(len(ndata["feat"]), ei[0], ei[1], ndata, edata)


def load_superpixels(name: str, root) -> GraphDataset:
    """``"MNIST"`` or ``"CIFAR10"`` superpixel graphs from ``<root>/<NAME>/raw/<NAME>_v2.pt``."""
    root = Path(root)
    fname = f"{name}_v2.pt"
    folder = find_dir([root / name / "raw", root / name], [fname])
    if folder is None:
        raise not_found(name.lower(), root / name / "raw" / fname,
                        f"on a machine with internet download {SUPERPIXEL_URL.format(name=name)} and unzip it "
                        f"into {root / name / 'raw'} (or run python -c \"from torch_geometric.datasets import "
                        f"GNNBenchmarkDataset as D; D('DIR', '{name}')\" and copy DIR/{name})")
    parts = safe_torch_load(folder / fname)
    if not isinstance(parts, (list, tuple)) or len(parts) != 3:
        raise DatasetFormatError(f"{folder / fname} should hold [train, val, test] lists")
    graphs, labels, splits = [], [], {}
    for split, items in zip(_SPLITS, parts):
        start = len(graphs)
        try:
            for d in items:
                graphs.append(_graph(d))
                labels.append(int(torch.as_tensor(d["y"]).reshape(-1)[0]))
        except (KeyError, TypeError, IndexError, RuntimeError) as exc:
            raise DatasetFormatError(f"unexpected content in {folder / fname}: {exc!r}") from exc
        splits[split] = torch.arange(start, len(graphs))
    has_efeat = bool(graphs) and "feat" in graphs[0].edata
    return GraphDataset(
        graphs=graphs, labels=torch.tensor(labels, dtype=torch.long), splits=splits, name=name.lower(),
        task="graph", task_type="multiclass", metric="accuracy", num_tasks=1, num_classes=10,
        node_feat_key="feat", edge_feat_key="feat" if has_efeat else None,
        info={"source": str(folder), "node_feat_kind": "float", "edge_feat_kind": "float" if has_efeat else None,
              "directed": True})
