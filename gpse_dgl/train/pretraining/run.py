# size: one run's life in one place: the driver, the epoch loop with its time-limit fitting (_Run), resuming
# and the per-epoch logs share the run's state; data, checkpoints and metrics are modules of their own.
"""GPSE pretraining from a validated recipe (:mod:`gpse_dgl.recipes`).

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
it with the fitting off.
"""
from __future__ import annotations

import contextlib

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .. import _env  # noqa: F401
from ..data.cache import default_cache_dir
from ..encode.models import resolve_checkpoint
from ..nn.gpse import GPSEForPretraining
from ..nn.loss import gpse_loss
from ..nn.random_features import random_node_features
from ..recipes import dump_recipe, validate_recipe
from ..utils import distributed as dist_utils
from ..utils.errors import CheckpointError, GPSEError
from ..utils.io import atomic_write_text
from ..utils.precision import autocast
from ..utils import checkpoint as ckpt
from . import distributed as data_parallel
from .data import PretrainingData, build_pretraining_data, describe_sizes
from .metrics import R2Accumulator
from .mixed_precision import MixedPrecision
from .rundir import RunDirectory, check_resumed_recipe
from .schedule import LRSchedule
from .runtime import (derive_seed, first_line, json_safe, progress_bar, resolve_device, run_environment,
                      torch_threads, tqdm_write, write_json)


# what a run writes into its directory (what --overwrite replaces)
RUN_OUTPUTS = ("best.pt", "last.pt", "metrics.json", "recipe.yaml", "tensorboard")


@dataclass(frozen=True)
class RunPaths:
    """Where a run writes its outputs."""

    root: Path

    @property
    def best(self) -> Path:
        return self.root / "best.pt"

    @property
    def last(self) -> Path:
        return self.root / "last.pt"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def recipe(self) -> Path:
        return self.root / "recipe.yaml"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"


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


def pretrain(recipe: dict, resume: bool = False, progress: bool = True, overwrite: bool = False,
             log: Callable[[str], None] | None = None,
             on_epoch_end: Callable[[dict], None] | None = None, allow_recipe_change: bool = False) -> dict:
    """Pretrain GPSE as ``recipe`` says; return the summary also written to ``metrics.json``.

    Parameters
    ----------
    recipe : dict
        A validated recipe (:func:`gpse_dgl.recipes.load_recipe`).
    resume : bool
        Continue from ``<save_path>/last.pt``.
    progress : bool
        Show tqdm progress bars.
    overwrite : bool
        Start afresh even if ``save_path`` already holds a run; the old run is kept until the new one has
        written its first checkpoint, and restored if the new one fails before (:mod:`.rundir`).
    log : callable
        Receives one-line status messages (default: ``tqdm.write``, or nothing when
        ``progress`` is False).
    on_epoch_end : callable
        Called with the epoch's record (``epoch``, ``lr``, ``train``, ``val``, ``seconds``) after its
        checkpoints are written; raise ``StopIteration`` in it to end training early (the best
        checkpoint is then evaluated as usual). Any other exception aborts the run.
    allow_recipe_change : bool
        With ``resume``: continue even if the recipe changes the result (recorded in ``metrics.json``).
    """
    started = time.perf_counter()
    log = log or (tqdm_write if progress else (lambda message: None))
    general = recipe["general_pipeline"]
    paths = RunPaths(Path(general["save_path"]))
    cache_dir = recipe["data"]["cache_dir"] or default_cache_dir()
    with dist_utils.process_group(general["distributed"], resolve_device(recipe["device"])) as ctx:
        if not ctx.is_main:
            progress, log = False, (lambda message: None)
        # rank 0 alone owns (locks, checks, replaces) the run directory; the others start once it has
        owner = (RunDirectory(paths.root, RUN_OUTPUTS, overwrite and not resume, cache_dir, allow_recipe_change)
                 if ctx.is_main else contextlib.nullcontext())
        # threads inside the group: under torchrun each process takes its share of the cores
        with torch_threads(general["num_threads"], log), owner as rundir:
            if ctx.is_main:
                _check_run_directory(paths, resume, overwrite)
                on_epoch_end = rundir.commit_after(on_epoch_end)
            dist_utils.barrier()
            return _run(recipe, paths, resume, progress, log, started, on_epoch_end, rundir, allow_recipe_change,
                        ctx)


