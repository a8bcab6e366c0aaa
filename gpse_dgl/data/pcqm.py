"""PCQM4Mv2-subset (OGB-LSC PCQM4Mv2 as subsampled by GraphGPS), read from disk, never downloading.

Layout: OGB-LSC's ``pcqm4m-v2.zip`` extracted (what ``ogb.lsc.PCQM4Mv2Dataset(root)`` leaves)::

    <root>/pcqm4m-v2/raw/data.csv.gz      columns idx, smiles, homolumogap (3,746,620 molecules)
    <root>/pcqm4m-v2/split_dict.pt        torch.save of {"train", "valid", "test-dev", "test-challenge"}
                                          -> index arrays (numpy or torch; read with weights_only=True)
    <root>/pcqm4m-v2/subset_split/{train,val,test}.csv.gz   optional, see below

What the subset is (GraphGPS ``preformat_OGB_PCQM4Mv2(name="subset")``): the original train indices are
permuted with ``numpy.random.default_rng(seed=42)``; the first 150,000 become a new validation pool and
the rest the new training pool; the subset keeps the first 10% of the training pool (322,860), the
first 50,000 of the validation pool, and the *original* ``valid`` split (73,545) as test: 446,405
molecules, as in the paper's Table 6. The paper notes numpy generators may differ across versions; if
you have the exact split indices the GPSE authors published, write them as headerless one-index-per-line
``subset_split/{train,val,test}.csv.gz`` (indices into ``data.csv.gz`` rows) and they are used instead.

``variant="full"`` keeps the whole permuted training pool (3,228,606), the 150k validation pool and the
original valid split (GraphGPS ``name="full"``).

Molecules are featurised with OGB's ``smiles2graph`` (9 atom / 3 bond categorical features, bidirected);
target ``homolumogap`` (eV) as ``(G, 1)`` float32, metric MAE. Processing ~446k SMILES takes minutes, so
the result is cached under ``<root>/pcqm4m-v2/processed_gpse_dgl/``.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
from ._io import DatasetFormatError, find_dir, not_found, ogb_smiles_graph, read_csv_array, safe_torch_load
from .cache import fingerprint_of, load_graphs_cached, save_graphs_cached
from .dataset import GraphDataset

log = logging.getLogger(__name__)

__all__ = ["load_pcqm4mv2", "graphgps_pcqm_split", "PCQM_URL"]

PCQM_URL = "https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m-v2.zip"
_SPLITS = ("train", "val", "test")


def graphgps_pcqm_split(split_dict: dict, variant: str = "subset") -> dict[str, np.ndarray]:
    """GraphGPS' PCQM4Mv2 ``subset`` / ``full`` splits (indices into the full dataset)."""
    train = np.random.default_rng(seed=42).permutation(np.asarray(split_dict["train"]))
    valid_pool, train_pool = train[:150000], train[150000:]
    test = np.asarray(split_dict["valid"])
    if variant == "full":
        return {"train": train_pool, "val": valid_pool, "test": test}
    if variant == "subset":
        return {"train": train_pool[: int(0.1 * len(train_pool))], "val": valid_pool[:50000], "test": test}
    raise ValueError(f"variant must be 'subset' or 'full', got {variant!r}")


def _split_indices(folder: Path, variant: str) -> tuple[dict[str, np.ndarray], str]:
    explicit = folder / "subset_split"
    if variant == "subset" and all((explicit / f"{s}.csv.gz").is_file() for s in _SPLITS):
        return {s: read_csv_array(explicit / f"{s}.csv.gz", np.int64).reshape(-1) for s in _SPLITS}, "file"
    raw = safe_torch_load(folder / "split_dict.pt", allow_numpy=True)
    try:
        split_dict = {k: np.asarray(v) for k, v in raw.items()}
        return graphgps_pcqm_split(split_dict, variant), "graphgps-rng42"
    except (AttributeError, KeyError) as exc:
        raise DatasetFormatError(f"{folder / 'split_dict.pt'} lacks OGB's train/valid index arrays") from exc


def load_pcqm4mv2(root, variant: str = "subset", cache: bool = True, limit: int | None = None) -> GraphDataset:
    """PCQM4Mv2 ``subset`` (the paper's PCQM4Mv2-subset) or ``full`` from ``<root>/pcqm4m-v2``.

    Parameters
    ----------
    root : path-like
        Folder holding ``pcqm4m-v2/``.
    variant : {"subset", "full"}
        Which GraphGPS split.
    cache : bool
        Read/write processed graphs under ``<root>/pcqm4m-v2/processed_gpse_dgl/``.
    limit : int, optional
        Keep only the first ``limit`` molecules of each split (quick experiments); not cached.
    """
    import pandas as pd  # pandas: a heavy import, for OGB's csv files only

    root = Path(root)
    folder = find_dir([root / "pcqm4m-v2"], ["raw/data.csv.gz", "split_dict.pt"])
    name = "pcqm4mv2-subset" if variant == "subset" else "pcqm4mv2-full"
    if folder is None:
        raise not_found(name, root / "pcqm4m-v2" / "raw" / "data.csv.gz",
                        f"on a machine with internet download {PCQM_URL} and unzip it into {root} "
                        f"(it holds pcqm4m-v2/raw/data.csv.gz and pcqm4m-v2/split_dict.pt)")
    parts, split_source = _split_indices(folder, variant)
    if limit is not None:
        parts = {k: v[:limit] for k, v in parts.items()}
    order = np.concatenate([parts[s] for s in _SPLITS])
    sizes = [len(parts[s]) for s in _SPLITS]
    bounds = np.cumsum([0] + sizes)
    splits = {s: torch.arange(bounds[i], bounds[i + 1]) for i, s in enumerate(_SPLITS)}

    csv_path = folder / "raw" / "data.csv.gz"
    fp = fingerprint_of([csv_path, folder / "split_dict.pt"], variant=variant, split_source=split_source,
                        num=int(len(order)), head=order[:5].tolist())
    cache_path = folder / "processed_gpse_dgl" / f"{variant}.bin"
    use_cache = cache and limit is None
    hit = load_graphs_cached(cache_path, fp) if use_cache else None
    if hit is not None:
        graphs, labels = hit[0], hit[1]["labels"]
    else:
        df = pd.read_csv(csv_path, usecols=["smiles", "homolumogap"])
        if order.max(initial=-1) >= len(df):
            raise DatasetFormatError(f"split indices exceed the {len(df)} rows of {csv_path}")
        smiles = df["smiles"].to_numpy()[order]
        labels = torch.from_numpy(df["homolumogap"].to_numpy(dtype=np.float32)[order]).reshape(-1, 1)
        log.info("featurising %d PCQM4Mv2 molecules (cached afterwards)", len(smiles))
        graphs = []
        for smi in smiles:
            g = ogb_smiles_graph(smi)
            if g is None:
                raise DatasetFormatError(f"{csv_path}: RDKit cannot parse SMILES {str(smi)[:40]!r}")
            graphs.append(g)
        if use_cache:
            save_graphs_cached(cache_path, graphs, {"labels": labels}, fp)
    return GraphDataset(
        graphs=graphs, labels=labels, splits=splits, name=name, task="graph", task_type="regression",
        metric="mae", num_tasks=1, node_feat_key="feat", edge_feat_key="feat",
        info={"source": str(folder), "split_source": split_source, "dataset_index": torch.from_numpy(order),
              "node_feat_kind": "ogb-atom", "edge_feat_kind": "ogb-bond"})
