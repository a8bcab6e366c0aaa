r"""Source ``LapPE``: the paper's Laplacian PE, signed eigenvectors with their eigenvalues (GraphGPS LapPE).

For each graph (simple, undirected) with combinatorial Laplacian :math:`L = D - A` and eigenpairs
:math:`L \phi_j = \lambda_j \phi_j`, :math:`\lambda_1 \le \dots`, :math:`\|\phi_j\|_2 = 1`, node :math:`v`
gets the row

.. math::
    [\phi_1(v), \dots, \phi_m(v),\ \lambda_1, \dots, \lambda_m]

with :math:`m` = ``model.pe.max_freqs`` (8) and NaN in the columns of frequencies a graph of fewer than
:math:`m` nodes lacks. As GraphGPS's ``get_lap_decomp_stats`` with the GPSE authors' ZINC LapPE settings
(``configs/mol_bench/zinc-*+LapPE.yaml``: ``laplacian_norm: none``, ``eigvec_norm: L2``, ``max_freqs: 8``,
``stack_eigval: true``). Signs are as the eigensolver returns them; the DeepSet encoder
(:class:`gpse_dgl.nn.lap_pe_encoder.LapPEDeepSet`) flips them at random in training. GPSE's pretraining
target ``LapPE`` (absolute values of 4 eigenvectors of the normalised Laplacian) is a different encoding,
the source ``LapPE-abs``.

Example
-------
>>> import dgl
>>> from gpse_dgl.train.downstream.pe_sources.lappe import lap_eig_features
>>> path = dgl.graph(([0, 1], [1, 2]))
>>> table = lap_eig_features([path], max_freqs=4)
>>> [round(float(x), 3) for x in table.values[0, 4:7]], bool(table.values[0, 3].isnan())
([0.0, 1.0, 3.0], True)
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch

from ....utils.graph import as_simple_undirected
from .table import NodeTable
from .spec import PESource


def lap_eig_features(graphs: Sequence, max_freqs: int = 8) -> NodeTable:
    """``(N, 2 max_freqs)`` rows: the lowest eigenvectors of ``D - A``, then their eigenvalues, NaN-padded."""
    graphs = list(graphs)
    rows: list = [None] * len(graphs)
    by_size = defaultdict(list)
    for index, graph in enumerate(graphs):
        by_size[graph.num_nodes()].append(index)
    for n, indices in by_size.items():  # graphs of one size share one batched eigensolver call
        adjacency = torch.zeros(len(indices), n, n, dtype=torch.float64)
        for slot, index in enumerate(indices):
            src, dst = as_simple_undirected(graphs[index]).edges()
            adjacency[slot, src.long(), dst.long()] = 1.0
        adjacency = torch.maximum(adjacency, adjacency.transpose(1, 2))
        adjacency.diagonal(dim1=1, dim2=2).zero_()
        laplacian = torch.diag_embed(adjacency.sum(2)) - adjacency
        values, vectors = torch.linalg.eigh(laplacian)                  # ascending, unit L2 columns
        keep = min(n, max_freqs)
        block = torch.full((len(indices), n, 2 * max_freqs), float("nan"), dtype=torch.float64)
        block[:, :, :keep] = vectors[:, :, :keep]
        block[:, :, max_freqs:max_freqs + keep] = values[:, None, :keep].clamp_min(0)
        for slot, index in enumerate(indices):
            rows[index] = block[slot].float()
    return NodeTable.from_list(rows) if rows else NodeTable(torch.zeros(0, 2 * max_freqs),
                                                            torch.zeros(1, dtype=torch.long))


def describe():
    return PESource(
        "LapPE", "signed eigenvectors of D - A with their eigenvalues (model.pe.max_freqs), DeepSet encoder",
        compute=lambda graphs, pe, device, progress: lap_eig_features(graphs, pe.get("max_freqs", 8)),
        width=lambda pe: 2 * pe.get("max_freqs", 8),
        settings=lambda pe: {"max_freqs": pe.get("max_freqs", 8), "storage": pe.get("storage", "float32")},
        encoder={"kind": "deepset", "layers": 2}, kinds=("deepset", "linear", "mlp"),
        code=("train/downstream/pe_sources",))