def _run(recipe: dict, paths: RunPaths, resume: bool, progress: bool, log, started: float,
         on_epoch_end, rundir: RunDirectory | None, allow_recipe_change: bool,
         ctx: dist_utils.Context = dist_utils.Context()) -> dict:
    general = recipe["general_pipeline"]
    device = dist_utils.local_device(resolve_device(recipe["device"]), ctx)
    mixed = MixedPrecision(general["precision"], device)  # a precision the device lacks fails here
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
    scheduler = build_schedule(optimizer, general, steps_per_epoch)
    state = TrainState()
    if resume:
        state = _restore(paths.last, recipe, model_config, model, optimizer, scheduler, allow_recipe_change,
                         mixed)
        # the restored schedule object carries the checkpoint's lengths: take the recipe's (which may
        # have changed, e.g. more epochs) or the fitted one
        scheduler.set_length(state.num_epochs or general["num_epochs"])
        log(f"resume: {paths.last} after epoch {state.epoch}")
    if rundir is not None:  # rank 0
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
    run = _Run(recipe, data, model, model_config, optimizer, scheduler, state, eval_batches, paths,
               writer, device, progress, log, started, mixed, ctx,
               data_parallel.data_parallel(model, ctx, device, general["sync_batchnorm"]),
               run_environment(ctx, device, mixed.precision, general["num_threads"]))
    if ctx.is_distributed:
        log(f"data-parallel: {ctx.world_size} processes ({ctx.backend}), "
            f"{general['batch_size'] // ctx.world_size} graphs per process and step")
    try:
        stop_reason = run.train_epochs(on_epoch_end)
        return run.final_evaluation(stop_reason)
    finally:
        writer.close()


# ----------------------------------------------------------------------------------------------
# building blocks


def model_config_from_recipe(model_recipe: dict, data: PretrainingData) -> dict:
    """:meth:`GPSEForPretraining.to_config` layout (stored in checkpoints to rebuild the model)."""
    encoder = {"dim_in": model_recipe["dim_in"], "dim_hidden": model_recipe["dim_hidden"],
               "num_layers": model_recipe["num_layers"], "dropout": model_recipe["dropout"],
               "virtual_node": model_recipe["virtual_node"]}
    if not model_recipe["learn_input_norm"]:  # as GPSE.to_config: the key only when it is off
        encoder["learn_input_norm"] = False
    return {
        "encoder": encoder,
        "heads": {"dim_in": model_recipe["dim_hidden"], "num_node_targets": data.num_node_columns,
                  "num_graph_targets": data.num_graph_columns, "node_hidden": model_recipe["head_hidden"],
                  "graph_hidden": model_recipe["graph_head_hidden"], "dropout": model_recipe["dropout"],
                  "pooling": model_recipe["pooling"]},
    }


def build_model(model_config: dict, backend: str | None = None) -> torch.nn.Module:
    """``GPSEForPretraining`` from a :func:`model_config_from_recipe` config."""
    return GPSEForPretraining.from_config(model_config, backend=backend)


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
        difference = _first_difference(payload["model_config"], model_config, "model_config")
        raise CheckpointError(f"model.init_from: {path}: model differs from the recipe's ({difference})")
    try:
        model.load_state_dict(payload["model_state"])
    except RuntimeError as exc:
        raise CheckpointError(f"model.init_from: {path}: {first_line(exc)}") from None
    trained = f"after epoch {payload['epoch']}" if "epoch" in payload else "epoch unknown"
    score = payload.get("best_metric")
    score = f", validation R^2 {score:.4f}" if isinstance(score, float) and math.isfinite(score) else ""
    return f"init: weights from {path} ({trained}{score}); optimiser and schedule start afresh"


