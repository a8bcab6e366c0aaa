"""Atomic, self-checking caches of processed graphs in DGL's binary format.

A cache is two files: ``<path>`` written by ``dgl.save_graphs`` and ``<path>.meta.json`` holding the
fingerprint it was built for, the file size and its SHA-256. Writing goes

1. remove the old sidecar (from here on the cache reads as invalid),
2. write ``<path>`` atomically (:func:`gpse_dgl.utils.io.atomic_path`: temporary file, fsync, rename),
3. write the sidecar the same way, last.

so an interrupted write never leaves a cache that validates: without a sidecar, or with a checksum that
does not match, :func:`load_graphs_cached` returns None and the caller rebuilds. Loading never raises for
a bad cache (missing, stale fingerprint, truncated, garbage); it logs why and returns None.

The fingerprint is any JSON-able dict; :func:`fingerprint_of` builds the usual one (data source files by
size and mtime, settings, package and DGL versions).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Iterable

import numpy as np
import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl
from dgl.data.utils import load_labels

from .. import __version__
from ..utils.io import atomic_write_text, save_graphs_atomic

log = logging.getLogger(__name__)

__all__ = ["save_graphs_cached", "load_graphs_cached", "save_rows_cached", "load_rows_cached", "cache_file_stem",
           "fingerprint_of", "file_sha256", "structure_digest", "json_digest", "code_digest", "default_cache_dir",
           "CACHE_FORMAT", "CACHE_ENV"]

CACHE_FORMAT = 1  # bump when the layout of cached graphs/labels changes
CACHE_ENV = "GPSE_DGL_CACHE"  # the environment variable naming the cache root


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def file_sha256(path) -> str:
    """Hex SHA-256 of a file's bytes, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def structure_digest(graphs: Iterable) -> str:
    """SHA-256 of the node counts and edge lists of ``graphs`` in order."""
    digest = hashlib.sha256()
    for g in graphs:
        src, dst = g.edges()
        digest.update(np.int64(g.num_nodes()).tobytes())
        digest.update(np.int64(len(src)).tobytes())
        digest.update(src.numpy().astype(np.int64, copy=False).tobytes())
        digest.update(dst.numpy().astype(np.int64, copy=False).tobytes())
    return digest.hexdigest()


def json_digest(value) -> str:
    """Hex SHA-256 of ``value`` written as canonical JSON (sorted keys; anything else JSON cannot hold by
    ``str``): equal settings give equal digests, the key of every cache file name."""
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def code_digest(subpackage: str) -> str:
    """Hex SHA-256 of the source of ``gpse_dgl.<subpackage>`` (every ``*.py`` below it, in path order, by
    file name and content digest), so that editing that code invalidates caches of what it computes."""
    digest = hashlib.sha256()
    for path in sorted((Path(__file__).resolve().parent.parent / subpackage).rglob("*.py")):
        digest.update(path.name.encode())
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def default_cache_dir() -> Path:
    """``$GPSE_DGL_CACHE`` or ``~/.cache/gpse-dgl``: pretraining targets, downstream features, encodings and
    fetched models (``models/``) live below it."""
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "gpse-dgl"


def _canonical(fingerprint: dict) -> str:
    # sort_keys + default=str: equal settings always serialise to the same string.
    return json.dumps(fingerprint, sort_keys=True, default=str)


def fingerprint_of(sources: Iterable[str | os.PathLike] = (), **settings) -> dict:
    """Fingerprint of a cache: source files (path, size, mtime), settings and versions.

    Parameters
    ----------
    sources : iterable of path-like
        Files the cached data is derived from; a changed size or mtime invalidates the cache.
        Missing files are recorded as missing.
    **settings
        Any JSON-able options that change the processed result.
    """
    files = []
    for src in sources:
        p = Path(src)
        try:
            st = p.stat()
            files.append([str(p.resolve()), st.st_size, int(st.st_mtime)])
        except OSError:
            files.append([str(p), None, None])
    return {"format": CACHE_FORMAT, "gpse_dgl": __version__, "dgl": dgl.__version__,
            "sources": files, "settings": settings}


