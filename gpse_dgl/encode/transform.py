"""GPSE encodings as a DGL transform (:class:`AddGPSE`) or for a whole dataset at once (:func:`precompute_gpse`).

``AddGPSE(model)`` is a callable ``g -> g`` like :class:`gpse_dgl.pse.AddPSE`: it writes the encodings
of every node to ``g.ndata[key]`` and returns ``g``, so it composes with ``dgl.transforms.Compose`` and
can be a ``dgl.data`` dataset's ``transform``. A transform runs once per graph and per access; for a
dataset, :func:`precompute_gpse` is the fast path: it encodes all graphs in batches
(:func:`~gpse_dgl.encode.encode_dataset`), writes ``ndata[key]`` into the dataset's own graphs once,
and can keep the result in a cache so a second run reads it instead of encoding again.

Both give the same values graph by graph: a graph's random input features are seeded by
``(seed, its structure)`` (:mod:`gpse_dgl.encode.inference`), so the encoding of a graph does not depend
on the batch it is encoded in.

The cache (``cache=True`` for ``$GPSE_DGL_CACHE`` or ``~/.cache/gpse-dgl``, or a directory) holds one
file per (dataset name, model weights, seed, samples, precision, graph structure) under
``<cache>/gpse_encodings/``, written atomically and checked on reading by :mod:`gpse_dgl.data.cache`.

Example
-------
>>> import dgl
>>> from gpse_dgl.nn.gpse import GPSE
>>> from gpse_dgl.encode import AddGPSE, precompute_gpse
>>> model = GPSE(dim_hidden=8, num_layers=2)
>>> g = AddGPSE(model)(dgl.graph(([0, 1, 2], [1, 2, 0])))
>>> g.ndata["gpse"].shape
torch.Size([3, 8])
>>> graphs = precompute_gpse([dgl.graph(([0, 1], [1, 0])), g], model=model)
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

from .. import _env  # noqa: F401
import dgl

from ..data.cache import (default_cache_dir, fingerprint_of, load_graphs_cached, save_graphs_cached,
                          structure_digest)
from ..utils.precision import PRECISIONS, select_precision
from .inference import encode, encode_dataset
from .loading import load_gpse

__all__ = ["AddGPSE", "precompute_gpse", "resolve_model", "PRECISIONS"]

log = logging.getLogger(__name__)

_CACHE_VERSION = 1


def resolve_model(model, device=None):
    """A GPSE module from a module, a checkpoint path or None (the shipped default model)."""
    if isinstance(model, torch.nn.Module):
        return model if device is None else model.to(device)

    return load_gpse(model, device=device or "cpu")


def _precision_options(precision: str, device) -> dict:
    """Keyword arguments for :func:`encode` / :func:`encode_dataset`: none for the fp32 reference
    (``auto`` resolved for ``device``, so cached encodings are keyed by the precision that made them)."""
    precision = select_precision(precision, device or "cpu")
    return {} if precision == "fp32" else {"precision": precision}


class AddGPSE:
    """Add the encodings of a pretrained GPSE to a DGLGraph: ``g.ndata[key]``, ``(num_nodes, dim)`` float32.

    Parameters
    ----------
    model : GPSE, str, PathLike or None
        An encoder, a checkpoint path (ours or the authors' ``gpse_model_<name>_1.0.pt``), or None for
        the default model shipped with gpse-dgl. Loaded once, here.
    seed : int
        Seed of the random input features (a graph's encoding depends only on the graph, seed, model).
    samples : int
        Average the encodings of this many draws of random features.
    precision : {"fp32", "bf16", "fp16"}
        Arithmetic of the forward pass; fp32 is the reference.
    key : str
        ``ndata`` key the encodings are written to.
    device : str or torch.device, optional
        Where the encoder runs; default the model's device.
    **kwargs
        Further options of :func:`gpse_dgl.encode.encode` (``undirected``, ``batch_size``).

    Examples
    --------
    >>> import dgl
    >>> from gpse_dgl.nn.gpse import GPSE
    >>> add = AddGPSE(GPSE(dim_hidden=4, num_layers=2), seed=1)
    >>> compose = dgl.transforms.Compose([dgl.transforms.AddSelfLoop(), add])
    >>> compose(dgl.graph(([0, 1], [1, 2]))).ndata["gpse"].shape
    torch.Size([3, 4])
    """

    def __init__(self, model=None, seed: int = 0, samples: int = 1, precision: str = "fp32", key: str = "gpse",
                 device=None, **kwargs):
        self.options = {"seed": seed, "samples": samples, "device": device,
                        **_precision_options(precision, device), **kwargs}
        self.model = resolve_model(model, device)
        self.precision = self.options.get("precision", "fp32")
        self.key = key

    def __call__(self, g: dgl.DGLGraph) -> dgl.DGLGraph:
        g.ndata[self.key] = encode(self.model, g, **self.options)
        return g

    def __repr__(self) -> str:
        encoder = getattr(self.model, "encoder", self.model)
        return (f"{type(self).__name__}(model={encoder.num_layers}x{encoder.dim_hidden}, "
                f"seed={self.options['seed']}, samples={self.options['samples']}, precision={self.precision!r}, "
                f"key={self.key!r})")


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


def precompute_gpse(dataset, model=None, seed: int = 0, samples: int = 1, precision: str = "fp32",
                    key: str = "gpse", batch_size: int = 256, device=None, cache=None, name: str | None = None,
                    progress: bool = False, **kwargs):
    """Encode every graph of ``dataset`` in batches and write ``ndata[key]`` into its graphs; return it.

    Parameters
    ----------
    dataset : list of DGLGraph, GraphDataset or dgl.data dataset
        See :func:`dataset_graphs`; the graphs are changed in place.
    model, seed, samples, precision, key, device
        As in :class:`AddGPSE`.
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
    written is logged (logger ``gpse_dgl.encode.transform``, INFO; an unwritable cache is a WARNING).

    Examples
    --------
    >>> import dgl
    >>> from gpse_dgl.nn.gpse import GPSE
    >>> graphs = precompute_gpse([dgl.graph(([0, 1], [1, 0]))], model=GPSE(dim_hidden=4, num_layers=2), key="pe")
    >>> graphs[0].ndata["pe"].shape
    torch.Size([2, 4])
    """
    options = _precision_options(precision, device)
    precision = options.get("precision", "fp32")
    graphs = dataset_graphs(dataset)
    model = resolve_model(model, device)
    path = fingerprint = None
    if cache:
        path, fingerprint = _cache_location(graphs, model, cache, name or getattr(dataset, "name", None) or "graphs",
                                            seed=seed, samples=samples, precision=precision,
                                            options=sorted(kwargs.items()))
        encodings = _read_cache(path, fingerprint, graphs)
        if encodings is not None:
            _store(graphs, encodings, key)
            return dataset
    encodings = encode_dataset(model, [_structure(g) for g in graphs], batch_size=batch_size, seed=seed, samples=samples, device=device,
                               progress=progress, **options, **kwargs)
    _store(graphs, encodings, key)
    if path is not None and _write_cache(path, fingerprint, encodings):
        log.info("GPSE encodings of %d graph(s) cached in %s", len(graphs), path)
    return dataset


def _structure(g: dgl.DGLGraph) -> dgl.DGLGraph:
    """``g``'s nodes and edges without their data: graphs of a dataset may carry different ``ndata``
    (some already encoded), which ``dgl.batch`` refuses to join."""
    src, dst = g.edges()
    return dgl.graph((src, dst), num_nodes=g.num_nodes(), idtype=g.idtype)


def _store(graphs: Sequence, encodings: Sequence[torch.Tensor], key: str) -> None:
    for g, enc in zip(graphs, encodings):
        g.ndata[key] = enc


def model_digest(model) -> str:
    """SHA-256 of an encoder's weights (names, shapes and values), so the same weights share a cache."""
    digest = hashlib.sha256()
    encoder = getattr(model, "encoder", model)
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
    safe = "".join(c if c.isalnum() or c in "-_+" else "_" for c in name)[:60]
    fingerprint = fingerprint_of(kind="gpse-encodings", version=_CACHE_VERSION, structure=structure_digest(graphs),
                                 **key)
    return root / "gpse_encodings" / f"{safe}-{digest}.bin", fingerprint


def _read_cache(path: Path, fingerprint: dict, graphs: Sequence) -> list | None:
    hit = load_graphs_cached(path, fingerprint)
    if hit is None:
        return None
    values, offsets = hit[0][0].ndata["gpse"], hit[1]["offsets"]
    if len(offsets) != len(graphs) + 1:
        return None
    log.info("GPSE encodings of %d graph(s) read from %s", len(graphs), path)
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(graphs))]


def _write_cache(path: Path, fingerprint: dict, encodings: Sequence[torch.Tensor]) -> bool:
    counts = torch.tensor([len(e) for e in encodings], dtype=torch.long)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
    holder = dgl.graph(([], []), num_nodes=int(offsets[-1]))
    holder.ndata["gpse"] = torch.cat(list(encodings))
    return save_graphs_cached(path, [holder], {"offsets": offsets}, fingerprint)
