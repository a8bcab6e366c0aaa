"""OGB graph- and node-property datasets read from OGB's on-disk layout, never downloading.

Expected layout (what ``ogb.graphproppred.GraphPropPredDataset(name, root)`` /
``ogb.nodeproppred.NodePropPredDataset(name, root)`` leave behind, or OGB's zip extracted and renamed)::

    <root>/<name with '-' replaced by '_'>/         e.g. <root>/ogbg_molhiv, <root>/ogbn_arxiv
        raw/edge.csv.gz                 (E, 2) int: per-graph local node ids, one row per stored edge
        raw/num-node-list.csv.gz        (G,) nodes per graph
        raw/num-edge-list.csv.gz        (G,) edges per graph
        raw/node-feat.csv.gz            optional (N, F)   (molecules: 9 categorical atom features)
        raw/edge-feat.csv.gz            optional (E, F)   (molecules: 3 categorical bond features)
        raw/graph-label.csv.gz          graph sets: (G, T), empty cells = missing labels
        raw/node-label.csv.gz           node sets: (N, T)
        raw/node_year.csv.gz            ogbn-arxiv, ogbn-mag (publication year)
        raw/node_species.csv.gz         ogbn-proteins (``species.csv.gz`` in older zips)
        split/<scaffold|time|species|...>/{train,valid,test}.csv.gz   one index per line
        mapping/mol.csv.gz              molecule sets: original columns incl. ``smiles`` (optional)

The zip's own folder name (``hiv``, ``arxiv``, ...: OGB's ``download_name``) is accepted too. When
``raw/`` is absent, OGB's processed DGL file ``processed/dgl_data_processed`` is read instead.

Task metadata (number of tasks, metric, task type, split name, whether OGB adds inverse edges) comes
from the ``master.csv`` files shipped inside the ``ogb`` package; locating them imports nothing from
``ogb`` (so no version check runs and nothing is fetched).

Edges follow OGB: for datasets with ``add_inverse_edge`` (all molecules, ogbn-proteins) every stored edge
is followed by its inverse, sharing the edge feature row. ogbn-arxiv is a *directed* citation graph
and is kept as stored (1,166,243 edges); PSEs and GPSE symmetrise graphs themselves
(``utils.graph.simple_edges``), message-passing models that need both directions must add them.

Splits are renamed ``train``/``val``/``test`` (OGB's ``valid`` -> ``val``) like every other dataset here.
The processed result is cached under ``<dataset dir>/processed_gpse_dgl/`` (see :mod:`.cache`).
"""
from __future__ import annotations

import functools
import importlib.util
import logging
from pathlib import Path

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND/OUTDATED_IGNORE before dgl/ogb are imported)
import dgl

from ._io import DatasetFormatError, bidirected_graph, find_dir, graph_from_edges, not_found, read_csv_array
from .cache import fingerprint_of, load_graphs_cached, save_graphs_cached
from .dataset import GraphDataset

log = logging.getLogger(__name__)

__all__ = ["ogb_meta", "ogb_graph_names", "ogb_node_names", "load_ogb_graph_dataset", "load_ogb_node_dataset",
           "ogb_dir_name"]

_TASK_TYPES = {"binary classification": "binary", "multiclass classification": "multiclass",
               "regression": "regression"}
_METRICS = {"rocauc": "rocauc", "ap": "ap", "acc": "accuracy", "rmse": "rmse", "mae": "mae"}


@functools.lru_cache(maxsize=None)
def _master(kind: str) -> dict:
    """``{name: {field: value}}`` from ogb's ``<kind>/master.csv`` (kind: graphproppred / nodeproppred)."""
    import pandas as pd  # pandas: a heavy import, for OGB's csv files only

    spec = importlib.util.find_spec("ogb")  # locate without importing ogb
    if spec is None or spec.origin is None:
        return {}
    path = Path(spec.origin).parent / kind / "master.csv"
    if not path.is_file():
        return {}
    df = pd.read_csv(path, index_col=0, keep_default_na=False)
    return {name: {k: str(v) for k, v in df[name].items()} for name in df.columns}


