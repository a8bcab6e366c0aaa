"""Large host buffers on transparent huge pages, for tensors whose rows are read in random order.

The gated sum of a large graph reads two source rows per edge, in the order of the edges: rows far
apart in a tensor of hundreds of MB. With the default 4 KiB pages each such read misses the TLB (an
arXiv-size layer's query and value take 170,000 pages), and the page walk adds to the wait on memory;
one 2 MiB page covers 512 of them. Linux backs memory with huge pages where a program asks for it
(``madvise(MADV_HUGEPAGE)``, the usual setting of ``/sys/kernel/mm/transparent_hugepage/enabled``), and
:func:`empty` asks for it on a fresh buffer before anything is written to it. PyTorch can do the same for
every large tensor of a process (``THP_MEM_ALLOC_ENABLE=1``, read once when the process starts); this
module does it for the few buffers that gain from it, whatever the environment.

Where huge pages are not offered (another OS, ``never``, a buffer on a GPU) :func:`empty` is
``torch.empty``: the advice changes speed, never values.

Example
-------
>>> import torch
>>> from gpse_dgl.utils import memory
>>> memory.empty((4096, 512)).shape
torch.Size([4096, 512])
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

import torch

__all__ = ["HUGE_PAGE_BYTES", "MIN_ADVISED_BYTES", "available_bytes", "empty", "huge_pages_available"]

HUGE_PAGE_BYTES = 1 << 21
#: Smaller buffers are left alone: glibc serves them from its heap (up to 32 MiB), whose pages outlive the
#: buffer, and their rows are few enough for the TLB to cover with small pages.
MIN_ADVISED_BYTES = 32 << 20
_MADV_HUGEPAGE = 14  # <linux/mman.h>
_THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"


@functools.lru_cache(maxsize=None)
def _madvise():
    """libc's ``madvise`` where transparent huge pages can be asked for, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open(_THP_SETTING) as fh:
            if "[never]" in fh.read():
                return None
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def huge_pages_available() -> bool:
    """Whether :func:`empty` can put buffers on huge pages here."""
    return _madvise() is not None


def empty(shape, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """``torch.empty(shape, dtype=dtype, device=device)``, asked to live on huge pages when it is a host
    buffer of at least :data:`MIN_ADVISED_BYTES` (the whole 2 MiB pages inside it; the advice must come
    before the first write, which is why it is given here and not to an existing tensor)."""
    tensor = torch.empty(shape, dtype=dtype, device=device)
    madvise = _madvise()
    nbytes = tensor.numel() * tensor.element_size()
    if madvise is None or tensor.device.type != "cpu" or nbytes < MIN_ADVISED_BYTES:
        return tensor
    start = tensor.data_ptr()
    first = -(-start // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    last = (start + nbytes) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    if last > first:
        madvise(first, last - first, _MADV_HUGEPAGE)  # a refusal (EINVAL on old kernels) only costs speed
    return tensor


def available_bytes() -> int | None:
    """The memory this process can still take without swapping: ``MemAvailable`` of ``/proc/meminfo``, or less
    where a cgroup (a container) limits the process (its limit less its use); None where neither is known."""
    known = [free for free in (_meminfo_available(), _cgroup_available()) if free is not None]
    return min(known) if known else None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


#: (limit, usage) files of cgroup v2, then v1; a limit of "max" (v2) or beyond the machine's memory (v1) is none.
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _cgroup_available() -> int | None:
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            with open(limit_file) as fh:
                limit = fh.read().strip()
            with open(usage_file) as fh:
                usage = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= (1 << 60):
            return None
        return max(0, int(limit) - usage)
    return None
