"""The runs of a downstream job: one per seed, times the folds with cross-validation.

Run ``r`` of a job uses seed ``seed + r``; with cross-validation (``data.evaluation: cv``) it also
draws its own stratified ``cv_folds``-fold split (seed ``data.split_seed + r``) and trains one model
per fold: fold ``i`` is the test set and fold ``i + 1`` the validation set (the benchmarking-gnns
protocol).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ...data.splits import stratified_kfold
from ...utils.errors import RecipeError
from .evaluation import SPLITS


@dataclass(frozen=True)
class RunPlan:
    """One training run: its seed, CV repeat/fold (None without CV) and index splits."""

    seed: int
    repeat: int
    fold: int | None
    splits: dict

    @property
    def name(self) -> str:
        return f"seed{self.seed}" if self.fold is None else f"seed{self.seed}-fold{self.fold}"


def plan_runs(dataset, recipe: dict, seeds: Sequence[int]) -> list[RunPlan]:
    """The runs of a job: one per seed, times the folds with cross-validation."""
    data = recipe["data"]
    use_cv = data["evaluation"] == "cv" or (data["evaluation"] == "auto" and bool(dataset.folds))
    if not use_cv:
        missing = [s for s in SPLITS if s not in dataset.splits]
        if missing:
            raise RecipeError(f"data.evaluation: {dataset.name} has no {missing[0]!r} split; use "
                              f"data.evaluation: cv")
        splits = {s: dataset.splits[s] for s in SPLITS}
        return [RunPlan(seed, repeat, None, splits) for repeat, seed in enumerate(seeds)]
    if dataset.task != "graph" or dataset.task_type != "multiclass":
        raise RecipeError("data.evaluation: stratified cross-validation needs a graph classification dataset")
    plans = []
    folds_per_repeat = min(data["cv_folds"], data["max_folds"] or data["cv_folds"])
    for repeat, seed in enumerate(seeds):
        folds = stratified_kfold(dataset.labels, k=data["cv_folds"], seed=data["split_seed"] + repeat)
        plans += [RunPlan(seed, repeat, f, folds[f]) for f in range(folds_per_repeat)]
    return plans


@dataclass
class RunState:
    """Progress of one run (what its checkpoint carries besides tensors)."""

    epoch: int = 0
    best_epoch: int = -1
    best: dict = field(default_factory=dict)   # {"train", "val", "test", "val_loss"[, "groups"]}
    history: list = field(default_factory=list)


def run_seeds(first: int, seeds) -> list[int]:
    if isinstance(seeds, int):
        if seeds < 1:
            raise RecipeError(f"--seeds: expected at least 1, got {seeds}")
        return [first + r for r in range(seeds)]
    return [int(s) for s in seeds]


def run_result(plan: RunPlan, state: RunState, status: str) -> dict:
    best = state.best or {}
    return {"run": plan.name, "seed": plan.seed, "repeat": plan.repeat, "fold": plan.fold, "status": status,
            "epochs": state.epoch, "best_epoch": state.best_epoch,
            **{split: best.get(split) for split in SPLITS}, **best.get("groups", {})}
