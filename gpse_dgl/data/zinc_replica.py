"""``zinc-replica``: a ZINC-12k stand-in built offline from the MOSES molecules and the ZINC label recipe.

ZINC-12k (benchmarking-gnns; the paper's headline benchmark) cannot be downloaded here. Its two
ingredients can be rebuilt from what the package registry ships:

* **Molecules.** The ``molsets`` wheel (MOSES, Polykovskiy et al. 2020) carries 1.58 M ZINC "clean leads"
  SMILES in ``moses/dataset/data/train.csv.gz``. ``pip install --no-deps molsets`` installs the files;
  they are read from the installed package folder without importing ``moses`` (its imports need old
  packages this toolkit does not use). :data:`NUM_MOLECULES` molecules are drawn with a fixed seed and cut
  10,000 / 1,000 / 1,000 in draw order, ZINC-12k's sizes.
* **Label.** ZINC's target ("constrained solubility", ``logP_SA_cycle_normalized`` in benchmarking-gnns)
  is the penalised logP of the JT-VAE code that labelled the ZINC-250k molecules benchmarking-gnns took
  (Jin et al. 2018, ``bo/gen_latent.py`` of ``wengong-jin/icml18-jtnn``): the sum of three terms, each
  standardised with its mean and standard deviation over ZINC-250k (:data:`STANDARDISATION`)::

      y = z(logP) + z(-SA) + z(-max(0, longest basis cycle - 6))

  with Crippen logP (``Descriptors.MolLogP``), the synthetic-accessibility score of Ertl and Schuffenhauer
  (``rdkit.Contrib.SA_Score``, shipped with RDKit) and the longest cycle of a cycle basis of the heavy-atom
  graph (networkx's algorithm, see :func:`longest_basis_cycle`), all on RDKit's canonical isomeric SMILES.

Featurisation follows ZINC's: one categorical atom type per node from benchmarking-gnns' 28-entry
dictionary (:data:`ZINC_ATOM_TYPES`: element, explicit hydrogens of bracket atoms, charge), one bond type
per edge (1 single, 2 double, 3 triple, on the Kekulé form), bidirected graphs, no hydrogens as nodes.

How the replica differs from ZINC-12k (its MAE is **not** comparable with the paper's numbers):
MOSES keeps "clean leads" (molecular weight 250-350, at most 7 rotatable bonds, logP at most 3.5,
no charged atoms, only C, N, S, O, F, Cl, Br, H), so the molecules are smaller and less varied than
ZINC-250k's drug-like ones, the label's spread is narrower, and atom types beyond those elements never
occur. Its label is standardised with ZINC-250k's constants, so it is on ZINC's scale but not centred.

Example
-------
>>> from rdkit import Chem
>>> round(penalized_logp(Chem.MolFromSmiles("c1ccccc1O")), 3)   # phenol
1.678
"""
from __future__ import annotations

import gzip
import importlib.util
import logging
from pathlib import Path

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
from ..utils.errors import GPSEError
from ._io import bidirected_graph, not_found
from .cache import file_sha256, fingerprint_of, load_graphs_cached, save_graphs_cached
from .dataset import GraphDataset

log = logging.getLogger(__name__)

__all__ = ["DATASET_NAME", "NUM_MOLECULES", "SPLIT_SIZES", "STANDARDISATION", "ZINC_ATOM_TYPES",
           "moses_smiles_file", "penalized_logp", "longest_basis_cycle", "zinc_atom_type", "zinc_style_graph",
           "draw_moses_smiles", "load_zinc_replica"]

DATASET_NAME = "zinc-replica"
NUM_MOLECULES = 12_000
SPLIT_SIZES = (10_000, 1_000, 1_000)  # ZINC-12k's train / val / test
_CACHE_VERSION = 1

#: ``(mean, std)`` of each term over ZINC-250k, as the JT-VAE labelling code standardised them (the same
#: constants appear in every later re-implementation of penalised logP).
STANDARDISATION = {
    "logp": (2.4570953396190123, 1.434324401111988),
    "neg_sa": (-3.0525811293166134, 0.8335207024513095),
    "neg_cycle": (-0.0485696876403053, 0.2860212110245455),
}

#: benchmarking-gnns' ZINC atom dictionary (its issue #42): "element[ H<explicit Hs>][ +|-]" -> type.
ZINC_ATOM_TYPES = {
    "C": 0, "O": 1, "N": 2, "F": 3, "C H1": 4, "S": 5, "Cl": 6, "O -": 7, "N H1 +": 8, "Br": 9,
    "N H3 +": 10, "N H2 +": 11, "N +": 12, "N -": 13, "S -": 14, "I": 15, "P": 16, "O H1 +": 17,
    "N H1 -": 18, "O +": 19, "S +": 20, "P H1": 21, "P H2": 22, "C H2 -": 23, "P +": 24, "S H1 +": 25,
    "C H1 -": 26, "P H1 +": 27,
}
_BOND_TYPES = {1.0: 1, 2.0: 2, 3.0: 3}  # Kekulé bond orders -> ZINC bond type (0 = no bond)
_INSTALL_HINT = "install the MOSES molecules with `pip install --no-deps molsets` (no other package is needed)"


