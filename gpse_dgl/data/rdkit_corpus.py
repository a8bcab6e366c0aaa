"""``rdkit-molecules``: every molecule set shipped inside the installed RDKit package, as unique skeletons.

The RDKit wheel carries, besides NCI's ``first_5K.smi`` (the ``embedded-molecules`` set), test and
example data of its contributed modules: WEHI's 10,000 screening molecules, ChEMBL series, EGFR ligands,
ZINC samples and more. None of it needs a download. This module finds those files by *searching* the
package directory (no list of paths, so another RDKit release contributes whatever it ships), reads the
molecules, and reduces them to unique bare skeletons with :mod:`gpse_dgl.data.molecules`.

What counts as a molecule file (:func:`read_molecule_file`):

* ``.sdf`` / ``.mol`` (optionally ``.gz``): every record RDKit can parse;
* ``.smi`` / ``.smiles`` / ``.csv`` / ``.tsv`` / ``.txt`` (optionally ``.gz``): the column named like
  ``smiles``, else the first column; either way a column that at least :data:`MIN_PARSE_RATE` of a
  sample of rows fill with values that parse as SMILES. Files with no such column (READMEs,
  fingerprints, activity tables) and pattern files (a header naming a ``SMARTS`` column and none
  ``SMILES``, or "smarts" / "smirks" in the file name: many patterns also parse as SMILES) are skipped
  and reported with the reason.

Split (:func:`hash_split_codes`): a skeleton's split is a function of its canonical SMILES alone,
``u = first 8 bytes of sha256(smiles) / 2**64`` in ``[0, 1)``: train when ``u < 0.9``, validation when
``u < 0.95``, test otherwise (:data:`SPLIT_FRACTIONS`). Adding or removing a file therefore never moves a
skeleton that was already there to another split.

The scan runs once: graphs, split codes, skeleton hashes and the scan report are cached with
:mod:`gpse_dgl.data.cache` under ``<root>/rdkit-molecules/``; the fingerprint covers every file found
(path, size, mtime), the RDKit version and the code of this module and of ``data.molecules``.

Example
-------
>>> from gpse_dgl.data.rdkit_corpus import hash_split_codes
>>> hash_split_codes(["C1CCCCC1", "CCC"]).tolist()    # fixed forever: depends on the strings alone
[0, 0]
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import logging
import os
import time
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
from .cache import cached_labels, file_sha256, fingerprint_of, load_graphs_cached, save_graphs_cached
from .dataset import GraphDataset

log = logging.getLogger(__name__)

__all__ = ["DATASET_NAME", "SPLIT_FRACTIONS", "MIN_PARSE_RATE", "rdkit_package_dir", "find_molecule_files",
           "read_molecule_file", "skeleton_hash", "hash_split_codes", "scan_rdkit_molecules",
           "load_rdkit_molecules", "corpus_summary"]

DATASET_NAME = "rdkit-molecules"
SPLIT_FRACTIONS = (0.9, 0.05, 0.05)   # train / val / test, as embedded-molecules and the paper
MIN_PARSE_RATE = 0.9                  # of a column's sampled values, for it to be a SMILES column
_SAMPLE_ROWS = 50
_TEXT_SUFFIXES = (".smi", ".smiles", ".csv", ".tsv", ".txt")
_RECORD_SUFFIXES = (".sdf", ".mol")
_CACHE_VERSION = 1


# -------------------------------------------------------------------------------------------------
# finding and reading files

def rdkit_package_dir() -> Path:
    """Directory of the installed ``rdkit`` package (its ``Data/`` and ``Contrib/`` are searched too)."""
    import rdkit  # rdkit: a heavy import, for molecules only

    return Path(rdkit.__file__).resolve().parent


def _kind(path: Path) -> str | None:
    """``"text"``, ``"records"`` or None from the suffix (a trailing ``.gz`` is looked through)."""
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(_TEXT_SUFFIXES):
        return "text"
    if name.endswith(_RECORD_SUFFIXES):
        return "records"
    return None


def find_molecule_files(root: str | os.PathLike | None = None) -> list[Path]:
    """Candidate molecule files under ``root`` (default: the RDKit package), sorted by relative path.

    Only the suffix is checked here; :func:`read_molecule_file` decides whether a file holds molecules.
    """
    root = Path(root) if root is not None else rdkit_package_dir()
    found = [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and _kind(p)]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _open_text(path: Path):
    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def _rows(path: Path) -> list[list[str]]:
    """Rows of a delimited text file: tab, comma or whitespace separated (sniffed from the data),
    blank lines and ``#`` / ``//`` comment lines dropped, quotes removed."""
    with _open_text(path) as fh:
        lines = [ln.rstrip("\r\n") for ln in fh]
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith(("#", "//"))]
    head = lines[:_SAMPLE_ROWS]
    if any("\t" in ln for ln in head):
        return [[c.strip() for c in row] for row in csv.reader(lines, delimiter="\t")]
    if any("," in ln for ln in head):
        return [[c.strip() for c in row] for row in csv.reader(lines)]
    return [ln.split() for ln in lines]


