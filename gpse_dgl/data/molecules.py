"""Molecules as bare graph skeletons.

GPSE is pretrained on the *topology* of molecules only (see ``docs/PSE.md``, "Training data"): every atom
becomes a carbon, every bond a single bond, and charges, hydrogens, aromaticity, isotopes and stereo are
forgotten. Molecules with the same skeleton (ethanol ``CCO``, ethylamine ``CCN`` and propane ``CCC`` are
all ``CCC``) are the same training graph, so datasets are de-duplicated by the canonical SMILES of the skeleton.

Node order of every graph built here is the atom order of that canonical SMILES, so a skeleton graph is
a deterministic function of its canonical string (the same skeleton always gives the identical graph,
whatever the input SMILES). Atoms are the heavy atoms RDKit keeps after parsing (explicit ``[H]`` atoms
are removed by RDKit's default parse unless they must stay, e.g. ``[H][H]``), exactly as OGB's
``smiles2graph`` sees them.

Graphs are bidirected (each bond gives ``u -> v`` and ``v -> u``), have no node or edge features, and use
the int64 id type.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
from typing import Iterable, Iterator

import numpy as np
import rdkit
import torch
from rdkit import Chem, RDLogger
from rdkit.Chem import rdmolops

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl

from ..utils.errors import DatasetNotFoundError
from ..utils.progress import progress

__all__ = [
    "skeleton_smiles",
    "skeleton_graph_from_mol",
    "smiles_to_skeleton",
    "unique_skeleton_graphs",
    "embedded_smiles_path",
    "read_smiles_file",
    "load_embedded_smiles",
    "load_embedded_molecules",
    "quiet_rdkit",
]

# Tokens of a line of a SMILES file: SMILES never contain whitespace or commas, so both separate columns.
_SPLIT = re.compile(r"[\s,;]+")
_CARBON = Chem.Atom(6)  # AddAtom copies it


@contextlib.contextmanager
def quiet_rdkit():
    """Silence RDKit's parse/sanitisation messages (invalid inputs are reported through return values)."""
    RDLogger.DisableLog("rdApp.*")
    try:
        yield
    finally:
        RDLogger.EnableLog("rdApp.*")


def _parse(smiles):
    """RDKit molecule for ``smiles``, or None when it is not a non-empty valid SMILES string."""
    if not isinstance(smiles, str) or not smiles.strip():
        return None
    mol = Chem.MolFromSmiles(smiles.strip())
    if mol is None or mol.GetNumAtoms() == 0:
        return None
    return mol


def _skeleton(mol) -> tuple[str, int, np.ndarray, np.ndarray]:
    """Canonical skeleton SMILES of ``mol`` and its bonds renumbered to canonical atom order.

    Returns ``(smiles, num_nodes, u, v)`` with int64 bond end points (one entry per bond, ``u < v``).
    """
    n = mol.GetNumAtoms()
    # The (small, dense) adjacency matrix is read in C++, without a Python call per RDKit bond object.
    a, b = np.nonzero(np.triu(rdmolops.GetAdjacencyMatrix(mol)))
    rw = Chem.RWMol()
    for _ in range(n):
        rw.AddAtom(_CARBON)
    for i, j in zip(a.tolist(), b.tolist()):
        rw.AddBond(i, j, Chem.BondType.SINGLE)
    skel = rw.GetMol()
    # Hypervalent skeleton carbons (from P, S, metals, ...) are fine here: no sanitisation, only the
    # implicit-valence cache that the SMILES writer reads.
    skel.UpdatePropertyCache(strict=False)
    smiles = Chem.MolToSmiles(skel, canonical=True)
    # e.g. "[4,3,5,...]": atom index per output position (absent for an empty molecule)
    order = skel.GetProp("_smilesAtomOutputOrder") if n else "[]"
    rank = np.empty(n, dtype=np.int64)
    rank[np.array([int(t) for t in order.strip("[]").split(",") if t], dtype=np.int64)] = np.arange(n)
    u, v = np.minimum(rank[a], rank[b]), np.maximum(rank[a], rank[b])
    key = np.lexsort((v, u))  # edges sorted too, so the graph depends on the canonical SMILES only
    return smiles, n, u[key], v[key]


def _graph(num_nodes: int, u: np.ndarray, v: np.ndarray):
    """Bidirected featureless int64 DGLGraph with one edge pair per bond."""
    src = torch.from_numpy(np.concatenate([u, v]))
    dst = torch.from_numpy(np.concatenate([v, u]))
    return dgl.graph((src, dst), num_nodes=num_nodes, idtype=torch.int64)


def skeleton_smiles(smiles: str) -> str | None:
    """Canonical SMILES of the bare skeleton of ``smiles``.

    Parameters
    ----------
    smiles : str
        Any SMILES string.

    Returns
    -------
    str or None
        Canonical SMILES with every atom a carbon and every bond single (``"c1ccccc1"`` -> ``"C1CCCCC1"``);
        None for an invalid or empty SMILES.
    """
    with quiet_rdkit():
        mol = _parse(smiles)
        return None if mol is None else _skeleton(mol)[0]


def skeleton_graph_from_mol(mol):
    """Skeleton DGLGraph of an RDKit molecule (nodes in canonical skeleton order).

    Parameters
    ----------
    mol : rdkit.Chem.Mol
        A parsed molecule.

    Returns
    -------
    dgl.DGLGraph
        Bidirected, featureless, int64 ids; ``mol.GetNumAtoms()`` nodes, two directed edges per bond.
    """
    _, n, u, v = _skeleton(mol)
    return _graph(n, u, v)


