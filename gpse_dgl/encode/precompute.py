"""GPSE encodings of a whole dataset at once, written into its graphs and optionally cached on disk.

:func:`precompute_gpse` is the fast path for a dataset where :class:`~gpse_dgl.encode.transform.AddGPSE`
is the per-graph one: it encodes all graphs in batches (:func:`~gpse_dgl.encode.encode_dataset`), writes
``ndata[key]`` into the dataset's own graphs once, and can keep the result in a cache so that a second
run reads it instead of encoding again. Both give the same values graph by graph: a graph's random input
features are seeded by ``(seed, its structure)`` (:mod:`gpse_dgl.encode.inference`), so its encoding does
not depend on the batch it is encoded in.

The cache (``cache=True`` for ``$GPSE_DGL_CACHE`` or ``~/.cache/gpse-dgl``, or a directory) holds one
file per (dataset name, model weights, seed, samples, precision, graph structure) under
``<cache>/gpse_encodings/``, written atomically and checked on reading by :mod:`gpse_dgl.data.cache`.

Example
-------
>>> import dgl
>>> from gpse_dgl.nn.gpse import GPSE
>>> from gpse_dgl.encode import precompute_gpse
>>> graphs = precompute_gpse([dgl.graph(([0, 1], [1, 0])), dgl.graph(([0, 1, 2], [1, 2, 0]))],
...                          model=GPSE(dim_hidden=8, num_layers=2))
>>> [tuple(h.ndata["gpse"].shape) for h in graphs]
[(2, 8), (3, 8)]
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Sequence

import torch

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl

from ..data.cache import (cache_file_stem, default_cache_dir, fingerprint_of, load_rows_cached, save_rows_cached,
                          structure_digest)
from ..utils.graph import structure_only
from ..utils.precision import Precision, as_precision
from .inference import DEFAULT_BATCH_SIZE, bare_encoder, encode_dataset, target_device
from .loading import resolve_model

__all__ = ["precompute_gpse", "dataset_graphs", "model_digest"]

log = logging.getLogger(__name__)

_CACHE_VERSION = 1


def dataset_graphs(dataset) -> list:
    """The graph objects a dataset holds, in order: a list of graphs, a ``GraphDataset`` or a ``dgl.data``
    dataset whose items are ``g`` or ``(g, label, ...)``.

    Indexing a ``dgl.data`` dataset without a ``transform`` returns its stored graphs, so writing their
    ``ndata`` changes the dataset.
    """
    if isinstance(dataset, dgl.DGLGraph):
        return [dataset]
    graphs = getattr(dataset, "graphs", None)
    if isinstance(graphs, list) and all(isinstance(g, dgl.DGLGraph) for g in graphs):
        return graphs
    out = []
    for index in range(len(dataset)):
        item = dataset[index]
        graph = item[0] if isinstance(item, (tuple, list)) else item
        if not isinstance(graph, dgl.DGLGraph):
            raise TypeError(f"item {index} of the dataset is not a DGLGraph or (DGLGraph, ...) but "
                            f"{type(item).__name__}")
        out.append(graph)
    return out


def precompute_gpse(dataset, model=None, seed: int = 0, samples: int = 1, precision: Precision | str = "fp32",
                    key: str = "gpse", batch_size: int = DEFAULT_BATCH_SIZE, device=None, cache=None, name: str | None = None,
                    progress: bool = False, **kwargs):
    """Encode every graph of ``dataset`` in batches and write ``ndata[key]`` into its graphs; return it.

    Parameters
    ----------
    dataset : list of DGLGraph, GraphDataset or dgl.data dataset
        See :func:`dataset_graphs`; the graphs are changed in place.
    model, seed, samples, precision, key, device
        As in :class:`~gpse_dgl.encode.transform.AddGPSE`.
    batch_size : int
        Graphs per forward pass (does not change the result).
    cache : bool, str or PathLike, optional
        None / False: no cache. True: ``$GPSE_DGL_CACHE`` or ``~/.cache/gpse-dgl``. A path: that
        directory. The encodings are read from the cache when it holds them for the same dataset name,
        model weights, seed, samples, precision and graph structure, else computed and written.
    name : str, optional
        Dataset name in the cache key and file name (default the dataset's ``name`` attribute).
    progress : bool
        Progress bar while encoding.
    **kwargs
        Further options of :func:`gpse_dgl.encode.encode_dataset` (``undirected``, ``sampled``, ...).

    Returns
    -------
    The same ``dataset`` object (its graphs now carry ``ndata[key]``). Whether the cache was read or
    written is logged (logger ``gpse_dgl.encode.precompute``, INFO; an unwritable cache is a WARNING).

    Examples
    --------
    >>> import dgl
    >>> from gpse_dgl.nn.gpse import GPSE
    >>> graphs = precompute_gpse([dgl.graph(([0, 1], [1, 0]))], model=GPSE(dim_hidden=4, num_layers=2), key="pe")
    >>> graphs[0].ndata["pe"].shape
    torch.Size([2, 4])
    """
    graphs = dataset_graphs(dataset)
    model = resolve_model(model, device)
    # decided once, for the device the encodings run on: auto keys the cache by what it stands for there
    precision = as_precision(precision, target_device(model, device))
    path = fingerprint = None
    if cache:
        path, fingerprint = _cache_location(graphs, model, cache, name or getattr(dataset, "name", None) or "graphs",
                                            seed=seed, samples=samples, precision=precision.name,
                                            options=sorted(kwargs.items()))
        encodings = _read_cache(path, fingerprint, graphs)
        if encodings is not None:
            _store(graphs, encodings, key)
            return dataset
    # the structures alone: the graphs of a dataset may carry different ndata (some already encoded)
    encodings = encode_dataset(model, [structure_only(g) for g in graphs], batch_size=batch_size, seed=seed,
                               samples=samples, device=device, progress=progress, precision=precision, **kwargs)
    _store(graphs, encodings, key)
    if path is not None and _write_cache(path, fingerprint, encodings):
        log.info("GPSE encodings of %d graph(s) cached in %s", len(graphs), path)
    return dataset


def _store(graphs: Sequence, encodings: Sequence[torch.Tensor], key: str) -> None:
    for g, enc in zip(graphs, encodings):
        g.ndata[key] = enc


def model_digest(model) -> str:
    """SHA-256 of an encoder's weights (names, shapes and values), so the same weights share a cache."""
    digest = hashlib.sha256()
    encoder = bare_encoder(model)
    for name, tensor in sorted(encoder.state_dict().items()):
        digest.update(name.encode())
        value = tensor.detach().cpu().contiguous()
        digest.update(str(tuple(value.shape)).encode() + str(value.dtype).encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _cache_location(graphs: Sequence, model, cache, name: str, **settings) -> tuple[Path, dict]:
    root = default_cache_dir() if cache is True else Path(os.fspath(cache)).expanduser()
    key = {"dataset": name, "model": model_digest(model), **settings}
    digest = hashlib.sha256(repr(sorted(key.items())).encode()).hexdigest()[:16]
    safe = cache_file_stem(name, 60)
    fingerprint = fingerprint_of(kind="gpse-encodings", version=_CACHE_VERSION, structure=structure_digest(graphs),
                                 **key)
    return root / "gpse_encodings" / f"{safe}-{digest}.bin", fingerprint


def _read_cache(path: Path, fingerprint: dict, graphs: Sequence) -> list | None:
    hit = load_rows_cached(path, fingerprint, "gpse")
    if hit is None:
        return None
    values, offsets = hit
    if len(offsets) != len(graphs) + 1:
        return None
    log.info("GPSE encodings of %d graph(s) read from %s", len(graphs), path)
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(graphs))]


def _write_cache(path: Path, fingerprint: dict, encodings: Sequence[torch.Tensor]) -> bool:
    counts = torch.tensor([len(e) for e in encodings], dtype=torch.long)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
    return save_rows_cached(path, torch.cat(list(encodings)), offsets, fingerprint, "gpse")
