"""Checkpoints of a downstream run (``last.pt``, ``best.pt``) and the job directory checks.

A checkpoint holds the model, optimiser, schedule, gradient-scaler (fp16) and RNG states, the recipe, the run's
identity and its :class:`~gpse_dgl.train.downstream.runs.RunState`, so a resumed run ends bit-identical to an
uninterrupted one.
"""
from __future__ import annotations

import math
from pathlib import Path

from ...utils import checkpoint as ckpt
from ...utils.errors import CheckpointError
from ..mixed_precision import MixedPrecision
from ..rundir import RunDirectory, check_resumed_recipe, restore_training_state
from ..runtime import json_safe
from .runs import RunPlan, RunState


#: ``format`` of downstream checkpoints (pretraining ones use :data:`gpse_dgl.utils.checkpoint.FORMAT`).
FORMAT = "gpse-dgl-downstream"
FORMAT_VERSION = 1


def checkpoint_payload(model, optimizer, scheduler, recipe, plan: RunPlan, config, state: RunState,
                       mixed: MixedPrecision) -> dict:
    scaler = mixed.state_dict()  # empty unless fp16
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "model_state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "model_config": json_safe(config),
        "optimizer_state": optimizer.state_dict(),
        "scheduler_state": json_safe(scheduler.state_dict()),
        "rng_state": ckpt.capture_rng_state(),
        "recipe": recipe,
        "run": {"seed": plan.seed, "repeat": plan.repeat, "fold": plan.fold},
        "epoch": state.epoch, "best_epoch": state.best_epoch,
        "best": json_safe(state.best), "history": json_safe(state.history),
        **({"grad_scaler_state": scaler} if scaler else {}),
    }


def restore_run(path: Path, recipe, plan: RunPlan, config, model, optimizer, scheduler, mixed: MixedPrecision,
                rundir: RunDirectory | None = None) -> RunState:
    """Load ``path`` into the run's objects (in place); return its :class:`RunState`."""
    payload = ckpt.load_checkpoint(path, required=("format", "model_state", "model_config", "epoch"))
    if payload["format"] != FORMAT:
        raise CheckpointError(f"{path}: not a gpse-dgl downstream checkpoint (format {payload['format']!r})")
    allowed = rundir is not None and rundir.allow_recipe_change
    changes = check_resumed_recipe(path, payload.get("recipe", {}), recipe, allowed)
    if rundir is not None:
        rundir.recipe_changes += [f"{plan.name}: {change}" for change in changes]
    if payload.get("run") != {"seed": plan.seed, "repeat": plan.repeat, "fold": plan.fold}:
        raise CheckpointError(f"{path}: belongs to run {payload.get('run')}, not {plan.name}")
    restore_training_state(path, payload, model, optimizer, scheduler, mixed)
    best = {k: (math.nan if v is None else v) for k, v in dict(payload["best"]).items()}
    history = [_restore_nan(r) for r in payload["history"]]
    return RunState(int(payload["epoch"]), int(payload["best_epoch"]), best, history)


def check_job_directory(root: Path, resume: bool, overwrite: bool) -> None:
    existing = root.is_dir() and (any(root.glob("*/last.pt")) or any(root.glob("*/result.json"))
                                  or (root / "results.json").is_file())
    if resume and not existing:
        raise CheckpointError(f"{root}: nothing to resume (no run found); run without --resume to start")
    if existing and not resume and not overwrite:
        raise CheckpointError(f"{root} already holds a run; pass --resume to continue it, --overwrite to "
                              f"replace it, or choose another --out")


def _restore_nan(record):
    if isinstance(record, dict):
        return {k: (math.nan if v is None and k in ("loss", "metric") else _restore_nan(v)) for k, v in record.items()}
    return record
