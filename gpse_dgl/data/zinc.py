"""ZINC (benchmarking-gnns molecules) from its published pickles, never downloading.

Layout: benchmarking-gnns' ``molecules.zip`` extracted, plus the subset index files::

    <root>/ZINC/molecules/{train,val,test}.pickle     (benchmarking-gnns layout), or
    <root>/ZINC/raw/{train,val,test}.pickle           (PyG's ``ZINC(root=<root>/ZINC)`` layout)
    .../{train,val,test}.index                        (needed for the 12k subset)

The published format **is pickle**: each ``<split>.pickle`` is a list of dicts with ``atom_type``
(LongTensor ``(n,)``, 28 atom types), ``bond_type`` (dense LongTensor ``(n, n)``, 0 = no bond, 1..3 bond
types) and ``logP_SA_cycle_normalized`` (the constrained-solubility target). The files are read with a
restricted unpickler (:func:`._io.safe_pickle_load`) that only rebuilds tensors, never runs code.
``<split>.index`` is one line of comma-separated positions into that split's list (10,000 / 1,000 / 1,000
molecules for the subset used by the paper).

Graphs are bidirected (both nonzero entries of the symmetric adjacency), ``ndata["feat"]`` int64 ``(n, 1)``
atom type, ``edata["feat"]`` int64 ``(e, 1)`` bond type; labels ``(G, 1)`` float32; metric MAE.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
from ._io import DatasetFormatError, find_dir, graph_from_edges, not_found, safe_pickle_load
from .dataset import GraphDataset

__all__ = ["load_zinc", "ZINC_URL", "ZINC_INDEX_URL"]

ZINC_URL = "https://www.dropbox.com/s/feo9qle74kg48gy/molecules.zip?dl=1"
ZINC_INDEX_URL = "https://raw.githubusercontent.com/graphdeeplearning/benchmarking-gnns/master/data/molecules/"
_SPLITS = (("train", "train"), ("val", "val"), ("test", "test"))


def _read_index(path: Path) -> list[int]:
    text = path.read_text().replace("\n", ",")
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise DatasetFormatError(f"cannot read {path}: not comma-separated integers") from exc


def _mol_graph(mol: dict):
    adj = torch.as_tensor(mol["bond_type"])
    src, dst = adj.nonzero(as_tuple=True)
    atoms = torch.as_tensor(mol["atom_type"]).long().reshape(-1, 1)
    return graph_from_edges(len(atoms), src, dst, {"feat": atoms}, {"feat": adj[src, dst].long().reshape(-1, 1)})


def load_zinc(root, subset: bool = True) -> GraphDataset:
    """ZINC-subset (12k molecules; ``subset=True``) or full ZINC (250k) with the published splits.

    Parameters
    ----------
    root : path-like
        Folder holding ``ZINC/``.
    subset : bool
        Keep only the molecules listed in ``<split>.index`` (the benchmark's 10k/1k/1k subset).
    """
    root = Path(root)
    need = [f"{s}.pickle" for s, _ in _SPLITS] + ([f"{s}.index" for s, _ in _SPLITS] if subset else [])
    cands = [root / "ZINC" / "molecules", root / "ZINC" / "raw", root / "molecules"]
    folder = find_dir(cands, need)
    name = "zinc" if subset else "zinc-full"
    if folder is None:
        raise not_found(name, cands[0] / need[0],
                        f"on a machine with internet download {ZINC_URL} and unzip it into {root / 'ZINC'}, "
                        f"plus {{train,val,test}}.index from {ZINC_INDEX_URL} into the same 'molecules' folder")
    graphs, labels, splits = [], [], {}
    for fname, key in _SPLITS:
        mols = safe_pickle_load(folder / f"{fname}.pickle")
        idx = _read_index(folder / f"{fname}.index") if subset else range(len(mols))
        start = len(graphs)
        try:
            for i in idx:
                graphs.append(_mol_graph(mols[i]))
                labels.append(float(torch.as_tensor(mols[i]["logP_SA_cycle_normalized"]).reshape(-1)[0]))
        except (KeyError, IndexError, TypeError) as exc:
            raise DatasetFormatError(f"unexpected content in {folder / (fname + '.pickle')}: {exc!r}") from exc
        splits[key] = torch.arange(start, len(graphs))
    return GraphDataset(
        graphs=graphs, labels=torch.tensor(np.asarray(labels, dtype=np.float32)).reshape(-1, 1), splits=splits,
        name=name, task="graph", task_type="regression", metric="mae", num_tasks=1, node_feat_key="feat",
        edge_feat_key="feat",
        info={"source": str(folder), "node_feat_kind": "categorical", "edge_feat_kind": "categorical",
              "num_node_types": 28, "num_edge_types": 4})
