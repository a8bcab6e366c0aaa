r"""Electrostatic-potential positional encodings (ElstaticPE, node level, 7 columns).

With the combinatorial Laplacian :math:`L = D - A` and its pseudo-inverse built from the eigenpairs with
:math:`\mu \ge 10^{-6}`, :math:`L^+ = \sum_{\mu_i \ge 10^{-6}} \mu_i^{-1} v_i v_i^\top`, the potential
with zero ground state is :math:`Q_{ji} = L^+_{ji} - L^+_{ii}` (each column minus its diagonal entry).
Per node ``i``:

0. :math:`\min_j Q_{ji}` (min over column ``i``)
1. :math:`\mathrm{mean}_j Q_{ji}`
2. :math:`\mathrm{std}_j Q_{ji}` (unbiased, ``n - 1``)
3. :math:`\min_j Q_{ij}` (min over row ``i``)
4. :math:`\mathrm{std}_j Q_{ij}`
5. :math:`\sum_j (A_{ji} / d_j)\, Q_{ji}` (interaction on direct neighbours)
6. :math:`\sum_j (A_{ij} / d_i)\, Q_{ij}` (interaction from direct neighbours)

A graph without edges gives zeros, a one-node graph too (its std is undefined and set to 0).

Difference from the authors' code: they build :math:`D^{-1}` as ``eye(n) * (1 / deg)``; one isolated node
makes ``0 * inf = NaN`` fill the whole :math:`D^{-1}A`, so columns 5 and 6 become 0 (after NaN -> 0) for
*every* node of such a graph. Here they are computed as defined for every node with neighbours and are 0
for isolated nodes only (:math:`A_{i\cdot} = 0`).
"""
from __future__ import annotations

import torch

ZERO_TOL = 1e-6  # eigenvalues below this are left out of the pseudo-inverse (reference EPS)
COLUMNS = ("col_min", "col_mean", "col_std", "row_min", "row_std", "nbr_on", "nbr_from")
DESCRIPTION = "statistics of the potential L+ - diag(L+) of the Laplacian pseudo-inverse, L = D - A"


def elstatic_pe(batch) -> torch.Tensor:
    """ElstaticPE of a :class:`~gpse_dgl.pse.spectral.DenseBatch`: ``(B, n, 7)``."""
    pinv = batch.comb_pinv(ZERO_TOL)
    q = pinv - pinv.diagonal(dim1=-2, dim2=-1).unsqueeze(-2)  # q[b, j, i] = L+[j, i] - L+[i, i]
    dinv_a = batch.adj * batch.inv_deg.unsqueeze(-1)  # (D^-1 A)[j, i] = A[j, i] / d_j, 0 if isolated
    weighted = dinv_a * q
    n = batch.n
    col_mean, row_mean = q.mean(dim=-2), q.mean(dim=-1)
    if n > 1:
        # two-pass unbiased std; Tensor.std over a strided axis of small stacks is several times slower
        col_std = ((q - col_mean.unsqueeze(-2)) ** 2).sum(dim=-2).div_(n - 1).sqrt_()
        row_std = ((q - row_mean.unsqueeze(-1)) ** 2).sum(dim=-1).div_(n - 1).sqrt_()
    else:  # the unbiased std of one value is undefined (NaN in the reference, then set to 0)
        col_std = row_std = torch.zeros_like(col_mean)
    return torch.stack([
        q.amin(dim=-2),
        col_mean,
        col_std,
        q.amin(dim=-1),
        row_std,
        weighted.sum(dim=-2),
        weighted.sum(dim=-1),
    ], dim=-1)
