"""Per-node encodings fed to downstream models, computed by their PE source and cached on disk.

One recipe key, ``model.pe.source``, picks the encoding; every source is one module of
:mod:`.pe_sources` (its width, the settings that change its values, its compute and the PE encoder it
needs), so this module holds no per-source branches.

Encodings are computed once per dataset and cached in DGL's binary format under
``<cache_dir>/downstream_features/`` (one edgeless graph whose ``ndata["pe"]`` holds the rows of all
graphs, plus their ``offsets``). The cache is keyed by the dataset name, a digest of the graphs'
structure, the source and every setting its spec names (for GPSE: the checkpoint's content, seed, number
of draws, sampling), and the code version of the packages it names; :mod:`gpse_dgl.data.cache` makes
writes atomic and rebuilds torn or stale files. Sources that are cheap or random are never cached.

Example
-------
>>> from gpse_dgl.data.synthetic import csl_dataset
>>> from gpse_dgl.train.downstream.features import compute_features
>>> table = compute_features(csl_dataset().graphs, "RWSE")
>>> len(table), table.dim, table.graph(0).shape
(150, 20, torch.Size([41, 20]))
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

from ...data.cache import (cache_file_stem, code_digest, default_cache_dir, fingerprint_of, json_digest,
                           load_rows_cached, save_rows_cached, structure_digest)
from .pe_sources import get_source, source_names
from .pe_sources.explicit import pse_features
from .pe_sources.fixed_random import random_features
from .pe_sources.gpse import checkpoint_identity, gpse_features
from .pe_sources.table import NodeTable


__all__ = ["SOURCES", "NodeTable", "source_width", "compute_features", "load_features", "feature_settings",
           "pse_features", "random_features", "gpse_features", "checkpoint_identity", "cache_location"]

#: The registered sources (:mod:`.pe_sources`) when this module was imported; ask ``source_names()`` for
#: sources registered later.
SOURCES = source_names()
_CACHE_VERSION = 1


def source_width(source: str, random_dim: int = 20, gpse_dim: int | None = None) -> int:
    """Columns of ``source``'s table (``gpse_dim`` must be given for a source only its table knows, GPSE)."""
    width = get_source(source).width({"random_dim": random_dim})
    if width is None:
        if gpse_dim is None:
            raise ValueError(f"the width of {source} encodings depends on the checkpoint: pass gpse_dim")
        return gpse_dim
    return width


def feature_settings(pe_recipe: dict) -> dict:
    """The values of a recipe's ``model.pe`` section that change its source's encoding."""
    return get_source(pe_recipe["source"]).settings(pe_recipe)


def compute_features(graphs: Sequence, source: str, *, device=None, progress: bool = False, **pe) -> NodeTable | None:
    """The encoding ``source`` of every graph (None for ``"none"``), without caching.

    ``pe`` holds ``model.pe`` keys that the source reads (e.g. ``random_dim``, ``checkpoint``,
    ``gpse_batch_size``); the rest take their defaults. ``device``: where GPSE runs.
    """
    spec = get_source(source)
    if spec.compute is None:
        return None
    return spec.compute(list(graphs), dict(pe, source=source), device, progress)


def load_features(graphs: Sequence, dataset_name: str, pe_recipe: dict, cache_dir=None, device=None,
                  progress: bool = False, log_fn: Callable[[str], None] | None = None
                  ) -> tuple[NodeTable | None, dict]:
    """The encoding a recipe's ``model.pe`` section asks for, from the cache or computed and cached.

    Parameters
    ----------
    graphs : sequence of DGLGraph
        The dataset's graphs, as the model will see them.
    dataset_name : str
        Part of the cache key and file name.
    pe_recipe : dict
        The validated ``model.pe`` section.
    cache_dir : path-like, optional
        Cache root (default :func:`default_cache_dir`).
    device : optional
        Where GPSE runs.
    progress : bool
        Progress bars while computing.
    log_fn : callable, optional
        Receives one-line status messages.

    Returns
    -------
    table : NodeTable or None
        None for source ``"none"``.
    info : dict
        ``source``, ``dim``, ``cache`` ("reused", "written", "not written" or None), ``path`` and
        ``seconds``.
    """
    say = log_fn or (lambda message: None)
    source, spec = pe_recipe["source"], get_source(pe_recipe["source"])
    started = time.perf_counter()
    if spec.compute is None or not spec.cached:
        table = compute_features(graphs, device=device, progress=progress, **pe_recipe)
        return table, {"source": source, "dim": table.dim if table is not None else 0, "cache": None,
                       "path": None, "seconds": round(time.perf_counter() - started, 3)}

    path, fingerprint = cache_location(graphs, dataset_name, pe_recipe, cache_dir)
    hit = load_rows_cached(path, fingerprint, "pe")
    if hit is not None:
        table, status = NodeTable(*hit), "reused"
        say(f"features: {source} reused from {path}")
    else:
        say(f"features: computing {source} for {len(graphs)} graph(s)")
        table = compute_features(graphs, device=device, progress=progress, **pe_recipe)
        if pe_recipe.get("storage") == "float16":
            table.values = table.values.half()
        status = "written" if save_rows_cached(path, table.values, table.offsets, fingerprint, "pe") else "not written"
    return table, {"source": source, "dim": table.dim, "cache": status, "path": str(path),
                   "seconds": round(time.perf_counter() - started, 3)}


def cache_location(graphs: Sequence, dataset_name: str, pe_recipe: dict, cache_dir=None) -> tuple[Path, dict]:
    """Cache file and fingerprint of the encoding ``pe_recipe`` asks for on ``graphs``.

    The file name hashes the dataset, source and settings (so a cache made stale by changed graphs or
    code is overwritten in place); the fingerprint adds the structure digest and code versions.
    """
    source, spec = pe_recipe["source"], get_source(pe_recipe["source"])
    key = {"dataset": dataset_name, "source": source, "settings": spec.settings(pe_recipe)}
    safe = cache_file_stem(f"{dataset_name}-{source}")
    path = Path(cache_dir or default_cache_dir()) / "downstream_features" / f"{safe}-{json_digest(key)[:16]}.bin"
    code = {package: code_digest(package) for package in spec.code if package != "pse"}
    fingerprint = fingerprint_of(kind="downstream-features", version=_CACHE_VERSION, structure=structure_digest(graphs),
                                 pse_code=code_digest("pse") if "pse" in spec.code else None,
                                 **({"code": code} if code else {}), **key)
    return path, fingerprint
