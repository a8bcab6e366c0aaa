"""GPSE pretraining from a validated recipe (:mod:`gpse_dgl.train.pretraining.schema`): ``gpse-dgl pretrain``.

``pretrain(recipe)`` runs the paper's procedure: unique molecular skeletons split 90 / 5 / 5, targets
computed once and cached, fresh N(0, 1) input features at every step, AdamW with a cosine schedule
after a linear warm-up (stepped per epoch by default, as in the paper), gradient-norm clipping, R^2 on
the validation set after every epoch, the best checkpoint by validation R^2 evaluated on the test set.

Outputs under ``general_pipeline.save_path``::

    best.pt          checkpoint of the epoch with the best validation R^2 (what ``encode`` loads)
    last.pt          checkpoint after the latest completed epoch (what ``--resume`` continues from)
    metrics.json     data summary, per-epoch history, best epoch, validation and test R^2 per PSE
    recipe.yaml      the validated recipe with every default filled in
    tensorboard/     TensorBoard event files (loss per step, R^2 per PSE per epoch)

Reproducibility: every source of randomness (weight init, batch order, input features, dropout) is
seeded from ``recipe["seed"]`` and, inside training, re-derived at the start of every epoch from
``(seed, epoch)``. So a run interrupted after any epoch and resumed gives bit-identical results to an
uninterrupted one (on the same device and thread count); a kill mid-epoch loses only that epoch.
With ``general_pipeline.fit_to_time_limit`` the number of epochs depends on the machine's speed (measured
during the warm-up); it is logged and stored, and the run is repeated exactly by setting ``num_epochs`` to
it with the fitting off (unless the machine slowed down later and the schedule was re-fitted: ``refits`` in
``metrics.json``). A time limit holds the whole run, final evaluation included
(:mod:`~gpse_dgl.train.pretraining.time_budget`).
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from ...data.cache import default_cache_dir
from ...recipes import dump_recipe
from ...utils.io import atomic_write_text
from ...utils.precision import decide_precision
from .. import data_parallel
from ..mixed_precision import MixedPrecision
from ..runtime import derive_seed, run_environment, tqdm_write
from ..schedule import LRSchedule
from ..run_frame import RunFrame, open_run
from .checkpoints import (RUN_OUTPUTS, RunPaths, TrainState, check_run_directory, initialise_from,
                          load_initial_weights, restore_run)
from .data import build_pretraining_data, describe_sizes
from .loop import Trainer
from .model import build_model, build_optimizer, model_config_from_recipe, num_parameters

__all__ = ["pretrain"]


def pretrain(recipe: dict, resume: bool = False, progress: bool = True, overwrite: bool = False,
             log: Callable[[str], None] | None = None,
             on_epoch_end: Callable[[dict], None] | None = None, allow_recipe_change: bool = False,
             reserve_seconds: float = 0.0) -> dict:
    """Pretrain GPSE as ``recipe`` says; return the summary also written to ``metrics.json``.

    Parameters
    ----------
    recipe : dict
        A validated recipe (:func:`~gpse_dgl.train.pretraining.schema.load_pretrain_recipe`).
    resume : bool
        Continue from ``<save_path>/last.pt``.
    progress : bool
        Show tqdm progress bars.
    overwrite : bool
        Start afresh even if ``save_path`` already holds a run; the old run is kept until the new one has
        written its first checkpoint, and restored if the new one fails before (:mod:`gpse_dgl.train.rundir`).
    log : callable
        Receives one-line status messages (default: ``tqdm.write``, or nothing when
        ``progress`` is False).
    on_epoch_end : callable
        Called with the epoch's record (``epoch``, ``lr``, ``train``, ``val``, ``seconds``) after its
        checkpoints are written; raise ``StopIteration`` in it to end training early (the best
        checkpoint is then evaluated as usual). Any other exception aborts the run.
    allow_recipe_change : bool
        With ``resume``: continue even if the recipe changes the result (recorded in ``metrics.json``).
    reserve_seconds : float
        Of ``time_limit_minutes``, the seconds kept for what the caller does after the run (``gpse-dgl
        pretrain``: its report); ``time_left_seconds`` in the summary says what is left.
    """
    started = time.perf_counter()
    log = log or (tqdm_write if progress else (lambda message: None))
    general = recipe["general_pipeline"]
    paths = RunPaths.under(general["save_path"])
    with open_run(general, recipe["device"], paths.root, RUN_OUTPUTS, resume=resume, overwrite=overwrite,
                  check_directory=lambda root, *flags: check_run_directory(paths, *flags),
                  allow_recipe_change=allow_recipe_change,
                  cache_dir=recipe["data"]["cache_dir"] or default_cache_dir(), progress=progress, log=log) as run:
        if run.ctx.is_main:
            on_epoch_end = run.rundir.commit_after(on_epoch_end)
        return _run(recipe, paths, resume, run, started, on_epoch_end, reserve_seconds)


def _run(recipe: dict, paths: RunPaths, resume: bool, frame: RunFrame, started: float, on_epoch_end,
         reserve_seconds: float = 0.0) -> dict:
    """Build the run (data, model, optimiser, schedule; resumed or warm-started), train it and evaluate
    its best checkpoint."""
    general = recipe["general_pipeline"]
    ctx, device, rundir, progress, log = frame.ctx, frame.device, frame.rundir, frame.progress, frame.log
    # the run's precision, decided once here (a precision the device lacks fails here) and read below
    mixed = MixedPrecision(decide_precision(general["precision"], device))
    # read before the data is built, so that a missing or corrupt file fails in seconds; resuming
    # takes its weights from last.pt instead
    init = load_initial_weights(recipe["model"]["init_from"]) if recipe["model"]["init_from"] and not resume \
        else None
    data = build_pretraining_data(recipe["data"], progress=progress, log=log)
    log(f"data: {describe_sizes(data)}; ready after {time.perf_counter() - started:.1f} s")
    model_config = model_config_from_recipe(recipe["model"], data)
    torch.manual_seed(derive_seed(recipe["seed"], "init"))
    model = build_model(model_config, recipe["model"]["backend"])
    if init is not None:
        log(initialise_from(model, model_config, *init))
    model = model.to(device)
    optimizer = build_optimizer(model, general["optimizer"])
    steps_per_epoch = data_parallel.num_global_batches(len(data.splits["train"]), general["batch_size"], ctx)
    scheduler = LRSchedule.from_recipe(optimizer, general, steps_per_epoch)
    state = TrainState()
    if resume:
        state = restore_run(paths.last, recipe, model_config, model, optimizer, scheduler, rundir.allow_recipe_change,
                            mixed)
        # the restored schedule object carries the checkpoint's lengths: take the recipe's (which may
        # have changed, e.g. more epochs) or the fitted one
        scheduler.set_length(state.num_epochs or general["num_epochs"])
        log(f"resume: {paths.last} after epoch {state.epoch}")
    if ctx.is_main:
        rundir.replace_previous()  # recipe valid, data and model ready: the old run may go aside now
        atomic_write_text(paths.recipe, dump_recipe(recipe))
    log(f"model: {num_parameters(model):,} parameters on {device}; {steps_per_epoch} steps per epoch")

    eval_batch_size = general["eval_batch_size"] or general["batch_size"]
    # evaluation batches are built once and reused every epoch
    eval_batches = {split: list(data.splits[split].batches(eval_batch_size))
                    for split in ("val", "test") if len(data.splits[split])}
    from torch.utils.tensorboard import SummaryWriter  # tensorboard: a heavy import, for training runs only

    writer = (SummaryWriter(str(paths.tensorboard), purge_step=state.epoch * steps_per_epoch + 1)
              if ctx.is_main else data_parallel.NoWriter())
    run = Trainer(recipe, data, model, model_config, optimizer, scheduler, state, eval_batches, paths,
                  writer, device, progress, log, started, mixed, ctx,
                  data_parallel.data_parallel(model, ctx, device, general["sync_batchnorm"]),
                  run_environment(ctx, device, mixed.precision, general["num_threads"]), reserve_seconds)
    if ctx.is_distributed:
        log(f"data-parallel: {ctx.world_size} processes ({ctx.backend}), "
            f"{general['batch_size'] // ctx.world_size} graphs per process and step")
    try:
        stop_reason = run.train_epochs(on_epoch_end)
        return run.final_evaluation(stop_reason)
    finally:
        writer.close()
