r"""Random-walk structural encodings (RWSE, node level): return probabilities of k-step random walks.

With :math:`P = D^{-1} A` (no self-loops; rows of isolated nodes are 0),

.. math:: \mathrm{RWSE}_k(i) = (P^k)_{ii}, \qquad k = 2, \dots, 21

(20 columns; ``k = 1`` is skipped because :math:`\mathrm{diag}(P) = 0` without self-loops).

Computed from the normalised Laplacian's eigenpairs that LapPE also uses (:mod:`.spectral`): ``P`` is
similar to :math:`S = D^{-1/2} A D^{-1/2} = I - L_{sym}`, so

.. math:: (P^k)_{ii} = (S^k)_{ii} = \sum_j U_{ij}^2 (1 - \lambda_j)^k,

one ``(n, n) @ (n, 20)`` product per graph instead of 21 dense matrix powers. Isolated nodes have
:math:`\lambda = 1` with eigenvector :math:`e_i` and so get 0, as :math:`P_{i\cdot} = 0` gives.
"""
from __future__ import annotations

import numpy as np
import torch

STEPS = tuple(range(2, 22))
DESCRIPTION = "random-walk return probabilities diag((D^-1 A)^k), k = 2..21"


def rwse(batch) -> torch.Tensor:
    """RWSE of a :class:`~gpse_dgl.pse.spectral.DenseBatch`: ``(B, n, 20)``."""
    lam, vec = batch.sym
    ks = torch.tensor(STEPS, dtype=lam.dtype, device=lam.device)
    powers = (1.0 - lam).unsqueeze(-1) ** ks  # (B, n_eig, 20)
    return torch.matmul(vec * vec, powers)


def rwse_sparse(graph) -> np.ndarray:
    """RWSE of one large :class:`~gpse_dgl.pse.spectral.SparseGraph`: ``(n, 20)``."""
    return np.asarray(graph.rwse(range(STEPS[0], STEPS[-1] + 1)), dtype=np.float64)
