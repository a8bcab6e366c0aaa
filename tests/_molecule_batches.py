"""Small batches of molecule-like graphs (atom and bond type columns as OGB's featuriser writes them, a
target per graph) for tests that train a downstream model for a few steps."""
from __future__ import annotations

import torch

from gpse_dgl import _env  # noqa: F401
import dgl

from gpse_dgl.nn.models import build_model


def molecule_batches(num_batches: int = 3, graphs_per_batch: int = 8, seed: int = 3) -> list:
    """``num_batches`` batched graphs of 2-11 nodes each with ``ndata["x"]`` (9 columns), ``edata["e"]`` (3
    columns), symmetric edges, and ``batch.y``: one target per graph."""
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(num_batches):
        parts = []
        for _ in range(graphs_per_batch):
            n = int(torch.randint(2, 12, (1,), generator=gen))
            src, dst = torch.randint(0, n, (2 * n,), generator=gen), torch.randint(0, n, (2 * n,), generator=gen)
            g = dgl.graph((torch.cat([src, dst]), torch.cat([dst, src])), num_nodes=n)
            g.ndata["x"] = torch.randint(0, 2, (n, 9), generator=gen)
            g.edata["e"] = torch.randint(0, 2, (g.num_edges(), 3), generator=gen)
            parts.append(g)
        batch = dgl.batch(parts)
        batch.y = torch.randn(len(parts), generator=gen)
        batches.append(batch)
    return batches


def train_losses(model, optimizer, batches: list, steps: int = 5, clip: float | None = None) -> list[float]:
    """The L1 losses of ``steps`` training steps of ``model`` on ``batches`` (in turn), optionally clipping the
    gradient norm at ``clip``."""
    losses = []
    for step in range(steps):
        g = batches[step % len(batches)]
        loss = (model(g, g.ndata["x"], g.edata["e"]).squeeze(-1) - g.y).abs().mean()
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


def losses_against_old_forward(monkeypatch, model_name: str, layer_class, old_forward, steps: int = 8,
                               optimizer=None, **model_kwargs) -> tuple[list[float], list[float]]:
    """The L1 losses of ``steps`` training steps of a small ``model_name`` on :func:`molecule_batches`, with
    today's layers and then with ``layer_class.forward`` replaced by ``old_forward`` (the code a kernel replaced).

    The default optimiser is SGD: AdamW's normalisation turns the ~1e-8 rounding noise of a gradient that is 0 in
    exact arithmetic (the bias of a Linear before a BatchNorm) into a step of a full learning rate with a random
    sign, the same on neither path, and the losses part after a few steps.
    """
    def losses():
        torch.manual_seed(0)
        model = build_model(model_name, dim_in=None, node_encoder="atom", dim_out=1, dim_hidden=32, num_layers=3,
                            **model_kwargs)
        make = optimizer or (lambda params: torch.optim.SGD(params, lr=5e-2))
        return train_losses(model, make(model.parameters()), molecule_batches(), steps, clip=1.0)

    new = losses()
    monkeypatch.setattr(layer_class, "forward", old_forward)
    return new, losses()
