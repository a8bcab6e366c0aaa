"""gpse_dgl's own kernels and the one dispatch that picks, per op and device, the path that computes it.

Four paths, named so in ``gpse-dgl info``, in ``metrics.json`` (``environment.kernels``) and in the docs:

=============  =================================================================================================
``dgl``        DGL's sparse kernels (``dgl.ops``): the message-passing ops of :mod:`gpse_dgl.nn.ops` where DGL
               runs on the device (backend ``"auto"``) or where ``backend="dgl"`` asks for them
``fused-cpu``  the C++ kernels of ``csrc/``, compiled on first use (:mod:`.cpu`): the gated sum
               (:mod:`.gated_sum`; by column blocks for layer-wise inference, :mod:`.gated_sum_packed`), GINE's
               ReLU sum (:mod:`.relu_sum`), GatedGCN's edge-gated sum (:mod:`.edge_gated_sum`), GIN's and GCN's
               neighbour sum and GraphSAGE's mean (:mod:`.u_sum`), the downstream layers' BatchNorm step
               (:mod:`.batch_norm_act`), dropout noise (:mod:`.dropout`), the encoder's residual step
               (:mod:`.residual`); float32 (and bfloat16 rows where said) on the CPU
``triton``     the Triton kernels of :mod:`.triton_kernels` (:mod:`.gpu`): the gated sum and the eval-mode
               residual update, on CUDA without autograd
``torch``      plain torch ops (:mod:`gpse_dgl.nn`): wherever no kernel above takes the operands
=============  =================================================================================================

Callers in :mod:`gpse_dgl.nn` name an op by what it computes and :func:`run` it; ``None`` back means no kernel
took the operands and the caller's torch ops run. :data:`KERNELS` is the registry: each entry says which op a
kernel computes, on which path and device type, whether it runs under autograd, which operands it takes and
the function that runs it (which may itself return ``None``, a Triton kernel that failed to launch, say: then
the next kernel, or torch, runs). Nothing outside this package imports its modules
(``tests/test_layering.py``).

Adding a kernel: a source file, its module here (imported below) and one line of :data:`KERNELS`. The file: a
Triton kernel beside :mod:`.triton_kernels` with its host side in a module here, or a C++ source in ``csrc/``
(every ``.cpp`` there is compiled into the one extension and binds its own entry points, ``gpse_native::Binding``
in ``csrc/native.h``) with the ``supports`` and ``run`` that call ``cpu.kernel().<name>`` in a module here named
after it (a graph's edges from :mod:`.csr`). The line: ``Kernel(op, path, device, autograd, takes, run)``, with
the module's ``supports`` as ``takes`` (``supports_<op>`` in :mod:`.gpu`, the host side of
several Triton kernels): a function of the op's operands. A kernel of a new message-passing op also needs its
caller in :mod:`gpse_dgl.nn.ops` and the op's ``"auto"`` rule here (:data:`TORCH_FIRST` or :data:`KERNEL_FIRST`,
and :data:`UNFUSED_BY_RULE` if its fallback is the other ops' rule); ``tests/test_kernel_paths.py`` checks that
:func:`paths` reports what the op runs. ``docs/ARCHITECTURE.md`` ("kernels") walks through it.

Example
-------
>>> import torch
>>> from gpse_dgl import kernels
>>> set(kernels.paths("cpu").values()) <= set(kernels.PATHS)
True
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from .. import _env  # noqa: F401
import dgl

from . import batch_norm_act, cpu, dropout, edge_gated_sum, gated_sum, gpu, relu_sum, residual, u_sum
from .csr import GatedCSR
from .gated_sum import accumulates_in_place
from .gated_sum_packed import PackedSources, pack_sources, packed_gated_sum, packed_shape
from .dropout import draw_seed
from .residual import EPS as ROW_NORM_EPS

__all__ = ["BACKENDS", "GatedCSR", "KERNELS", "Kernel", "PATHS", "PackedSources", "ROW_NORM_EPS",
           "accumulates_in_place", "available", "describe", "disabled", "dgl_supports", "draw_seed", "kernels_for",
           "pack_sources", "packed_gated_sum", "packed_shape", "packs_sources", "path_of", "paths", "resolve_backend",
           "run"]

PATHS = ("dgl", "fused-cpu", "triton", "torch")
#: What :mod:`gpse_dgl.nn.ops` takes as ``backend=``: ``"dgl"`` is the ``dgl`` path; ``"torch"`` is
#: gpse-dgl's own, the ``fused-cpu`` or ``triton`` kernel where one takes the operands, else ``torch`` ops.
BACKENDS = ("auto", "dgl", "torch")


@dataclass(frozen=True)
class Kernel:
    """One kernel of an op: ``run(*operands, **options)`` computes ``op`` on ``path`` where ``takes(*operands)``
    holds, on devices of type ``device``, under autograd too if ``autograd``; it returns None if it could not
    run after all (nothing changed)."""

    op: str
    path: str
    device: str
    autograd: bool
    takes: Callable[..., bool]
    run: Callable


#: The registry, tried in order per op (ops by what they compute; see :mod:`gpse_dgl.nn.ops`,
#: :mod:`gpse_dgl.nn.dropout`, :mod:`gpse_dgl.nn.residual`, :meth:`gpse_dgl.nn.gpse.GPSE.residual_update`).
KERNELS = (
    Kernel("gated_sum", "triton", "cuda", False, gpu.supports_gated_sum, gpu.gated_sum),
    Kernel("gated_sum", "fused-cpu", "cpu", True, gated_sum.supports, gated_sum.gated_sum),
    Kernel("relu_sum", "fused-cpu", "cpu", True, relu_sum.supports, relu_sum.relu_sum),
    Kernel("edge_gated_sum", "fused-cpu", "cpu", True, edge_gated_sum.supports, edge_gated_sum.edge_gated_sum),
    Kernel("copy_u_sum", "fused-cpu", "cpu", True, u_sum.supports, u_sum.u_sum),
    Kernel("copy_u_mean", "fused-cpu", "cpu", True, u_sum.supports, u_sum.u_mean),
    Kernel("batch_norm_act", "fused-cpu", "cpu", True, batch_norm_act.supports, batch_norm_act.batch_norm_act),
    Kernel("dropout_noise", "fused-cpu", "cpu", True, dropout.supports, dropout.noise),
    Kernel("normalized_residual", "fused-cpu", "cpu", True, residual.supports, residual.normalized_residual),
    Kernel("normalized_residual_", "fused-cpu", "cpu", False, residual.supports, residual.normalized_residual_),
    Kernel("residual_update_", "triton", "cuda", False, gpu.supports_residual_update, gpu.residual_update_),
)
#: Whether a path's kernels can run in this process (built, importable, not turned off).
_AVAILABLE = {"fused-cpu": cpu.available, "triton": gpu.available}


def available(path: str) -> bool:
    """Whether ``path`` can run in this process (``dgl`` and ``torch`` always can; ``fused-cpu`` once built,
    ``triton`` where Triton imports; neither with ``GPSE_DGL_NATIVE=0``)."""
    return _AVAILABLE[path]() if path in _AVAILABLE else path in PATHS


def disabled(path: str):
    """A context inside which ``path``'s kernels do not run (benchmarks time two paths in one process);
    ``triton`` only."""
    if path != "triton":
        raise ValueError(f"only the triton path can be turned off in a process, not {path!r}")
    return gpu.disabled()


def kernels_for(op: str, *operands, autograd: bool = False) -> Iterator[Kernel]:
    """The kernels of ``op`` that take ``operands``, in the registry's order."""
    for kernel in KERNELS:
        if kernel.op == op and (kernel.autograd or not autograd) and kernel.takes(*operands):
            yield kernel


