"""The training loop of one downstream run: epochs, steps, evaluation, checkpoints and logs.

Graph-level tasks train on mini-batches of graphs; node-level tasks (one graph) train and evaluate on
the full graph, or with DGL neighbour sampling (``general_pipeline.sampling: neighbor``; evaluation
then uses one fixed sampled draw per split). Every random draw (batch order, dropout, sampling) is
seeded from ``(seed, epoch)``. After every evaluation the best validation epoch is kept (a tie on the
metric goes to the lower validation loss); the learning rate follows
:class:`~gpse_dgl.train.schedule.LRSchedule`, moved once per epoch.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from pathlib import Path

import torch

from ... import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl

from ...utils import checkpoint as ckpt
from ...utils import distributed as dist_utils
from ...utils.precision import to_accumulation
from .. import data_parallel
from ..mixed_precision import MixedPrecision
from ..runtime import derive_seed, progress_bar
from .checkpoints import checkpoint_payload
from .data import Prepared, graph_batches
from .evaluation import SPLITS, TaskSpec, compute_loss, group_scores
from .models import uses_edge_features
from .runs import RunPlan, RunState


class Trainer:
    """Epoch loop, evaluation, checkpoints and logs of one run."""

    def __init__(self, recipe, prepared: Prepared, plan: RunPlan, model, config, optimizer, scheduler,
                 device, run_dir: Path, mixed: MixedPrecision):
        self.recipe, self.prepared, self.plan, self.model = recipe, prepared, plan, model
        self.config, self.optimizer, self.scheduler = config, optimizer, scheduler
        # listed once: clip_grad_norm_ would otherwise walk every submodule for them at each step
        self.parameters = list(model.parameters())
        self.device, self.run_dir = device, run_dir
        self.general = recipe["general_pipeline"]
        self.spec = prepared.spec
        self.edges = uses_edge_features(model)
        self.pe_only = config["pe_only"]
        self.eval_batches = None
        self.pending_best = None  # payload of a best epoch not written yet (see _save)
        self.shift, self.scale = self._target_scaling()
        self.dist = dist_utils.current()
        # what training steps call: the DDP wrapper under torchrun (train/data_parallel.py), else model
        self.trained = data_parallel.data_parallel(model, self.dist, device, self.general["sync_batchnorm"])
        self.mixed = mixed  # built by the job before a resume restores its gradient scale

    def _target_scaling(self) -> tuple[torch.Tensor | float, torch.Tensor | float]:
        """Mean and std of the training targets (per column) when standardising, else ``(0, 1)``."""
        if not (self.general["standardize_targets"] and self.spec.task_type == "regression"):
            return 0.0, 1.0
        y = self.prepared.labels[self.plan.splits["train"]].double()
        y = y.reshape(len(y), -1)
        labelled = ~torch.isnan(y)
        count = labelled.sum(0).clamp(min=1)
        mean = torch.where(labelled, y, 0.0).sum(0) / count
        var = torch.where(labelled, (y - mean) ** 2, 0.0).sum(0) / count
        return mean.float(), var.sqrt().clamp(min=1e-6).float()

    # -- the loop ------------------------------------------------------------------------------

    def fit(self, state: RunState, progress: bool, title: str, on_epoch_end) -> str:
        from torch.utils.tensorboard import SummaryWriter  # tensorboard: a heavy import, for training runs only

        num_epochs, started = self.general["num_epochs"], time.perf_counter()
        limit = self.general["time_limit_minutes"]
        status = "complete"
        writer = (SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=state.epoch + 1)
                  if self.dist.is_main else data_parallel.NoWriter())
        bar = progress_bar(range(state.epoch, num_epochs), progress, desc=title, unit="epoch", leave=False,
                        total=num_epochs, initial=state.epoch)
        try:
            for epoch in bar:
                record = self._epoch(epoch, state)
                self._log(writer, record)
                out_of_time = limit is not None and time.perf_counter() - started > limit * 60
                out_of_time = dist_utils.broadcast_object(out_of_time)  # rank 0's clock decides for all
                self._save(state, record, final=epoch + 1 == num_epochs or out_of_time)
                if hasattr(bar, "set_postfix"):
                    bar.set_postfix_str(_postfix(record, self.spec), refresh=False)
                if out_of_time and epoch + 1 < num_epochs:
                    status = f"time limit of {limit:g} min reached after epoch {epoch + 1}"
                    break
                if on_epoch_end is not None:
                    try:
                        on_epoch_end(record)
                    except StopIteration:
                        self._save(state, record, final=True)
                        status = f"stopped by on_epoch_end after epoch {epoch + 1}"
                        break
        finally:
            writer.close()
            if hasattr(bar, "close"):
                bar.close()
        return status

    def _epoch(self, epoch: int, state: RunState) -> dict:
        started = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]
        train = self._train_epoch(epoch)
        record = {"epoch": epoch + 1, "lr": lr, "train": train}
        final = epoch + 1 == self.general["num_epochs"]
        if (epoch + 1) % self.general["eval_every"] == 0 or final:
            record.update(self._evaluate())
            record["is_best"] = self._note_best(state, record)
        self.scheduler.after_epoch(record["val"]["metric"] if "val" in record else None)
        record["seconds"] = round(time.perf_counter() - started, 3)
        state.epoch = epoch + 1
        state.history.append(record)
        return record


    def _note_best(self, state: RunState, record: dict) -> bool:
        value, loss = record["val"]["metric"], record["val"]["loss"]
        best = state.best.get("val")
        # A tie on the metric (common with accuracy on small sets) goes to the lower validation loss, so
        # the selected epoch is the most confident of the equally accurate ones, not merely the first.
        tie = value == best and math.isfinite(loss) and loss < state.best.get("val_loss", math.inf)
        if _better(value, best, self.spec.higher_is_better) or tie or (
                state.best_epoch < 0 and not math.isfinite(value)):
            # NaN validation scores (tiny sets) never beat a real one; the first epoch is kept as a
            # fallback so every run reports something.
            state.best_epoch = record["epoch"]
            state.best = {"train": record["train"]["metric"], "val": value, "test": record["test"]["metric"],
                          "val_loss": record["val"]["loss"], **group_scores(record)}
            return True
        return False

    # -- training ------------------------------------------------------------------------------

    def _train_epoch(self, epoch: int) -> dict:
        seed = self.plan.seed
        data_parallel.seed_dropout(seed, epoch, self.dist)
        self.model.train()
        if self.spec.level == "graph":
            outputs = self._train_graph_batches(torch.Generator().manual_seed(derive_seed(seed, "order", epoch)))
        elif self.general["sampling"] == "neighbor":
            outputs = self._train_sampled(epoch)
        else:
            outputs = self._train_full_graph()
        return self._scores(*outputs)

    def _step(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = compute_loss(self.spec.loss, pred, self._standardize(target).to(pred.device))
        self.optimizer.zero_grad(set_to_none=True)
        self.mixed.backward_and_step(data_parallel.ddp_loss(loss, self.dist), self.optimizer,
                                     self.parameters, self.general["clip_grad_norm"])
        return loss.detach()

    def _train_graph_batches(self, generator: torch.Generator):
        train = self.plan.splits["train"]
        order = train[torch.randperm(len(train), generator=generator)]
        preds, targets, losses = [], [], []
        for members in data_parallel.global_batches(order, self.general["batch_size"], self.dist):
            # this rank's share of the global batch; loss and scores over all shares (train/data_parallel.py)
            start, stop = dist_utils.shard_range(len(members), self.dist.rank, self.dist.world_size)
            batch = next(graph_batches(self.prepared, members[start:stop], len(members)))
            pred = self._forward(*batch[:-1])
            pred, target = data_parallel.gather_batch(pred, batch[-1].to(pred.device))
            target = target.cpu()
            losses.append((self._step(pred, target), len(target)))
            preds.append(pred.detach())  # on the device: one copy to the host per epoch, not one sync per step
            targets.append(target)
        return self._on_host(preds), targets, losses

    def _train_full_graph(self):
        g, target = self.prepared.graphs[0], self.prepared.labels
        idx = self.plan.splits["train"]
        pred = self._forward(g, self._pe_rows(None))[idx.to(self.device)]
        loss = self._step(pred, target[idx])
        return [self._unscale(pred.detach().cpu())], [target[idx]], [(loss, len(idx))]

    def _train_sampled(self, epoch: int):
        dropout_seed = derive_seed(self.plan.seed, "dropout", epoch)
        preds, targets, losses = [], [], []
        for pred, target in self._sampled_outputs(self.plan.splits["train"], self.general["batch_size"],
                                                  ("sampling", epoch), shuffle=True, dropout_seed=dropout_seed):
            losses.append((self._step(pred, target), len(target)))
            preds.append(pred.detach())
            targets.append(target)
        return self._on_host(preds), targets, losses

    def _sampled_outputs(self, nodes: torch.Tensor, batch_size: int, key: tuple, shuffle: bool,
                         dropout_seed: int | None = None):
        """``(raw outputs, targets)`` per mini-batch of ``nodes`` on DGL neighbour-sampled blocks."""
        g = self.prepared.graphs[0]
        dgl.seed(derive_seed(self.plan.seed, *key) % (2**31 - 1))  # DGL takes a 32-bit seed
        torch.manual_seed(derive_seed(self.plan.seed, *key, "order"))
        sampler = dgl.dataloading.NeighborSampler([int(f) for f in self.general["fanouts"]])
        loader = dgl.dataloading.DataLoader(g, nodes, sampler, shuffle=shuffle, batch_size=batch_size,
                                            drop_last=False)
        table = self._pe_rows(None)
        with warnings.catch_warnings():  # DGL advises CPU affinity every epoch; irrelevant in process
            warnings.filterwarnings("ignore", message="Dataloader CPU affinity")
            batches = iter(loader)  # draws the node order from the generator seeded above
            if dropout_seed is not None:
                torch.manual_seed(dropout_seed)  # dropout draws from the global generator
            for input_nodes, output_nodes, blocks in batches:
                nf = None if self.prepared.node_feat is None else g.ndata[self.prepared.node_feat][input_nodes]
                pe = None if table is None else table[input_nodes]
                yield (self._call(blocks, _to(nf, self.device), None, _to(pe, self.device)),
                       self.prepared.labels[output_nodes])

    def _predict_sampled(self, split: str):
        """Evaluation on sampled neighbourhoods (fixed draw per split): a full-graph pass over a graph such
        as ogbn-proteins (39.6M edges) does not fit in memory."""
        size = self.general["eval_batch_size"] or 4 * self.general["batch_size"]
        preds, targets, losses = [], [], []
        for pred, target in self._sampled_outputs(self.plan.splits[split], size, ("evaluation", split), shuffle=False):
            pred = self._unscale(pred.cpu())
            preds.append(pred)
            targets.append(target)
            losses.append((compute_loss(self.spec.loss, pred, target), len(target)))
        return preds, targets, losses

    # -- evaluation ----------------------------------------------------------------------------

    @torch.no_grad()
    def _evaluate(self) -> dict:
        self.model.eval()
        try:
            if self.spec.level == "node" and self.general["sampling"] == "neighbor":
                return {split: self._scores(*self._predict_sampled(split)) for split in ("val", "test")}
            if self.spec.level == "node":
                pred = self._unscale(self._forward(self.prepared.graphs[0], self._pe_rows(None)).cpu())
                return {split: self._split_scores(pred[self.plan.splits[split]],
                                                  self.prepared.labels[self.plan.splits[split]])
                        for split in ("val", "test")}
            return {split: self._graph_scores(split) for split in ("val", "test")}
        finally:
            self.model.train()

    def _predict(self, split: str):
        if self.eval_batches is None:
            size = self.general["eval_batch_size"] or 4 * self.general["batch_size"]
            self.eval_batches = {s: list(graph_batches(self.prepared, self.plan.splits[s], size))
                                 for s in ("val", "test")}
        preds, targets, losses = [], [], []
        for batch in self.eval_batches[split]:
            pred = self._unscale(self._forward(*batch[:-1]).cpu())
            preds.append(pred)
            targets.append(batch[-1])
            losses.append((compute_loss(self.spec.loss, pred, batch[-1]), len(batch[-1])))
        return preds, targets, losses

    def _graph_scores(self, split: str) -> dict:
        """The split's scores and, under ``"groups"``, the metric over the split's members of each of the
        dataset's groups (e.g. the RMSE over MoleculeACE's activity-cliff compounds)."""
        preds, targets, losses = self._predict(split)
        scores = self._scores(preds, targets, losses)
        groups = getattr(self.prepared.dataset, "groups", None)
        if groups and preds:
            pred, target = torch.cat(preds).float(), torch.cat(targets)
            members = self.plan.splits[split]  # _predict keeps the split's order
            scores["groups"] = {name: self.spec.score(target[mask[members]], pred[mask[members]])
                                for name, mask in groups.items()}
        return scores

    def _split_scores(self, pred, target) -> dict:
        return self._scores([pred], [target], [(compute_loss(self.spec.loss, pred, target), len(target))])

    def _on_host(self, preds: list) -> list:
        """A training epoch's raw outputs (on the device) as one host tensor in the targets' units."""
        return [self._unscale(torch.cat(preds).cpu())] if preds else []

    def _scores(self, preds, targets, losses) -> dict:
        count = sum(n for _, n in losses)
        # the step losses stay where they were computed until here: one transfer per epoch
        values = [torch.as_tensor(value).detach().reshape(()).double() for value, _ in losses]
        weights = torch.tensor([float(n) for _, n in losses], dtype=torch.float64)
        loss = float((torch.stack(values).cpu() * weights).sum()) / max(count, 1) if losses else 0.0
        if not preds:
            return {"loss": math.nan, "metric": math.nan}
        return {"loss": loss, "metric": self.spec.score(torch.cat(targets), torch.cat(preds).float())}

    # -- forward helpers -----------------------------------------------------------------------

    def _standardize(self, target: torch.Tensor) -> torch.Tensor:
        if isinstance(self.scale, float):
            return target
        return (target.reshape(len(target), -1) - self.shift) / self.scale

    def _unscale(self, pred: torch.Tensor) -> torch.Tensor:
        """Model outputs in the targets' units (losses and scores are reported in those units)."""
        return pred if isinstance(self.scale, float) else pred * self.scale + self.shift

    def _forward(self, graph, pe):
        """Model outputs for a (batched) graph whose node inputs are in its ndata."""
        nf = None if self.prepared.node_feat is None else graph.ndata[self.prepared.node_feat]
        ef = graph.edata[self.prepared.edge_feat] if self.edges else None
        # graphs stay on the CPU (DGL wheels are CPU-only); nn.ops runs message passing where the
        # tensors are
        return self._call(graph, _to(nf, self.device), _to(ef, self.device), _to(pe, self.device))

    def _call(self, graph, nf, ef, pe):
        if pe is not None:
            pe = pe.float()
        model = self.trained if self.model.training else self.model
        with self.mixed.autocast():
            out = model(graph, pe, ef) if self.pe_only else model(graph, nf, ef, pe)
        return to_accumulation(out)  # losses and scores in float32

    def _pe_rows(self, indices):
        table = self.prepared.table
        if table is None:
            return None
        return table.graph(0) if indices is None else table.gather(indices)

    # -- checkpoints and logs ------------------------------------------------------------------

    def _save(self, state: RunState, record: dict, final: bool = False) -> None:
        """Checkpoints every ``checkpoint_every`` epochs; the best epoch's is kept in memory until then
        (writing two files per epoch costs more than training a small model for one)."""
        if not self.general["save_checkpoints"] or not self.dist.is_main:
            return
        if record.get("is_best"):
            self.pending_best = copy.deepcopy(self._payload(state))
        if not (final or state.epoch % self.general["checkpoint_every"] == 0):
            return
        if self.pending_best is not None:
            ckpt.save_checkpoint(self.run_dir / "best.pt", self.pending_best)
            self.pending_best = None
        ckpt.save_checkpoint(self.run_dir / "last.pt", self._payload(state))

    def _payload(self, state: RunState) -> dict:
        return checkpoint_payload(self.model, self.optimizer, self.scheduler, self.recipe, self.plan, self.config,
                                  state, self.mixed)

    def _log(self, writer, record: dict) -> None:
        step = record["epoch"]
        writer.add_scalar("lr", record["lr"], step)
        for split in SPLITS:
            if split in record:
                for name in ("loss", "metric"):
                    value = record[split][name]
                    if value is not None and math.isfinite(value):
                        writer.add_scalar(f"{split}/{name if name == 'loss' else self.spec.metric}", value, step)


def _to(tensor, device):
    return None if tensor is None else tensor.to(device)


def _better(value, best, higher: bool) -> bool:
    if value is None or not math.isfinite(value):
        return False
    if best is None or not math.isfinite(best):
        return True
    return value > best if higher else value < best


def _postfix(record: dict, spec: TaskSpec) -> str:
    text = f"loss {record['train']['loss']:.4f}"
    if "val" in record:
        text += f" val {record['val']['metric']:.4f} test {record['test']['metric']:.4f}"
    return text