def _parses(text: str) -> bool:
    from rdkit import Chem  # rdkit: a heavy import, for molecules only

    mol = Chem.MolFromSmiles(text) if text else None
    return mol is not None and mol.GetNumAtoms() > 0


def _is_smiles_column(rows: list[list[str]], col: int) -> bool:
    """At least :data:`MIN_PARSE_RATE` of the rows have a value there, and of those values as many parse."""
    values = [r[col] for r in rows if len(r) > col and r[col]]
    return len(values) >= MIN_PARSE_RATE * len(rows) and sum(map(_parses, values)) >= MIN_PARSE_RATE * len(values)


def _smiles_column(rows: list[list[str]]) -> tuple[int | None, int, str]:
    """``(column, first data row, why)``: the SMILES column of a table, or None with the reason.

    A header cell naming SMILES picks the column; otherwise the first column that parses. Either way
    the column must pass :func:`_is_smiles_column` on a sample (a README mentioning "SMILES" does not).
    """
    from .molecules import quiet_rdkit  # rdkit (through .molecules): a heavy import

    header = [c.lower() for c in rows[0]]
    named = [i for i, c in enumerate(header) if "smiles" in c]
    if not named and any("smarts" in c for c in header):
        return None, 0, "a SMARTS pattern table"
    sample = rows[1:_SAMPLE_ROWS + 1] or rows[:1]
    with quiet_rdkit():
        exact = [i for i in named if header[i] == "smiles"]
        for col in (exact or named)[:1]:
            if _is_smiles_column(sample, col):
                return col, 1, "header"
        for col in range(max(len(r) for r in rows[:_SAMPLE_ROWS + 1])):
            if _is_smiles_column(sample, col):
                first_parses = len(rows[0]) > col and _parses(rows[0][col])
                return col, (0 if first_parses else 1), "parsed"
    return None, 0, f"no column where {MIN_PARSE_RATE:.0%} of the values parse as SMILES"


def _record_smiles(path: Path) -> list[str]:
    """SMILES of each record of an SD or MOL file ("" for a record RDKit cannot parse)."""
    from rdkit import Chem  # rdkit: a heavy import, for molecules only

    from .molecules import quiet_rdkit  # rdkit (through .molecules): a heavy import

    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")
    with raw, quiet_rdkit():
        if path.name.lower().removesuffix(".gz").endswith(".mol"):
            mols = [Chem.MolFromMolBlock(raw.read().decode("utf-8", errors="replace"))]
        else:
            mols = list(Chem.ForwardSDMolSupplier(raw))
    return [Chem.MolToSmiles(m) if m is not None else "" for m in mols]


def read_molecule_file(path: str | os.PathLike) -> tuple[list[str] | None, str]:
    """``(smiles, how)`` of one file, or ``(None, why not)`` when it is not a molecule set.

    ``how`` names the column or format read. Unparsable entries are kept as they are (empty strings for
    unreadable SD records): :func:`~gpse_dgl.data.molecules.unique_skeleton_graphs` counts them invalid.
    """
    path = Path(path)
    if any(word in path.name.lower() for word in ("smarts", "smirks")):
        return None, "a pattern file (SMARTS / SMIRKS by its name)"
    try:
        if _kind(path) == "records":
            smiles = _record_smiles(path)
            return (smiles, "records") if any(smiles) else (None, "no readable record")
        rows = _rows(path)
    except (OSError, EOFError, UnicodeError, csv.Error) as exc:
        return None, f"unreadable ({type(exc).__name__})"
    if not rows:
        return None, "empty"
    column, start, why = _smiles_column(rows)
    if column is None:
        return None, why
    return [r[column] for r in rows[start:] if len(r) > column and r[column]], f"column {column + 1} ({why})"


# -------------------------------------------------------------------------------------------------
# the hash split

def skeleton_hash(smiles: str) -> int:
    """First 8 bytes of the SHA-256 of a canonical skeleton SMILES, as an unsigned integer."""
    return int.from_bytes(hashlib.sha256(smiles.encode("utf-8")).digest()[:8], "big")


def hash_split_codes(smiles: Sequence[str], fractions: Sequence[float] = SPLIT_FRACTIONS) -> torch.Tensor:
    """Split code per skeleton (0 train, 1 val, 2 test) from its hash alone.

    ``u = skeleton_hash(s) / 2**64``; the code is the first part whose cumulative fraction exceeds
    ``u`` (fractions are normalised to sum to one).
    """
    return _codes_of_hashes(np.array([skeleton_hash(s) for s in smiles], dtype=np.uint64), fractions)


def _codes_of_hashes(hashes: np.ndarray, fractions: Sequence[float]) -> torch.Tensor:
    u = hashes.astype(np.float64) / 2.0 ** 64
    bounds = np.cumsum(np.asarray(fractions, dtype=np.float64)) / float(np.sum(fractions))
    return torch.from_numpy(np.minimum(np.searchsorted(bounds, u, side="right"), len(bounds) - 1).astype(np.int64))


# -------------------------------------------------------------------------------------------------
# scanning, caching, loading

