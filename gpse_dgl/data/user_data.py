"""Your own labelled data as a :class:`~gpse_dgl.data.dataset.GraphDataset`: a CSV of SMILES, a DGL binary
file, or any graphs and targets (:func:`labelled_dataset`, which the ``dgl:`` and ``csv-dir:`` loaders
share).

Registered names (``data.name`` in downstream recipes, with ``data.path``):

``csv``
    a molecule table (:mod:`gpse_dgl.data.tables`: CSV / TSV, SD or SMILES file). Each valid SMILES
    becomes a graph with OGB's atom and bond features (``ogb.utils.smiles2graph``); invalid ones are
    skipped and listed (``info["invalid_records"]``, ``info["record_index"]`` maps graphs to file
    records). Targets: ``target_columns`` (default every numeric column other than the split column;
    the others are listed in ``info["text_columns"]`` with their first record that is not a number). A
    target that is infinite (``inf``, ``1e400``) is refused, naming its record and column; an empty cell
    is a missing value.
``dgl-bin``
    a ``dgl.save_graphs`` file whose labels dict holds the targets: graph-level when a tensor has one
    row per graph, node-level when the file holds one graph and the tensor one row per node. Targets:
    ``target_columns`` = labels-dict keys (default: the only key, or ``label``). Input features are
    ``ndata["feat"]`` / ``edata["feat"]`` when present.

Task (``task``): ``regression``; ``classification`` (one integer column: multiclass scored by accuracy,
or binary scored by ROC-AUC when its values are 0 / 1; several 0 / 1 columns: multi-task binary); or
``auto``: classification when every target is an integer, else regression. Splits (``split``):
:mod:`gpse_dgl.data.splits` (``random`` 80 / 10 / 10 with ``split_seed``, ``scaffold``, ``column:<name>``).

Example
-------
>>> import dgl, torch
>>> graphs = [dgl.rand_graph(5, 10) for _ in range(20)]
>>> ds = labelled_dataset(graphs, torch.arange(20.0).reshape(-1, 1) / 3, "toy")
>>> ds.task_type, ds.metric, sorted(len(v) for v in ds.splits.values())
('regression', 'mae', [2, 2, 16])
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch

from .. import _env  # noqa: F401
import dgl

from ..utils.errors import DatasetNotFoundError, GPSEError
from ._io import DatasetFormatError, ogb_smiles_graph
from .dataset import GraphDataset
from .splits import make_split, parse_split
from .tables import read_molecule_table

__all__ = ["TASKS", "USER_DATA_NAMES", "labelled_dataset", "infer_task_type", "feature_kinds",
           "load_csv_dataset", "load_dgl_bin_dataset", "recipe_data_options"]

TASKS = ("auto", "regression", "classification")
#: Dataset names whose files are given by ``data.path`` (``dgl-csv`` is :mod:`gpse_dgl.data.dgl_csv`).
USER_DATA_NAMES = ("csv", "dgl-bin", "dgl-csv")


def infer_task_type(targets: torch.Tensor, task: str = "auto") -> str:
    """``"regression"``, ``"multiclass"`` or ``"binary"`` for ``(N, T)`` targets (module docstring)."""
    if task not in TASKS:
        raise GPSEError(f"data.task: expected one of {', '.join(TASKS)}, got {task!r}")
    known = targets[~torch.isnan(targets)] if targets.is_floating_point() else targets
    integral = bool(known.numel()) and bool((known == known.round()).all())
    if task == "regression" or (task == "auto" and not integral):
        return "regression"
    if not integral:
        raise GPSEError("data.task: classification needs integer targets (class ids, or 0 / 1 per task)")
    binary = bool(((known == 0) | (known == 1)).all())
    if targets.shape[1] > 1:
        if not binary:
            raise GPSEError(f"data.task: {targets.shape[1]} target columns need 0 / 1 values (multi-task "
                            "binary classification)")
        return "binary"
    if targets.is_floating_point() and bool(torch.isnan(targets).any()):
        raise GPSEError("data.task: a class-id column cannot have missing values")
    if bool((known < 0).any()):
        raise GPSEError("data.task: class ids must be >= 0")
    return "binary" if binary else "multiclass"


def _as_targets(labels: torch.Tensor, task_type: str) -> tuple[torch.Tensor, int, int | None, str]:
    """Labels in :class:`GraphDataset`'s convention, the number of tasks and classes, and the metric."""
    if task_type == "regression":
        return labels.float(), labels.shape[1], None, "mae"
    if task_type == "binary":
        return labels.float(), labels.shape[1], 2, "rocauc"
    classes = labels.reshape(-1).long()
    return classes, 1, int(classes.max()) + 1 if classes.numel() else 1, "accuracy"


