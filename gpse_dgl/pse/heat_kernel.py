r"""Heat-kernel diagonal structural encodings (HKdiagSE, node level).

With the combinatorial Laplacian :math:`L = D - A = \sum_i \mu_i \phi_i \phi_i^\top` (orthonormal
eigenvectors), dropping the constant modes :math:`\mu_i \le 10^{-8}`:

.. math:: \mathrm{HKdiagSE}_t(j) = \sum_{i:\, \mu_i > 10^{-8}} e^{-t \mu_i} \phi_i(j)^2, \qquad t = 1, \dots, 20.

A graph without edges (or a single node) gives zeros.
"""
from __future__ import annotations

import torch

TIMES = tuple(range(1, 21))
ZERO_TOL = 1e-8  # eigenvalues at or below this are dropped (reference threshold, stricter than LapPE's)
DESCRIPTION = "heat-kernel diagonals diag(exp(-t L)) without the zero modes, L = D - A, t = 1..20"


def hkdiag_se(batch) -> torch.Tensor:
    """HKdiagSE of a :class:`~gpse_dgl.pse.spectral.DenseBatch`: ``(B, n, 20)``."""
    mu, vec = batch.comb
    ts = torch.tensor(TIMES, dtype=mu.dtype, device=mu.device)
    weights = torch.exp(-mu.unsqueeze(-1) * ts) * (mu > ZERO_TOL).unsqueeze(-1)  # (B, n_eig, 20)
    return torch.matmul(vec * vec, weights)
