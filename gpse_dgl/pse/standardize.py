r"""Per-graph standardisation of node-level PSEs, as the reference applies to pretraining targets.

For every graph :math:`G` (its rows of ``x``) and every column :math:`c`, with :math:`n_G` nodes:

* if the unbiased variance :math:`\frac{1}{n_G - 1}\sum_i (x_{ic} - \bar x_c)^2 < 10^{-5}`, the column is
  set to 0 within that graph (a one-node graph counts as variance 0, so it is all zeros);
* otherwise :math:`x_{ic} \leftarrow (x_{ic} - \bar x_c) / \sqrt{\sigma^2_c + 10^{-5}}` with the biased
  variance :math:`\sigma^2_c = \frac{1}{n_G}\sum_i (x_{ic} - \bar x_c)^2`.

NaN in the input is treated as 0 (the reference applies ``nan_to_num`` before standardising) and any
non-finite output is set to 0. Graph-level PSEs are never standardised. The statistics are accumulated in
float64 whatever the input dtype; the output has the input's dtype.
"""
from __future__ import annotations

import torch

__all__ = ["per_graph_standardize", "standardize_stack", "VAR_TOL", "EPS"]

VAR_TOL = 1e-5  # columns whose unbiased variance within a graph is below this are zeroed
EPS = 1e-5  # added to the biased variance in the denominator


def per_graph_standardize(x: torch.Tensor, batch_num_nodes) -> torch.Tensor:
    """Standardise the columns of ``x`` within each graph.

    Parameters
    ----------
    x : torch.Tensor
        ``(N, d)`` (or ``(N,)``) node values of all graphs, rows grouped by graph.
    batch_num_nodes : sequence of int or torch.Tensor
        Number of rows of each graph; sums to ``N``. Zero-node graphs are allowed.

    Returns
    -------
    torch.Tensor
        Same shape and dtype as ``x``.
    """
    squeeze = x.dim() == 1
    if squeeze:
        x = x.unsqueeze(-1)
    counts = torch.as_tensor(batch_num_nodes, dtype=torch.long, device=x.device).reshape(-1)
    if int(counts.sum()) != x.shape[0]:
        raise ValueError(f"batch_num_nodes sums to {int(counts.sum())} but x has {x.shape[0]} rows")
    xd = torch.nan_to_num(x.to(torch.float64), nan=0.0)
    seg = torch.repeat_interleave(torch.arange(counts.shape[0], device=x.device), counts)
    cnt = counts.to(torch.float64).unsqueeze(-1)
    mean = torch.zeros(counts.shape[0], xd.shape[1], dtype=torch.float64, device=x.device)
    mean.index_add_(0, seg, xd)
    mean = mean / cnt.clamp_min(1.0)
    centred = xd - mean[seg]
    ss = torch.zeros_like(mean).index_add_(0, seg, centred * centred)
    var_unbiased = torch.where(cnt > 1, ss / (cnt - 1).clamp_min(1.0), torch.zeros_like(ss))
    var_biased = ss / cnt.clamp_min(1.0)
    scale = torch.where(var_unbiased < VAR_TOL, torch.zeros_like(ss), 1.0 / torch.sqrt(var_biased + EPS))
    out = centred * scale[seg]
    out = torch.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0).to(x.dtype)
    return out.squeeze(-1) if squeeze else out


def standardize_stack(x: torch.Tensor, sizes=None) -> torch.Tensor:
    """:func:`per_graph_standardize` for ``B`` graphs stored as ``(B, n, d)``: all of size ``n``, or of
    ``sizes[b] <= n`` nodes each (a padded stack; its padding rows come out as 0).

    The batched driver standardises each batch in float64 before casting to float32, so the result does
    not lose the precision a later float32 standardisation would.
    """
    n = x.shape[-2]
    xd = torch.nan_to_num(x.to(torch.float64), nan=0.0)
    if sizes is None:
        count = torch.full((x.shape[0], 1, 1), float(n), dtype=torch.float64)
        real = None
    else:
        count = torch.as_tensor(sizes, dtype=torch.float64).reshape(-1, 1, 1)
        real = (torch.arange(n).reshape(1, n, 1) < count).to(torch.float64)
        xd = xd * real
    centred = xd - xd.sum(dim=-2, keepdim=True) / count.clamp_min(1.0)
    if real is not None:
        centred = centred * real
    ss = (centred * centred).sum(dim=-2, keepdim=True)
    var_unbiased = torch.where(count > 1, ss / (count - 1).clamp_min(1.0), torch.zeros_like(ss))
    scale = torch.where(var_unbiased < VAR_TOL, torch.zeros_like(ss), 1.0 / torch.sqrt(ss / count.clamp_min(1.0) + EPS))
    out = torch.nan_to_num(centred * scale, nan=0.0, posinf=0.0, neginf=0.0)
    return out.to(x.dtype)
