"""Sources of explicit PSEs (``LapPE-abs``, ``RWSE``, ``LapPE+RWSE``, ``AllPSE``): registered PSEs concatenated.

Each is a list of :data:`gpse_dgl.pse.registry.PSE_REGISTRY` names, their columns side by side; a
graph-level PSE (``EigVals``, ``CycleGE``) is repeated on every node of its graph. Values are raw, as
GraphGPS feeds them; the PE encoder standardises them (``model.pe.standardize``) and, as the authors'
``CombinedPSE`` / ``RWSE`` encoders, applies BatchNorm and a Linear layer.

Example
-------
>>> from gpse_dgl.data.synthetic import csl_dataset
>>> from gpse_dgl.train.downstream.pe_sources.explicit import pse_features
>>> pse_features(csl_dataset().graphs[:2], ["RWSE"]).values.shape
torch.Size([82, 20])
"""
from __future__ import annotations

from typing import Sequence

import torch

from ....pse import compute_pse_tensors
from ....pse.registry import PSE_REGISTRY
from .table import NodeTable
from .spec import PESource


def pse_features(graphs: Sequence, names: Sequence[str], progress: bool = False) -> NodeTable:
    """Explicit PSEs ``names`` of every graph, concatenated per node; graph-level ones broadcast."""
    result = compute_pse_tensors(list(graphs), list(names), progress=progress)
    counts = result.num_nodes.long()
    columns = []
    for name in names:
        if name in result.node:
            columns.append(result.node[name])
        else:  # graph-level: one row per graph, repeated on its nodes
            columns.append(torch.repeat_interleave(result.graph[name], counts, dim=0))
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
    return NodeTable(torch.cat(columns, dim=1).float(), offsets)


def describe(name: str, components: Sequence[str]):
    """The source ``name``: the PSEs ``components`` in this column order."""
    components = tuple(components)
    return PESource(
        name, " + ".join(components) + " (raw, graph-level ones repeated on every node)",
        compute=lambda graphs, pe, device, progress: pse_features(graphs, components, progress=progress),
        width=lambda pe: sum(PSE_REGISTRY[c].dim for c in components),
        settings=lambda pe: {"storage": pe.get("storage", "float32")},
        code=("pse",))