def ogb_meta(name: str) -> dict:
    """OGB's master.csv row of ``name`` (ogbg-* or ogbn-*) as a dict of strings."""
    kind = "graphproppred" if name.startswith("ogbg-") else "nodeproppred"
    meta = _master(kind).get(name)
    if meta is None:
        raise KeyError(f"{name} is not in ogb's {kind}/master.csv")
    return meta


def ogb_graph_names() -> list[str]:
    """Molecular ogbg-* datasets in OGB's master.csv (read from CSV graph files)."""
    return sorted(n for n, m in _master("graphproppred").items()
                  if m.get("data type") == "mol" and m.get("binary") != "True")


def ogb_node_names() -> list[str]:
    """Homogeneous, CSV-stored ogbn-* datasets in OGB's master.csv."""
    return sorted(n for n, m in _master("nodeproppred").items()
                  if m.get("is hetero") != "True" and m.get("binary") != "True")


def ogb_dir_name(name: str) -> str:
    """OGB's folder name: ``ogbg-molhiv`` -> ``ogbg_molhiv``."""
    return name.replace("-", "_")


def _fetch_hint(name: str, root: Path, meta: dict) -> str:
    cls = ("graphproppred import GraphPropPredDataset as D" if name.startswith("ogbg-")
           else "nodeproppred import NodePropPredDataset as D")
    return (f"on a machine with internet run python -c \"from ogb.{cls}; D('{name}', root='DIR')\" "
            f"and copy DIR/{ogb_dir_name(name)} to {root} (or unzip {meta.get('url', 'the OGB zip')} "
            f"there and rename '{meta.get('download_name')}' to '{ogb_dir_name(name)}')")


def _locate(name: str, root: Path, meta: dict) -> tuple[Path, bool]:
    """Dataset folder and whether it has raw CSVs (else OGB's processed DGL file)."""
    cands = [root / ogb_dir_name(name), root / meta.get("download_name", ogb_dir_name(name))]
    found = find_dir(cands, ["raw/edge.csv.gz"])
    if found is not None:
        return found, True
    found = find_dir(cands, ["processed/dgl_data_processed"])
    if found is not None:
        return found, False
    raise not_found(name, cands[0] / "raw" / "edge.csv.gz", _fetch_hint(name, root, meta))


def _read_split(folder: Path, split_type: str, name: str) -> dict[str, torch.Tensor]:
    split_dir = folder / "split" / split_type
    splits = {}
    for ogb_key, key in (("train", "train"), ("valid", "val"), ("test", "test")):
        path = split_dir / f"{ogb_key}.csv.gz"
        if not path.is_file():
            raise not_found(name, path, f"the {split_type!r} split files are part of OGB's zip")
        splits[key] = torch.from_numpy(read_csv_array(path, np.int64).reshape(-1)).long()
    return splits


def _raw_files(raw: Path, names) -> dict[str, Path]:
    return {n: raw / f"{n}.csv.gz" for n in names if (raw / f"{n}.csv.gz").is_file()}


def _feat_array(path: Path) -> torch.Tensor:
    arr = read_csv_array(path)
    # OGB's rule: integer columns are categorical (int64), anything else float32.
    return torch.from_numpy(arr.astype(np.int64) if arr.dtype.kind in "iu" else arr.astype(np.float32))


def _extra_node_files(meta: dict) -> list[str]:
    extra = meta.get("additional node files", "None")
    return [] if extra in ("None", "") else extra.split(",")


