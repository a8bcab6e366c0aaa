"""Imported by pytest before any test module: gpse_dgl first, so that on DGL 2.x its import guard
(``gpse_dgl._dgl_compat``) is in place before a test module imports dgl itself. Shared fixtures below."""
import os

import pytest
import torch

if not torch.cuda.is_available():
    # The Triton kernels of the CUDA path run in Triton's interpreter on CPU tensors (tests/test_gpu_kernels.py);
    # Triton reads this when it is imported, so before any test imports it.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import gpse_dgl  # noqa: F401,E402


@pytest.fixture(params=["fused kernel", "torch ops"])
def gated_path(request, monkeypatch):
    """Run a test on both CPU paths of ``ops.gated_sum``: the fused C++ kernel (skipped where it cannot
    be built) and the torch ops it falls back to (turning the kernels off also gives torch's dropout)."""
    from gpse_dgl.kernels import cpu

    if request.param == "fused kernel":
        if cpu.kernel() is None:
            pytest.skip(cpu.describe())
    else:
        monkeypatch.setattr(cpu, "_state", {"module": None, "reason": "turned off by the test"})
    return request.param


@pytest.fixture
def compiled():
    """The compiled CPU kernels of ``gpse_dgl.kernels.cpu`` (the test is skipped where they cannot be built)."""
    from gpse_dgl.kernels import cpu

    if cpu.kernel() is None:
        pytest.skip(cpu.describe())


@pytest.fixture
def no_kernel(monkeypatch):
    """The compiled CPU kernels turned off: every caller takes its torch path."""
    from gpse_dgl.kernels import cpu

    monkeypatch.setattr(cpu, "_state", {"module": None, "reason": "turned off by the test"})