def build_optimizer(model: torch.nn.Module, optimizer_recipe: dict) -> torch.optim.Optimizer:
    optimizer_class = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[optimizer_recipe["name"]]
    # foreach: one multi-tensor kernel per update step instead of a Python loop over the ~100 parameter
    # tensors (torch only picks it by itself on CUDA), which pays on a CPU as well
    return optimizer_class(model.parameters(), lr=optimizer_recipe["lr"],
                           weight_decay=optimizer_recipe["weight_decay"], foreach=True)


def build_scheduler(optimizer: torch.optim.Optimizer, general: dict, steps_per_epoch: int):
    """The torch ``LambdaLR`` inside :func:`build_schedule` (for code that steps a torch scheduler itself)."""
    return build_schedule(optimizer, general, steps_per_epoch).scheduler


def build_schedule(optimizer: torch.optim.Optimizer, general: dict, steps_per_epoch: int) -> LRSchedule:
    """The run's :class:`~gpse_dgl.train.schedule.LRSchedule` from ``general_pipeline``.

    ``cosine_with_warmup``: linear from ~0 to the peak over ``warmup_epochs``, then half a cosine down
    to 0 at ``num_epochs`` (:meth:`~gpse_dgl.train.schedule.LRSchedule.set_length` changes that end).
    With ``interval: epoch`` it moves once per epoch, as in the paper; with ``interval: step`` after
    every optimiser step.
    """
    return LRSchedule(optimizer, general["lr_scheduler"], general["num_epochs"], steps_per_epoch)


def training_features(graph, dim: int, generator: torch.Generator, share=None) -> torch.Tensor:
    """Fresh N(0, 1) input features for a training batch, drawn from the run's ``generator``; under
    torchrun ``share`` (:class:`~gpse_dgl.train.distributed.BatchShare`) picks this rank's rows of the
    global batch's draw."""
    if share is not None and share.node_rows != (0, share.global_nodes):
        return share.features(dim, generator)

    return random_node_features(graph, dim=dim, generator=generator)


def evaluation_features(graph, dim: int, seed: int) -> torch.Tensor:
    """N(0, 1) input features fixed per graph by ``seed`` (independent of batching), so every
    evaluation of a model sees the same inputs and validation scores are comparable across epochs."""
    return random_node_features(graph, dim=dim, seed=seed)


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------------------
# the loop


