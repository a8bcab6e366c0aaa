r"""``fused-cpu`` dropout noise from a counter-based generator (``csrc/dropout.cpp``).

.. math::

    \mathrm{noise}_i = \frac{m_i}{1 - p}, \qquad m_i = [\,\mathrm{splitmix64}(s, i) \ge p \cdot 2^{64}\,]

torch's CPU dropout draws its Bernoulli mask element by element from one Mersenne Twister on one thread
(about 10 ns an element): a fifth of a paper-size bf16 training step went there. Here one 64-bit seed ``s``
is drawn from torch's default generator (:func:`draw_seed`) and every element's draw is a function of
``(s, i)`` alone, vectorised and split over threads: ``torch.manual_seed`` and saved generator states govern
it as they govern torch's dropout, and the mask does not depend on the number of threads.
:func:`gpse_dgl.nn.dropout.dropout` multiplies by it (through :mod:`gpse_dgl.kernels`).

Example
-------
>>> import torch
>>> from gpse_dgl.kernels import dropout
>>> x = torch.ones(2, 1000)
>>> noise = dropout.noise(x, 0.25) if dropout.supports(x, 0.25) else torch.tensor([0.0, 4 / 3])
>>> torch.allclose(noise.unique(), torch.tensor([0.0, 4 / 3]))
True
"""
from __future__ import annotations

import torch

from . import cpu

__all__ = ["draw_seed", "noise", "supports"]


def draw_seed() -> int:
    """A mask's 64-bit seed, from torch's CPU generator: ``torch.manual_seed`` and saved generator states
    govern it as they govern torch's dropout."""
    return int(torch.empty((), dtype=torch.int64, device="cpu").random_())


def supports(x: torch.Tensor, p: float) -> bool:
    """Whether :func:`noise` takes ``x``: float32 or bfloat16 on the CPU, ``p < 1``, the kernels built."""
    return p < 1.0 and x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and cpu.available()


def noise(x: torch.Tensor, p: float) -> torch.Tensor:
    """A tensor of ``x``'s shape and dtype holding 0 or ``1 / (1 - p)`` per element, for a seed drawn now."""
    out = torch.empty(x.shape, dtype=x.dtype, device="cpu")
    cpu.kernel().dropout_noise(draw_seed(), float(p), out)
    return out