def feature_kinds(graphs: Sequence) -> dict:
    """``node_feat_kind`` / ``edge_feat_kind`` of ``ndata["feat"]`` / ``edata["feat"]``: ``"categorical"``
    for one integer column (flattened in place to ``(n,)``), ``"float"`` otherwise; absent keys omitted."""
    info = {}
    for store, kind_key in (("ndata", "node_feat_kind"), ("edata", "edge_feat_kind")):
        first = next((getattr(g, store)["feat"] for g in graphs if "feat" in getattr(g, store)), None)
        if first is None or not all("feat" in getattr(g, store) for g in graphs):
            continue
        if first.is_floating_point():
            info[kind_key] = "float"
            for g in graphs:
                getattr(g, store)["feat"] = getattr(g, store)["feat"].float()
        elif first.dim() == 1 or (first.dim() == 2 and first.shape[1] == 1):
            info[kind_key] = "categorical"
            for g in graphs:
                getattr(g, store)["feat"] = getattr(g, store)["feat"].reshape(-1).long()
        else:
            info[kind_key] = "float"  # several integer columns (counts, one-hot): fed to a linear encoder
            for g in graphs:
                getattr(g, store)["feat"] = getattr(g, store)["feat"].float()
    return info


def labelled_dataset(graphs: list, labels: torch.Tensor, name: str, task: str = "auto", level: str = "graph",
                     split: str = "random", split_seed: int = 0, splits: dict | None = None,
                     smiles: Sequence[str] | None = None, split_values: Sequence | None = None,
                     info: dict | None = None) -> GraphDataset:
    """A :class:`GraphDataset` from graphs and ``(items, T)`` targets (``items`` = graphs, or the nodes of
    the one graph when ``level == "node"``).

    ``splits`` given are used as they are; otherwise ``split`` (``random`` / ``scaffold`` with
    ``smiles`` / ``column:<name>`` with ``split_values``) makes them. ``ndata["feat"]`` /
    ``edata["feat"]`` become the input features (:func:`feature_kinds`) unless ``info`` names kinds.
    """
    labels = labels.reshape(labels.shape[0], -1)
    _refuse_non_finite(labels, name, level, (info or {}).get("targets"))
    task_type = infer_task_type(labels, task)
    targets, num_tasks, num_classes, metric = _as_targets(labels, task_type)
    if splits is None:
        kind, _ = parse_split(split)
        splits = make_split(kind, len(targets), seed=split_seed, smiles=smiles, column=split_values)
    info = dict(info or {})
    if "node_feat_kind" not in info and "edge_feat_kind" not in info:
        info.update(feature_kinds(graphs))
    return GraphDataset(
        graphs=list(graphs), labels=targets, splits=splits, name=name, task=level, task_type=task_type,
        metric=metric, num_tasks=num_tasks, num_classes=num_classes,
        node_feat_key="feat" if info.get("node_feat_kind") else None,
        edge_feat_key="feat" if info.get("edge_feat_kind") else None, info=info)


def _refuse_non_finite(labels: torch.Tensor, name: str, level: str, targets) -> None:
    """Infinite targets are refused before training (NaN is a missing value, kept)."""
    if not labels.is_floating_point():
        return
    bad = torch.isinf(labels).nonzero()
    if len(bad):
        row, column = bad[0].tolist()
        label = targets[column] if targets and column < len(targets) else column
        raise GPSEError(f"{name}: target {label!r}, {level} {row}: {labels[row, column].item()} is not a finite "
                        f"number (a target must be finite)")


def _require_file(path, what: str) -> Path:
    if not path:
        raise GPSEError(f"data.path: the {what} to read is not set")
    path = Path(os.fspath(path)).expanduser()
    if not path.exists():
        raise DatasetNotFoundError(f"dataset file {path} not found (data.path: the {what})")
    return path


def load_csv_dataset(root=None, path=None, smiles_column: str | None = None,
                     target_columns: Sequence[str] | None = None, task: str = "auto", split: str = "random",
                     split_seed: int = 0) -> GraphDataset:
    """``data.name: csv``: molecules of a table file with targets from its columns (module docstring)."""
    from .molecules import quiet_rdkit  # rdkit (through .molecules): a heavy import
    from .tables import columns_note

    table = read_molecule_table(_require_file(path, "molecule table"), smiles_column)
    kind, split_column = parse_split(split)
    split_values = table.column(split_column) if split_column else None
    not_numbers = {k: v for k, v in table.text_columns().items() if k != split_column}
    if target_columns:
        columns = table.numeric_columns(list(target_columns))
        not_numbers = {}  # the user chose the targets: the other columns are not dropped from anything
    else:
        columns = {k: v for k, v in table.numeric_columns().items() if k != split_column}
        if not columns:
            raise DatasetFormatError(f"{table.path}: no numeric column to use as target (not numbers: "
                                     f"{columns_note(not_numbers) or 'no columns'}); set data.target_columns")
    graphs, kept = [], []
    with quiet_rdkit():
        for index, text in enumerate(table.smiles):
            graph = ogb_smiles_graph(text) if text else None
            if graph is not None:
                graphs.append(graph)
                kept.append(index)
    if not graphs:
        raise DatasetFormatError(f"{table.path}: no valid SMILES in column {table.smiles_column or 1}")
    rows = torch.tensor(kept, dtype=torch.long)
    labels = torch.stack([values[rows] for values in columns.values()], dim=1)
    _refuse_infinite(table, list(columns), labels, kept)
    invalid = sorted(set(range(len(table))) - set(kept))
    return labelled_dataset(
        graphs, labels, f"csv-{Path(table.path).stem}", task=task, split=split, split_seed=split_seed,
        smiles=[table.smiles[i] for i in kept],
        split_values=None if split_values is None else [split_values[i] for i in kept],
        info={"source": table.path, "targets": list(columns), "invalid": len(invalid), "invalid_records": invalid,
              "text_columns": not_numbers, "record_index": kept, "node_feat_kind": "ogb-atom",
              "edge_feat_kind": "ogb-bond"})