@dataclass
class _Run:
    """Everything one pretraining run works with; methods are the phases of the loop."""

    recipe: dict
    data: PretrainingData
    model: torch.nn.Module
    model_config: dict
    optimizer: torch.optim.Optimizer
    scheduler: LRSchedule
    state: TrainState
    eval_batches: dict
    paths: RunPaths
    writer: object
    device: torch.device
    progress: bool
    log: Callable[[str], None]
    started: float
    mixed: MixedPrecision | None = None
    dist: dist_utils.Context = dist_utils.Context()
    trained: torch.nn.Module | None = None  # what training steps call: the DDP wrapper of model, or None
    environment: dict = field(default_factory=dict)  # how the run runs (runtime.run_environment)

    @property
    def general(self) -> dict:
        return self.recipe["general_pipeline"]

    @property
    def steps_per_epoch(self) -> int:
        return data_parallel.num_global_batches(len(self.data.splits["train"]), self.general["batch_size"],
                                                self.dist)

    @property
    def num_epochs(self) -> int:
        """Epochs this run trains for: the recipe's, or fewer once fitted to the time limit."""
        return self.state.num_epochs or self.general["num_epochs"]

    def train_epochs(self, on_epoch_end) -> str:
        """Train up to ``num_epochs``; return why training stopped."""
        bar = progress_bar(None, self.progress, desc="epochs", unit="epoch", initial=self.state.epoch,
                           total=self.num_epochs)
        try:
            return self._train_epochs(on_epoch_end, bar)
        finally:
            if bar is not None:
                bar.close()

    def _train_epochs(self, on_epoch_end, bar) -> str:
        limit = self.general["time_limit_minutes"]
        eval_seconds = 0.0  # duration of the latest validation, to budget the evaluations to come
        timed_from, timed_epochs = time.perf_counter(), 0
        while self.state.epoch < self.num_epochs:
            epoch, num_epochs = self.state.epoch, self.num_epochs
            epoch_started = time.perf_counter()
            # the epoch after which the schedule is fitted also validates, to time the evaluations
            fit_now = self.general["fit_to_time_limit"] and epoch + 1 == self.fit_after_epoch
            record = {"epoch": epoch + 1, "lr": self.optimizer.param_groups[0]["lr"],
                      "train": self.train_one_epoch(epoch)}
            # Would another epoch overrun the budget? Count its training and validation, this
            # epoch's validation and the final validation + test evaluation of the best checkpoint.
            projected = (time.perf_counter() - self.started + (time.perf_counter() - epoch_started)
                         + 4 * eval_seconds)
            out_of_time = limit is not None and projected > limit * 60 and epoch + 1 < num_epochs
            out_of_time = dist_utils.broadcast_object(out_of_time)  # rank 0's clock decides for all
            if "val" in self.eval_batches and (
                    (epoch + 1) % self.general["eval_every"] == 0 or epoch + 1 == num_epochs or out_of_time
                    or fit_now):
                eval_started = time.perf_counter()
                record["val"] = self.evaluate("val")
                eval_seconds = time.perf_counter() - eval_started
            record["seconds"] = round(time.perf_counter() - epoch_started, 2)
            timed_epochs += 1
            fitted = None
            if fit_now:
                # before the checkpoints are written, so that they carry the fitted length
                fitted = self.fit_to_time_limit(epoch + 1, (time.perf_counter() - timed_from) / timed_epochs,
                                                eval_seconds) if self.dist.is_main else None
                self.adopt_fitted_length(dist_utils.broadcast_object(self.state.num_epochs))
            self.finish_epoch(record)
            if fitted:
                self.log(fitted)
            if bar is not None:
                bar.total = self.num_epochs
                bar.update(1)
                bar.set_postfix(loss=f"{record['train']['loss']:.4f}",
                                val_r2=f"{record.get('val', {}).get('r2', math.nan):.4f}")
            if out_of_time:
                self.log(f"stop: time limit of {limit:g} min reached after epoch {epoch + 1}")
                return f"time limit of {limit:g} min reached after epoch {epoch + 1}"
            if on_epoch_end is not None:
                try:
                    on_epoch_end(record)
                except StopIteration:
                    return f"stopped by on_epoch_end after epoch {epoch + 1}"
        return "completed"

    @property
    def fit_after_epoch(self) -> int:
        """The epoch after which the schedule is fitted to the time limit: the last whole epoch of the
        warm-up, whose learning rates do not depend on the schedule's length (so the fitted run is the
        same as one started with ``num_epochs`` set to the fitted length; the recipe check requires
        ``warmup_epochs >= 1`` with fitting)."""
        return max(1, math.floor(self.general["lr_scheduler"]["warmup_epochs"]))

    def fit_to_time_limit(self, epochs_done: int, epoch_seconds: float, eval_seconds: float) -> str | None:
        """Shorten the schedule so that it reaches its end inside ``time_limit_minutes``.

        With ``fit_to_time_limit`` the cosine decays to 0 by the last epoch that fits, instead of being
        cut off by the time limit mid-way (at a high learning rate) on a slower machine. Called once,
        after epoch :attr:`fit_after_epoch` (``epochs_done``) with the mean seconds per epoch so far
        (validation included).
        The fitted length is kept in checkpoints (``--resume`` continues it) and in ``metrics.json``.
        Returns a line for the log when the schedule was shortened.
        """
        limit = self.general["time_limit_minutes"]
        if limit is None or self.state.num_epochs is not None or epoch_seconds <= 0:
            return None
        # All the time left after the final evaluation of the best checkpoint (validation + test), no
        # margin: epoch times vary by ~+-15 % within a run on a shared CPU, but erring long costs little
        # (a run that falls behind is stopped by the time limit in the cosine's tail, where the rate is
        # near 0: 0.6 % of the peak at 95 % of the schedule), while erring short leaves minutes unused.
        left = limit * 60 - (time.perf_counter() - self.started) - 2 * eval_seconds
        fitted = epochs_done + max(1, int(left / epoch_seconds))
        if fitted >= self.general["num_epochs"]:
            return None
        self.state.num_epochs = fitted
        self.scheduler.set_length(fitted)
        return (f"schedule: fitted to the {limit:g}-minute limit at {epoch_seconds:.1f} s per epoch: "
                f"{fitted} epochs instead of {self.general['num_epochs']} (repeat this run exactly with "
                f"--set general_pipeline.num_epochs={fitted} --set general_pipeline.fit_to_time_limit=false)")

    def adopt_fitted_length(self, num_epochs: int | None) -> None:
        """Take rank 0's fitted schedule length (every rank must stop after the same epoch)."""
        if num_epochs != self.state.num_epochs:
            self.state.num_epochs = num_epochs
            self.scheduler.set_length(num_epochs)

    def train_one_epoch(self, epoch: int) -> dict:
        """One pass over the training graphs; every random draw derives from (seed, epoch)."""
        seed, train = self.recipe["seed"], self.data.splits["train"]
        batch_size, dim_in = self.general["batch_size"], self.model_config["encoder"]["dim_in"]
        order = torch.Generator().manual_seed(derive_seed(seed, "batch order", epoch))
        features = torch.Generator().manual_seed(derive_seed(seed, "features", epoch))
        # dropout uses the global generator; under torchrun each rank draws its own masks
        rank_key = (self.dist.rank,) if self.dist.is_distributed else ()
        torch.manual_seed(derive_seed(seed, "dropout", epoch, *rank_key))
        first_step = epoch * self.steps_per_epoch
        self.model.train()
        totals: dict[str, float] = {}
        counted = 0  # graphs of the global batches (every rank computes the global batch's loss)
        bar = progress_bar(data_parallel.sharded_batches(train, batch_size, order, self.dist), self.progress,
                            desc=f"epoch {epoch + 1}", unit="batch", total=self.steps_per_epoch,
                            leave=False)
        for step, (graph, node_true, graph_true, share) in enumerate(bar):
            x = training_features(graph, dim_in, features, share).to(self.device)
            loss, parts = self.training_step(graph, x, node_true, graph_true)
            self.scheduler.after_step()
            counted += share.global_graphs
            for name, value in {"loss": loss, **parts}.items():
                totals[name] = totals.get(name, 0.0) + _scalar(value) * share.global_graphs
            global_step = first_step + step + 1
            if (step + 1) % self.general["log_every"] == 0 or step + 1 == self.steps_per_epoch:
                self.writer.add_scalar("train/loss_step", _scalar(loss), global_step)
                self.writer.add_scalar("train/lr", self.optimizer.param_groups[0]["lr"], global_step)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{_scalar(loss):.4f}")
        self.scheduler.after_epoch()
        return {name: total / max(counted, 1) for name, total in totals.items()}

    def training_step(self, graph, x, node_true, graph_true):
        with self.mixed.autocast():  # the model's outputs are float32: the loss is computed outside
            node_pred, graph_pred = (self.trained or self.model)(graph, x)
        # the loss of the whole global batch, from every rank's rows (train/distributed.py)
        node_pred, node_true, graph_pred, graph_true, sizes = data_parallel.gather_batch(
            node_pred, node_true.to(self.device), graph_pred, graph_true.to(self.device), graph.batch_num_nodes())
        loss, parts = _loss(node_pred, node_true, graph_pred, graph_true, sizes, self.general["loss"])
        self.optimizer.zero_grad(set_to_none=True)
        self.mixed.backward_and_step(data_parallel.ddp_loss(loss, self.dist), self.optimizer,
                                     self.model.parameters(), self.general["clip_grad_norm"], foreach=True)
        return loss, parts

    def evaluate(self, split: str) -> dict:
        return evaluate(self.model, self.eval_batches[split], self.data, self.recipe["seed"],
                        self.device, self.model_config["encoder"]["dim_in"], self.general["loss"],
                        precision=self.mixed.precision)

    def finish_epoch(self, record: dict) -> None:
        """Book-keeping after an epoch: best model, checkpoints, metrics file, logs."""
        state = self.state
        state.epoch = record["epoch"]
        state.history.append(record)
        if "val" in record and not math.isnan(record["val"]["r2"]) and record["val"]["r2"] > state.best_metric:
            state.best_metric, state.best_epoch = record["val"]["r2"], record["epoch"]
        _log_epoch(self.writer, record, state.epoch * self.steps_per_epoch)
        if not self.dist.is_main:
            return
        if state.best_epoch == state.epoch:
            ckpt.save_checkpoint(self.paths.best, self.checkpoint_payload())
        # last.pt is written after best.pt: a run killed in between resumes from the epoch before,
        # and redoing that epoch rewrites best.pt identically
        ckpt.save_checkpoint(self.paths.last, self.checkpoint_payload())
        _write_metrics(self.paths, self.summary(status="running"))
        self.log(_epoch_line(record, state))

    def checkpoint_payload(self) -> dict:
        state, data = self.state, self.data
        return {
            "format": ckpt.FORMAT,
            "format_version": ckpt.FORMAT_VERSION,
            "model_state": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "model_config": dict(self.model_config),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict(),
            "rng_state": ckpt.capture_rng_state(),
            "recipe": self.recipe,
            "epoch": state.epoch,
            "fitted_num_epochs": state.num_epochs,
            "best_metric": state.best_metric,
            "best_epoch": state.best_epoch,
            "history": json_safe(state.history),
            "recipe_changes": list(state.recipe_changes),
            "node_targets": list(data.node_names),
            "graph_targets": list(data.graph_names),
            # graph head outputs are z-scores when set: raw value = output * std + mean
            "graph_target_scaling": data.graph_target_scaling,
            **({"grad_scaler_state": self.mixed.state_dict()} if self.mixed.state_dict() else {}),
        }

    def final_evaluation(self, stop_reason: str) -> dict:
        """Evaluate the best checkpoint on validation and test data; write and return the summary."""
        if not self.dist.is_main:  # rank 0 alone evaluates and reports
            return {**self.summary(status=stop_reason), "rank": self.dist.rank}
        source = self.paths.best if self.paths.best.exists() else self.paths.last
        self.model.load_state_dict(ckpt.load_pretrain_checkpoint(source)["model_state"])
        results = {split: self.evaluate(split) for split in self.eval_batches}
        for split, report in results.items():
            _add_r2_scalars(self.writer, f"best_{split}", report, self.state.epoch * self.steps_per_epoch)
        summary = self.summary(status=stop_reason)
        summary.update(evaluated_checkpoint=str(source),
                       final={split: _drop_columns(report) for split, report in results.items()},
                       r2_table=r2_table(results))
        _write_metrics(self.paths, summary)
        return summary

    def summary(self, status: str) -> dict:
        state, paths = self.state, self.paths
        best = next((r for r in state.history if r["epoch"] == state.best_epoch), None)
        return {
            "status": status,
            "epochs_completed": state.epoch,
            "num_epochs": self.num_epochs,
            "fitted_to_time_limit": state.num_epochs is not None,
            "best_epoch": state.best_epoch,
            "best_val_r2": state.best_metric if state.best_epoch > 0 else None,
            "best_val": _drop_columns(best.get("val")) if best else None,
            "wall_time_seconds": round(time.perf_counter() - self.started, 2),
            "environment": self.environment,
            "data": self.data.info,
            "model": {"config": self.model_config, "num_parameters": num_parameters(self.model)},
            "paths": {"run": str(paths.root), "best_checkpoint": str(paths.best),
                      "last_checkpoint": str(paths.last), "metrics": str(paths.metrics),
                      "tensorboard": str(paths.tensorboard), "recipe": str(paths.recipe)},
            "history": [{**r, "val": _drop_columns(r["val"])} if r.get("val") else r
                        for r in state.history],
            "recipe_changes": list(state.recipe_changes),
            "recipe": self.recipe,
        }


