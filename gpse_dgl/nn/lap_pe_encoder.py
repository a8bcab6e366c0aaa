r"""GraphGPS's LapPE encoder (``LapPENodeEncoder``, ``model: DeepSet``): signed eigenvectors with their
eigenvalues, random sign flips in training, a DeepSet over the frequencies.

Node :math:`v` holds, for the :math:`m` lowest frequencies, its eigenvector entry :math:`\phi_j(v)` and the
eigenvalue :math:`\lambda_j` (NaN where the graph has fewer than :math:`m` nodes). The encoder is

.. math::
    z_v = \sum_{j:\ \lambda_j \ne \mathrm{NaN}} \rho\big(A\,[s_j\,\phi_j(v),\ \lambda_j]\big)

with :math:`A` a ``Linear(2, 2 dim_pe)``, :math:`\rho` ReLU, (Linear, ReLU) blocks ending at ``dim_pe``,
and :math:`s_j \in \{-1, 1\}` drawn uniformly per frequency and batch in training (1 in evaluation):
an eigenvector's sign is arbitrary, so the model is taught not to read it. As GraphGPS
(``graphgps/encoder/laplace_pos_encoder.py``) with ``raw_norm_type: none`` and ``post_layers: 0``, the
GPSE authors' ZINC LapPE rows (``configs/mol_bench/zinc-*+LapPE.yaml``).

The input is the ``(N, 2 m)`` table of :mod:`gpse_dgl.train.downstream.pe_sources.lappe`: ``m``
eigenvector columns, then ``m`` eigenvalue columns.

Example
-------
>>> import torch
>>> from gpse_dgl.nn.lap_pe_encoder import LapPEDeepSet
>>> enc = LapPEDeepSet(16, 8).eval()
>>> pe = torch.randn(5, 16)
>>> pe[:, 3:8] = float("nan"); pe[:, 11:] = float("nan")   # a 3-node graph: 3 of 8 frequencies
>>> enc(pe).shape
torch.Size([5, 8])
"""
from __future__ import annotations

import torch
from torch import nn


class LapPEDeepSet(nn.Module):
    """DeepSet over (eigenvector entry, eigenvalue) pairs, summed over the frequencies.

    Parameters
    ----------
    dim_in : int
        ``2 * max_freqs`` columns: eigenvector entries, then eigenvalues.
    dim_pe : int
        Output width.
    n_layers : int
        Layers of the DeepSet (GraphGPS ``posenc_LapPE.layers``; 1 = ``Linear(2, dim_pe)`` + ReLU).
    """

    def __init__(self, dim_in: int, dim_pe: int, n_layers: int = 2):
        super().__init__()
        if dim_in % 2:
            raise ValueError(f"LapPEDeepSet reads eigenvector and eigenvalue columns in pairs, got {dim_in}")
        if n_layers < 1:
            raise ValueError(f"LapPEDeepSet n_layers must be >= 1, got {n_layers}")
        self.dim_in, self.dim_pe, self.max_freqs = dim_in, dim_pe, dim_in // 2
        width = dim_pe if n_layers == 1 else 2 * dim_pe
        self.linear_a = nn.Linear(2, width)
        layers: list[nn.Module] = [nn.ReLU()]
        for index in range(n_layers - 1):
            layers += [nn.Linear(width, dim_pe if index == n_layers - 2 else width), nn.ReLU()]
        self.net = nn.Sequential(*layers)

    def forward(self, pe: torch.Tensor) -> torch.Tensor:
        """``(N, 2 max_freqs)`` -> ``(N, dim_pe)``."""
        if pe.dim() != 2 or pe.shape[1] != self.dim_in:
            raise ValueError(f"LapPEDeepSet expects a (num_nodes, {self.dim_in}) encoding, got {tuple(pe.shape)}")
        vectors, values = pe[:, :self.max_freqs], pe[:, self.max_freqs:]
        if self.training:  # one sign per frequency and batch, as GraphGPS
            signs = torch.randint(0, 2, (self.max_freqs,), device=pe.device).to(pe.dtype) * 2 - 1
            vectors = vectors * signs
        pairs = torch.stack([vectors, values], dim=2)                   # (N, m, 2)
        empty = torch.isnan(pairs).any(dim=2, keepdim=True)              # frequencies the graph lacks
        encoded = self.net(self.linear_a(pairs.masked_fill(empty, 0.0)))
        return encoded.masked_fill(empty, 0.0).sum(dim=1)