def run(op: str, *operands, autograd: bool = False, **options):
    """``op`` on the first kernel that takes ``operands`` and runs; None: none did, the caller's torch ops run."""
    for kernel in kernels_for(op, *operands, autograd=autograd):
        result = kernel.run(*operands, **options)
        if result is not None:
            return result
    return None


@functools.lru_cache(maxsize=None)
def dgl_supports(device_type: str) -> bool:
    """Whether the installed DGL can run its kernels on ``device_type`` (``"cpu"``, ``"cuda"``, ...)."""
    if device_type == "cpu":
        return True
    try:
        g = dgl.graph(([0], [0])).to(torch.device(device_type))
        dgl.ops.copy_u_sum(g, torch.ones(1, 1, device=device_type))
        return True
    except Exception:  # noqa: BLE001 - any failure means "not supported"
        return False


#: Ops whose ``"auto"`` backend is ``"torch"`` everywhere: their own kernels, and even their plain torch ops on
#: the CPU, beat DGL's (``benchmarks/RESULTS.md``).
TORCH_FIRST = ("gated_sum", "relu_sum", "edge_gated_sum")
#: Ops whose ``"auto"`` backend tries their kernel first on graphs of at most :data:`KERNEL_GRAPH_EDGES` edges, and
#: otherwise takes the rule of the other ops: the fused neighbour sum and mean beat DGL's kernels on batches of
#: molecules from 32 to 2,048 (77,326 edges), their plain torch ops only on small graphs; on uniform random graphs
#: of 200,000 edges and more DGL's sum and mean are level or faster (``benchmarks/aggregation_speed.py``, RESULTS 21).
KERNEL_FIRST = ("copy_u_sum", "copy_u_mean")
#: The ops that, where their rule picks ``"torch"`` but no kernel takes the operands, run by the rule of the other
#: ops (DGL's kernels or torch's, :func:`resolve_backend` without ``op``) rather than by their own torch ops: the
#: neighbour sum and mean, and GatedGCN's edge-gated sum, whose unfused ops each pick their path.
UNFUSED_BY_RULE = KERNEL_FIRST + ("edge_gated_sum",)
#: The limit of :data:`KERNEL_FIRST`: 2**17, between the largest batch measured (77,326 edges) and the smallest
#: random graph (200,000); sizes in between were not measured.
KERNEL_GRAPH_EDGES = 1 << 17
#: On the CPU, ``"auto"`` runs the other message-passing ops on graphs of at most this many edges (a training batch
#: of a few dozen molecules) and DGL's kernels above: plain torch gathers and ``index_add_`` saved about a tenth of
#: a GatedGCN training step against DGL's kernels at 32 molecules a batch and lost to them from about 4,800 edges
#: (96 molecules).
SMALL_GRAPH_EDGES = 4096