def _loss(node_pred, node_true, graph_pred, graph_true, batch_num_nodes, options: dict | None = None):
    """:func:`~gpse_dgl.nn.loss.gpse_loss` with the recipe's ``general_pipeline.loss`` options."""
    loss, parts = gpse_loss(node_pred, node_true, graph_pred, graph_true, batch_num_nodes,
                            **(options or {}))
    # counts such as num_pairs are not losses: keep only the loss terms for logging
    return loss, {f"loss_{name}": value for name, value in (parts or {}).items()
                  if not name.startswith("num_")}


def _scalar(value) -> float:
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches, data: PretrainingData, seed: int, device: torch.device,
             dim_in: int, loss_options: dict | None = None, precision: str = "fp32") -> dict:
    """Loss (with the recipe's ``loss_options``) and R^2 report over pre-built batches.

    Input features are seeded per graph, so repeated evaluations of the same model agree. The
    forward pass runs in ``precision`` (:mod:`gpse_dgl.utils.precision`); loss and R^2 in float32.
    """
    was_training = model.training
    model.eval()
    accumulator = R2Accumulator(data.columns, data.num_node_columns)
    loss_total, graphs = 0.0, 0
    feature_seed = derive_seed(seed, "evaluation features")
    for graph, node_true, graph_true in batches:
        x = evaluation_features(graph, dim_in, feature_seed).to(device)
        with autocast(precision, device):
            node_pred, graph_pred = model(graph, x)
        loss, _ = _loss(node_pred, node_true.to(device), graph_pred, graph_true.to(device),
                        graph.batch_num_nodes(), loss_options)
        accumulator.update(node_pred, node_true, graph_pred, graph_true, graph.batch_num_nodes())
        loss_total += float(loss) * graph.batch_size
        graphs += graph.batch_size
    model.train(was_training)
    report = accumulator.compute()
    report["loss"] = loss_total / max(graphs, 1)
    return report