def _refuse_infinite(table, names: list, labels: torch.Tensor, records: list) -> None:
    """A one-line error naming the first infinite target's record and column (a model cannot fit it, and
    every metric of the run would be NaN)."""
    bad = torch.isinf(labels).nonzero()
    if len(bad):
        row, column = bad[0].tolist()
        name, record = names[column], records[row]
        raise DatasetFormatError(f"{table.path}: column {name!r}, record {record}: {table.columns[name][record]!r} "
                                 f"is not a finite number (a target must be finite; leave the cell empty for a "
                                 f"missing value)")


def _target_keys(labels: dict, target_columns, path: Path, skip: str | None) -> list[str]:
    if target_columns:
        missing = [k for k in target_columns if k not in labels]
        if missing:
            raise DatasetFormatError(f"{path}: no labels entry {missing[0]!r} (has: {', '.join(labels) or 'none'})")
        return list(target_columns)
    candidates = [k for k in labels if k != skip]
    if len(candidates) == 1:
        return candidates
    if "label" in candidates:
        return ["label"]
    raise DatasetFormatError(f"{path}: set data.target_columns to the labels entries to train on "
                             f"(has: {', '.join(labels) or 'none'})")


def load_dgl_bin_dataset(root=None, path=None, target_columns: Sequence[str] | None = None, task: str = "auto",
                         split: str = "random", split_seed: int = 0, **_) -> GraphDataset:
    """``data.name: dgl-bin``: graphs of a ``dgl.save_graphs`` file, targets from its labels dict."""
    path = _require_file(path, "DGL binary file")
    try:
        graphs, labels = dgl.load_graphs(str(path))
    except Exception as exc:  # noqa: BLE001 - DGL raises assorted errors for foreign files
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DatasetFormatError(f"{path}: not a DGL graph file ({reason[:100]})") from None
    if not graphs:
        raise DatasetFormatError(f"{path}: holds no graphs")
    _, split_key = parse_split(split)
    keys = _target_keys(labels, target_columns, path, split_key)
    values = [labels[k].reshape(labels[k].shape[0], -1) for k in keys]
    rows = {v.shape[0] for v in values}
    if rows == {len(graphs)}:
        level = "graph"
    elif len(graphs) == 1 and rows == {graphs[0].num_nodes()}:
        level = "node"
    else:
        raise DatasetFormatError(f"{path}: labels {keys} have {sorted(rows)} rows; expected one per graph "
                                 f"({len(graphs)}) or, for one graph, one per node")
    split_values = None
    if split_key is not None:
        if split_key not in labels:
            raise DatasetFormatError(f"{path}: no labels entry {split_key!r} for data.split")
        split_values = labels[split_key].reshape(-1).tolist()
    return labelled_dataset(graphs, torch.cat([v.double() for v in values], dim=1), f"dgl-bin-{path.stem}",
                            task=task, level=level, split=split, split_seed=split_seed, split_values=split_values,
                            info={"source": str(path), "targets": keys})


def recipe_data_options(data: dict) -> dict:
    """Keyword arguments of :func:`gpse_dgl.data.registry.load_dataset` for a recipe's ``data`` section:
    the file and target settings of the user-data names, nothing for the others."""
    name = str(data.get("name", "")).strip().lower()
    in_name = name.startswith("csv-dir:")  # the directory is part of the name
    if name not in USER_DATA_NAMES and not in_name:
        return {}
    options = {"target_columns": data.get("target_columns") or None, "task": data.get("task", "auto"),
               "split": data.get("split", "random"), "split_seed": data.get("split_seed", 0)}
    if not in_name:
        options["path"] = data.get("path")
    if name == "csv":
        options["smiles_column"] = data.get("smiles_column")
    return options
