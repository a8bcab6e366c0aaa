"""The ``triton`` path: the CUDA inference kernels, when Triton can be imported.

Without autograd, on CUDA tensors:

* :func:`gpse_dgl.nn.ops.gated_sum` runs :func:`gated_sum`: one kernel over a destination-sorted CSR
  (:mod:`gpse_dgl.kernels.triton_kernels`) where the torch path launches about eight (gathers, add, sigmoid,
  multiply, ``index_add_``) and writes ``(E, d)`` tensors between them. A destination with more than
  :data:`HUB_DEGREE` in-edges (the virtual node of a large graph) would keep one program of that kernel
  looping while the rest of the GPU waits: its sum runs as torch ops over pieces of its edges instead.
* :meth:`gpse_dgl.nn.gpse.GPSE.residual_update` in eval mode runs :func:`residual_update_`: BatchNorm,
  ReLU, the row's L2 norm and the residual sum in one kernel instead of about ten.

On molecule batches the GPU spends most of a forward pass waiting for launches, so launches saved are the
gain; on large graphs the edge work reads each source row once per edge and writes nothing per edge. Every
destination's sum runs in the order of its in-edges, in pieces that depend on its in-edges only, so a
graph's encoding does not depend on the batch it is in.

Training (autograd) keeps the torch path. Triton ships with the CUDA builds of torch; without it, on GPUs
older than compute capability 7.0, with ``GPSE_DGL_NATIVE=0`` (which also turns off the compiled CPU
kernels of :mod:`gpse_dgl.kernels.cpu`), or after a kernel failed to compile or launch (said once on stderr),
the ``torch`` path runs, and :func:`describe` says which path runs (``gpse-dgl info`` prints it).

Example
-------
>>> from gpse_dgl.kernels import gpu
>>> gpu.describe().split(":")[0] in ("triton", "torch")
True
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys

import torch

from ..utils.graph_cache import cached_on_graph
from ..utils.text import first_line
from . import cpu
from .csr import GatedCSR, check_gated_operands
from .gated_sum import accumulates_in_place

__all__ = ["HUB_DEGREE", "MAX_RESIDUAL_DIM", "available", "describe", "disabled", "gated_sum", "residual_update_",
           "supports_gated_sum", "supports_residual_update"]

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: The widest row :func:`residual_update_` takes (one program holds a row: its L2 norm needs all of it).
MAX_RESIDUAL_DIM = 8192
#: In-edges above which a destination is summed by torch ops over pieces of :data:`HUB_PIECE` edges.
HUB_DEGREE = 4096
HUB_PIECE = 1 << 16
_state: dict = {}


def available() -> bool:
    """Whether the Triton kernels can run here (Triton importable, not turned off, no kernel failed)."""
    if "reason" not in _state:
        _state["reason"] = _unavailable_reason()
    return _state["reason"] is None


def _unavailable_reason() -> str | None:
    if os.environ.get("GPSE_DGL_NATIVE", "1").strip() == "0":
        return "GPSE_DGL_NATIVE=0"
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed"
    try:
        from . import triton_kernels  # noqa: F401 - only where Triton is: importing it imports Triton
    except Exception as exc:  # noqa: BLE001 - a broken Triton install: the torch path runs
        return f"Triton could not be imported ({type(exc).__name__}: {first_line(exc, 200)})"
    return None


@contextlib.contextmanager
def disabled():
    """Inside, CUDA inference takes the torch ops (benchmarks time both paths in one process)."""
    available()
    saved = _state["reason"]
    _state["reason"] = "turned off by kernels.gpu.disabled()"
    try:
        yield
    finally:
        _state["reason"] = saved


def describe() -> str:
    """One line: which path CUDA inference takes for the gated sum and the residual update, and why."""
    if available():
        import triton  # available() imported it already

        return f"triton: gated sum, residual update (Triton {triton.__version__}; inference only)"
    return f"torch: {_state['reason']}"


@functools.lru_cache(maxsize=None)
def _capable(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device) >= (7, 0)


def _on_capable_gpu(tensors) -> bool:
    device = tensors[0].device
    return device.type == "cuda" and all(t.device == device for t in tensors) and _capable(device)


def supports_gated_sum(graph, dst_gate: torch.Tensor, src_gate: torch.Tensor, src_feat: torch.Tensor) -> bool:
    """Whether :func:`gated_sum` takes these rows: 2-d, one float dtype, on one CUDA device of compute
    capability 7.0 or more, Triton available."""
    tensors = (dst_gate, src_gate, src_feat)
    dtype = dst_gate.dtype
    return (dtype in _DTYPES and all(t.dtype == dtype and t.dim() == 2 for t in tensors)
            and _on_capable_gpu(tensors) and available())  # the device first: CPU-only runs never import Triton


def _run(launch, *args) -> bool:
    """``launch(*args)``; if a kernel fails to compile or launch, the torch ops take over for the rest of the
    process (said once on stderr) and False is returned."""
    try:
        launch(*args)
        return True
    except Exception as exc:  # noqa: BLE001 - a GPU or toolchain Triton cannot use: the torch path runs
        _state["reason"] = f"a Triton kernel failed ({type(exc).__name__}: {first_line(exc, 200)})"
        print(f"gpse-dgl: {_state['reason']}; the torch ops run instead", file=sys.stderr, flush=True)
        return False


class _DeviceCSR:
    """A graph's in-edges by destination on a device, as the kernel reads them: ``starts``/``stops`` per
    destination (empty for hubs) and ``index`` (sources); ``hubs`` lists ``(row, start, stop)`` of the
    destinations with more than :data:`HUB_DEGREE` in-edges."""

    def __init__(self, csr: GatedCSR, device: torch.device):
        indptr = csr.dst_indptr
        starts, stops = indptr[:-1].clone(), indptr[1:].clone()
        hubs = torch.nonzero(stops - starts > HUB_DEGREE).flatten()
        stops[hubs] = starts[hubs]
        self.hubs = [(row, int(indptr[row]), int(indptr[row + 1])) for row in hubs.tolist()]
        self.starts, self.stops = starts.to(device), stops.to(device)
        self.index = csr.dst_index.to(device)
        self.num_src, self.num_dst = csr.num_src, csr.num_dst

    @classmethod
    def of(cls, graph, device: torch.device) -> "_DeviceCSR":
        return cached_on_graph(graph, "device_csr", (str(device), HUB_DEGREE), lambda: cls(GatedCSR.of(graph), device))


def _hub_sums_(csr: _DeviceCSR, dst_gate, src_gate, src_feat, out) -> None:
    """Add the sums of the hub destinations to ``out`` with torch ops, :data:`HUB_PIECE` edges at a time."""
    for row, start, stop in csr.hubs:
        row_gate = dst_gate[row].float()
        for first in range(start, stop, HUB_PIECE):
            sources = csr.index[first:min(stop, first + HUB_PIECE)]
            gate = src_gate.index_select(0, sources).float().add_(row_gate).sigmoid_()
            out[row] += gate.mul_(src_feat.index_select(0, sources).float()).sum(0)


def gated_sum(graph, dst_gate: torch.Tensor, src_gate: torch.Tensor, src_feat: torch.Tensor,
              out: torch.Tensor | None = None) -> torch.Tensor | None:
    """``out[v] (+)= sum_{e = (u, v)} sigmoid(dst_gate[v] + src_gate[u]) * src_feat[u]`` without autograd.

    The rows must have unit column stride (any row stride). The sum is float32: added to ``out`` (float32)
    in place where its rows can take it, else returned. None if the kernel could not run (see :func:`_run`):
    nothing was added, and the caller takes the torch path. CPU tensors run in Triton's interpreter (tests).
    """
    csr = _DeviceCSR.of(graph, src_feat.device)
    check_gated_operands(csr, dst_gate, src_gate, src_feat, out)
    target = out
    if out is None or not accumulates_in_place(out):
        target = torch.zeros((csr.num_dst, src_feat.shape[1]), dtype=torch.float32, device=src_feat.device)
    from . import triton_kernels  # only where Triton is (supports_gated_sum() checked it)

    if not _run(triton_kernels.gated_sum_, csr.starts, csr.stops, csr.index, dst_gate, src_gate, src_feat, target):
        return None
    _hub_sums_(csr, dst_gate, src_gate, src_feat, target)
    return target if out is None or target is out else out.add_(target)


def supports_residual_update(h: torch.Tensor, conv: torch.Tensor, norm: torch.nn.BatchNorm1d) -> bool:
    """Whether :func:`residual_update_` takes this update: ``h`` float32 rows with unit column stride that
    do not overlap, ``conv`` of its shape, both on one CUDA device (as :func:`supports_gated_sum`), ``norm`` in eval
    mode with running statistics, rows of at most :data:`MAX_RESIDUAL_DIM`."""
    # the device first: on the CPU this runs once per layer and returns at once
    return (_on_capable_gpu((h, conv)) and h.dtype == torch.float32 and conv.dtype in _DTYPES and h.dim() == 2
            and conv.shape == h.shape and cpu.distinct_rows(h) and conv.stride(1) == 1
            and not norm.training and norm.running_mean is not None and norm.running_var is not None
            and h.shape[1] <= MAX_RESIDUAL_DIM and available())


def residual_update_(h: torch.Tensor, conv: torch.Tensor, norm: torch.nn.BatchNorm1d) -> torch.Tensor | None:
    """``h += normalize(relu(norm(conv)))`` in place (see :func:`supports_residual_update`); returns ``h``, or
    None if the kernel could not run (``h`` unchanged). CPU tensors run in Triton's interpreter (tests)."""
    from . import triton_kernels  # only where Triton is

    return h if _run(triton_kernels.residual_update_, h, conv, norm) else None