# ---------------------------------------------------------------------------------------------------------
# The label.

def longest_basis_cycle(mol) -> int:
    """Length of the longest cycle in networkx's cycle basis of the molecule's heavy-atom graph (0: none).

    The basis comes from a depth-first spanning tree rooted at the lowest-numbered atom of each
    component, neighbours visited in increasing index order, every non-tree edge closing one cycle:
    ``networkx.cycle_basis`` on ``GetAdjacencyMatrix`` as the JT-VAE labelling code called it (networkx
    2.x started at the lowest node; networkx 3 starts at the highest unless given ``root=0``). The basis,
    not the smallest set of rings, is what the label uses: on fused rings the longest basis cycle can be
    an envelope of two rings.
    """
    neighbours = [sorted(n.GetIdx() for n in atom.GetNeighbors()) for atom in mol.GetAtoms()]
    longest, seen = 0, set()
    for root in range(len(neighbours)):
        if root in seen:
            continue
        pred, used, stack = {root: root}, {root: set()}, [root]
        while stack:
            z = stack.pop()
            for nbr in neighbours[z]:
                if nbr not in used:
                    pred[nbr], used[nbr] = z, {z}
                    stack.append(nbr)
                elif nbr not in used[z]:  # a non-tree edge: walk z's tree path back until it meets nbr's
                    length, p = 2, pred[z]
                    while p not in used[nbr]:
                        length, p = length + 1, pred[p]
                    longest = max(longest, length + 1)
                    used[nbr].add(z)
        seen.update(pred)
    return longest


def _sascorer():
    """RDKit's contributed SA_Score module, loaded from its file (``rdkit.Contrib`` is not a package)."""
    from rdkit.Chem import RDConfig  # rdkit: a heavy import, for molecules only

    path = Path(RDConfig.RDContribDir) / "SA_Score" / "sascorer.py"
    if not path.is_file():
        raise GPSEError(f"RDKit's SA_Score module is missing ({path}); reinstall rdkit")
    spec = importlib.util.spec_from_file_location("gpse_dgl_sascorer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SA = None


def penalized_logp(mol) -> float:
    """ZINC's constrained-solubility label of an RDKit molecule (module docstring), on ZINC-250k's scale."""
    global _SA
    from rdkit.Chem import Descriptors

    if _SA is None:
        _SA = _sascorer()
    cycle = longest_basis_cycle(mol)
    terms = {"logp": Descriptors.MolLogP(mol), "neg_sa": -_SA.calculateScore(mol),
             "neg_cycle": -float(max(0, cycle - 6))}
    return float(sum((value - STANDARDISATION[k][0]) / STANDARDISATION[k][1] for k, value in terms.items()))


# ---------------------------------------------------------------------------------------------------------
# Graphs.

def zinc_atom_type(atom) -> int:
    """benchmarking-gnns' ZINC type of an RDKit atom (:data:`ZINC_ATOM_TYPES`); ValueError if it has none."""
    key = atom.GetSymbol()
    if atom.GetNumExplicitHs():  # hydrogens written inside a bracket atom, e.g. [C@H], [NH3+]
        key += f" H{atom.GetNumExplicitHs()}"
    charge = atom.GetFormalCharge()
    if charge:
        key += " +" if charge > 0 else " -"
    if key not in ZINC_ATOM_TYPES:
        raise ValueError(f"atom type {key!r} is not in ZINC's dictionary")
    return ZINC_ATOM_TYPES[key]


def zinc_style_graph(mol):
    """Bidirected DGLGraph with ZINC's features: ``ndata["feat"]`` atom type and ``edata["feat"]`` bond type,
    both int64 ``(n, 1)`` / ``(e, 1)``; bonds on the Kekulé form. ValueError for atoms outside ZINC's types."""
    from rdkit import Chem

    mol = Chem.Mol(mol)
    Chem.Kekulize(mol, clearAromaticFlags=True)
    atoms = [zinc_atom_type(a) for a in mol.GetAtoms()]
    bonds = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx(), _BOND_TYPES[b.GetBondTypeAsDouble()]) for b in mol.GetBonds()]
    src, dst, kind = (np.array(c, dtype=np.int64).reshape(-1) for c in zip(*bonds)) if bonds else ([], [], [])
    return bidirected_graph(len(atoms), src, dst, {"feat": torch.tensor(atoms, dtype=torch.long).reshape(-1, 1)},
                            {"feat": torch.as_tensor(np.asarray(kind, dtype=np.int64)).reshape(-1, 1)})


# ---------------------------------------------------------------------------------------------------------
# The molecules.