# ----------------------------------------------------------------------------------------------
# checkpoints and resuming


def _restore(path: Path, recipe, model_config, model, optimizer, scheduler,
             allow_recipe_change: bool = False, mixed=None) -> TrainState:
    payload = ckpt.load_pretrain_checkpoint(path)
    changes = _check_same_run(path, payload, recipe, model_config, allow_recipe_change)
    try:
        model.load_state_dict(payload["model_state"])
        optimizer.load_state_dict(payload["optimizer_state"])
        scheduler.load_state_dict(payload["scheduler_state"])
        ckpt.restore_rng_state(payload["rng_state"])
        if mixed is not None:
            mixed.load_state_dict(payload.get("grad_scaler_state"))
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot resume from it ({first_line(exc)})") from None
    fitted = payload.get("fitted_num_epochs")
    return TrainState(int(payload["epoch"]), None if fitted is None else int(fitted),
                      float(payload["best_metric"]), int(payload["best_epoch"]), list(payload["history"]),
                      list(payload.get("recipe_changes", [])) + changes)


def _check_same_run(path: Path, payload: dict, recipe: dict, model_config: dict,
                    allow_recipe_change: bool = False) -> list[str]:
    """Resuming is only meaningful with the same data, model, seed and schedule; return the changes allowed."""
    saved = payload.get("recipe", {})
    try:  # fill in keys added to the schema since the checkpoint was written, at their defaults

        saved = validate_recipe(saved, source=str(path))
    except Exception:  # noqa: BLE001 - an unreadable old recipe is compared as stored
        pass
    changes = check_resumed_recipe(path, saved, recipe, allow_recipe_change)
    if payload["model_config"] != model_config:
        difference = _first_difference(payload["model_config"], model_config, "model_config")
        raise CheckpointError(f"{path}: model differs from the checkpoint's ({difference})")
    return changes