def _read_raw_graphs(raw: Path, add_inverse: bool, extra_node_files=()) -> list:
    """DGL graphs from OGB's raw CSVs (per-graph local ids, concatenated)."""
    edge = read_csv_array(raw / "edge.csv.gz", np.int64)
    n_nodes = read_csv_array(raw / "num-node-list.csv.gz", np.int64).reshape(-1)
    n_edges = read_csv_array(raw / "num-edge-list.csv.gz", np.int64).reshape(-1)
    if len(n_nodes) != len(n_edges) or n_edges.sum() != len(edge) or edge.ndim != 2 or edge.shape[1] != 2:
        raise DatasetFormatError(f"inconsistent OGB raw files in {raw}: {len(edge)} edges, "
                                 f"num-edge-list sums to {n_edges.sum()}")
    node_feat = _feat_array(raw / "node-feat.csv.gz") if (raw / "node-feat.csv.gz").is_file() else None
    edge_feat = _feat_array(raw / "edge-feat.csv.gz") if (raw / "edge-feat.csv.gz").is_file() else None
    extra = {}
    for fname in extra_node_files:
        path = raw / f"{fname}.csv.gz"
        if fname == "node_species" and not path.is_file():
            path = raw / "species.csv.gz"  # name inside older ogbn-proteins zips
        extra[fname[len("node_"):]] = _feat_array(path)

    node_off = np.concatenate([[0], np.cumsum(n_nodes)])
    edge_off = np.concatenate([[0], np.cumsum(n_edges)])
    build = bidirected_graph if add_inverse else graph_from_edges
    graphs = []
    for i in range(len(n_nodes)):
        a, b = edge_off[i], edge_off[i + 1]
        na, nb = node_off[i], node_off[i + 1]
        ndata = {} if node_feat is None else {"feat": node_feat[na:nb]}
        ndata.update({k: v[na:nb] for k, v in extra.items()})
        edata = {} if edge_feat is None else {"feat": edge_feat[a:b]}
        graphs.append(build(int(n_nodes[i]), edge[a:b, 0], edge[a:b, 1], ndata, edata))
    return graphs


def _labels(path: Path, task_type: str) -> torch.Tensor:
    arr = read_csv_array(path)  # float64 with NaN where a label is missing
    if task_type == "multiclass":
        return torch.from_numpy(arr.reshape(-1).astype(np.int64))
    return torch.from_numpy(arr.astype(np.float32))


def _load_processed(folder: Path) -> tuple[list, torch.Tensor]:
    graphs, label_dict = dgl.load_graphs(str(folder / "processed" / "dgl_data_processed"))
    return graphs, label_dict["labels"]


def _load_graphs_and_labels(name: str, folder: Path, has_raw: bool, label_file: str, task_type: str,
                            add_inverse: bool, extra_node_files, cache: bool):
    """(graphs, labels) from raw CSVs (through the cache) or OGB's processed file."""
    if not has_raw:
        graphs, labels = _load_processed(folder)
        labels = labels.reshape(-1).long() if task_type == "multiclass" else labels.float()
        return graphs, labels
    raw = folder / "raw"
    srcs = sorted(raw.glob("*.csv.gz"))
    fp = fingerprint_of(srcs, dataset=name, add_inverse_edge=add_inverse)
    cache_path = folder / "processed_gpse_dgl" / "graphs.bin"
    hit = load_graphs_cached(cache_path, fp) if cache else None
    if hit is not None:
        return hit[0], hit[1]["labels"]
    log.info("reading %s from %s", name, raw)
    graphs = _read_raw_graphs(raw, add_inverse, extra_node_files)
    labels = _labels(raw / label_file, task_type)
    if cache:
        save_graphs_cached(cache_path, graphs, {"labels": labels}, fp)
    return graphs, labels


def _task(meta: dict) -> tuple[str, str | None, int, int | None]:
    task_type = _TASK_TYPES.get(meta["task type"])
    if task_type is None:
        raise DatasetFormatError(f"unsupported OGB task type {meta['task type']!r}")
    num_classes = int(meta["num classes"]) if task_type != "regression" else None
    return task_type, _METRICS.get(meta["eval metric"], meta["eval metric"]), int(meta["num tasks"]), num_classes


