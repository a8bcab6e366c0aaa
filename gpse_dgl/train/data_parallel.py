"""Data-parallel training under ``torchrun``: batch shares, the DDP model, the global-batch loss.

Contract (what makes N processes train like one with the same global batch):

* **Batches.** Every rank draws the same global batch order from ``(seed, epoch)``; global batch ``b``
  (``batch_size`` graphs, the recipe's number whatever the world size) is cut into ``N`` contiguous
  shares in rank order, ``batch_size / N`` graphs each (:func:`gpse_dgl.utils.distributed.per_rank_batch_size`
  refuses sizes ``N`` does not divide; the last, shorter batch is cut as evenly as it goes). A last batch
  with fewer graphs than ranks is skipped under ``N > 1`` (:func:`num_global_batches`).
* **Random inputs.** Each rank draws the global batch's N(0, 1) features from the shared generator and
  keeps its rows (:meth:`BatchShare.features`), so every node gets the value it gets in one process.
* **Loss.** Predictions and targets of the shares are gathered (:func:`gather_batch`), so each rank
  computes the loss of the whole global batch: losses that are not sums over graphs (GPSE's cosine
  over the batch's graph-level rows, means over a rank's nodes) need no re-weighting. Gradients flow
  into a rank's own rows only; back-propagating ``world_size x loss`` (:func:`ddp_loss`) makes DDP's
  mean over ranks the gradient of the global loss.
* **BatchNorm.** Statistics are per rank unless ``general_pipeline.sync_batchnorm`` (then global:
  :func:`gpse_dgl.nn.sync_batchnorm.convert_sync_batchnorm`, or ``torch.nn.SyncBatchNorm`` on CUDA).
  With synchronised (or no) BatchNorm and no dropout, N processes reproduce one process's loss curve
  and weights up to float32 summation order; dropout masks are drawn per rank (:func:`seed_dropout`).

Example (one process: the share is the whole batch)
----------------------------------------------------
>>> from gpse_dgl.utils.distributed import Context
>>> share = BatchShare.of(torch.tensor([3, 4, 5]), Context())
>>> share.graphs, share.node_rows
((0, 3), (0, 12))
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch.nn.parallel import DistributedDataParallel

from ..nn.sync_batchnorm import convert_sync_batchnorm
from ..utils.distributed import Context, gather_rows, per_rank_batch_size, shard_range
from .runtime import derive_seed

__all__ = ["seed_dropout", "BatchShare", "num_global_batches", "global_batches", "sharded_batches", "data_parallel",
           "gather_batch", "ddp_loss", "NoWriter"]


def seed_dropout(seed: int, epoch: int, ctx: Context) -> None:
    """Seed the global generator that dropout draws its masks from, for one epoch of a run seeded ``seed``.
    Under torchrun each rank draws its own masks (its rank joins the key); one process keeps the key of a run
    that never had ranks, so its masks stay what they were."""
    rank_key = (ctx.rank,) if ctx.is_distributed else ()
    torch.manual_seed(derive_seed(seed, "dropout", epoch, *rank_key))


@dataclass(frozen=True)
class BatchShare:
    """This rank's contiguous part of one global batch: graph positions and node rows in it."""

    graphs: tuple[int, int]      # [start, stop) among the global batch's graphs
    node_rows: tuple[int, int]   # [start, stop) among the global batch's nodes
    global_nodes: int
    global_graphs: int

    @classmethod
    def of(cls, num_nodes: torch.Tensor, ctx: Context) -> "BatchShare":
        """The share of rank ``ctx.rank`` of a global batch whose graphs have ``num_nodes`` nodes."""
        lo, hi = shard_range(len(num_nodes), ctx.rank, ctx.world_size)
        cumulative = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(num_nodes.long(), 0)])
        return cls((lo, hi), (int(cumulative[lo]), int(cumulative[hi])), int(cumulative[-1]), len(num_nodes))

    def features(self, dim: int, generator: torch.Generator) -> torch.Tensor:
        """This share's rows of the global batch's ``randn(global_nodes, dim)`` draw."""
        start, stop = self.node_rows
        return torch.randn(self.global_nodes, dim, generator=generator)[start:stop]


def num_global_batches(num_graphs: int, batch_size: int, ctx: Context) -> int:
    """Global batches per epoch: ``ceil(num_graphs / batch_size)``, less a last batch with fewer
    graphs than ranks (it would leave a rank without a graph)."""
    full, rest = divmod(num_graphs, batch_size)
    return full + (1 if rest and (rest >= ctx.world_size) else 0)


def global_batches(order: torch.Tensor, batch_size: int, ctx: Context):
    """Positions (into ``order``'s collection) of every global batch this epoch, in order."""
    per_rank_batch_size(batch_size, ctx.world_size)
    for index in range(num_global_batches(len(order), batch_size, ctx)):
        yield order[index * batch_size:(index + 1) * batch_size]


def sharded_batches(collection, batch_size: int, generator: torch.Generator, ctx: Context):
    """``(graph, node targets, graph targets, share)`` of this rank for every global batch of a
    :class:`~gpse_dgl.train.pretraining.graph_collection.GraphCollection`, in the order
    ``collection.batches(batch_size, generator, shuffle=True)`` draws (the same batches in one process)."""
    order = torch.randperm(len(collection), generator=generator)
    for members in global_batches(order, batch_size, ctx):
        share = BatchShare.of(collection.num_nodes[members], ctx)
        graph, node_true, graph_true = collection.batch(members[share.graphs[0]:share.graphs[1]])
        yield graph, node_true, graph_true, share


def data_parallel(model: torch.nn.Module, ctx: Context, device: torch.device, sync_batchnorm: bool):
    """``model`` wrapped in ``DistributedDataParallel`` (BatchNorm synchronised if asked); ``model``
    itself with one process. The wrapper shares the module's parameters: checkpoints and evaluation
    keep using ``model``."""
    if not ctx.is_distributed:
        return model
    if sync_batchnorm:
        if device.type == "cuda":
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        else:
            convert_sync_batchnorm(model)

    with warnings.catch_warnings():  # broadcast_buffers: deprecated in new torch, the only way in torch 2.1
        warnings.filterwarnings("ignore", message=".*broadcast_buffers", category=FutureWarning)
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                       broadcast_buffers=not sync_batchnorm)


def gather_batch(*tensors):
    """Every rank's rows of each tensor, concatenated in rank order (``None`` stays ``None``)."""
    return tuple(None if t is None else gather_rows(t) for t in tensors)


class NoWriter:
    """TensorBoard writer of the ranks other than 0: writes nothing."""

    def add_scalar(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass


def ddp_loss(loss: torch.Tensor, ctx: Context) -> torch.Tensor:
    """What to back-propagate for a global-batch loss: DDP divides the summed gradients by the world
    size, so each rank's copy is multiplied by it (the gradient is then the global batch's)."""
    return loss * ctx.world_size if ctx.is_distributed else loss
