r"""The pretraining loss and the held-out evaluation: loss and R^2 per PSE, and their tables.

:func:`pretraining_loss` is :func:`~gpse_dgl.nn.loss.gpse_loss` with the recipe's ``general_pipeline.loss``
options; :func:`evaluate` runs a model over pre-built batches with per-graph seeded input features and
reports the loss and :math:`R^2` per target column, per PSE and overall
(:class:`~gpse_dgl.train.pretraining.r2.R2Accumulator`, the authors' ``eval_r2``).

Example
-------
>>> rows = r2_table({"val": {"r2_per_pse": {"RWSE": 0.91}, "r2": 0.91},
...                  "test": {"r2_per_pse": {"RWSE": 0.9}, "r2": 0.9}})
>>> print(format_r2_table(rows))
PSE             R^2 val    R^2 test
RWSE             0.9100      0.9000
Overall          0.9100      0.9000
"""
from __future__ import annotations

import contextlib
import math

import torch

from ...nn.loss import gpse_loss
from ...utils.precision import Precision
from .r2 import R2Accumulator
from ..runtime import derive_seed
from .data import PretrainingData
from .model import evaluation_features

__all__ = ["pretraining_loss", "evaluate", "r2_table", "format_r2_table", "format_score", "drop_columns"]


def pretraining_loss(node_pred, node_true, graph_pred, graph_true, batch_num_nodes, options: dict | None = None):
    """``(loss, {"loss_<term>": value})``: :func:`~gpse_dgl.nn.loss.gpse_loss` with the recipe's
    ``general_pipeline.loss`` options, and its terms for logging."""
    loss, parts = gpse_loss(node_pred, node_true, graph_pred, graph_true, batch_num_nodes, **(options or {}))
    # counts such as num_pairs are not losses: keep only the loss terms for logging
    return loss, {f"loss_{name}": value for name, value in (parts or {}).items() if not name.startswith("num_")}


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches, data: PretrainingData, seed: int, device: torch.device,
             dim_in: int, loss_options: dict | None = None, precision: Precision | None = None) -> dict:
    """Loss (with the recipe's ``loss_options``) and R^2 report over pre-built batches.

    Input features are seeded per graph, so repeated evaluations of the same model agree. The
    forward pass runs in the run's ``precision`` (:mod:`gpse_dgl.utils.precision`; None: fp32); loss and R^2 in
    float32.
    """
    was_training = model.training
    model.eval()
    accumulator = R2Accumulator(data.columns, data.num_node_columns)
    loss_total, graphs = 0.0, 0
    feature_seed = derive_seed(seed, "evaluation features")
    for graph, node_true, graph_true in batches:
        x = evaluation_features(graph, dim_in, feature_seed).to(device)
        with precision.autocast(device) if precision is not None else contextlib.nullcontext():
            node_pred, graph_pred = model(graph, x)
        loss, _ = pretraining_loss(node_pred, node_true.to(device), graph_pred, graph_true.to(device),
                                   graph.batch_num_nodes(), loss_options)
        accumulator.update(node_pred, node_true, graph_pred, graph_true, graph.batch_num_nodes())
        loss_total += float(loss) * graph.batch_size
        graphs += graph.batch_size
    model.train(was_training)
    report = accumulator.compute()
    report["loss"] = loss_total / max(graphs, 1)
    return report


def r2_table(results: dict) -> list[dict]:
    """Rows ``{"pse", "val", "test"}`` (R^2 per PSE, then ``Overall``) for printing."""
    splits = [s for s in ("val", "test") if s in results]
    if not splits:
        return []
    names = list(results[splits[0]]["r2_per_pse"])
    rows = [{"pse": name, **{s: results[s]["r2_per_pse"][name] for s in splits}} for name in names]
    rows.append({"pse": "Overall", **{s: results[s]["r2"] for s in splits}})
    return rows


def format_r2_table(rows: list[dict]) -> str:
    """Plain-text table of :func:`r2_table` rows."""
    if not rows:
        return "(no held-out data)"
    splits = [k for k in rows[0] if k != "pse"]
    lines = [f"{'PSE':<12}" + "".join(f"{'R^2 ' + s:>12}" for s in splits)]
    for row in rows:
        lines.append(f"{row['pse']:<12}" + "".join(f"{format_score(row[s]):>12}" for s in splits))
    return "\n".join(lines)


def format_score(value) -> str:
    """``0.9123`` as ``"0.9123"``; a missing or NaN score as ``"n/a"``."""
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


def drop_columns(report: dict | None) -> dict | None:
    """An evaluation report without its per-column R^2 (what summaries keep)."""
    return None if report is None else {k: v for k, v in report.items() if k != "r2_per_column"}