def _first_difference(old, new, prefix: str) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(new) + [k for k in old if k not in new]:
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{prefix}.{key}")
    return f"{prefix}: checkpoint {old!r}, recipe {new!r}"


def _check_run_directory(paths: RunPaths, resume: bool, overwrite: bool) -> None:
    if resume and not paths.last.exists():
        raise CheckpointError(f"{paths.last}: checkpoint not found; nothing to resume in "
                              f"{paths.root} (run without --resume to start)")
    if not resume and not overwrite and paths.last.exists():
        raise CheckpointError(f"{paths.root} already holds a run ({paths.last.name}); pass --resume "
                              f"to continue it, --overwrite to replace it, or choose another --out")


# ----------------------------------------------------------------------------------------------
# final evaluation, summaries, logging


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
        lines.append(f"{row['pse']:<12}" + "".join(f"{_fmt(row[s]):>12}" for s in splits))
    return "\n".join(lines)


def _drop_columns(report: dict | None) -> dict | None:
    return None if report is None else {k: v for k, v in report.items() if k != "r2_per_column"}


def _write_metrics(paths: RunPaths, summary: dict) -> None:
    write_json(paths.metrics, summary)


def _log_epoch(writer, record: dict, global_step: int) -> None:
    writer.add_scalar("train/loss", record["train"]["loss"], global_step)
    for name, value in record["train"].items():
        if name.startswith("loss_"):
            writer.add_scalar(f"train/{name}", value, global_step)
    writer.add_scalar("epoch", record["epoch"], global_step)
    if "val" in record:
        _add_r2_scalars(writer, "val", record["val"], global_step)


def _add_r2_scalars(writer, prefix: str, report: dict, step: int) -> None:
    writer.add_scalar(f"{prefix}/loss", report["loss"], step)
    writer.add_scalar(f"{prefix}/r2", report["r2"], step)
    writer.add_scalar(f"{prefix}/r2_global", report["r2_global"], step)
    for name, value in report["r2_per_pse"].items():
        writer.add_scalar(f"{prefix}/r2_{name}", value, step)


def _epoch_line(record: dict, state: TrainState) -> str:
    val = record.get("val")
    val_text = (f"val loss {val['loss']:.4f} R^2 {_fmt(val['r2'])}" if val else "no validation")
    best = " (best)" if state.best_epoch == record["epoch"] else ""
    return (f"epoch {record['epoch']:>3}: lr {record['lr']:.2e} train loss {record['train']['loss']:.4f}"
            f"; {val_text}{best}; {record['seconds']:.1f} s")


def _fmt(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}"


__all__ = ["pretrain", "evaluate", "RunPaths", "TrainState", "build_model", "build_optimizer",
           "build_scheduler", "model_config_from_recipe", "derive_seed", "training_features",
           "evaluation_features", "resolve_device", "r2_table",
           "format_r2_table"]