def load_ogb_graph_dataset(name: str, root, *, split: str | None = None, cache: bool = True,
                           with_smiles: bool = False) -> GraphDataset:
    """An ``ogbg-*`` dataset from ``<root>/<name_with_underscores>/``.

    Parameters
    ----------
    name : str
        OGB name, e.g. ``"ogbg-molhiv"``.
    root : path-like
        Folder holding the dataset folder.
    split : str, optional
        Split folder under ``split/``; OGB's default (``scaffold`` for molecules) if None.
    cache : bool
        Read/write the processed graphs under ``<dataset dir>/processed_gpse_dgl/``.
    with_smiles : bool
        Also return ``info["smiles"]`` (list of str) from ``mapping/mol.csv.gz``.

    Returns
    -------
    GraphDataset
        Graphs bidirected with ``ndata["feat"]`` (int64, 9 columns) and ``edata["feat"]`` (int64, 3
        columns) for molecules; labels ``(G, T)`` float32 with NaN for missing labels.
    """
    root = Path(root)
    meta = ogb_meta(name)
    folder, has_raw = _locate(name, root, meta)
    task_type, metric, num_tasks, num_classes = _task(meta)
    graphs, labels = _load_graphs_and_labels(
        name, folder, has_raw, "graph-label.csv.gz", task_type, meta.get("add_inverse_edge") == "True",
        [], cache)
    splits = _read_split(folder, split or meta["split"], name)
    g0 = graphs[0] if graphs else None
    mol = meta.get("data type") == "mol"
    info = {"source": str(folder), "split_type": split or meta["split"],
            "node_feat_kind": ("ogb-atom" if mol else "float") if g0 is not None and "feat" in g0.ndata else None,
            "edge_feat_kind": ("ogb-bond" if mol else "float") if g0 is not None and "feat" in g0.edata else None}
    if with_smiles:
        info["smiles"] = _read_smiles(folder, name, len(graphs))
    return GraphDataset(
        graphs=graphs, labels=labels, splits=splits, name=name, task="graph", task_type=task_type,
        metric=metric, num_tasks=num_tasks, num_classes=num_classes,
        node_feat_key="feat" if info["node_feat_kind"] else None,
        edge_feat_key="feat" if info["edge_feat_kind"] else None, info=info)


def _read_smiles(folder: Path, name: str, num_graphs: int) -> list[str]:
    import pandas as pd  # pandas: a heavy import, for OGB's csv files only

    path = folder / "mapping" / "mol.csv.gz"
    if not path.is_file():
        raise not_found(name, path, "mapping/mol.csv.gz is part of OGB's zip")
    smiles = pd.read_csv(path)["smiles"].astype(str).tolist()
    if len(smiles) != num_graphs:
        raise DatasetFormatError(f"{path} has {len(smiles)} rows for {num_graphs} graphs")
    return smiles


def load_ogb_node_dataset(name: str, root, *, split: str | None = None, cache: bool = True,
                          add_inverse_edge: bool | None = None) -> GraphDataset:
    """An ``ogbn-*`` dataset (one graph) from ``<root>/<name_with_underscores>/``.

    Parameters
    ----------
    name : str
        OGB name, e.g. ``"ogbn-arxiv"``, ``"ogbn-proteins"``.
    root : path-like
        Folder holding the dataset folder.
    split : str, optional
        Split folder under ``split/``; OGB's default (``time``, ``species``, ...) if None.
    cache : bool
        Read/write the processed graph under ``<dataset dir>/processed_gpse_dgl/``.
    add_inverse_edge : bool, optional
        Override OGB's setting (False for ogbn-arxiv, which stays directed; True for ogbn-proteins).

    Returns
    -------
    GraphDataset
        ``task="node"``; labels ``(N,)`` int64 for multiclass (arxiv), ``(N, T)`` float32 for binary
        (proteins). Extra node files become ``ndata["year"]`` / ``ndata["species"]``.
    """
    root = Path(root)
    meta = ogb_meta(name)
    folder, has_raw = _locate(name, root, meta)
    task_type, metric, num_tasks, num_classes = _task(meta)
    add_inverse = meta.get("add_inverse_edge") == "True" if add_inverse_edge is None else bool(add_inverse_edge)
    graphs, labels = _load_graphs_and_labels(
        name, folder, has_raw, "node-label.csv.gz", task_type, add_inverse, _extra_node_files(meta), cache)
    if len(graphs) != 1:
        raise DatasetFormatError(f"{folder} holds {len(graphs)} graphs, a node-level OGB dataset holds one")
    g = graphs[0]
    if task_type == "multiclass":
        labels = labels.reshape(-1)
    splits = _read_split(folder, split or meta["split"], name)
    info = {"source": str(folder), "split_type": split or meta["split"], "directed": not add_inverse,
            "node_feat_kind": "float" if "feat" in g.ndata else None,
            "edge_feat_kind": "float" if "feat" in g.edata else None}
    return GraphDataset(
        graphs=[g], labels=labels, splits=splits, name=name, task="node", task_type=task_type, metric=metric,
        num_tasks=num_tasks, num_classes=num_classes,
        node_feat_key="feat" if "feat" in g.ndata else None,
        edge_feat_key="feat" if "feat" in g.edata else None, info=info)