def resolve_backend(backend: str | None, device: torch.device, op: str | None = None,
                    num_edges: int | None = None) -> str:
    """``backend`` (None: ``GPSE_DGL_BACKEND``, default ``"auto"``) as ``"dgl"`` or ``"torch"`` for tensors on
    ``device``. ``"auto"`` is ``"dgl"`` where DGL runs on the device, except for the ops of :data:`TORCH_FIRST`,
    those of :data:`KERNEL_FIRST` on graphs of at most :data:`KERNEL_GRAPH_EDGES` edges (whose callers fall back to
    this rule, without ``op``, where no kernel takes the operands) and, on the CPU, a graph of at most
    :data:`SMALL_GRAPH_EDGES` edges (``num_edges``, when the caller gives it)."""
    backend = backend or os.environ.get("GPSE_DGL_BACKEND", "auto")
    if backend not in BACKENDS:
        raise ValueError(f"unknown message-passing backend {backend!r}; choose one of {BACKENDS}")
    if backend == "auto":
        device_type = torch.device(device).type
        small = device_type == "cpu" and num_edges is not None and num_edges <= SMALL_GRAPH_EDGES
        kernel_first = op in KERNEL_FIRST and (num_edges is None or num_edges <= KERNEL_GRAPH_EDGES)
        first = op in TORCH_FIRST or kernel_first
        return "dgl" if not first and not small and dgl_supports(device_type) else "torch"
    return backend


def packs_sources(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the gated sum without autograd runs on ``fused-cpu`` for rows of ``dtype`` on ``device``, so that
    a caller summing many destinations with the same sources (layer-wise inference) can pack them once
    (:func:`pack_sources`) and sum by column blocks instead (:func:`packed_gated_sum`): the same sums."""
    return (torch.device(device).type == "cpu" and dtype in (torch.float32, torch.bfloat16)
            and resolve_backend(None, device, "gated_sum") == "torch" and cpu.available())


def path_of(op: str, device, backend: str | None = None, num_edges: int | None = None) -> str:
    """The path ``op`` takes on ``device`` for float32 rows (on a graph of ``num_edges`` edges where the rule
    looks at it), by the rule of :mod:`gpse_dgl.nn.ops`: the message-passing ops of :data:`TORCH_FIRST` and
    :data:`KERNEL_FIRST` take DGL where their rule picks ``"dgl"``; every op takes its first kernel for the device
    that can run here; without one, the ops of :data:`UNFUSED_BY_RULE` fall back to the rule of the other ops and
    the rest to their torch ops. ``tests/test_kernel_paths.py`` checks this against what the ops run."""
    device = torch.device(device)
    if op in TORCH_FIRST + KERNEL_FIRST and resolve_backend(backend, device, op, num_edges) == "dgl":
        return "dgl"
    for kernel in KERNELS:
        if kernel.op == op and kernel.device == device.type and available(kernel.path):
            return kernel.path
    if op in UNFUSED_BY_RULE:
        return resolve_backend(backend, device, num_edges=num_edges)
    return "torch"


def paths(device, num_edges: int | None = None) -> dict[str, str]:
    """The path each op takes on ``device`` for float32 rows (:func:`path_of`): ``message_passing`` (the other ops
    of :mod:`gpse_dgl.nn.ops`), then each op of :data:`KERNELS` (training and inference alike where a kernel takes
    both; the ``triton`` ones are inference only). ``num_edges``: a graph's size, where the rule looks at it
    (None: a graph above :data:`SMALL_GRAPH_EDGES` and up to :data:`KERNEL_GRAPH_EDGES` edges)."""
    chosen = {"message_passing": resolve_backend(None, device, num_edges=num_edges)}
    for op in dict.fromkeys(kernel.op for kernel in KERNELS):  # each op once, in the registry's order
        chosen[op] = path_of(op, device, num_edges=num_edges)
    return chosen


def describe(device) -> str:
    """One line: the state of the kernels that can run on ``device`` and why (``fused-cpu`` on the CPU,
    ``triton`` on CUDA; Triton is imported only when asked about a GPU)."""
    kind = torch.device(device).type
    if kind == "cpu":
        return cpu.describe()
    if kind == "cuda":
        return gpu.describe()
    return "torch: no kernels of gpse-dgl for this device"
