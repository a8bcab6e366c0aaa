"""What a downstream task predicts and how it is scored: task description, loss, metrics, summaries.

:func:`task_spec` reads a dataset's task (graph / node level, binary / multiclass / regression) and
metric; :meth:`TaskSpec.score` uses OGB's ``Evaluator`` for ``ogbg-*`` / ``ogbn-*`` datasets, else
:mod:`gpse_dgl.train.downstream.scores`. Runs are summarised as mean +- std with the population std, as GraphGPS
aggregates them.

Example
-------
>>> from gpse_dgl.train.downstream.evaluation import format_mean_std, summarize
>>> format_mean_std(summarize([0.9, 1.0, None]), percent=True)
'95.0 ± 5.0'
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ...utils.errors import RecipeError
from .scores import HIGHER_IS_BETTER, score

#: The splits every run is scored on, in report order.
SPLITS = ("train", "val", "test")


@dataclass
class TaskSpec:
    """What a dataset asks the model to predict and how it is scored.

    Attributes
    ----------
    level : {"graph", "node"}
    task_type : {"binary", "multiclass", "regression"}
    metric : str
        ``"rocauc"``, ``"ap"``, ``"accuracy"``, ``"mae"`` or ``"rmse"``.
    dim_out : int
        Model outputs per graph / node.
    loss : str
        ``"bce"``, ``"cross_entropy"``, ``"l1"`` or ``"mse"``.
    ogb_name : str or None
        Dataset name for OGB's evaluator, when OGB defines one.
    """

    level: str
    task_type: str
    metric: str
    dim_out: int
    loss: str
    ogb_name: str | None = None
    _evaluator: object = field(default=None, repr=False, compare=False)

    @property
    def higher_is_better(self) -> bool:
        return HIGHER_IS_BETTER[self.metric]

    def score(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> float:
        """The dataset's metric of raw model outputs (logits / values); NaN when it is undefined."""
        if len(y_true) == 0:
            return math.nan
        if self.ogb_name is not None:
            return self._ogb_score(y_true, y_pred)
        return score(self.metric, y_true, y_pred)

    def _ogb_score(self, y_true, y_pred) -> float:
        if self._evaluator is None:  # ogb: a heavy import, for OGB datasets only
            if self.level == "graph":
                from ogb.graphproppred import Evaluator
            else:
                from ogb.nodeproppred import Evaluator
            self._evaluator = Evaluator(self.ogb_name)
        if self.task_type == "multiclass":
            y_true, y_pred = y_true.reshape(-1, 1), y_pred.argmax(dim=-1, keepdim=True)
        try:
            result = self._evaluator.eval({"y_true": y_true.numpy(), "y_pred": y_pred.numpy()})
        except RuntimeError:  # OGB raises when no task has both classes (tiny evaluation sets)
            return math.nan
        return float(result[self._evaluator.eval_metric])


def task_spec(dataset, loss: str = "auto", metric: str | None = None) -> TaskSpec:
    """The :class:`TaskSpec` of a :class:`~gpse_dgl.data.dataset.GraphDataset`.

    ``metric`` replaces the dataset's own metric (then OGB's evaluator is not used).
    """
    if dataset.task_type not in ("binary", "multiclass", "regression") or dataset.labels is None:
        raise RecipeError(f"data.name: {dataset.name} has no labels to train on (task type "
                          f"{dataset.task_type!r})")
    dim_out = dataset.num_classes if dataset.task_type == "multiclass" else dataset.num_tasks
    if loss == "auto":
        loss = {"binary": "bce", "multiclass": "cross_entropy"}.get(
            dataset.task_type, "mse" if dataset.metric == "rmse" else "l1")
    own = dataset.metric or {"binary": "rocauc", "multiclass": "accuracy"}.get(dataset.task_type, "mae")
    ogb_name = _ogb_name(dataset.name) if metric in (None, own) else None
    return TaskSpec(dataset.task, dataset.task_type, metric or own, int(dim_out), loss, ogb_name)


