r"""Per-graph standardisation of node-level PSEs, as the reference applies to pretraining targets.

For every graph :math:`G` (its rows of ``x``) and every column :math:`c`, with :math:`n_G` nodes:

* if the unbiased variance :math:`s^2_c = \frac{1}{n_G - 1}\sum_i (x_{ic} - \bar x_c)^2 < \tau(n_G)`, the
  column is set to 0 within that graph (a one-node graph counts as variance 0, so it is all zeros), with
  the tolerance

  .. math:: \tau(n) = 10^{-5} \cdot \min(1, 10^4 / n);
* otherwise :math:`x_{ic} \leftarrow (x_{ic} - \bar x_c) / \sqrt{\sigma^2_c + \tau(n_G)}` with the biased
  variance :math:`\sigma^2_c = \frac{1}{n_G}\sum_i (x_{ic} - \bar x_c)^2`.

The reference's tolerance is :math:`10^{-5}` for every graph; it is kept up to :math:`n = 10^4` nodes
(molecules, pretraining: the same targets as the reference) and shrinks as :math:`1/n` above, the scale of
a column's variance there: a unit-norm eigenvector (LapPE) has variance :math:`\approx 1/n`, which a fixed
:math:`10^{-5}` cuts off above :math:`n \approx 10^5` (every LapPE column of a 300,000-node graph came out 0).
With :math:`\tau(n)` a unit-norm column stays ten times above the tolerance at every size, and comes out
with standard deviation :math:`\approx 0.95` (the tolerance is also the denominator's :math:`\epsilon`,
:math:`10^{-5}` in the reference, which would otherwise shrink it to 0.5 at 300,000 nodes). A column set to 0
whose variance is within four orders of magnitude of :math:`\tau` had real spread, not rounding noise of a
constant: :class:`ColumnZeroedWarning` says how many and the largest variance (``gpse-dgl pse`` prints it).

NaN in the input is treated as 0 (the reference applies ``nan_to_num`` before standardising) and any
non-finite output is set to 0. Graph-level PSEs are never standardised. The statistics are accumulated in
float64 whatever the input dtype; the output has the input's dtype.

Example
-------
>>> import torch
>>> n = 300_000
>>> column = torch.randn(n, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
>>> column /= column.norm()  # variance ~ 1/n = 3.3e-6, below the reference's fixed 1e-5
>>> out = per_graph_standardize(column, [n])
>>> round(float(out.std()), 2), float(variance_tolerance(torch.tensor(n, dtype=torch.float64)))
(0.95, 3.3333333333333335e-07)
"""
from __future__ import annotations

import warnings

import torch

__all__ = ["per_graph_standardize", "standardize_stack", "variance_tolerance", "ColumnZeroedWarning", "VAR_TOL",
           "EPS", "REFERENCE_NODES"]

VAR_TOL = 1e-5  # the reference's tolerance: columns whose unbiased variance within a graph is below it are zeroed
REFERENCE_NODES = 10_000  # up to this many nodes the tolerance is VAR_TOL; above, VAR_TOL * REFERENCE_NODES / n
NOTICE = 1e-4  # a zeroed column with variance above NOTICE * tolerance had spread: reported
EPS = VAR_TOL  # added to the biased variance in the denominator (scaled as the tolerance)


class ColumnZeroedWarning(UserWarning):
    """Standardisation set ``count`` columns (of some graphs) with spread to 0: variance up to ``largest``,
    below the tolerance ``tolerance`` of their graph."""

    def __init__(self, count: int, largest: float, tolerance: float):
        super().__init__(f"per-graph standardisation set {count} column(s) to 0 whose variance (up to {largest:.3g}) "
                         f"is below the tolerance ({tolerance:.3g}); normalize=False keeps them")
        self.count, self.largest, self.tolerance = count, largest, tolerance


def variance_tolerance(count: torch.Tensor) -> torch.Tensor:
    r""":math:`\tau(n) = 10^{-5} \min(1, 10^4 / n)` for node counts ``count`` (float64, any shape)."""
    return VAR_TOL * torch.clamp(REFERENCE_NODES / count.clamp_min(1.0), max=1.0)


def _scale(var_unbiased: torch.Tensor, var_biased: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """``1 / sqrt(var_biased + tau)``, 0 where the column is zeroed; warns about zeroed columns with spread."""
    tolerance = variance_tolerance(count).expand_as(var_unbiased)
    zeroed = var_unbiased < tolerance
    spread = zeroed & (var_unbiased >= NOTICE * tolerance)
    if bool(spread.any()):
        warnings.warn(ColumnZeroedWarning(int(spread.sum()), float(var_unbiased[spread].max()),
                                          float(tolerance[spread].min())), stacklevel=3)
    return torch.where(zeroed, torch.zeros_like(var_unbiased), 1.0 / torch.sqrt(var_biased + tolerance))


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
    scale = _scale(var_unbiased, ss / cnt.clamp_min(1.0), cnt)
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
    scale = _scale(var_unbiased, ss / count.clamp_min(1.0), count)
    out = torch.nan_to_num(centred * scale, nan=0.0, posinf=0.0, neginf=0.0)
    return out.to(x.dtype)