def scan_rdkit_molecules(files: Iterable[Path] | None = None, progress: bool = False):
    """Read every molecule file and reduce them to unique skeletons.

    Returns ``(graphs, smiles, report)``: skeleton graphs in order of first occurrence (files in
    sorted order), their canonical skeleton SMILES, and a JSON-able report (per file: molecules read
    or why skipped; totals as in :func:`~gpse_dgl.data.molecules.unique_skeleton_graphs`; seconds).
    """
    from .molecules import unique_skeleton_graphs  # rdkit (through .molecules): a heavy import

    started = time.perf_counter()
    root = rdkit_package_dir()
    files = find_molecule_files() if files is None else list(files)
    everything, per_file = [], []
    for path in files:
        smiles, how = read_molecule_file(path)
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        per_file.append({"file": name, "read": len(smiles) if smiles else 0, "how": how,
                         "used": smiles is not None})
        everything.extend(smiles or ())
    graphs, stats = unique_skeleton_graphs(everything, progress=progress)
    smiles = stats.pop("smiles")
    report = {"files": per_file, "files_used": sum(f["used"] for f in per_file),
              "files_skipped": sum(not f["used"] for f in per_file), **stats,
              "seconds": round(time.perf_counter() - started, 2)}
    return graphs, smiles, report


def _fingerprint(files: Sequence[Path]) -> dict:
    import rdkit  # rdkit: a heavy import, for molecules only

    here = Path(__file__).resolve().parent
    code = [file_sha256(here / name) for name in ("rdkit_corpus.py", "molecules.py")]
    return fingerprint_of(files, kind=DATASET_NAME, version=_CACHE_VERSION, rdkit=rdkit.__version__, code=code)


def _json_tensor(value) -> torch.Tensor:
    return torch.tensor(list(json.dumps(value).encode()), dtype=torch.uint8)


def _scan_cached(root: Path, cache: bool, progress: bool):
    """``(graphs, hashes (uint64 numpy), report)`` from the cache, or scanned and cached."""
    files = find_molecule_files()
    path = root / DATASET_NAME / "skeletons.bin"
    fingerprint = _fingerprint(files)
    hit = load_graphs_cached(path, fingerprint) if cache else None
    if hit is not None:
        graphs, labels = hit
        report = json.loads(bytes(labels["report"].tolist()).decode())
        report["cache"] = "reused"
        return graphs, labels["skeleton_hash"].numpy().view(np.uint64), report
    graphs, smiles, report = scan_rdkit_molecules(files, progress=progress)
    hashes = np.array([skeleton_hash(s) for s in smiles], dtype=np.uint64)
    if cache:
        # int64 is what DGL's label format holds; the bits are the unsigned hash
        save_graphs_cached(path, graphs, {"skeleton_hash": torch.from_numpy(hashes.view(np.int64)),
                                          "report": _json_tensor(report)}, fingerprint)
    report["cache"] = "written" if cache else "off"
    return graphs, hashes, report


def load_rdkit_molecules(root, cache: bool = True, progress: bool = False):
    """The ``rdkit-molecules`` :class:`~gpse_dgl.data.dataset.GraphDataset` (unlabelled, hash split).

    Parameters
    ----------
    root : path-like
        Datasets root; the cache goes to ``<root>/rdkit-molecules/skeletons.bin``.
    cache : bool
        Read and write the cache (False scans every time and writes nothing).
    progress : bool
        Progress bar while converting molecules.
    """
    graphs, hashes, report = _scan_cached(Path(root), cache, progress)
    codes = _codes_of_hashes(hashes, SPLIT_FRACTIONS)
    splits = {name: torch.nonzero(codes == code).flatten() for code, name in enumerate(("train", "val", "test"))}
    return GraphDataset(graphs=list(graphs), labels=None, splits=splits, name=DATASET_NAME, task="graph",
                        task_type="none", metric=None, num_tasks=0,
                        info={"source": str(rdkit_package_dir()), "report": report,
                              "split": "sha256 of the canonical skeleton SMILES, 90 / 5 / 5",
                              "note": "unique molecule skeletons, for pretraining"})


def corpus_summary(root) -> str:
    """One line for ``gpse-dgl info``: skeletons, split sizes, files and molecules read, from the cache
    under the datasets ``root`` (``gpse_dgl.data.registry.default_root()`` is where loading puts it).

    Read from the cache's labels alone (milliseconds); before the first use has scanned the package, the
    line says so instead of scanning (which reads every molecule file of the package).
    """
    path = Path(root) / DATASET_NAME / "skeletons.bin"
    labels = cached_labels(path, _fingerprint(find_molecule_files()))
    if labels is None:
        return ("not scanned yet: its first use (e.g. `gpse-dgl pse --dataset rdkit-molecules`) scans the "
                "RDKit package once and caches it")
    report = json.loads(bytes(labels["report"].tolist()).decode())
    codes = _codes_of_hashes(labels["skeleton_hash"].numpy().view(np.uint64), SPLIT_FRACTIONS)
    sizes = " / ".join(f"{name} {int((codes == code).sum()):,}"
                       for code, name in enumerate(("train", "val", "test")))
    return (f"{len(codes):,} unique skeletons ({sizes}) from {report['total']:,} molecules in "
            f"{report['files_used']} files")