def moses_smiles_file() -> Path:
    """``train.csv.gz`` of the installed ``molsets`` package, found without importing it."""
    spec = importlib.util.find_spec("moses")
    folder = Path(spec.origin).parent / "dataset" / "data" if spec and spec.origin else None
    path = folder / "train.csv.gz" if folder else Path("moses/dataset/data/train.csv.gz")
    if not path.is_file():
        raise not_found(DATASET_NAME, path if folder else "the molsets package", _INSTALL_HINT)
    return path


def _read_moses_smiles(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    header = lines[0].split(",")
    if "SMILES" not in header:
        raise GPSEError(f"{path}: expected a SMILES column, got {header}")
    column = header.index("SMILES")
    return [line.split(",")[column] for line in lines[1:] if line]


def draw_moses_smiles(num_molecules: int = NUM_MOLECULES, seed: int = 0, path: Path | None = None) -> list[str]:
    """``num_molecules`` MOSES training SMILES drawn without replacement by ``numpy.random.default_rng(seed)``,
    in draw order (the first 10,000 are the replica's training split)."""
    smiles = _read_moses_smiles(path or moses_smiles_file())
    if not 0 < num_molecules <= len(smiles):
        raise GPSEError(f"{DATASET_NAME}: num_molecules must be in 1..{len(smiles)}, got {num_molecules}")
    picked = np.random.default_rng(seed).choice(len(smiles), size=num_molecules, replace=False)
    return [smiles[i] for i in picked]


def _label_and_featurise(smiles: list[str]):
    from rdkit import Chem

    graphs, labels, canonical = [], [], []
    for text in smiles:
        # The label code works on RDKit's canonical isomeric SMILES, parsed again.
        mol = Chem.MolFromSmiles(Chem.MolToSmiles(Chem.MolFromSmiles(text), isomericSmiles=True))
        canonical.append(Chem.MolToSmiles(mol))
        graphs.append(zinc_style_graph(mol))
        labels.append(penalized_logp(mol))
    return graphs, torch.tensor(labels, dtype=torch.float32).reshape(-1, 1), canonical


def _split_sizes(num_molecules: int) -> tuple[int, int, int]:
    if num_molecules == NUM_MOLECULES:
        return SPLIT_SIZES
    val = test = max(1, num_molecules // 12)
    return num_molecules - val - test, val, test


def load_zinc_replica(root, seed: int = 0, num_molecules: int = NUM_MOLECULES, cache: bool = True) -> GraphDataset:
    """The ``zinc-replica`` dataset (module docstring): ZINC-style graphs, penalised logP, MAE.

    Parameters
    ----------
    root : path-like
        Datasets root; the labelled graphs are cached under ``<root>/zinc-replica/``.
    seed : int
        Seed of the draw from MOSES (0 is the benchmark's replica).
    num_molecules : int
        Molecules drawn (12,000: ZINC-12k's 10,000 / 1,000 / 1,000; other sizes cut train / val / test
        10 : 1 : 1).
    cache : bool
        Read and write the cache (labelling 12,000 molecules takes about half a minute).
    """
    source = moses_smiles_file()
    here = Path(__file__).resolve()
    fingerprint = fingerprint_of([source], kind=DATASET_NAME, version=_CACHE_VERSION, seed=seed,
                                 num_molecules=num_molecules, code=file_sha256(here))
    path = Path(root) / DATASET_NAME / f"seed{seed}-n{num_molecules}.bin"
    hit = load_graphs_cached(path, fingerprint) if cache else None
    if hit is not None:
        graphs, stored = hit
        labels = stored["y"]
        canonical = bytes(stored["smiles"].tolist()).decode().split("\n")
    else:
        graphs, labels, canonical = _label_and_featurise(draw_moses_smiles(num_molecules, seed, source))
        if cache:
            packed = torch.tensor(list("\n".join(canonical).encode()), dtype=torch.uint8)
            save_graphs_cached(path, graphs, {"y": labels, "smiles": packed}, fingerprint)
    train, val, _ = _split_sizes(num_molecules)
    splits = {"train": torch.arange(0, train), "val": torch.arange(train, train + val),
              "test": torch.arange(train + val, num_molecules)}
    return GraphDataset(
        graphs=list(graphs), labels=labels, splits=splits, name=DATASET_NAME, task="graph",
        task_type="regression", metric="mae", num_tasks=1, node_feat_key="feat", edge_feat_key="feat",
        info={"source": str(source), "smiles": canonical, "node_feat_kind": "categorical",
              "edge_feat_kind": "categorical", "num_node_types": len(ZINC_ATOM_TYPES), "num_edge_types": 4,
              "target": "penalised logP (JT-VAE / ZINC constrained solubility), ZINC-250k standardisation",
              "draw": f"numpy default_rng({seed}).choice over MOSES train.csv.gz, {num_molecules} molecules"})
