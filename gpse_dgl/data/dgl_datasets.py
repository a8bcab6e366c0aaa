"""``dgl.data`` datasets by name: ``dgl:<Class>[:<arg>...]`` -> :class:`~gpse_dgl.data.dataset.GraphDataset`.

The name selects one of DGL's own dataset classes (:data:`SUPPORTED`); the colon-separated arguments
after it are the class's arguments, positional (``dgl:TUDataset:MUTAG``) or ``key=value``
(``dgl:MiniGCDataset:num_graphs=500:max_num_v=30``), values read as Python literals where they are
one (``self_loop=True``, ``label_keys=[mu,gap]``), else as text. Arguments DGL requires have defaults
here so the bare name works (:data:`DEFAULTS`, e.g. ``GINDataset`` without self-loops, ``QM9Dataset``
with the HOMO-LUMO ``gap``). ``dgl:ZINCDataset`` and ``dgl:PPIDataset``-like classes with a ``mode``
are read in all three modes and joined with their train / val / test splits.

Files: DGL's own ``raw_dir`` (``root`` when given, else DGL's default ``$DGL_DOWNLOAD_DIR`` or
``~/.dgl``), read by DGL's classes as they are. **Nothing is downloaded**: where DGL would fetch a file,
:class:`~gpse_dgl.utils.errors.DatasetNotFoundError` says which URL DGL fetches and where it expects
it. The offline classes (``KarateClubDataset``, ``MiniGCDataset``) work out of the box.

Conversion: a dataset of one graph with ``ndata["label"]`` is node-level (splits from
``train_mask`` / ``val_mask`` / ``test_mask``, else random 80 / 10 / 10); otherwise each item
``(graph, label)`` is one graph and its label (random 80 / 10 / 10 split). Node and edge input
features are the first of ``feat``, ``attr``, ``node_attr``, ``node_labels`` (edges: ``feat``,
``edge_attr``, ``edge_labels``), stored as ``ndata["feat"]`` / ``edata["feat"]``. Integer labels are
classes, float labels regression targets (:mod:`gpse_dgl.data.user_data`).

Example
-------
>>> ds = load_dgl_dataset("KarateClubDataset")
>>> ds.task, ds.num_classes, ds.graph.num_nodes()
('node', 2, 34)
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import sys

import torch

from .. import _env  # noqa: F401
import dgl.data
import dgl.data.utils

from ..utils.errors import DatasetNotFoundError, GPSEError
from .dataset import GraphDataset
from .user_data import feature_kinds, labelled_dataset

__all__ = ["SUPPORTED", "DEFAULTS", "parse_spec", "load_dgl_dataset", "UnknownDGLDatasetError"]

#: Keyword defaults of the supported classes: arguments DGL requires, or that keep loading quiet and offline.
DEFAULTS: dict[str, dict] = {
    "TUDataset": {}, "LegacyTUDataset": {}, "GINDataset": {"self_loop": False}, "ZINCDataset": {},
    "QM9Dataset": {"label_keys": ["gap"]}, "QM9EdgeDataset": {}, "BA2MotifDataset": {}, "FakeNewsDataset": {},
    "MiniGCDataset": {"num_graphs": 200, "min_num_v": 10, "max_num_v": 20, "save_graph": False},
    "KarateClubDataset": {}, "CoraGraphDataset": {}, "CiteseerGraphDataset": {}, "PubmedGraphDataset": {},
    "AmazonCoBuyComputerDataset": {}, "AmazonCoBuyPhotoDataset": {}, "CoauthorCSDataset": {},
    "CoauthorPhysicsDataset": {}, "WikiCSDataset": {}, "FlickrDataset": {}, "YelpDataset": {}, "RedditDataset": {},
}
_MODES = ("train", "valid", "test")
_NODE_FEATURES = ("feat", "attr", "node_attr", "node_labels")
_EDGE_FEATURES = ("feat", "edge_attr", "edge_labels")
_MASKS = {"train": "train_mask", "val": "val_mask", "test": "test_mask"}


class UnknownDGLDatasetError(GPSEError, ValueError):
    """The ``dgl:`` name is not a supported ``dgl.data`` class; the message lists the supported ones."""


def _supported() -> list[str]:
    return [name for name in DEFAULTS if hasattr(dgl.data, name)]


SUPPORTED = tuple(DEFAULTS)


def _value(text: str):
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if text.startswith("[") and text.endswith("]"):
            return [_value(part) for part in text[1:-1].split(",") if part.strip()]
        return text


def parse_spec(spec: str) -> tuple[str, list, dict]:
    """``"TUDataset:MUTAG:verbose=True"`` -> ``("TUDataset", ["MUTAG"], {"verbose": True})``."""
    parts = str(spec).split(":")
    name, args, kwargs = parts[0].strip(), [], {}
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if sep and key.strip().isidentifier():
            kwargs[key.strip()] = _value(value)
        elif kwargs:
            raise GPSEError(f"dgl:{spec}: positional argument {part!r} after a key=value argument")
        else:
            args.append(_value(part))
    return name, args, kwargs


def _dataset_class(name: str):
    supported = _supported()
    match = next((s for s in supported if s.lower() == name.lower()), None)
    if match is None:
        raise UnknownDGLDatasetError(f"unknown or unsupported dgl.data dataset {name!r}; supported: "
                                     f"{', '.join('dgl:' + s for s in supported)}")
    return getattr(dgl.data, match)


@contextlib.contextmanager
def _no_downloads(cls, spec: str, raw_dir):
    """Replace DGL's ``download`` function, in every module a dataset class of ``cls`` uses it from, by one
    that raises a one-line :class:`DatasetNotFoundError` naming the URL and where DGL expects the file."""
    def refuse(url, path=None, *args, **kwargs):
        where = path or raw_dir or dgl.data.utils.get_download_dir()
        raise DatasetNotFoundError(f"dgl:{spec}: DGL's files are not on disk (downloads are off): DGL expects "
                                   f"{where}, fetched from {url}; put them there, or pass the raw_dir holding "
                                   f"them as --root / data.root")

    modules = {sys.modules[k.__module__] for k in cls.__mro__ if k.__module__ in sys.modules} | {dgl.data.utils}
    patched = [(m, m.download) for m in modules if callable(getattr(m, "download", None))]
    for module, _ in patched:
        module.download = refuse
    try:
        yield
    finally:
        for module, original in patched:
            module.download = original


def _construct(cls, spec: str, args: list, kwargs: dict, raw_dir):
    params = inspect.signature(cls.__init__).parameters
    options = {k: v for k, v in DEFAULTS.get(cls.__name__, {}).items() if k in params}
    positional = [p for p in params if p != "self"][:len(args)]
    options = {k: v for k, v in options.items() if k not in positional}
    options.update(kwargs)
    for key, value in (("verbose", False), ("raw_dir", raw_dir)):
        if key in params and key not in options and key not in positional and value is not None:
            options[key] = value
    with _no_downloads(cls, spec, raw_dir):
        try:
            return cls(*args, **options)
        except (DatasetNotFoundError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - DGL's own message, in one line
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise GPSEError(f"dgl:{spec}: {cls.__name__}: {reason[:300]}") from None


def _copy_features(graphs: list) -> None:
    """``ndata["feat"]`` / ``edata["feat"]`` from the first known feature key of each store."""
    for store, keys in (("ndata", _NODE_FEATURES), ("edata", _EDGE_FEATURES)):
        for g in graphs:
            data = getattr(g, store)
            key = next((k for k in keys if k in data), None)
            if key is not None and key != "feat":
                data["feat"] = data[key]


def _items(datasets) -> tuple[list, list, dict]:
    """Graphs, labels (or None each) and splits (by mode when several datasets are joined)."""
    graphs, labels, splits, start = [], [], {}, 0
    for mode, ds in datasets:
        for index in range(len(ds)):
            item = ds[index]
            graph, label = (item[0], item[1] if len(item) > 1 else None) if isinstance(item, tuple) else (item, None)
            graphs.append(graph)
            labels.append(label)
        if mode is not None:
            splits["val" if mode == "valid" else mode] = torch.arange(start, len(graphs))
        start = len(graphs)
    return graphs, labels, splits


def _node_level(graph, name: str) -> GraphDataset:
    splits = None
    if all(mask in graph.ndata for mask in _MASKS.values()):
        # Several standard splits (WikiCS: one column each): the first.
        masks = {s: graph.ndata[m] if graph.ndata[m].dim() == 1 else graph.ndata[m][:, 0] for s, m in _MASKS.items()}
        splits = {s: torch.nonzero(m.bool()).reshape(-1) for s, m in masks.items()}
    _copy_features([graph])
    labels = graph.ndata["label"]
    return labelled_dataset([graph], labels.reshape(labels.shape[0], -1), name, level="node", splits=splits,
                            info={"source": f"dgl.data ({name})"})


def _graph_level(graphs: list, labels: list, splits: dict, name: str) -> GraphDataset:
    _copy_features(graphs)
    if any(label is None for label in labels):
        info = {"source": f"dgl.data ({name})", **feature_kinds(graphs)}
        return GraphDataset(graphs=graphs, labels=None, splits={}, name=name, task="graph", task_type="none",
                            metric=None, num_tasks=0, node_feat_key="feat" if "node_feat_kind" in info else None,
                            edge_feat_key="feat" if "edge_feat_kind" in info else None, info=info)
    if isinstance(labels[0], dict):
        raise GPSEError(f"{name}: items carry several labels ({', '.join(labels[0])}); not supported")
    stacked = torch.stack([torch.as_tensor(label).reshape(-1) for label in labels])
    return labelled_dataset(graphs, stacked, name, splits=splits or None, info={"source": f"dgl.data ({name})"})


def load_dgl_dataset(spec: str, root=None) -> GraphDataset:
    """A ``dgl.data`` dataset (``spec`` = the part after ``dgl:``) as a :class:`GraphDataset`.

    Parameters
    ----------
    spec : str
        ``<Class>[:<arg>...]`` (module docstring).
    root : path-like, optional
        DGL's ``raw_dir``; default DGL's own.

    Raises
    ------
    UnknownDGLDatasetError
        Not a supported class (the message lists them).
    DatasetNotFoundError
        DGL would have to download files (the message says where it expects them).
    GPSEError
        DGL refused the arguments or the files (DGL's message, one line).
    """
    name, args, kwargs = parse_spec(spec)
    cls = _dataset_class(name)
    raw_dir = None if root is None else str(root)
    params = inspect.signature(cls.__init__).parameters
    if "mode" in params and not args and "mode" not in kwargs:
        datasets = [(mode, _construct(cls, spec, [], {**kwargs, "mode": mode}, raw_dir)) for mode in _MODES]
    else:
        datasets = [(None, _construct(cls, spec, args, kwargs, raw_dir))]
    title = f"dgl:{spec}"
    first = datasets[0][1]
    if len(datasets) == 1 and len(first) == 1:
        graph = first[0][0] if isinstance(first[0], tuple) else first[0]
        if "label" in graph.ndata:
            return _node_level(graph, title)
    return _graph_level(*_items(datasets), title)
