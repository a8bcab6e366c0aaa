"""Row-count buckets for low-precision dense products on the CPU.

On the CPU, torch runs bf16 matrix products through oneDNN, which compiles a kernel for every new problem
shape and caches it. Graph batches give every step a new number of rows (nodes or edges), so each
product of a training or encoding run compiles again: a bf16 ``nn.Linear`` over 500-4,000 random rows costs
5-6x as much per call as the same product over row counts rounded up to a multiple of 64, and the process
grows by ~1 GB of kernels (``benchmarks/RESULTS.md`` sections 2d and 4). :class:`RowBuckets` pads the rows of
every ``F.linear`` input with zeros up to a bucket size and slices the result back, so only a few dozen
shapes occur. Each output row depends on its own input row only, so the real rows are unchanged (values
and gradients); the padding costs at most 1/16 more rows. Inputs of :data:`MAX_BUCKETED_ROWS` rows or more
are left as they are: one compilation is small against such a product, and the padded copy is not (a
layer-wise encode of a large graph projects all its rows at once, the same shape every layer).

:func:`gpse_dgl.utils.precision.autocast` turns it on for bf16 and fp16 on the CPU; model code never sees
it.

Example
-------
>>> import torch
>>> from gpse_dgl.utils.row_buckets import RowBuckets, bucket_rows
>>> bucket_rows(1000), bucket_rows(64), bucket_rows(70_000)
(1024, 64, 73728)
>>> lin = torch.nn.Linear(8, 4)
>>> x = torch.randn(1000, 8)
>>> with RowBuckets():
...     y = lin(x)
>>> y.shape, torch.allclose(y, lin(x))
(torch.Size([1000, 4]), True)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["MAX_BUCKETED_ROWS", "RowBuckets", "bucket_rows"]

MIN_BUCKET = 64  # rows; matches the blocking of the CPU's bf16 kernels
BUCKETS_PER_DOUBLING = 16  # above 1,024 rows: at most 1/16 padding, 16 shapes per doubling of the rows
MAX_BUCKETED_ROWS = 1 << 15  # from here on rows are not padded (see the module docstring)


def bucket_rows(rows: int) -> int:
    """``rows`` rounded up to its bucket: a multiple of 64, or of ``2**k / 16`` for ``2**k <= rows``."""
    if rows <= 0:
        return rows
    step = max(MIN_BUCKET, (1 << (rows.bit_length() - 1)) // BUCKETS_PER_DOUBLING)
    return -(-rows // step) * step


class RowBuckets(TorchFunctionMode):
    """A torch function mode that runs ``F.linear`` on CPU inputs with their leading dimension padded to
    :func:`bucket_rows` (see the module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and args and isinstance(args[0], torch.Tensor):
            x = args[0]
            rows = x.shape[0] if x.dim() >= 2 else 0
            padded = bucket_rows(rows)
            if padded != rows and rows < MAX_BUCKETED_ROWS and x.device.type == "cpu":
                # F.pad lists dimensions from the last: (0, 0) for each trailing one, then the rows
                x = F.pad(x, [0, 0] * (x.dim() - 1) + [0, padded - rows])
                return func(x, *args[1:], **kwargs)[:rows]
        return func(*args, **kwargs)
