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

Option (not in the references): ``regression="mse"`` or ``"l1+mse"`` replaces or complements the L1
term by the mean squared error over the same entries. R^2, the pretraining metric, is a squared-error
score, while the L1 optimum is a median: for a column that is zero in almost every graph (triangles
and 4-, 7- and 8-cycles in molecules, and with them the odd return probabilities) L1 pulls the
prediction to 0 everywhere.

Option (not in the references): ``graph_weight`` scales every graph-level entry of the element-wise
term and every graph-level cosine pair. With the references' weighting (1), a graph column counts once
per graph and a node column once per node, so graph-level targets hold ~1 % of the loss of a batch of
molecules (~19 nodes each) but 11 of the 62 columns that the pretraining R^2 averages.
``recipes/quickstart.yaml`` uses both options (``benchmarks/RESULTS.md``, section 2b).

Option (not in the references): a NaN graph-level target means "not known for this graph" (a training
graph whose count would be far off the scale of the others, see ``data.regular_graphs``): the entry
adds no error and its prediction is left out of the cosine, while the denominators stay as they are.

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

__all__ = ["gpse_loss", "REGRESSION_TERMS"]

#: Element-wise terms :func:`gpse_loss` can add to the cosine term (``"l1"`` = the paper's).
REGRESSION_TERMS = ("l1", "mse", "l1+mse")


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
    regression: str = "l1",
    graph_weight: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GPSE loss ``l1 + cosine`` for a batch of graphs (or ``mse + cosine``, ``l1 + mse + cosine``).

    Parameters
    ----------
    node_pred, node_true : torch.Tensor
        ``(N, K_n)`` predictions and targets of the real nodes (virtual nodes already dropped), rows
        grouped by graph in batch order.
    graph_pred, graph_true : torch.Tensor or None
        ``(B, K_g)`` graph-level predictions and targets (``None`` for no graph-level targets). A NaN
        target is unknown: its entry is left out of the loss.
    batch_num_nodes : sequence of int or tensor
        ``(B,)`` nodes per graph; sums to ``N``. Graphs with no nodes are allowed.
    eps : float
        Norm floor of the cosine similarity (as ``F.cosine_similarity``).
    regression : {"l1", "mse", "l1+mse"}
        The element-wise term: ``"l1"`` is the paper's mean absolute error. ``"mse"`` (mean squared
        error over the same entries) targets what R^2 scores: the L1 optimum is a median, so a column
        that is zero in most graphs (rare cycle lengths, triangle return probabilities) is predicted
        as 0 everywhere under L1, which scores R^2 ~ 0. ``"l1+mse"`` adds both.
    graph_weight : float
        Weight of every graph-level entry and cosine pair relative to a node-level one (1 = the
        references). The element-wise term keeps its denominator, so the default changes nothing.

    Returns
    -------
    loss : torch.Tensor
        Scalar.
    parts : dict
        Detached scalars: the terms (``l1`` and/or ``mse``, and ``cosine``), ``node_cosine`` /
        ``graph_cosine`` (mean ``1 - cos`` over the kept node / graph pairs, 0 if none) and
        ``num_pairs`` (kept pairs).
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

    if regression not in REGRESSION_TERMS:
        raise ValueError(f"regression must be one of {', '.join(REGRESSION_TERMS)}, not {regression!r}")
    if not graph_weight >= 0:
        raise ValueError(f"graph_weight must be >= 0, not {graph_weight!r}")
    entries = max((n + num_graphs) * (k_n + k_g), 1)
    known = ~torch.isnan(graph_true)  # masked unconditionally: a check would sync the device every step
    graph_pred, graph_true = torch.where(known, graph_pred, 0.0), torch.where(known, graph_true, 0.0)
    node_err, graph_err = node_pred - node_true, graph_pred - graph_true
    terms = {}
    if regression in ("l1", "l1+mse"):
        terms["l1"] = (node_err.abs().sum() + graph_weight * graph_err.abs().sum()) / entries
    if regression in ("mse", "l1+mse"):
        terms["mse"] = ((node_err ** 2).sum() + graph_weight * (graph_err ** 2).sum()) / entries
    elementwise = sum(terms.values())

    seg = torch.repeat_interleave(torch.arange(num_graphs, device=device), bnn)

    def seg_sum(values):
        return values.new_zeros((num_graphs, k_n)).index_add_(0, seg, values)

    node_cos = _cos(seg_sum(node_pred * node_true), seg_sum(node_pred * node_pred),
                    seg_sum(node_true * node_true), eps)
    node_keep = seg_sum((node_true != 0).to(node_pred.dtype)) > 0
    graph_cos = _cos((graph_pred * graph_true).sum(0), (graph_pred * graph_pred).sum(0),
                     (graph_true * graph_true).sum(0), eps)
    graph_keep = (graph_true != 0).any(0)
    kept_node, kept_graph = node_cos[node_keep], graph_cos[graph_keep]
    num_pairs = kept_node.numel() + kept_graph.numel()
    weight = kept_node.numel() + graph_weight * kept_graph.numel()
    if num_pairs and weight > 0:
        cosine = 1.0 - (kept_node.sum() + graph_weight * kept_graph.sum()) / weight
    else:
        cosine = elementwise * 0.0

    def mean_or_zero(x):
        return (1.0 - x).mean().detach() if x.numel() else torch.zeros((), device=device)

    parts = {
        **{name: term.detach() for name, term in terms.items()},
        "cosine": cosine.detach(),
        "node_cosine": mean_or_zero(kept_node),
        "graph_cosine": mean_or_zero(kept_graph),
        "num_pairs": torch.tensor(num_pairs, device=device),
    }
    return elementwise + cosine, parts
