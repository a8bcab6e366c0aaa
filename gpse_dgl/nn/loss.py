"""The GPSE pretraining loss: mean absolute error plus a per-graph, per-column cosine term.

This is the authors' ``mae_cosim_col_sep`` loss (``graphgym/loss/cosim.py``), which PyG ships as
``torch_geometric.nn.models.gpse.gpse_loss``. The references stack node predictions ``(N, K_n)`` and
graph predictions ``(B, K_g)`` into one zero-padded ``(N + B, K_n + K_g)`` matrix and then compute

* ``F.l1_loss(pred, true)``: the mean over all ``(N + B) * (K_n + K_g)`` entries, padding included, i.e.
  ``(sum |node error| + sum |graph error|) / ((N + B) * (K_n + K_g))``;
* ``1 - mean(cos)``, where ``cos`` runs over groups x columns: every graph of the batch is a group of
  its nodes, the ``B`` graph-level rows form one more group, ``cos`` is the cosine similarity of the
  predicted and true column inside a group (``F.cosine_similarity``, eps 1e-8), and (group, column)
  pairs whose true values are all zero are left out. Padding columns are all zero, so what remains is
  one cosine per (graph, node-target column) and one per graph-target column across the batch.

Here the same quantities are computed with segment sums (no padding, no per-graph loop).

Deviations: (1) the references form the groups with ``to_dense_batch`` on rows ordered nodes-first
although the graph rows get the smallest group id; ``to_dense_batch`` assumes sorted ids, so there the
graph-level rows and the node groups land in shifted slots (the graph-level group is typically split
in two). We compute the intended grouping, which equals the references' function when the rows are
given in sorted order. (2) If no (group, column) pair is left, the references return NaN; we return a
cosine term of 0.

Example
-------
>>> import torch
>>> from gpse_dgl.nn.loss import gpse_loss
>>> node_true = torch.randn(5, 3); graph_true = torch.randn(2, 2)
>>> loss, parts = gpse_loss(node_true, node_true, graph_true, graph_true, [2, 3])
>>> round(float(loss), 6), sorted(parts)
(0.0, ['cosine', 'graph_cosine', 'l1', 'node_cosine', 'num_pairs'])
"""
from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["gpse_loss"]


def _cos(dot, pp, tt, eps):
    # max(sqrt(x), eps) == sqrt(max(x, eps**2)); clamping first keeps sqrt's gradient finite at 0.
    return dot / (pp.clamp_min(eps * eps).sqrt() * tt.clamp_min(eps * eps).sqrt())


def gpse_loss(
    node_pred: torch.Tensor,
    node_true: torch.Tensor,
    graph_pred: torch.Tensor | None,
    graph_true: torch.Tensor | None,
    batch_num_nodes: Sequence[int] | torch.Tensor,
    eps: float = 1e-8,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GPSE loss ``l1 + cosine`` for a batch of graphs.

    Parameters
    ----------
    node_pred, node_true : torch.Tensor
        ``(N, K_n)`` predictions and targets of the real nodes (virtual nodes already dropped), rows
        grouped by graph in batch order.
    graph_pred, graph_true : torch.Tensor or None
        ``(B, K_g)`` graph-level predictions and targets (``None`` for no graph-level targets).
    batch_num_nodes : sequence of int or tensor
        ``(B,)`` nodes per graph; sums to ``N``. Graphs with no nodes are allowed.
    eps : float
        Norm floor of the cosine similarity (as ``F.cosine_similarity``).

    Returns
    -------
    loss : torch.Tensor
        Scalar.
    parts : dict
        Detached scalars ``l1``, ``cosine`` (the two terms), ``node_cosine`` / ``graph_cosine`` (mean
        ``1 - cos`` over the kept node / graph pairs, 0 if none) and ``num_pairs`` (kept pairs).
    """
    device = node_pred.device
    bnn = torch.as_tensor(batch_num_nodes, dtype=torch.int64).to(device)
    num_graphs = int(bnn.numel())
    n, k_n = node_pred.shape
    if node_true.shape != node_pred.shape:
        raise ValueError(f"node_pred {tuple(node_pred.shape)} and node_true {tuple(node_true.shape)} differ")
    if int(bnn.sum()) != n:
        raise ValueError(f"batch_num_nodes sums to {int(bnn.sum())}, node_pred has {n} rows")
    if graph_pred is None:
        graph_pred = node_pred.new_zeros(num_graphs, 0)
        graph_true = graph_pred
    if graph_true.shape != graph_pred.shape or graph_pred.shape[0] != num_graphs:
        raise ValueError(f"graph_pred {tuple(graph_pred.shape)} and graph_true {tuple(graph_true.shape)} "
                         f"must both have {num_graphs} rows")
    k_g = graph_pred.shape[1]

    entries = (n + num_graphs) * (k_n + k_g)
    abs_sum = (node_pred - node_true).abs().sum() + (graph_pred - graph_true).abs().sum()
    l1 = abs_sum / entries if entries else abs_sum * 0.0

    seg = torch.repeat_interleave(torch.arange(num_graphs, device=device), bnn)

    def seg_sum(values):
        return values.new_zeros((num_graphs, k_n)).index_add_(0, seg, values)

    node_cos = _cos(seg_sum(node_pred * node_true), seg_sum(node_pred * node_pred),
                    seg_sum(node_true * node_true), eps)
    node_keep = seg_sum((node_true != 0).to(node_pred.dtype)) > 0
    graph_cos = _cos((graph_pred * graph_true).sum(0), (graph_pred * graph_pred).sum(0),
                     (graph_true * graph_true).sum(0), eps)
    graph_keep = (graph_true != 0).any(0)
    kept = torch.cat([node_cos[node_keep], graph_cos[graph_keep]])
    cosine = 1.0 - kept.mean() if kept.numel() else l1 * 0.0

    def mean_or_zero(x):
        return (1.0 - x).mean().detach() if x.numel() else torch.zeros((), device=device)

    parts = {
        "l1": l1.detach(),
        "cosine": cosine.detach(),
        "node_cosine": mean_or_zero(node_cos[node_keep]),
        "graph_cosine": mean_or_zero(graph_cos[graph_keep]),
        "num_pairs": torch.tensor(kept.numel(), device=device),
    }
    return l1 + cosine, parts