def _ogb_name(name: str) -> str | None:
    if not name.startswith(("ogbg-", "ogbn-")):
        return None
    import pandas as pd  # pandas and ogb: heavy imports, for OGB datasets only
    from ogb import graphproppred

    kind = "graphproppred" if name.startswith("ogbg-") else "nodeproppred"
    master = Path(graphproppred.__file__).parent.parent / kind / "master.csv"
    return name if name in pd.read_csv(master, index_col=0).columns else None


def group_scores(record: dict) -> dict:
    """``{"groups": {"<split>_<group>": score}}`` of an epoch record's scores on the dataset's groups
    (``val_cliff``, ``test_cliff`` for MoleculeACE); ``{}`` when the dataset has none."""
    scores = {f"{split}_{name}": value for split in SPLITS
              for name, value in record.get(split, {}).get("groups", {}).items()}
    return {"groups": scores} if scores else {}


def group_keys(dataset) -> tuple[str, ...]:
    """The result keys of the dataset's groups: ``val_<group>``, ``test_<group>`` for each."""
    return tuple(f"{split}_{name}" for name in getattr(dataset, "groups", {}) for split in ("val", "test"))


def compute_loss(kind: str, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Training loss of raw outputs; NaN targets (missing labels) are left out."""
    if kind == "cross_entropy":
        return F.cross_entropy(pred, target.reshape(-1).long())
    target = target.reshape(pred.shape).to(pred.dtype)
    labelled = ~torch.isnan(target)
    if not labelled.any():
        return pred.sum() * 0.0  # keeps the graph connected so backward() works
    pred, target = pred[labelled], target[labelled]
    if kind == "bce":
        return F.binary_cross_entropy_with_logits(pred, target)
    if kind == "l1":
        return F.l1_loss(pred, target)
    if kind == "mse":
        return F.mse_loss(pred, target)
    raise ValueError(f"unknown loss {kind!r}")


def summarize(values: Sequence[float | None]) -> dict:
    """``{"mean", "std", "values"}`` of the finite values (population std; None when there are none)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return {"mean": None, "std": None, "values": list(values)}
    return {"mean": float(np.mean(finite)), "std": float(np.std(finite)), "values": list(values)}


def format_summary(summary: dict, percent: bool | None = None) -> str:
    """Markdown table: one row per split, ``mean ± std`` of the metric over the runs."""
    metric = summary["metric"]
    percent = metric in ("accuracy", "rocauc", "ap") if percent is None else percent
    lines = [f"| split | {metric}{' (%)' if percent else ''} |", "|---|---|"]
    for split in SPLITS:
        lines.append(f"| {split} | {format_mean_std(summary['summary'][split], percent)} |")
    for key in summary["summary"]:
        if key not in SPLITS:  # a group's score, test_cliff -> "test (cliff)"
            split, _, group = key.partition("_")
            lines.append(f"| {split} ({group}) | {format_mean_std(summary['summary'][key], percent)} |")
    return "\n".join(lines)


def format_mean_std(stats: dict, percent: bool = False, digits: int | None = None) -> str:
    """``mean ± std`` text of a :func:`summarize` dict (``n/a`` without values)."""
    if stats["mean"] is None:
        return "n/a"
    scale = 100.0 if percent else 1.0
    digits = (1 if percent else 4) if digits is None else digits
    return f"{stats['mean'] * scale:.{digits}f} ± {stats['std'] * scale:.{digits}f}"


def result_line(result: dict, spec: TaskSpec) -> str:
    def show(value):
        return "n/a" if value is None or not math.isfinite(value) else f"{value:.4f}"

    groups = "".join(f", {key.replace('_', ' (', 1)}) {show(value)}" for key, value in result.items()
                     if key.startswith("test_"))
    return (f"best epoch {result['best_epoch']}/{result['epochs']}: {spec.metric} train {show(result['train'])}, "
            f"val {show(result['val'])}, test {show(result['test'])}{groups}"
            + ("" if result["status"] == "complete" else f" ({result['status']})"))