def smiles_to_skeleton(smiles: str):
    """Skeleton DGLGraph of a SMILES string, or None if it is invalid or empty.

    Multi-fragment SMILES (``"CC.O"``) give a disconnected graph.
    """
    with quiet_rdkit():
        mol = _parse(smiles)
        return None if mol is None else skeleton_graph_from_mol(mol)


def _progress(it, enabled: bool, desc: str):
    if not enabled:
        return it

    return progress(it, desc=desc, unit="mol")


def unique_skeleton_graphs(smiles_iter: Iterable[str], min_nodes: int = 2, progress: bool = False):
    """De-duplicated skeleton graphs of many SMILES, in order of first occurrence.

    Each input is classified once, in this order: invalid (unparsable or empty); too small (fewer than
    ``min_nodes`` nodes, or no bond, i.e. <= 1 directed edge, as the reference drops); duplicate (its
    canonical skeleton SMILES was already kept); kept.

    Parameters
    ----------
    smiles_iter : iterable of str
        SMILES strings.
    min_nodes : int
        Smallest number of nodes a kept graph has (the reference drops graphs with <= 1 node).
    progress : bool
        Show a tqdm progress bar.

    Returns
    -------
    graphs : list of dgl.DGLGraph
        One graph per kept skeleton.
    stats : dict
        ``total``, ``invalid``, ``too_small``, ``duplicates``, ``kept`` (ints; they add up:
        ``total = invalid + too_small + duplicates + kept``), and ``smiles``: the kept canonical skeleton
        SMILES, aligned with ``graphs`` (use them to identify or cache a dataset).
    """
    graphs, kept_smiles, seen = [], [], set()
    stats = {"total": 0, "invalid": 0, "too_small": 0, "duplicates": 0, "kept": 0}
    with quiet_rdkit():
        for smi in _progress(smiles_iter, progress, "skeletons"):
            stats["total"] += 1
            mol = _parse(smi)
            if mol is None:
                stats["invalid"] += 1
                continue
            if mol.GetNumAtoms() < max(min_nodes, 2) or mol.GetNumBonds() == 0:
                stats["too_small"] += 1
                continue
            canon, n, u, v = _skeleton(mol)
            if canon in seen:
                stats["duplicates"] += 1
                continue
            seen.add(canon)
            kept_smiles.append(canon)
            graphs.append(_graph(n, u, v))
    stats["kept"] = len(graphs)
    stats["smiles"] = kept_smiles
    return graphs, stats


def embedded_smiles_path() -> str:
    """Path of the 4,999 NCI molecules bundled with RDKit (``rdkit/Data/NCI/first_5K.smi``)."""
    try:
        from rdkit import RDConfig  # inside the try: RDConfig can fail to import (below)

        data_dir = RDConfig.RDDataDir
    except Exception:  # noqa: BLE001  (RDConfig can fail on exotic installs; fall back to the package)
        data_dir = None
    if not data_dir or not os.path.isdir(data_dir):
        data_dir = os.path.join(os.path.dirname(rdkit.__file__), "Data")
    return os.path.join(data_dir, "NCI", "first_5K.smi")


def _iter_smiles_lines(lines: Iterable[str]) -> Iterator[str]:
    first = True
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        token = _SPLIT.split(line, maxsplit=1)[0]
        if first:
            first = False
            if "smiles" in token.lower():  # header such as "SMILES<TAB>id" or "smiles,name"
                continue
        yield token


def read_smiles_file(path) -> list[str]:
    """SMILES strings of a text file, one molecule per line.

    The first column is the SMILES; further columns (ids, names, labels) separated by tabs, spaces,
    commas or semicolons are ignored. Blank lines and lines starting with ``#`` are skipped, and so is a
    first line whose first column contains "smiles" (a header). Invalid SMILES are kept here; they are
    counted as invalid by :func:`unique_skeleton_graphs`.
    """
    if not os.path.isfile(path):
        raise DatasetNotFoundError(f"SMILES file not found: {path}")
    with open(path, encoding="utf-8", errors="replace") as fh:
        return list(_iter_smiles_lines(fh))


@functools.lru_cache(maxsize=1)
def _embedded():
    graphs, stats = unique_skeleton_graphs(read_smiles_file(embedded_smiles_path()), progress=_SHOW[0])
    return tuple(graphs), stats


_SHOW = [False]  # progress flag for the one uncached build (kept out of the lru_cache key)


def load_embedded_smiles() -> list[str]:
    """Canonical skeleton SMILES of :func:`load_embedded_molecules`, aligned with its graphs."""
    return list(_embedded()[1]["smiles"])


def embedded_stats() -> dict:
    """Counts (``total``/``invalid``/``too_small``/``duplicates``/``kept``) for the embedded molecules."""
    return {k: v for k, v in _embedded()[1].items() if k != "smiles"}


def load_embedded_molecules(progress: bool = False) -> list:
    """Unique skeleton graphs of RDKit's bundled NCI molecules (about 3,070 graphs, deterministic order).

    Needs no download. The conversion runs once per process (about 1 s) and is cached in memory; every
    call returns a fresh list of the same graph objects, so callers that write ``ndata`` in place share
    those writes (clone the graphs first if that matters).
    """
    _SHOW[0] = progress
    return list(_embedded()[0])
