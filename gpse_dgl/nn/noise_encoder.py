"""Fresh standard-normal node features on every forward pass, in place of the node features.

The paper's ``rand`` rows (the GPSE authors' ``NormalRE`` node encoder, ``graphgym/encoder/
random_encoder.py``, in ``configs/mol_bench/*+rand.yaml``): every node gets :math:`x_v \\sim N(0, I_d)`, drawn
anew at every call, in training and in evaluation, and the dataset's node features are not read. The
draw comes from torch's generator, which the training run seeds.

Example
-------
>>> import torch
>>> from gpse_dgl.nn.noise_encoder import NormalNoise
>>> enc = NormalNoise(dim_pe=8)
>>> a, b = enc(torch.zeros(4, 0)), enc(torch.zeros(4, 0))
>>> a.shape, bool(torch.equal(a, b))
(torch.Size([4, 8]), False)
"""
from __future__ import annotations

import torch
from torch import nn


class NormalNoise(nn.Module):
    """``(N, anything)`` -> ``(N, dim_pe)`` fresh N(0, 1) noise (only the row count of the input is read).

    Parameters
    ----------
    dim_pe : int
        Columns drawn per node.
    dim_in : int
        Ignored (the input carries no values); accepted so every PE encoder config has it.
    """

    def __init__(self, dim_pe: int, dim_in: int = 0):
        super().__init__()
        self.dim_pe = dim_pe

    def forward(self, pe: torch.Tensor) -> torch.Tensor:
        return torch.randn(pe.shape[0], self.dim_pe, device=pe.device,
                           dtype=pe.dtype if pe.is_floating_point() else torch.float32)
