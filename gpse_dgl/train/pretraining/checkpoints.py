"""A pretraining run's directory and checkpoints: where outputs go, resuming, and warm starts.

``last.pt`` (after the latest epoch) and ``best.pt`` (best validation R^2) hold plain containers
(:mod:`gpse_dgl.utils.checkpoint`): the model's config and weights, optimiser, schedule, gradient-scaler
and RNG states, the recipe and the :class:`TrainState`. :func:`restore_run` continues a run from
``last.pt`` only when the data, model, seed and schedule are the same (``--allow-recipe-change``
records the changes it accepts); :func:`load_initial_weights` / :func:`initialise_from` are the warm
start of ``model.init_from``, which takes the weights and starts the optimiser and schedule afresh.

Example
-------
>>> first_difference({"encoder": {"dim_hidden": 16}}, {"encoder": {"dim_hidden": 24}}, "model_config")
'model_config.encoder.dim_hidden: checkpoint 16, recipe 24'
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch

from ...encode.models import resolve_checkpoint
from ...utils import checkpoint as ckpt
from ...utils.errors import CheckpointError, GPSEError
from ...utils.text import first_line
from ..rundir import check_resumed_recipe, restore_training_state
from .schema import validate_pretrain_recipe

__all__ = ["RUN_OUTPUTS", "RunPaths", "TrainState", "restore_run", "check_same_run", "check_run_directory",
           "load_initial_weights", "initialise_from", "first_difference"]

# what a run writes into its directory (what --overwrite replaces)
RUN_OUTPUTS = ("best.pt", "last.pt", "metrics.json", "recipe.yaml", "tensorboard")


class RunPaths(NamedTuple):
    """Where a run writes its outputs: :data:`RUN_OUTPUTS` under ``root``, in that order."""

    root: Path
    best: Path
    last: Path
    metrics: Path
    recipe: Path
    tensorboard: Path

    @classmethod
    def under(cls, root) -> "RunPaths":
        root = Path(root)
        return cls(root, *(root / name for name in RUN_OUTPUTS))


@dataclass
class TrainState:
    """Progress that a checkpoint carries besides the tensors."""

    epoch: int = 0  # completed epochs
    # epochs the schedule runs to when fitted to the time limit (general_pipeline.fit_to_time_limit);
    # None = the recipe's num_epochs
    num_epochs: int | None = None
    best_metric: float = -math.inf
    best_epoch: int = -1
    history: list = field(default_factory=list)
    recipe_changes: list = field(default_factory=list)  # accepted by --resume --allow-recipe-change
    # the schedule re-fitted to the time limit after the machine slowed down: {"after_epoch", "num_epochs",
    # "epoch_seconds"} each
    refits: list = field(default_factory=list)


def check_run_directory(paths: RunPaths, resume: bool, overwrite: bool) -> None:
    """``--resume`` needs ``last.pt``; a fresh run refuses a directory holding one unless ``--overwrite``."""
    if resume and not paths.last.exists():
        raise CheckpointError(f"{paths.last}: checkpoint not found; nothing to resume in "
                              f"{paths.root} (run without --resume to start)")
    if not resume and not overwrite and paths.last.exists():
        raise CheckpointError(f"{paths.root} already holds a run ({paths.last.name}); pass --resume "
                              f"to continue it, --overwrite to replace it, or choose another --out")


def restore_run(path: Path, recipe, model_config, model, optimizer, scheduler, allow_recipe_change: bool,
                mixed) -> TrainState:
    """Load ``path`` into the run's objects (in place); return its :class:`TrainState`."""
    payload = ckpt.load_pretrain_checkpoint(path)
    changes = check_same_run(path, payload, recipe, model_config, allow_recipe_change)
    restore_training_state(path, payload, model, optimizer, scheduler, mixed)
    fitted = payload.get("fitted_num_epochs")
    return TrainState(int(payload["epoch"]), None if fitted is None else int(fitted),
                      float(payload["best_metric"]), int(payload["best_epoch"]), list(payload["history"]),
                      list(payload.get("recipe_changes", [])) + changes, list(payload.get("refits", [])))


def check_same_run(path: Path, payload: dict, recipe: dict, model_config: dict,
                   allow_recipe_change: bool = False) -> list[str]:
    """Resuming is only meaningful with the same data, model, seed and schedule; return the changes allowed."""
    saved = payload.get("recipe", {})
    try:  # fill in keys added to the schema since the checkpoint was written, at their defaults
        saved = validate_pretrain_recipe(saved, source=str(path))
    except Exception:  # noqa: BLE001 - an unreadable old recipe is compared as stored
        pass
    changes = check_resumed_recipe(path, saved, recipe, allow_recipe_change)
    if payload["model_config"] != model_config:
        difference = first_difference(payload["model_config"], model_config, "model_config")
        raise CheckpointError(f"{path}: model differs from the checkpoint's ({difference})")
    return changes


def first_difference(old, new, prefix: str) -> str:
    """The first key path where two nested configs differ, with both values."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(new) + [k for k in old if k not in new]:
            if old.get(key) != new.get(key):
                return first_difference(old.get(key), new.get(key), f"{prefix}.{key}")
    return f"{prefix}: checkpoint {old!r}, recipe {new!r}"


def load_initial_weights(name_or_path: str) -> tuple[Path, dict]:
    """``(file, payload)`` of the pretraining checkpoint that ``model.init_from`` names (a path or a
    registered model name); one-line errors for unknown names and missing, corrupt or foreign files."""
    try:
        path, _ = resolve_checkpoint(name_or_path)
        return path, ckpt.load_pretrain_checkpoint(path)
    except GPSEError as exc:  # unknown name, model not fetched, missing / corrupt / foreign file
        raise type(exc)(f"model.init_from: {exc}") from None


def initialise_from(model: torch.nn.Module, model_config: dict, path: Path, payload: dict) -> str:
    """Load ``payload``'s weights into ``model`` (built from ``model_config``); return a line for the log.

    The checkpoint must describe the same model (layers, widths and the target columns its heads
    predict): continuing a pretraining with another shape is not a warm start but a new model.
    """
    if payload["model_config"] != model_config:
        difference = first_difference(payload["model_config"], model_config, "model_config")
        raise CheckpointError(f"model.init_from: {path}: model differs from the recipe's ({difference})")
    try:
        model.load_state_dict(payload["model_state"])
    except RuntimeError as exc:
        raise CheckpointError(f"model.init_from: {path}: {first_line(exc)}") from None
    trained = f"after epoch {payload['epoch']}" if "epoch" in payload else "epoch unknown"
    score = payload.get("best_metric")
    score = f", validation R^2 {score:.4f}" if isinstance(score, float) and math.isfinite(score) else ""
    return f"init: weights from {path} ({trained}{score}); optimiser and schedule start afresh"
