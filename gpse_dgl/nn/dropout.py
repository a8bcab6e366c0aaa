r"""Dropout whose CPU masks come from a counter-based generator.

.. math::

    y_i = x_i \cdot \frac{m_i}{1 - p}, \qquad
    m_i = [\,\mathrm{splitmix64}(s, i) \ge p \cdot 2^{64}\,]

torch's CPU dropout draws its Bernoulli mask element by element from one Mersenne Twister on one
thread (about 10 ns an element): a fifth of a paper-size bf16 training step went there. On the CPU,
on the ``fused-cpu`` path (:mod:`gpse_dgl.kernels.dropout`), :func:`dropout` draws one 64-bit seed ``s``
from torch's default generator and computes every element's draw from ``(s, i)`` alone, vectorised and
split over threads. So ``torch.manual_seed`` and saved generator states govern it as they govern torch's
dropout, and the mask does not depend on the number of threads. Elsewhere (CUDA, other dtypes, no
compiler, ``p = 1``) it is ``torch.nn.functional.dropout`` (the ``torch`` path).
The masks differ from torch's for the same seed; their distribution is the same.

Example
-------
>>> import torch
>>> from gpse_dgl.nn.dropout import Dropout
>>> _ = torch.manual_seed(0)
>>> y = Dropout(0.25)(torch.ones(4, 1000))
>>> sorted(set(y.unique().tolist()))
[0.0, 1.3333333730697632]
>>> abs(float((y > 0).float().mean()) - 0.75) < 0.03
True
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import kernels

__all__ = ["Dropout", "dropout"]


def dropout(x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    """``torch.nn.functional.dropout`` with the CPU mask of the module docstring (same arguments)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    noise = kernels.run("dropout_noise", x, p, autograd=True)
    if noise is None:
        return F.dropout(x, p, training, inplace)
    return x.mul_(noise) if inplace else x * noise


class Dropout(nn.Dropout):
    """``torch.nn.Dropout`` through :func:`dropout` (no parameters: state dicts are unchanged)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training, self.inplace)
