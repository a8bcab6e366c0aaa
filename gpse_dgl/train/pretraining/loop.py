"""The epoch loop of a pretraining run: steps, validation, time-limit fitting, checkpoints and logs.

:class:`Trainer` holds everything one run works with; its methods are the phases of the loop. Every
random draw of an epoch (batch order, input features, dropout) derives from ``(seed, epoch)``, so a run
resumed after any epoch continues bit-identically. ``general_pipeline.time_limit_minutes`` is held by
:mod:`~gpse_dgl.train.pretraining.time_budget`: no epoch starts that would overrun it, one that would
anyway is cut mid-way, and with ``fit_to_time_limit`` the schedule is fitted to it after the warm-up
(:meth:`Trainer.fit_to_time_limit`) and again when the machine slows down (:meth:`Trainer.refit`).
Under torchrun every rank trains on its share of each global batch and rank 0 alone writes.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ...utils import checkpoint as ckpt
from ...utils import distributed as dist_utils
from .. import data_parallel
from ..mixed_precision import MixedPrecision
from ..runtime import derive_seed, json_safe, progress_bar, write_json
from ..schedule import LRSchedule
from .checkpoints import RunPaths, TrainState
from .data import PretrainingData
from .evaluation import drop_columns, evaluate, format_score, pretraining_loss, r2_table
from .model import num_parameters, training_features
from .time_budget import TimeBudget

__all__ = ["OutOfTime", "Trainer"]

#: Under torchrun the ranks agree on the mid-epoch time check every this many steps (one broadcast each).
DEADLINE_CHECK_STEPS = 8
#: Epochs whose mean duration a re-fit of the schedule goes by.
REFIT_WINDOW = 3


class OutOfTime(Exception):
    """The time limit ends training mid-epoch, after ``steps`` steps of it (which are discarded)."""

    def __init__(self, steps: int):
        super().__init__(steps)
        self.steps = steps


@dataclass
class Trainer:
    """Everything one pretraining run works with; methods are the phases of the loop (built by
    :func:`~gpse_dgl.train.pretraining.run.pretrain`)."""

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
    reserve_seconds: float = 0.0  # of the time limit, kept for what the caller does after the run
    budget: TimeBudget = field(init=False)

    def __post_init__(self):
        self.budget = TimeBudget.start(self.started, self.general["time_limit_minutes"], self.reserve_seconds)

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
        val_seconds = 0.0  # duration of the latest validation
        timed_from, timed_epochs = time.perf_counter(), 0
        while self.state.epoch < self.num_epochs:
            epoch, num_epochs = self.state.epoch, self.num_epochs
            epoch_started = time.perf_counter()
            # the epoch after which the schedule is fitted also validates, to time the evaluations
            fit_now = self.general["fit_to_time_limit"] and epoch + 1 == self.fit_after_epoch
            try:
                record = {"epoch": epoch + 1, "lr": self.optimizer.param_groups[0]["lr"],
                          "train": self.train_one_epoch(epoch)}
            except OutOfTime as stop:
                reason = (f"time limit of {limit:g} min reached during epoch {epoch + 1} (its {stop.steps} "
                          f"steps discarded; the checkpoints of epoch {epoch} kept)")
                self.log(f"stop: {reason}")
                return reason
            # Would another epoch overrun the budget? Count its training and validation, and this epoch's.
            now = time.perf_counter()
            out_of_time = not self.budget.allows(now, (now - epoch_started) + 2 * val_seconds) \
                and epoch + 1 < num_epochs
            out_of_time = dist_utils.broadcast_object(out_of_time)  # rank 0's clock decides for all
            if "val" in self.eval_batches and (
                    (epoch + 1) % self.general["eval_every"] == 0 or epoch + 1 == num_epochs or out_of_time
                    or fit_now):
                eval_started = time.perf_counter()
                record["val"] = self.evaluate("val")
                val_seconds = time.perf_counter() - eval_started
                self.budget.record_validation(val_seconds, {k: len(v) for k, v in self.eval_batches.items()})
            record["seconds"] = round(time.perf_counter() - epoch_started, 2)
            timed_epochs += 1
            # before the checkpoints are written, so that they carry the fitted length
            fitted = self.fit_schedule(epoch + 1, fit_now, (time.perf_counter() - timed_from) / timed_epochs,
                                       record["seconds"])
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

    def fit_schedule(self, epochs_done: int, fit_now: bool, mean_epoch_seconds: float,
                     epoch_seconds: float) -> str | None:
        """Fit the schedule to the time limit after the warm-up, or re-fit it after a later epoch;
        rank 0 decides, every rank adopts its length. Returns rank 0's line for the log, if any."""
        if not self.general["fit_to_time_limit"] or epochs_done < self.fit_after_epoch:
            return None
        fitted = None
        if self.dist.is_main:
            fitted = (self.fit_to_time_limit(epochs_done, mean_epoch_seconds) if fit_now
                      else self.refit(epochs_done, epoch_seconds))
        self.adopt_fitted_length(dist_utils.broadcast_object(self.state.num_epochs))
        return fitted

    @property
    def fit_after_epoch(self) -> int:
        """The epoch after which the schedule is fitted to the time limit: the last whole epoch of the
        warm-up, whose learning rates do not depend on the schedule's length (so the fitted run is the
        same as one started with ``num_epochs`` set to the fitted length; the recipe check requires
        ``warmup_epochs >= 1`` with fitting)."""
        return max(1, math.floor(self.general["lr_scheduler"]["warmup_epochs"]))

    def fit_to_time_limit(self, epochs_done: int, epoch_seconds: float) -> str | None:
        """Shorten the schedule so that it reaches its end inside ``time_limit_minutes``.

        With ``fit_to_time_limit`` the cosine decays to 0 by the last epoch that fits, instead of being
        cut off by the time limit mid-way (at a high learning rate) on a slower machine. Called after
        epoch :attr:`fit_after_epoch` (``epochs_done``) with the mean seconds per epoch so far
        (validation included).
        The fitted length is kept in checkpoints (``--resume`` continues it) and in ``metrics.json``.
        Returns a line for the log when the schedule was shortened.
        """
        if not self.budget.limited or self.state.num_epochs is not None or epoch_seconds <= 0:
            return None
        # All the time left after what follows training, no margin: epoch times vary by ~+-15 % within a
        # run on a shared CPU, but erring long costs little (refit() and the cut in the cosine's tail,
        # where the rate is near 0: 0.6 % of the peak at 95 % of the schedule), while erring short leaves
        # minutes unused.
        fitted = epochs_done + self.budget.epochs_that_fit(time.perf_counter(), epoch_seconds)
        if fitted >= self.general["num_epochs"]:
            return None
        self.state.num_epochs = fitted
        self.scheduler.set_length(fitted)
        return (f"schedule: fitted to the {self.budget.limit_minutes:g}-minute limit at {epoch_seconds:.1f} s "
                f"per epoch: {fitted} epochs instead of {self.general['num_epochs']} (repeat this run exactly "
                f"with --set general_pipeline.num_epochs={fitted} --set general_pipeline.fit_to_time_limit=false)")

    def refit(self, epochs_done: int, epoch_seconds: float) -> str | None:
        """Shorten the schedule again when the machine has slowed down since it was fitted.

        At the mean speed of the latest :data:`REFIT_WINDOW` epochs (``epoch_seconds`` the latest), do
        the remaining epochs still fit? A shortfall of one epoch is left to the cut (epoch times vary by
        ~15 % on a shared CPU); a larger one fits the rest of the cosine into the time left. Re-fits are
        logged and recorded (``refits`` in checkpoints and metrics.json): such a run is not repeated
        exactly by its ``num_epochs``.
        """
        recent = [r["seconds"] for r in self.state.history[-(REFIT_WINDOW - 1):]] + [epoch_seconds]
        recent_seconds = sum(recent) / len(recent)
        if not self.budget.limited or recent_seconds <= 0:
            return None
        fitted = epochs_done + self.budget.epochs_that_fit(time.perf_counter(), recent_seconds)
        if fitted >= self.num_epochs - 1:
            return None
        previous = self.num_epochs
        self.state.num_epochs = fitted
        self.scheduler.set_length(fitted)
        self.state.refits.append({"after_epoch": epochs_done, "num_epochs": fitted,
                                  "epoch_seconds": round(recent_seconds, 2)})
        return (f"schedule: the machine slowed down ({recent_seconds:.1f} s per epoch): re-fitted to the "
                f"{self.budget.limit_minutes:g}-minute limit, {fitted} epochs instead of {previous}")

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
        data_parallel.seed_dropout(seed, epoch, self.dist)
        first_step = epoch * self.steps_per_epoch
        self.model.train()
        totals: dict[str, float] = {}
        counted = 0  # graphs of the global batches (every rank computes the global batch's loss)
        bar = progress_bar(data_parallel.sharded_batches(train, batch_size, order, self.dist), self.progress,
                            desc=f"epoch {epoch + 1}", unit="batch", total=self.steps_per_epoch,
                            leave=False)
        cut, previous = False, time.perf_counter()
        for step, (graph, node_true, graph_true, share) in enumerate(bar):
            if cut:
                if hasattr(bar, "close"):
                    bar.close()
                raise OutOfTime(step)
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
            now = time.perf_counter()
            self.budget.record_step(now - previous)
            cut, previous = self.cut_after(step + 1, now), now
        self.scheduler.after_epoch()
        return {name: total / max(counted, 1) for name, total in totals.items()}

    def cut_after(self, steps_done: int, now: float) -> bool:
        """Whether the time limit ends the epoch after its ``steps_done``-th step: the steps until the
        next check, each as long as the longest of the latest ones, would not leave room for what
        follows training. The first epoch of a fresh run is never cut (there would be no checkpoint to
        keep). Under torchrun rank 0's clock decides, every :data:`DEADLINE_CHECK_STEPS` steps."""
        every = DEADLINE_CHECK_STEPS if self.dist.is_distributed else 1
        if (not self.budget.limited or self.state.epoch == 0 or steps_done % every
                or steps_done >= self.steps_per_epoch):
            return False
        return dist_utils.broadcast_object(not self.budget.allows(now, every * self.budget.longest_step))

    def training_step(self, graph, x, node_true, graph_true):
        with self.mixed.autocast():  # the model's outputs are float32: the loss is computed outside
            node_pred, graph_pred = (self.trained or self.model)(graph, x)
        # the loss of the whole global batch, from every rank's rows (train/data_parallel.py)
        node_pred, node_true, graph_pred, graph_true, sizes = data_parallel.gather_batch(
            node_pred, node_true.to(self.device), graph_pred, graph_true.to(self.device), graph.batch_num_nodes())
        loss, parts = pretraining_loss(node_pred, node_true, graph_pred, graph_true, sizes, self.general["loss"])
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
            "refits": list(state.refits),
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
        evaluation_started = time.perf_counter()
        source = self.paths.best if self.paths.best.exists() else self.paths.last
        self.model.load_state_dict(ckpt.load_pretrain_checkpoint(source)["model_state"])
        results = {split: self.evaluate(split) for split in self.eval_batches}
        evaluation_seconds = time.perf_counter() - evaluation_started
        for split, report in results.items():
            _add_r2_scalars(self.writer, f"best_{split}", report, self.state.epoch * self.steps_per_epoch)
        summary = self.summary(status=stop_reason)
        summary.update(evaluated_checkpoint=str(source), final_evaluation_seconds=round(evaluation_seconds, 2),
                       final={split: drop_columns(report) for split, report in results.items()},
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
            "refits": list(state.refits),
            "best_epoch": state.best_epoch,
            "best_val_r2": state.best_metric if state.best_epoch > 0 else None,
            "best_val": drop_columns(best.get("val")) if best else None,
            "wall_time_seconds": round(time.perf_counter() - self.started, 2),
            # what the time limit leaves for what the caller does next (the report); None without a limit
            "time_left_seconds": _rounded(self.budget.left(time.perf_counter())),
            "environment": self.environment,
            "data": self.data.info,
            "model": {"config": self.model_config, "num_parameters": num_parameters(self.model)},
            "paths": {"run": str(paths.root), "best_checkpoint": str(paths.best),
                      "last_checkpoint": str(paths.last), "metrics": str(paths.metrics),
                      "tensorboard": str(paths.tensorboard), "recipe": str(paths.recipe)},
            "history": [{**r, "val": drop_columns(r["val"])} if r.get("val") else r
                        for r in state.history],
            "recipe_changes": list(state.recipe_changes),
            "recipe": self.recipe,
        }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


def _scalar(value) -> float:
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)


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
    val_text = (f"val loss {val['loss']:.4f} R^2 {format_score(val['r2'])}" if val else "no validation")
    best = " (best)" if state.best_epoch == record["epoch"] else ""
    return (f"epoch {record['epoch']:>3}: lr {record['lr']:.2e} train loss {record['train']['loss']:.4f}"
            f"; {val_text}{best}; {record['seconds']:.1f} s")