def save_graphs_cached(path, graphs: list, labels: dict[str, torch.Tensor] | None, fingerprint: dict) -> bool:
    """Write graphs and a dict of tensors to ``path`` atomically, with fingerprint and checksum sidecar.

    Parameters
    ----------
    path : path-like
        Cache file; its directory is created.
    graphs : list of dgl.DGLGraph
        Graphs to store (node/edge data included).
    labels : dict of str to torch.Tensor or None
        Extra tensors stored with the graphs (targets, split indices, ...).
    fingerprint : dict
        JSON-able description of what the cache was built from (see :func:`fingerprint_of`).

    Returns
    -------
    bool
        True when written; False (logged) when the location is not writable, so callers can go on with
        the data they just built.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _sidecar(path).unlink(missing_ok=True)
        save_graphs_atomic(path, graphs, labels)
        meta = {"fingerprint": json.loads(_canonical(fingerprint)), "size": path.stat().st_size,
                "sha256": file_sha256(path)}
        atomic_write_text(_sidecar(path), json.dumps(meta, sort_keys=True, indent=1))
        return True
    except (OSError, dgl.DGLError) as exc:  # DGL reports failed writes as DGLError
        log.warning("not caching to %s: %s", path, exc)
        return False


def cached_labels(path, fingerprint: dict) -> dict | None:
    """The labels dict of a cache written for ``fingerprint``, read without its graphs, or None.

    Checks the fingerprint and the size recorded by :func:`save_graphs_cached`, not the checksum, so it
    costs milliseconds: for summaries such as ``gpse-dgl info``. Data is read with
    :func:`load_graphs_cached`.
    """
    path = Path(path)
    try:
        meta = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        if _canonical(meta["fingerprint"]) != _canonical(fingerprint) or path.stat().st_size != meta["size"]:
            return None
        return dict(load_labels(str(path)))
    except Exception:  # noqa: BLE001 - missing, stale or unreadable: no summary
        return None


def load_graphs_cached(path, fingerprint: dict):
    """``(graphs, labels)`` from a cache written by :func:`save_graphs_cached`, or None.

    None (with an INFO log saying why) when the cache or its sidecar is missing, the fingerprint differs,
    the size or checksum does not match (torn or corrupt file), or DGL cannot read it. Never raises for
    a bad cache.
    """
    path = Path(path)
    side = _sidecar(path)
    if not path.is_file() or not side.is_file():
        log.info("cache %s: missing, building", path)
        return None
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
        if _canonical(meta["fingerprint"]) != _canonical(fingerprint):
            log.info("cache %s: built from other data or settings, rebuilding", path)
            return None
        if path.stat().st_size != meta["size"] or file_sha256(path) != meta["sha256"]:
            log.warning("cache %s: checksum mismatch (torn or corrupt file), rebuilding", path)
            return None
        graphs, labels = dgl.load_graphs(str(path))
    except Exception as exc:  # noqa: BLE001 - any failure means "rebuild", never a crash
        log.warning("cache %s: unreadable (%s: %s), rebuilding", path, type(exc).__name__, exc)
        return None
    return graphs, dict(labels)


def save_rows_cached(path, values: torch.Tensor, offsets: torch.Tensor, fingerprint: dict, key: str) -> bool:
    """Per-graph node rows as one cache file (:func:`save_graphs_cached`): graph ``i``'s rows are
    ``values[offsets[i]:offsets[i + 1]]``, stored as ``ndata[key]`` of one graph without edges, with the
    offsets. What encodings and downstream features are cached as; read back by :func:`load_rows_cached`."""
    holder = dgl.graph(([], []), num_nodes=values.shape[0])
    holder.ndata[key] = values
    return save_graphs_cached(path, [holder], {"offsets": offsets}, fingerprint)


def load_rows_cached(path, fingerprint: dict, key: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(values, offsets)`` written by :func:`save_rows_cached` for ``fingerprint``, or None (as
    :func:`load_graphs_cached`, and when the file holds no such rows)."""
    hit = load_graphs_cached(path, fingerprint)
    if hit is None or len(hit[0]) != 1 or key not in hit[0][0].ndata or "offsets" not in hit[1]:
        return None
    return hit[0][0].ndata[key], hit[1]["offsets"]


def cache_file_stem(name: str, limit: int | None = None) -> str:
    """``name`` as a file-name stem: characters other than letters, digits, ``-``, ``_`` and ``+`` become ``_``;
    cut to ``limit`` characters when given."""
    return "".join(c if c.isalnum() or c in "-_+" else "_" for c in name)[:limit]
