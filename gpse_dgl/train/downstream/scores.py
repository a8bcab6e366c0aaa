"""The downstream scores: MAE, RMSE, accuracy, ROC-AUC and AP, and :func:`score` by name.

They follow OGB's evaluators (ogb.graphproppred / nodeproppred) so that a dataset scored here and
one scored by OGB agree: multi-task binary scores are the mean over the tasks (columns) that have
both a positive and a negative label, NaN labels are ignored, and a score with no scorable task is
NaN (OGB raises instead). Inputs are tensors or arrays; predictions are logits or probabilities
(ROC-AUC and AP only depend on the ranking).

Example
-------
>>> score("mae", [1.0, 2.0], [1.5, 2.0])
0.25
"""
from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["HIGHER_IS_BETTER", "accuracy", "average_precision", "mae", "rmse", "roc_auc", "score"]

#: Metric name -> True when larger is better.
HIGHER_IS_BETTER = {"rocauc": True, "ap": True, "accuracy": True, "mae": False, "rmse": False}


def _numpy_2d(values):
    array = values.detach().cpu().double().numpy() if isinstance(values, torch.Tensor) else np.asarray(
        values, dtype=np.float64)
    return array[:, None] if array.ndim == 1 else array


def mae(y_true, y_pred) -> float:
    """Mean absolute error over every non-NaN target value."""
    true, pred = _numpy_2d(y_true), _numpy_2d(y_pred)
    keep = ~np.isnan(true)
    return float(np.abs(true[keep] - pred[keep]).mean()) if keep.any() else math.nan


def rmse(y_true, y_pred) -> float:
    """Root mean squared error per task (non-NaN values), averaged over tasks (OGB's ``rmse``)."""
    true, pred = _numpy_2d(y_true), _numpy_2d(y_pred)
    scores = []
    for column in range(true.shape[1]):
        keep = ~np.isnan(true[:, column])
        if keep.any():
            scores.append(math.sqrt(float(((true[keep, column] - pred[keep, column]) ** 2).mean())))
    return float(np.mean(scores)) if scores else math.nan


def accuracy(y_true, y_pred) -> float:
    """Fraction of correct predictions.

    ``y_true`` holds class indices ``(N,)``; ``y_pred`` is either class indices ``(N,)`` or scores
    ``(N, C)`` (argmax taken). For a single binary task given as ``(N, 1)`` scores, the threshold is 0
    (logits).
    """
    true = torch.as_tensor(y_true).reshape(-1)
    pred = torch.as_tensor(y_pred)
    if pred.dim() == 2 and pred.shape[1] > 1:
        pred = pred.argmax(dim=1)
    elif pred.is_floating_point():
        pred = (pred.reshape(-1) > 0).long()
    pred = pred.reshape(-1)
    if len(true) == 0:
        return math.nan
    return float((pred.long() == true.long()).double().mean())


def roc_auc(y_true, y_score) -> float:
    """ROC-AUC averaged over the tasks (columns) that have both classes; NaN labels ignored.

    Each task's is ``sklearn.metrics.roc_auc_score`` (the Mann-Whitney statistic, tied scores counting 1/2),
    as in OGB's evaluators.
    """
    from sklearn.metrics import roc_auc_score  # scikit-learn (installed with ogb): heavy, for these metrics only

    return _mean_over_tasks(roc_auc_score, y_true, y_score)


def average_precision(y_true, y_score) -> float:
    """Average precision averaged over the tasks that have both classes; NaN labels ignored.

    Each task's is ``sklearn.metrics.average_precision_score``, ``AP = sum_k (R_k - R_{k-1}) P_k`` over the
    distinct score thresholds (OGB's and LRGB's ``ap``).
    """
    from sklearn.metrics import average_precision_score  # scikit-learn: heavy, for these metrics only

    return _mean_over_tasks(average_precision_score, y_true, y_score)


def _mean_over_tasks(metric, y_true, y_score) -> float:
    """The mean of ``metric(labels, scores)`` over the columns with both classes among their labelled rows (a
    task with one class in a split has no score, as in OGB's evaluators); NaN when no column has one."""
    true, score = _numpy_2d(y_true), _numpy_2d(y_score)
    scores = []
    for column in range(true.shape[1]):
        keep = ~np.isnan(true[:, column])
        labels = true[keep, column] > 0.5
        if labels.all() or not labels.any():
            continue
        scores.append(float(metric(labels, score[keep, column])))
    return float(np.mean(scores)) if scores else math.nan


def score(metric: str, y_true, y_pred) -> float:
    """Dispatch by name: ``"mae"``, ``"rmse"``, ``"accuracy"``, ``"rocauc"`` or ``"ap"``."""
    functions = {"mae": mae, "rmse": rmse, "accuracy": accuracy, "rocauc": roc_auc, "ap": average_precision}
    if metric not in functions:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(functions)}")
    return functions[metric](y_true, y_pred)
