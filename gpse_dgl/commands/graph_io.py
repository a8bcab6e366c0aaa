"""Graph files in and out of the ``pse`` and ``encode`` verbs: checked inputs, checked and atomic outputs.

* :func:`read_graph_file` reads a ``dgl.save_graphs`` file, one line for a file DGL cannot read;
* :func:`check_input_graphs` refuses inputs there is nothing to compute on (no graphs, no nodes) and
  node or edge tensors holding NaN or Inf, naming the graph and the key (labels pass through unchecked:
  datasets such as ogbg-molpcba mark missing targets with NaN);
* :func:`write_graph_file` writes the result through :func:`gpse_dgl.utils.io.save_graphs_atomic`.

Example
-------
>>> import dgl, os, tempfile
>>> from gpse_dgl.commands.graph_io import check_input_graphs, read_graph_file, write_graph_file
>>> path = os.path.join(tempfile.mkdtemp(), "g.bin")
>>> write_graph_file(path, [dgl.graph(([0], [1]))], {})
>>> graphs, labels = read_graph_file(path)
>>> check_input_graphs(graphs, path)        # two nodes, nothing non-finite: no error
"""
from __future__ import annotations

import torch

from ..utils.errors import GPSEError, InputDataError
from ..utils.text import plural

__all__ = ["read_graph_file", "check_input_graphs", "write_graph_file"]


def read_graph_file(path) -> tuple[list, dict]:
    """``(graphs, labels)`` of a DGL binary graph file."""
    import dgl

    try:
        graphs, labels = dgl.load_graphs(str(path))
    except Exception as exc:  # noqa: BLE001 - DGL raises assorted errors for foreign files
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise GPSEError(f"{path}: not a DGL graph file ({reason[:100]})") from None
    return list(graphs), dict(labels)


def _first_non_finite(frames) -> str | None:
    for key, value in frames.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            return key
    return None


def check_input_graphs(graphs: list, source: str) -> None:
    """One-line :class:`InputDataError` for no graphs, no nodes at all, or NaN/Inf in node or edge data."""
    if not graphs:
        raise InputDataError(f"{source}: holds no graphs; nothing to compute")
    if sum(g.num_nodes() for g in graphs) == 0:
        raise InputDataError(f"{source}: {plural(len(graphs), 'graph')} but no nodes; nothing to compute")
    for index, graph in enumerate(graphs):
        for kind, frames in (("ndata", graph.ndata), ("edata", graph.edata)):
            key = _first_non_finite(frames)
            if key is not None:
                raise InputDataError(f"{source}: graph {index} has NaN or Inf in {kind}[{key!r}]")


def write_graph_file(path, graphs: list, labels: dict | None) -> None:
    """Save graphs and labels atomically (a reader sees the old file or the new one, never a mix)."""
    from ..utils.io import save_graphs_atomic

    save_graphs_atomic(path, graphs, labels or None)
