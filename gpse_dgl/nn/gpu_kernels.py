"""The CUDA inference path's own kernels: Triton's, when Triton can be imported.

Without autograd, on CUDA tensors:

* :func:`gpse_dgl.nn.ops.gated_sum` runs :func:`gated_sum`: one kernel over a destination-sorted CSR
  (:mod:`gpse_dgl.nn.triton_kernels`) where the torch path launches about eight (gathers, add, sigmoid,
  multiply, ``index_add_``) and writes ``(E, d)`` tensors between them;
* :meth:`gpse_dgl.nn.gpse.GPSE.residual_update` in eval mode runs :func:`residual_update_`: BatchNorm,
  ReLU, the row's L2 norm and the residual sum in one kernel instead of about ten.

On molecule batches the GPU spends most of a forward pass waiting for launches, so launches saved are the
gain; on large graphs the edge work reads each source row once per edge and writes nothing per edge.

Training (autograd) keeps the torch path. Triton ships with the CUDA builds of torch; without it, with
``GPSE_DGL_NATIVE=0`` (which also turns off the compiled CPU kernels of :mod:`gpse_dgl.nn.native`), or on
other devices the torch ops run, and :func:`describe` says so (``gpse-dgl info`` prints it).

Example
-------
>>> from gpse_dgl.nn import gpu_kernels
>>> gpu_kernels.describe().split(":")[0] in ("Triton kernels", "torch ops")
True
"""
from __future__ import annotations

import contextlib
import importlib.util
import os

import torch

from .native import GatedCSR, accumulates_in_place

__all__ = ["available", "describe", "disabled", "gated_sum", "residual_update_", "supports", "supports_residual_update"]

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: The widest row :func:`residual_update_` takes (one program holds a row: its L2 norm needs all of it).
MAX_RESIDUAL_DIM = 8192
_state: dict = {}


def available() -> bool:
    """Whether the Triton kernels can run here (Triton importable, not turned off); checked once."""
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
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"Triton could not be imported ({type(exc).__name__}: {first[:200]})"
    return None


@contextlib.contextmanager
def disabled():
    """Inside, CUDA inference takes the torch ops (benchmarks time both paths in one process)."""
    available()
    saved = _state["reason"]
    _state["reason"] = "turned off by gpu_kernels.disabled()"
    try:
        yield
    finally:
        _state["reason"] = saved


def describe() -> str:
    """One line: which path CUDA inference takes for the gated sum and the residual update, and why."""
    if available():
        import triton  # available() imported it already

        return f"Triton kernels: gated sum, residual update (Triton {triton.__version__}; inference only)"
    return f"torch ops: {_state['reason']}"


def supports(*tensors: torch.Tensor) -> bool:
    """Whether :func:`gated_sum` takes these rows: 2-d, on CUDA, one float dtype, Triton available."""
    dtype = tensors[0].dtype
    return (dtype in _DTYPES and all(t.device.type == "cuda" and t.dtype == dtype and t.dim() == 2 for t in tensors)
            and available())


def gated_sum(graph, dst_gate: torch.Tensor, src_gate: torch.Tensor, src_feat: torch.Tensor,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """``out[v] (+)= sum_{e = (u, v)} sigmoid(dst_gate[v] + src_gate[u]) * src_feat[u]`` without autograd;
    float32 result, added to ``out`` in place where its rows can take it. The rows must have unit column
    stride (any row stride). CPU tensors run in Triton's interpreter (for tests)."""
    indptr, index = GatedCSR.of(graph).by_destination_on(src_feat.device)
    target = out
    if out is None or not accumulates_in_place(out):
        target = torch.zeros((indptr.shape[0] - 1, src_feat.shape[1]), dtype=torch.float32, device=src_feat.device)
    from . import triton_kernels  # only where Triton is (supports() checked it)

    triton_kernels.gated_sum_(indptr, index, dst_gate, src_gate, src_feat, target)
    return target if out is None or target is out else out.add_(target)


def supports_residual_update(h: torch.Tensor, conv: torch.Tensor, norm: torch.nn.BatchNorm1d) -> bool:
    """Whether :func:`residual_update_` takes this update: CUDA rows (``h`` float32 with unit column
    stride), ``norm`` in eval mode with running statistics, Triton available."""
    return (h.device.type == "cuda" and conv.device == h.device and h.dtype == torch.float32
            and conv.dtype in _DTYPES and h.dim() == 2 and conv.shape == h.shape and h.stride(1) == 1
            and conv.stride(1) == 1 and not norm.training and norm.running_var is not None
            and h.shape[1] <= MAX_RESIDUAL_DIM and available())


def residual_update_(h: torch.Tensor, conv: torch.Tensor, norm: torch.nn.BatchNorm1d) -> torch.Tensor:
    """``h += normalize(relu(norm(conv)))`` in place (see :func:`supports_residual_update`); returns ``h``.
    CPU tensors run in Triton's interpreter (for tests)."""
    from . import triton_kernels  # only where Triton is

    return triton_kernels.residual_update_(h, conv, norm)
