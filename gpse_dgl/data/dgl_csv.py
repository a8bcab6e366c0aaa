"""DGL's own custom-data format (``dgl.data.CSVDataset``: ``meta.yaml`` + ``nodes.csv`` / ``edges.csv`` /
``graphs.csv``) as a :class:`~gpse_dgl.data.dataset.GraphDataset`.

Names: ``csv-dir:PATH`` wherever a dataset is named, or ``data.name: dgl-csv`` with ``data.path`` in
downstream recipes. DGL parses the directory (its rules: ``graph_id`` / ``node_id`` / ``src_id`` /
``dst_id`` columns, other columns become ``ndata`` / ``edata`` / graph data, quoted comma-separated
values become vectors); here it always re-reads the CSV files and writes nothing next to them (DGL's
own cache would not notice edited files).

Targets (``target_columns``, default ``["label"]``):

* graph-level when ``graphs.csv`` (``graph_data`` in ``meta.yaml``) has the columns: one row per graph;
* node-level otherwise, from the columns of the node file of a single graph; node splits come from
  its ``train_mask`` / ``val_mask`` / ``test_mask`` columns when all three are there.

Missing columns are one-line errors naming the file and the column. Input features: a ``feat`` column
(:func:`gpse_dgl.data.user_data.feature_kinds`). Task and split as in :mod:`gpse_dgl.data.user_data`.

Example
-------
>>> ds = load_csv_dir("tests/fixtures/dgl_csv/graphs")           # doctest: +SKIP
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Sequence

import torch

from .. import _env  # noqa: F401
import dgl

from ..utils.errors import DatasetNotFoundError, GPSEError
from ._io import DatasetFormatError
from .dataset import GraphDataset
from .splits import parse_split
from .user_data import labelled_dataset

__all__ = ["load_csv_dir", "read_csv_dir"]

_MASKS = {"train": "train_mask", "val": "val_mask", "test": "test_mask"}


def read_csv_dir(path) -> tuple[list, dict, dict]:
    """``(graphs, graph_data, files)`` parsed by ``dgl.data.CSVDataset``; ``files`` names the graph and
    node files of ``meta.yaml`` (for messages)."""
    path = Path(os.fspath(path)).expanduser()
    if not (path / "meta.yaml").is_file():
        raise DatasetNotFoundError(f"{path}: no meta.yaml (a dgl.data.CSVDataset directory holds meta.yaml, "
                                   "nodes.csv, edges.csv and optionally graphs.csv)")
    # Always parse the CSV files, never read or write DGL's processed copy beside them.
    uncached = type("UncachedCSVDataset", (dgl.data.CSVDataset,),
                    {"has_cache": lambda self: False, "save": lambda self: None})
    try:
        with warnings.catch_warnings():  # DGL wraps read-only numpy arrays; the tensors are not written to
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            ds = uncached(str(path), verbose=False)
    except Exception as exc:  # noqa: BLE001 - DGL's own message (DGLError, pydantic, pandas), in one line
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise DatasetFormatError(f"{path}: {reason[:300]}") from None
    meta = ds.meta_yaml
    files = {"graph": str(path / meta.graph_data.file_name) if meta.graph_data is not None else None,
             "node": [str(path / n.file_name) for n in meta.node_data]}
    return list(ds.graphs), dict(ds.data or {}), files


def _columns(store: dict, names: Sequence[str], where: str) -> torch.Tensor:
    missing = [n for n in names if n not in store]
    if missing:
        raise DatasetFormatError(f"{where}: no column {missing[0]!r} (columns: "
                                 f"{', '.join(k for k in store) or 'none'})")
    return torch.cat([store[n].reshape(store[n].shape[0], -1).double() for n in names], dim=1)


def load_csv_dir(root=None, path=None, target_columns: Sequence[str] | None = None, task: str = "auto",
                 split: str = "random", split_seed: int = 0, **_) -> GraphDataset:
    """``csv-dir:PATH`` / ``data.name: dgl-csv``: a CSVDataset directory with targets (module docstring)."""
    if not path:
        raise GPSEError("data.path: the CSVDataset directory to read is not set")
    graphs, graph_data, files = read_csv_dir(path)
    names = list(target_columns or ["label"])
    _, split_column = parse_split(split)
    name = f"csv-dir-{Path(os.fspath(path)).name}"
    info = {"source": str(path), "targets": names}
    if files["graph"] is not None and any(n in graph_data for n in names):
        labels = _columns(graph_data, names, files["graph"])
        split_values = None if split_column is None else _columns(graph_data, [split_column], files["graph"])
        return labelled_dataset(graphs, labels, name, task=task, split=split, split_seed=split_seed,
                                split_values=None if split_values is None else split_values.reshape(-1).tolist(),
                                info=info)
    where = ", ".join(files["node"]) or "the node file"
    if len(graphs) != 1:
        where = files["graph"] or "meta.yaml graph_data"
        _columns(graph_data, names, where)  # raises: names the graph file and the missing column
    graph = graphs[0]
    labels = _columns(graph.ndata, names, where)
    splits = None
    if split_column is None and split == "random" and all(m in graph.ndata for m in _MASKS.values()):
        splits = {s: torch.nonzero(graph.ndata[m].reshape(-1).bool()).reshape(-1) for s, m in _MASKS.items()}
    split_values = None if split_column is None else _columns(graph.ndata, [split_column], where).reshape(-1).tolist()
    return labelled_dataset(graphs, labels, name, task=task, level="node", split=split, split_seed=split_seed,
                            splits=splits, split_values=split_values, info=info)
