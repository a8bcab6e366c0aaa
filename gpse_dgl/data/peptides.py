"""LRGB Peptides-func / Peptides-struct (Dwivedi et al. 2022), read from disk, never downloading.

Two published layouts are accepted (the first found wins):

1. LRGB's preprocessed zips (``peptidesfunc.zip`` / ``peptidesstruct.zip``), the files PyG's
   ``LRGBDataset(root, "Peptides-func")`` uses::

       <root>/peptides-func/raw/{train,val,test}.pt        (PyG's layout; ``peptides-struct`` likewise)
       <root>/peptidesfunc/{train,val,test}.pt             (the zip extracted as is)

   Each file is ``torch.save`` of a list of tuples ``(x (n, 9) int64, edge_attr (e, 3) int64,
   edge_index (2, e) int64, y (1, T))``; read with ``torch.load(weights_only=True)``.

2. The original LRGB / GraphGPS CSV release::

       <root>/peptides-functional/raw/peptide_multi_class_dataset.csv.gz   (columns smiles, labels="[0, 1, ...]")
       <root>/peptides-functional/splits_random_stratified_peptide.pickle
       <root>/peptides-structural/raw/peptide_structure_normalized_dataset.csv.gz   (smiles + 11 targets)
       <root>/peptides-structural/splits_random_stratified_peptide_structure.pickle

   SMILES are featurised with OGB's ``smiles2graph`` (as GraphGPS does), struct targets standardised per
   column (as GraphGPS does), and the split pickles (dicts of numpy index arrays) are read with the
   restricted unpickler. The processed graphs are cached under ``<folder>/processed_gpse_dgl/``.

Graphs: 15,535 peptides, bidirected, OGB atom (9) / bond (3) categorical features. Peptides-func: 10
binary tasks, metric AP; Peptides-struct: 11 regression targets, metric MAE.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
from ._io import DatasetFormatError, find_dir, graph_from_edges, not_found, ogb_smiles_graph, safe_pickle_load, \
    safe_torch_load
from .cache import fingerprint_of, load_graphs_cached, save_graphs_cached
from .dataset import GraphDataset

__all__ = ["load_peptides", "PEPTIDES", "STRUCT_TARGETS"]

STRUCT_TARGETS = ("Inertia_mass_a", "Inertia_mass_b", "Inertia_mass_c", "Inertia_valence_a", "Inertia_valence_b",
                  "Inertia_valence_c", "length_a", "length_b", "length_c", "Spherocity", "Plane_best_fit")

#: name -> (pyg folder, zip folder, csv folder, csv file, split pickle, task_type, metric, num_tasks, zip url)
PEPTIDES = {
    "peptides-func": ("peptides-func", "peptidesfunc", "peptides-functional", "peptide_multi_class_dataset.csv.gz",
                      "splits_random_stratified_peptide.pickle", "binary", "ap", 10,
                      "https://www.dropbox.com/s/ycsq37q8sxs1ou8/peptidesfunc.zip?dl=1"),
    "peptides-struct": ("peptides-struct", "peptidesstruct", "peptides-structural",
                        "peptide_structure_normalized_dataset.csv.gz",
                        "splits_random_stratified_peptide_structure.pickle", "regression", "mae", 11,
                        "https://www.dropbox.com/s/zgv4z8fcpmknhs8/peptidesstruct.zip?dl=1"),
}
_SPLITS = ("train", "val", "test")


def _from_pt(folder: Path):
    graphs, labels, splits = [], [], {}
    for split in _SPLITS:
        path = folder / f"{split}.pt"
        start = len(graphs)
        try:
            for x, edge_attr, edge_index, y in safe_torch_load(path):
                graphs.append(graph_from_edges(len(x), edge_index[0], edge_index[1], {"feat": x.long()},
                                               {"feat": edge_attr.long()}))
                labels.append(torch.as_tensor(y, dtype=torch.float32).reshape(-1))
        except (TypeError, ValueError, IndexError) as exc:
            raise DatasetFormatError(f"unexpected content in {path}: {exc!r}") from exc
        splits[split] = torch.arange(start, len(graphs))
    return graphs, torch.stack(labels), splits


def _from_csv(folder: Path, csv_name: str, split_name: str, task_type: str, cache: bool):
    import pandas as pd  # pandas: a heavy import, for OGB's csv files only

    csv_path = folder / "raw" / csv_name
    split_raw = safe_pickle_load(folder / split_name)
    try:
        splits = {k: torch.as_tensor(np.asarray(split_raw[k]), dtype=torch.long) for k in _SPLITS}
    except (KeyError, TypeError) as exc:
        raise DatasetFormatError(f"{folder / split_name} is not a dict of train/val/test indices") from exc
    fp = fingerprint_of([csv_path], kind="peptides-csv", task_type=task_type)
    cache_path = folder / "processed_gpse_dgl" / "graphs.bin"
    hit = load_graphs_cached(cache_path, fp) if cache else None
    if hit is not None:
        return hit[0], hit[1]["labels"], splits
    df = pd.read_csv(csv_path)
    if task_type == "binary":
        labels = np.asarray([ast.literal_eval(s) for s in df["labels"]], dtype=np.float32)
    else:
        y = df.loc[:, list(STRUCT_TARGETS)].to_numpy(dtype=np.float64)
        # GraphGPS standardises each target column (the published file is already close to standard).
        labels = ((y - y.mean(0)) / y.std(0, ddof=1)).astype(np.float32)
    graphs = []
    for smi in df["smiles"]:
        g = ogb_smiles_graph(smi)
        if g is None:
            raise DatasetFormatError(f"{csv_path}: RDKit cannot parse SMILES {smi[:40]!r}")
        graphs.append(g)
    labels = torch.from_numpy(labels.reshape(len(graphs), -1))
    if cache:
        save_graphs_cached(cache_path, graphs, {"labels": labels}, fp)
    return graphs, labels, splits


def load_peptides(name: str, root, cache: bool = True) -> GraphDataset:
    """Peptides-func or Peptides-struct from ``root`` (see the module docstring for the layouts).

    Parameters
    ----------
    name : {"peptides-func", "peptides-struct"}
        Which task.
    root : path-like
        Folder holding the dataset folder.
    cache : bool
        Cache graphs featurised from the CSV release.
    """
    root = Path(root)
    pyg_dir, zip_dir, csv_dir, csv_name, split_name, task_type, metric, num_tasks, url = PEPTIDES[name]
    folder = find_dir([root / pyg_dir / "raw", root / zip_dir], [f"{s}.pt" for s in _SPLITS])
    if folder is not None:
        graphs, labels, splits = _from_pt(folder)
    else:
        folder = find_dir([root / csv_dir], [f"raw/{csv_name}", split_name])
        if folder is None:
            raise not_found(name, root / pyg_dir / "raw" / "train.pt",
                            f"on a machine with internet download {url} and unzip it there as "
                            f"{root / pyg_dir / 'raw'} (or run python -c \"from torch_geometric.datasets import "
                            f"LRGBDataset; LRGBDataset('DIR', '{name}')\" and copy DIR/{pyg_dir})")
        graphs, labels, splits = _from_csv(folder, csv_name, split_name, task_type, cache)
    if labels.shape[1] != num_tasks:
        raise DatasetFormatError(f"{folder}: {labels.shape[1]} targets, {name} has {num_tasks}")
    return GraphDataset(
        graphs=graphs, labels=labels, splits=splits, name=name, task="graph", task_type=task_type, metric=metric,
        num_tasks=num_tasks, num_classes=2 if task_type == "binary" else None, node_feat_key="feat",
        edge_feat_key="feat",
        info={"source": str(folder), "node_feat_kind": "ogb-atom", "edge_feat_kind": "ogb-bond",
              **({"target_names": list(STRUCT_TARGETS)} if task_type == "regression" else {})})
