"""Shared helpers of the on-disk loaders: locating files, one-line errors, safe readers, graph building.

Nothing here downloads. Published formats that are pickles are read with :func:`safe_pickle_load`, an
unpickler that only resolves an allow-list of tensor/array rebuild functions, so a crafted file cannot run
code; torch files go through ``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import functools
import io
import logging
import pickle
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl

from .. import _private
from ..utils.errors import DatasetNotFoundError, GPSEError

log = logging.getLogger(__name__)

__all__ = [
    "DatasetFormatError", "find_dir", "not_found", "read_csv_array", "safe_pickle_load", "safe_torch_load",
    "bidirected_graph", "graph_from_edges", "ogb_smiles_graph",
]


class DatasetFormatError(GPSEError, ValueError):
    """A dataset is on disk but a file is malformed; the message names the file."""


def find_dir(candidates: Sequence[Path], required: Iterable[str]) -> Path | None:
    """First directory of ``candidates`` that contains every relative path in ``required``."""
    required = list(required)
    for cand in candidates:
        if all((Path(cand) / r).exists() for r in required):
            return Path(cand)
    return None


def not_found(name: str, expected: Path | str, fetch: str) -> DatasetNotFoundError:
    """The one-line error of a missing dataset: where to put it and how to fetch it elsewhere."""
    msg = f"dataset {name!r} not found: expected {expected}; {fetch}"
    return DatasetNotFoundError(" ".join(msg.split()))  # one line whatever the hints contain


def read_csv_array(path: Path, dtype=None) -> np.ndarray:
    """Headerless (optionally gzipped) CSV as a 2-D numpy array, as OGB stores everything.

    ``dtype=None`` keeps pandas' inference (int64 where possible, float64 with NaN for empty cells).
    """
    import pandas as pd  # pandas: a heavy import, for OGB's csv files only

    try:
        df = pd.read_csv(path, header=None, dtype=dtype, compression="infer")
    except pd.errors.EmptyDataError:
        return np.zeros((0, 1), dtype=dtype or np.int64)
    except (ValueError, OSError, EOFError) as exc:
        raise DatasetFormatError(f"cannot read {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    arr = df.to_numpy()
    if not arr.flags.writeable:
        # pandas' copy-on-write hands out read-only views; torch.from_numpy wants writable memory.
        try:
            arr.flags.writeable = True
        except ValueError:
            arr = arr.copy()
    return arr


# ---------------------------------------------------------------------------------------------------------
# Restricted unpickling of published pickles (ZINC molecules, LRGB split files).

def _storage_from_bytes(b: bytes):
    # torch pickles a tensor's storage as torch.save bytes; read them without arbitrary globals.
    return torch.load(io.BytesIO(b), weights_only=True)


def _numpy_reconstruct():
    try:
        from numpy._core import multiarray  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core import multiarray
    return multiarray


_ALLOWED = {
    ("collections", "OrderedDict"): lambda: __import__("collections").OrderedDict,
    ("_codecs", "encode"): lambda: __import__("codecs").encode,
    ("torch.storage", "_load_from_bytes"): lambda: _storage_from_bytes,
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
}
for _mod, _name in _private.torch_pickle_globals():
    _ALLOWED[(_mod, _name)] = functools.partial(_private.torch_pickle_global, _mod, _name)
for _mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
    _ALLOWED[(_mod, "_reconstruct")] = lambda: _numpy_reconstruct()._reconstruct
    _ALLOWED[(_mod, "scalar")] = lambda: _numpy_reconstruct().scalar


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        factory = _ALLOWED.get((module, name))
        if factory is None:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return factory()


def safe_pickle_load(path: Path):
    """Unpickle ``path`` allowing only containers, numpy arrays and torch tensors (no code execution)."""
    try:
        with open(path, "rb") as f:
            return _SafeUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, RuntimeError) as exc:
        raise DatasetFormatError(f"cannot read {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from exc


def _numpy_safe_globals() -> list:
    # What torch.save of numpy arrays references (numpy 1.x and 2.x module names).
    rec = _numpy_reconstruct()._reconstruct
    dtype_classes = [c for c in vars(getattr(np, "dtypes", object)).values()
                     if isinstance(c, type) and issubclass(c, np.dtype)]  # numpy >= 1.25 pickles these
    return [np.ndarray, np.dtype, *dtype_classes, (rec, "numpy.core.multiarray._reconstruct"),
            (rec, "numpy._core.multiarray._reconstruct")]


def safe_torch_load(path: Path, allow_numpy: bool = False):
    """``torch.load(path, weights_only=True)`` with a one-line error for unreadable files.

    ``allow_numpy`` also admits numpy arrays (e.g. OGB's ``split_dict.pt``), still without running code.
    """
    try:
        if allow_numpy:
            with torch.serialization.safe_globals(_numpy_safe_globals()):
                return torch.load(path, map_location="cpu", weights_only=True)
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for bad files
        raise DatasetFormatError(f"cannot read {path}: {type(exc).__name__}: {exc}".splitlines()[0]) from exc


# ---------------------------------------------------------------------------------------------------------
# Graph construction.

def graph_from_edges(num_nodes: int, src, dst, ndata: dict | None = None, edata: dict | None = None):
    """DGLGraph (int64 ids) with the given directed edges and feature dicts."""
    g = dgl.graph((torch.as_tensor(np.asarray(src), dtype=torch.long),
                   torch.as_tensor(np.asarray(dst), dtype=torch.long)), num_nodes=int(num_nodes))
    for k, v in (ndata or {}).items():
        g.ndata[k] = torch.as_tensor(v)
    for k, v in (edata or {}).items():
        g.edata[k] = torch.as_tensor(v)
    return g


def bidirected_graph(num_nodes: int, src, dst, ndata: dict | None = None, edata: dict | None = None):
    """Graph with each given edge followed by its inverse (OGB's ``add_inverse_edge`` order).

    Edge features are repeated so the inverse edge carries the same feature row.
    """
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    s = np.empty(2 * len(src), dtype=np.int64)
    d = np.empty(2 * len(src), dtype=np.int64)
    s[0::2], s[1::2] = src, dst
    d[0::2], d[1::2] = dst, src
    edata = {k: torch.repeat_interleave(torch.as_tensor(v), 2, dim=0) for k, v in (edata or {}).items()}
    return graph_from_edges(num_nodes, s, d, ndata, edata)


def ogb_smiles_graph(smiles: str):
    """OGB molecular graph (9 atom / 3 bond categorical features, bidirected) of a SMILES string.

    Uses ``ogb.utils.smiles2graph`` (RDKit), exactly as OGB, LRGB and GraphGPS featurise molecules.
    Returns None for SMILES RDKit cannot parse.
    """
    from ogb.utils import smiles2graph  # ogb: a heavy import, for OGB data only

    try:
        g = smiles2graph(smiles)
    except Exception:  # noqa: BLE001 - RDKit returns None and ogb then raises AttributeError
        return None
    ei = g["edge_index"]
    # smiles2graph already lists both directions of every bond.
    return graph_from_edges(g["num_nodes"], ei[0], ei[1],
                            {"feat": torch.from_numpy(g["node_feat"]).long()},
                            {"feat": torch.from_numpy(g["edge_feat"]).long()})
