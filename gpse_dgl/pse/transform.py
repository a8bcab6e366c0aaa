"""DGL-style transform that adds PSEs to a graph: ``g = AddPSE(["LapPE", "RWSE"])(g)``.

Usable wherever DGL takes a callable ``g -> g`` (e.g. a dataset's ``transform``), and composable with
``dgl.transforms.Compose``. For many graphs at once prefer :func:`gpse_dgl.pse.compute_pses`, which
batches same-size graphs and is much faster than calling the transform graph by graph.

Node-level PSEs go to ``g.ndata[name]`` (float32, ``(num_nodes, dim)``). A ``DGLGraph`` has no
graph-level feature store, so graph-level PSEs (EigVals, CycleGE) are attached according to
``graph_level``:

``"ndata"`` (default)
    broadcast to every node: ``g.ndata[name]`` is ``(num_nodes, dim)`` with identical rows (per member
    graph for a batched graph). Survives ``dgl.batch``, ``dgl.save_graphs`` and subgraphing, and any
    node readout (mean / max) recovers the graph value. A graph with no nodes carries nothing.
``"attr"``
    a Python attribute ``g.graph_pse`` = ``{name: FloatTensor (batch_size, dim)}``; exact, but lost on
    ``dgl.batch`` and ``dgl.save_graphs`` (store those as ``labels`` instead).
``"skip"``
    not computed.
"""
from __future__ import annotations

from typing import Iterable, Optional

import torch

from .compute import DEFAULT_DENSE_LIMIT, compute_pses
from .registry import PSE_REGISTRY, resolve_pse_names

__all__ = ["AddPSE", "GRAPH_ATTR"]

GRAPH_ATTR = "graph_pse"
_MODES = ("ndata", "attr", "skip")


class AddPSE:
    """Add explicit PSEs to a DGLGraph.

    Parameters
    ----------
    names : str or list of str, optional
        PSE names; default all six.
    normalize : bool
        Standardise node-level PSEs per graph (see :mod:`gpse_dgl.pse.standardize`).
    graph_level : {"ndata", "attr", "skip"}
        How graph-level PSEs are attached (module docstring).
    dense_limit : int
        As in :func:`gpse_dgl.pse.compute_pses`.
    **kwargs
        Further keyword arguments of :func:`gpse_dgl.pse.compute_pses` (``max_cycle_paths``, ``device``).

    Examples
    --------
    >>> import dgl, torch
    >>> g = dgl.graph((torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0])))
    >>> g = AddPSE(["RWSE", "CycleGE"])(g)
    >>> g.ndata["RWSE"].shape, g.ndata["CycleGE"][0].tolist()
    (torch.Size([4, 20]), [4.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    """

    def __init__(self, names: Optional[Iterable[str] | str] = None, normalize: bool = False,
                 graph_level: str = "ndata", dense_limit: int = DEFAULT_DENSE_LIMIT, **kwargs):
        if graph_level not in _MODES:
            raise ValueError(f"graph_level must be one of {_MODES}, got {graph_level!r}")
        names = resolve_pse_names(names)
        if graph_level == "skip":
            names = [n for n in names if PSE_REGISTRY[n].level == "node"]
        self.names = names
        self.normalize = normalize
        self.graph_level = graph_level
        self.dense_limit = dense_limit
        self.kwargs = kwargs

    def __call__(self, g):
        if not self.names:
            return g
        g, graph_values = compute_pses(g, self.names, normalize=self.normalize,
                                       dense_limit=self.dense_limit, **self.kwargs)
        if self.graph_level == "ndata":
            counts = g.batch_num_nodes()
            for name, value in graph_values.items():
                g.ndata[name] = torch.repeat_interleave(value, counts, dim=0)
        elif self.graph_level == "attr":
            setattr(g, GRAPH_ATTR, dict(graph_values))
        return g

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(names={self.names}, normalize={self.normalize}, "
                f"graph_level={self.graph_level!r})")
