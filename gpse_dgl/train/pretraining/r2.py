"""The pretraining metric: R^2 per target column, per PSE and overall.

How the paper's R^2 is computed (read from the authors' ``graphgym/logger.py``, ``eval_r2``, and their
``inductive_hybrid_multi`` head; the checkpoint is selected on ``metric_best: r2``):

* every target column is scored separately: R^2 = 1 - RSS / TSS, and a column whose TSS is
  <= 1e-6 (constant target) is left out (NaN) rather than scored;
* node-level columns are scored **within each graph** (``r2_split``) and averaged over the graphs
  where the column is not constant; graph-level columns are scored across all graphs;
* the overall score is the mean over all columns that have a score (``np.nanmean``), so a PSE
  weighs by its number of columns. This reproduces the paper's table: its per-PSE values
  (0.964, 0.973, 0.984, 0.981, 0.982, 0.977) weighted by 7, 4, 20, 20, 4, 7 columns give the reported
  overall 0.979, whereas their plain mean would be 0.977;
* per PSE we report the mean of that PSE's column scores.

We call that score ``r2`` and select checkpoints on it. We also report ``r2_global``: each column
scored over all held-out nodes (or graphs) at once. The authors log a ``r2_global`` too, but theirs
stacks node rows and graph rows into one zero-padded matrix, so the padding enters the variance of
every column; ours does not pad.

Statistics are accumulated in float64 batch by batch (:class:`R2Accumulator`), so an evaluation
never holds all predictions in memory.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch

__all__ = ["CONSTANT_TSS", "R2Accumulator", "column_r2", "group_scores", "nanmean", "per_graph_column_r2"]

# A column whose total sum of squares is at or below this is constant: it gets no score
# (the authors' EPS in graphgym/logger.py).
CONSTANT_TSS = 1e-6


def column_r2(y_true: torch.Tensor, y_pred: torch.Tensor, eps: float = CONSTANT_TSS) -> torch.Tensor:
    """R^2 of every column over all rows, ``(C,)`` float64; NaN where the target column is constant."""
    y_true, y_pred = _as_2d(y_true), _as_2d(y_pred)
    rss = ((y_true - y_pred) ** 2).sum(0)
    tss = ((y_true - y_true.mean(0)) ** 2).sum(0)
    return _r2_from_sums(rss, tss, eps)


def per_graph_column_r2(y_true: torch.Tensor, y_pred: torch.Tensor, batch_num_nodes: torch.Tensor,
                        eps: float = CONSTANT_TSS) -> torch.Tensor:
    """R^2 of every column within every graph, ``(num_graphs, C)`` float64 (NaN = constant there)."""
    y_true, y_pred = _as_2d(y_true), _as_2d(y_pred)
    graph_of_row = _graph_index(batch_num_nodes, y_true.device)
    num_graphs = len(batch_num_nodes)
    count = torch.as_tensor(batch_num_nodes, dtype=torch.float64, device=y_true.device)[:, None]
    sum_true = _segment_sum(y_true, graph_of_row, num_graphs)
    sum_true_sq = _segment_sum(y_true ** 2, graph_of_row, num_graphs)
    rss = _segment_sum((y_true - y_pred) ** 2, graph_of_row, num_graphs)
    tss = sum_true_sq - sum_true ** 2 / count.clamp(min=1)
    return _r2_from_sums(rss, tss, eps)


def group_scores(column_scores: Sequence[float], columns: Sequence[tuple[str, int]]) -> dict[str, float]:
    """Mean score per PSE from per-column scores; ``columns[i] = (pse_name, column_within_pse)``."""
    groups: dict[str, list[float]] = {}
    for score, (name, _) in zip(column_scores, columns):
        groups.setdefault(name, []).append(float(score))
    return {name: nanmean(values) for name, values in groups.items()}


def nanmean(values: Iterable[float]) -> float:
    """Mean of the non-NaN values; NaN when there are none."""
    kept = [float(v) for v in values if not math.isnan(float(v))]
    return sum(kept) / len(kept) if kept else math.nan


class R2Accumulator:
    """Collects batches of node and graph predictions; :meth:`compute` returns the R^2 report.

    ``columns`` lists ``(pse_name, column)`` for the node columns followed by the graph columns, as
    ``pse.target_columns(node_names, graph_names)`` returns them.
    """

    def __init__(self, columns: Sequence[tuple[str, int]], num_node_columns: int,
                 eps: float = CONSTANT_TSS):
        self.columns = list(columns)
        self.num_node_columns = num_node_columns
        self.num_graph_columns = len(self.columns) - num_node_columns
        self.eps = eps
        # per-graph R^2 of node columns: running sum and count of the non-NaN scores
        self._graph_r2_sum = torch.zeros(num_node_columns, dtype=torch.float64)
        self._graph_r2_count = torch.zeros(num_node_columns, dtype=torch.float64)
        self._node = _SumsOfSquares(num_node_columns)
        self._graph = _SumsOfSquares(self.num_graph_columns)
        self._abs_error = {"node": 0.0, "graph": 0.0}
        self.num_graphs = 0

    @torch.no_grad()
    def update(self, node_pred: torch.Tensor, node_true: torch.Tensor, graph_pred: torch.Tensor,
               graph_true: torch.Tensor, batch_num_nodes: torch.Tensor) -> None:
        node_pred, node_true = _as_2d(node_pred).cpu(), _as_2d(node_true).cpu()
        graph_pred, graph_true = _as_2d(graph_pred).cpu(), _as_2d(graph_true).cpu()
        batch_num_nodes = torch.as_tensor(batch_num_nodes).cpu()
        if self.num_node_columns:
            scores = per_graph_column_r2(node_true, node_pred, batch_num_nodes, self.eps)
            scored = ~torch.isnan(scores)
            self._graph_r2_sum += torch.where(scored, scores, torch.zeros_like(scores)).sum(0)
            self._graph_r2_count += scored.sum(0)
            self._node.update(node_true, node_pred)
            self._abs_error["node"] += float((node_true.double() - node_pred.double()).abs().sum())
        if self.num_graph_columns:
            self._graph.update(graph_true, graph_pred)
            self._abs_error["graph"] += float((graph_true.double() - graph_pred.double()).abs().sum())
        self.num_graphs += len(batch_num_nodes)

    def column_scores(self) -> tuple[list[float], list[float]]:
        """``(r2, r2_global)`` per column, node columns first."""
        per_graph = self._graph_r2_sum / self._graph_r2_count  # 0/0 = NaN: constant in every graph
        node_global = self._node.r2(self.eps)
        graph_global = self._graph.r2(self.eps)
        r2 = per_graph.tolist() + graph_global.tolist()
        r2_global = node_global.tolist() + graph_global.tolist()
        return r2, r2_global

    def compute(self) -> dict:
        """``{"r2", "r2_per_pse", "r2_global", "r2_global_per_pse", "mae_node", "mae_graph", ...}``."""
        r2, r2_global = self.column_scores()
        node_values = self._node.count * self.num_node_columns
        graph_values = self._graph.count * self.num_graph_columns
        return {
            "r2": nanmean(r2),
            "r2_per_pse": group_scores(r2, self.columns),
            "r2_global": nanmean(r2_global),
            "r2_global_per_pse": group_scores(r2_global, self.columns),
            "r2_per_column": r2,
            "mae_node": self._abs_error["node"] / node_values if node_values else math.nan,
            "mae_graph": self._abs_error["graph"] / graph_values if graph_values else math.nan,
            "num_graphs": self.num_graphs,
        }


class _SumsOfSquares:
    """Float64 running sums giving column R^2 over all rows seen (one pass, mergeable)."""

    def __init__(self, num_columns: int):
        self.count = 0
        self.sum_true = torch.zeros(num_columns, dtype=torch.float64)
        self.sum_true_sq = torch.zeros(num_columns, dtype=torch.float64)
        self.rss = torch.zeros(num_columns, dtype=torch.float64)

    def update(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> None:
        y_true, y_pred = y_true.double(), y_pred.double()
        self.count += y_true.shape[0]
        self.sum_true += y_true.sum(0)
        self.sum_true_sq += (y_true ** 2).sum(0)
        self.rss += ((y_true - y_pred) ** 2).sum(0)

    def r2(self, eps: float) -> torch.Tensor:
        tss = self.sum_true_sq - self.sum_true ** 2 / max(self.count, 1)
        return _r2_from_sums(self.rss, tss, eps)


def _r2_from_sums(rss: torch.Tensor, tss: torch.Tensor, eps: float) -> torch.Tensor:
    scores = 1.0 - rss / tss.clamp(min=eps)
    return torch.where(tss > eps, scores, torch.full_like(scores, math.nan))


def _as_2d(x: torch.Tensor) -> torch.Tensor:
    x = torch.as_tensor(x).detach().to(torch.float64)
    return x[:, None] if x.dim() == 1 else x


def _graph_index(batch_num_nodes, device) -> torch.Tensor:
    counts = torch.as_tensor(batch_num_nodes, dtype=torch.int64, device=device)
    return torch.repeat_interleave(torch.arange(len(counts), device=device), counts)


def _segment_sum(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    out = torch.zeros(size, values.shape[1], dtype=values.dtype, device=values.device)
    return out.index_add_(0, index, values)
