"""The ``fused-cpu`` path: the compiled C++ kernels (``csrc/``), their build and load, and the CPU gated sum.

:func:`gpse_dgl.nn.ops.gated_sum` computes ``out[v] = sum_{e = (u, v)} sigmoid(k[v] + q[u]) * val[u]``.
With plain torch ops every edge's gate and message is a row of an ``(E, d)`` tensor that is written and
read again several times; ``csrc/gated_sum.cpp`` reads the two source rows an edge needs once and keeps
the rest in registers (one pass by destination forward; backward one pass by destination and one by
source, the gates recomputed, no atomics). Rows are read as float32 or bfloat16 (half the bytes);
gates, messages and sums are float32, as on the torch path (the precision contract of docs/ARCHITECTURE.md).
The gate is computed as ``1 / (1 + exp(-k[v]) exp(-q[u]))`` from factors computed once per row
(:func:`factors`), so an edge costs no exponential; rows with entries too large for that form are
flagged and their edges take ``sigmoid(k + q)`` itself (``csrc/gated_sum.cpp``). A destination with more
than 16,384 in-edges (a virtual node has one from every node) is summed by every thread, in pieces of 4,096
edges fixed by its edge count, so the result does not depend on the number of threads. Layer-wise inference
on large graphs packs a layer's sources once and sums by column blocks that stay in the cache
(:func:`pack_sources`, :func:`packed_gated_sum`, ``csrc/gated_sum_packed.cpp``).

``csrc/dropout.cpp`` draws dropout masks from a counter-based generator, thread-parallel and vectorised
(:mod:`gpse_dgl.kernels.dropout`; torch's CPU dropout draws them one element at a time). ``csrc/residual.cpp``
runs the encoder's residual step ``h + normalize(relu(dropout(z)))`` in one pass per row, forward and
backward (:mod:`gpse_dgl.kernels.residual`). The downstream layers' kernels (GINE's ReLU sum, GatedGCN's edge-gated
sum, GIN's, GCN's and GraphSAGE's neighbour sums, the BatchNorm step) are in the same extension, with their Python
halves in :mod:`.relu_sum`, :mod:`.edge_gated_sum`, :mod:`.u_sum` and :mod:`.batch_norm_act`; they read a graph's
CSRs from :class:`EdgeCSR`.

The kernels are compiled with the machine's C++ compiler the first time they are needed (about a minute,
once per machine, source and torch version, announced by one line on stderr); the build is kept under
``$TORCH_EXTENSIONS_DIR/gpse_dgl`` (default ``~/.cache/torch_extensions/gpse_dgl``).
Without a compiler or ``ninja``, or with ``GPSE_DGL_NATIVE=0``, :func:`kernel` is None and every op runs as
:mod:`gpse_dgl.nn` writes it without kernels (torch ops, or DGL's kernels where the backend rule picks them:
:func:`gpse_dgl.kernels.path_of`); :func:`describe` says which path runs and why (``gpse-dgl info`` prints it, run
records store it).

Example
-------
>>> from gpse_dgl.kernels import cpu
>>> cpu.describe().split(":")[0] in ("fused-cpu", "torch")
True
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch

from .._private import tensor_version
from ..utils import memory
from ..utils.graph_cache import cached_on_graph

__all__ = ["EdgeCSR", "GatedCSR", "PackedSources", "accumulates_in_place", "available", "describe", "factors", "gated_sum",
           "kernel", "pack_sources", "packed_gated_sum", "packed_shape", "supports"]

_CSRC = Path(__file__).parent / "csrc"
#: The extension's sources: every C++ file of ``csrc/`` (one module; each source binds its own entry points,
#: ``gpse_native::Binding`` in ``native.h``, so a new kernel is one more file there), and its headers.
SOURCES = sorted(_CSRC.glob("*.cpp"))
_HEADERS = sorted(_CSRC.glob("*.h"))
#: Compiler flags: the machine's own vector instructions (the build is per machine), and fast math so
#: that the edge loop vectorises (min/max without NaN cases, reassociated arithmetic); the kernel's exp is
#: its own polynomial, accurate to float32's rounding, so results stay within the fp32 contract.
CFLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp"]
_lock = threading.Lock()
_state: dict = {}


def _build_name() -> str:
    """One build per source text, flags, torch version and environment (the interpreter's ABI, where torch is
    installed and where the sources are), so that an edit or an upgrade rebuilds, and two environments or two
    checkouts sharing the cache (Python 3.11 and 3.12, say, or two clones) keep a build each: torch rebuilds in
    place, without a word, when a build's include paths or source paths change."""
    text = b"".join(path.read_bytes() for path in SOURCES + _HEADERS)
    environment = (f"{torch.__version__} {sys.implementation.cache_tag} {Path(torch.__file__).resolve().parent} "
                   f"{_CSRC.resolve()}")
    digest = hashlib.sha256(text + " ".join(CFLAGS).encode() + environment.encode())
    return f"gpse_dgl_native_{digest.hexdigest()[:12]}"


def kernel():
    """The compiled extension module, or None when it cannot be built here (see :func:`describe`)."""
    with _lock:
        if "module" not in _state:
            _state["module"], _state["reason"] = _load()
        return _state["module"]


def _load():
    if os.environ.get("GPSE_DGL_NATIVE", "1").strip() == "0":
        return None, "GPSE_DGL_NATIVE=0"
    try:
        from torch.utils.cpp_extension import load  # only when the kernel is needed: it imports setuptools

        _find_ninja()
        name = _build_name()
        root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")
        build = root / "gpse_dgl" / name
        build.mkdir(parents=True, exist_ok=True)
        if not (build / f"{name}.so").exists():
            print(f"gpse-dgl: compiling the CPU kernels into {build} (once, about a minute)",
                  file=sys.stderr, flush=True)
        with _watching_lock(build / "lock"):
            module = load(name=name, sources=[str(path) for path in SOURCES], extra_cflags=CFLAGS,
                          extra_ldflags=["-fopenmp"], build_directory=str(build), verbose=False)
        return module, None
    except Exception as exc:  # noqa: BLE001 - no compiler, no ninja, a failed build: the torch path runs
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return None, f"{type(exc).__name__}: {first[:200]}"


def _find_ninja() -> None:
    """torch builds with the ``ninja`` on PATH; the pip package's own copy (``pip install ninja``, in the
    test extra) sits beside the interpreter, which is not on PATH when a venv's tools are called by path."""
    if shutil.which("ninja") is None:
        candidate = Path(sys.executable).parent / "ninja"
        if candidate.exists():
            os.environ["PATH"] = f"{candidate.parent}{os.pathsep}{os.environ.get('PATH', '')}"


#: A build lock older than this, with no process working in its build directory, was left by a compilation that
#: was killed: torch would wait on it for ever.
STALE_LOCK_SECONDS = 600
#: How often the lock is looked at while torch builds or waits.
LOCK_POLL_SECONDS = 5.0


def _build_running(directory: Path) -> bool:
    """Whether a process works in ``directory`` (torch runs ninja there, and ninja the compilers): on Linux from
    each process's working directory in ``/proc``; elsewhere unknown, taken as no. Age alone cannot tell a killed
    build from a live one on a loaded host, where compiling every kernel can take longer than ten minutes."""
    proc = Path("/proc")
    if not proc.is_dir():
        return False
    target = os.path.realpath(directory)
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == target:
                    return True
            except OSError:  # gone, or another user's
                continue
    return False


def _remove_stale_lock(lock: Path, stale_seconds: float = STALE_LOCK_SECONDS) -> bool:
    """Remove ``lock`` if it is older than ``stale_seconds`` and no process builds in its directory; whether it
    did."""
    try:
        if time.time() - lock.stat().st_mtime > stale_seconds and not _build_running(lock.parent):
            lock.unlink()
            return True
    except FileNotFoundError:
        pass
    return False


@contextlib.contextmanager
def _watching_lock(lock: Path, stale_seconds: float = STALE_LOCK_SECONDS, poll: float = LOCK_POLL_SECONDS):
    """Run the block while a thread removes ``lock`` once it is stale. torch waits, without a limit, for the lock
    of a build that another process holds; a lock still young when the wait began (its build killed a minute
    earlier) would otherwise hold this process for ever. A build still running in the lock's directory, this
    process's own or another's, keeps its lock however long it takes."""
    done = threading.Event()

    def watch():
        while not done.wait(poll):
            if _remove_stale_lock(lock, stale_seconds):
                print(f"gpse-dgl: removed {lock}, left {stale_seconds:.0f} s ago by a build that did not finish",
                      file=sys.stderr, flush=True)

    _remove_stale_lock(lock, stale_seconds)
    watcher = threading.Thread(target=watch, name="gpse-dgl-build-lock", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def available() -> bool:
    """Whether the ``fused-cpu`` path can run here (the extension built and loaded)."""
    return kernel() is not None


def describe() -> str:
    """One line: whether the CPU's kernels run (``fused-cpu``, with the sources built) or not (``torch``), and
    why."""
    if kernel() is not None:
        kernels = ", ".join(path.name for path in SOURCES if path.name != "bindings.cpp")
        return f"fused-cpu: {kernels}, built with {' '.join(CFLAGS)}"
    return f"torch: the compiled kernels are not available ({_state['reason']})"


def supports(*tensors: torch.Tensor) -> bool:
    """Whether the fused kernel can take these tensors: on the CPU, float32 or bfloat16, one dtype, and
    the kernel built."""
    dtype = tensors[0].dtype
    return (all(t.device.type == "cpu" and t.dtype == dtype and t.dim() == 2 for t in tensors)
            and dtype in (torch.float32, torch.bfloat16) and kernel() is not None)


class GatedCSR:
    """A graph's edges sorted by destination (forward) and, when a backward pass first needs them, by
    source (stable: edge-id order within each node), as the kernel reads them; built once per graph
    object (:meth:`of`)."""

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, num_src: int, num_dst: int):
        self.dst_indptr, self.dst_index = csr(dst, src, num_dst)
        self.num_src, self.num_dst = num_src, num_dst
        self._edges = (src, dst)

    @functools.cached_property
    def by_source(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(indptr, destinations)`` of each source's out-edges: only gradients read them."""
        src, dst = self._edges
        return csr(src, dst, self.num_src)

    @classmethod
    def of(cls, graph) -> "GatedCSR":
        return edge_layout(graph, "gated_csr", cls)


class EdgeCSR:
    """A graph's edges as the neighbour-sum kernels read them (:mod:`.relu_sum`, :mod:`.edge_gated_sum`,
    :mod:`.u_sum`): the in-edges of each destination (``dst_indptr``; their sources ``dst_src`` and edge ids
    ``dst_eid``) and the out-edges of each source (``src_indptr``; ``src_dst``, ``src_eid``), int64 on the CPU,
    stable (edge-id order within a node). One counting sort per direction (``csrc/edge_csr.cpp``), built once per
    graph object (:meth:`of`) and shared by every layer and kernel: a training batch is a new graph every step."""

    def __init__(self, src: torch.Tensor, dst: torch.Tensor, num_src: int, num_dst: int):
        #: the six arrays as the kernels take them, one list (``csrc/edge_csr.h`` reads them by name)
        self.arrays = kernel().edge_csr(src, dst, num_src, num_dst)
        (self.dst_indptr, self.dst_src, self.dst_eid, self.src_indptr, self.src_dst, self.src_eid) = self.arrays

    @classmethod
    def of(cls, graph) -> "EdgeCSR":
        return edge_layout(graph, "edge_csr", cls)


def csr(rows: torch.Tensor, cols: torch.Tensor, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(indptr, cols sorted by row, stably)``: the CSR the kernels read (int64 on the CPU)."""
    order = torch.argsort(rows, stable=True)
    indptr = torch.zeros(num_rows + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(torch.bincount(rows, minlength=num_rows), 0)
    return indptr, cols[order].contiguous()


def edge_layout(graph, name: str, build):
    """``build(src, dst, num_src, num_dst)`` of ``graph``'s edges (int64, CPU), made once per graph object
    (:func:`gpse_dgl.utils.graph_cache.cached_on_graph`): the kernels' CSR layouts are built per graph, not per
    call."""
    def from_edges():
        src, dst = graph.edges()
        return build(src.to(torch.int64).cpu(), dst.to(torch.int64).cpu(), graph.num_src_nodes(),
                     graph.num_dst_nodes())

    return cached_on_graph(graph, name, None, from_edges)


def factors(x: torch.Tensor, keep: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(exp(-x), flags)``: the gate factors of the rows of ``x`` in its dtype (the kernel computes
    ``sigmoid(k + q)`` as ``1 / (1 + exp(-k) exp(-q))``) and one uint8 per row, 1 where an entry is too
    large for that form (its edges take ``sigmoid(k + q)`` itself). For bf16 rows the factors are stored
    in bf16 too: a gate then carries bf16's rounding of ``exp(-q)`` (at most ~1e-3), where before it
    carried the rounding of ``q`` itself; both within the bf16 contract of ``tests/test_precision.py``.

    With ``keep`` the factors of the last tensor asked for are kept while that tensor lives and is
    unchanged (its version counter; ``.data`` edits are not seen, as autograd does not see them): gated sums
    over chunks of destinations with the same sources (layer-wise inference where packing its sources would
    not fit in memory, :mod:`gpse_dgl.encode.large_graph`) compute them once per layer. Training does not
    keep them (they would live as long as the saved activations), nor does inference mode (its tensors have
    no version counter).
    """
    keep = keep and not x.is_inference()
    kept = _kept.get("tensor")
    if keep and kept is not None and kept() is x and _kept["version"] == tensor_version(x):
        return _kept["factors"]
    if keep:
        _kept.clear()  # the stale factors go before the new ones are allocated: one buffer at a time at most
    factor = memory.empty(tuple(x.shape), dtype=x.dtype)  # read in random order, like the rows themselves
    flags = torch.empty(x.shape[0], dtype=torch.uint8)
    kernel().gated_sum_factors(x, factor, flags)
    if keep:
        _kept.update(tensor=weakref.ref(x), version=tensor_version(x), factors=(factor, flags))
        weakref.finalize(x, _forget)  # the factors go when the tensor goes
    return factor, flags


#: The factors kept by :func:`factors` (one tensor's at a time).
_kept: dict = {}


@dataclass(frozen=True)
class PackedSources:
    """One layer's sources packed for :func:`packed_gated_sum` by :func:`pack_sources`: ``slab`` holds, for each
    block of 64 bytes of columns (16 float32 or 32 bf16), every source's gate factors ``exp(-q)`` and value in one
    128-byte record (``q`` itself for a flagged row); ``flags`` has one uint8 per row, as :func:`factors`;
    ``query`` are the rows packed (read by the direct form). The slab is a copy: pack again after writing to the
    queries or values."""

    query: torch.Tensor
    slab: torch.Tensor
    flags: torch.Tensor


def packed_shape(num_rows: int, dim: int, dtype: torch.dtype) -> tuple:
    """The shape of the slab :func:`pack_sources` fills for ``num_rows`` rows of width ``dim``:
    ``(blocks, num_rows, 2 * lanes)`` with ``lanes`` = 64 bytes of ``dtype`` (padded past ``dim``)."""
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"packed sources are float32 or bfloat16, not {dtype}")
    return tuple(_module("packed sources").gated_sum_packed_shape(num_rows, dim, dtype.itemsize))


def pack_sources(query: torch.Tensor, value: torch.Tensor, out: torch.Tensor) -> PackedSources:
    """Pack the sources of a gated sum into ``out``, a slab of :func:`packed_shape` in their dtype (kept by the
    caller from layer to layer), for :func:`packed_gated_sum` (:func:`supports` must hold for both).

    Layer-wise inference sums every destination of a large graph with one layer's sources: by rows, each edge
    reads two rows of ``2 x d`` floats from memory (the rows are far larger than the cache); by blocks of 64
    bytes of columns, one block's records of every source fit in the last-level cache while all the edges read
    them (``csrc/gated_sum_packed.cpp``).
    """
    if (not supports(query, value) or out.device.type != "cpu" or out.dtype != query.dtype
            or out.shape != packed_shape(query.shape[0], query.shape[1], query.dtype)):
        raise ValueError("pack_sources needs float32 or bfloat16 rows on the CPU, the compiled kernels, and a slab "
                         "of packed_shape() in their dtype")
    flags = torch.empty(query.shape[0], dtype=torch.uint8)
    kernel().gated_sum_pack(query, value, out, flags)
    return PackedSources(query, out, flags)


def packed_gated_sum(indptr: torch.Tensor, index: torch.Tensor, key: torch.Tensor, sources: PackedSources,
                     out: torch.Tensor) -> None:
    """``out[v] += sum_{e = (u, v)} sigmoid(key[v] + q[u]) * value[u]`` from packed sources, without autograd.

    ``indptr``/``index``: the in-edges by destination (CSR, int64: ``index[indptr[v]:indptr[v + 1]]`` are the
    sources of destination ``v``); ``key``: the destinations' gates, in the sources' dtype; ``out``: float32
    with contiguous rows (a column slice included), added to in place. The sums agree with
    :func:`gated_sum`'s to float rounding (the same arithmetic, edges in the same order).
    """
    if not accumulates_in_place(out):
        raise ValueError("packed_gated_sum adds into float32 rows that do not overlap "
                         "(a 2-D tensor, unit column stride)")
    _module("packed_gated_sum").gated_sum_packed_forward(indptr, index, key, sources.query, sources.slab,
                                                         sources.flags, out)


def _module(what: str):
    """The compiled extension, or a RuntimeError that says why ``what`` cannot run without it."""
    module = kernel()
    if module is None:
        raise RuntimeError(f"{what}: the compiled CPU kernels are not available ({_state['reason']})")
    return module


def _forget() -> None:
    """Drop the kept factors if their tensor is gone (another tensor's may have taken the slot since)."""
    kept = _kept.get("tensor")
    if kept is not None and kept() is None:
        _kept.clear()


class _NativeGatedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, dst_gate, src_gate, src_feat, csr):
        ctx.csr = csr
        ctx.save_for_backward(dst_gate, src_gate, src_feat)
        out = torch.zeros((csr.num_dst, src_feat.shape[1]), dtype=torch.float32)
        kernel().gated_sum_forward(csr.dst_indptr, csr.dst_index, dst_gate, src_gate, src_feat, *factors(src_gate), out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        dst_gate, src_gate, src_feat = ctx.saved_tensors
        csr, module = ctx.csr, kernel()
        grad_out = grad_out.to(torch.float32).contiguous()
        need_k, need_q, need_v = ctx.needs_input_grad[:3]
        empty = torch.empty(0)
        grad_k = grad_q = grad_v = None
        # The kernels sum in float32 and write every row once in the rows' dtype: no zero fill, no cast after.
        if need_k:
            grad_k = torch.empty((csr.num_dst, dst_gate.shape[1]), dtype=dst_gate.dtype)
            module.gated_sum_grad_key(csr.dst_indptr, csr.dst_index, dst_gate, src_gate, src_feat,
                                      *factors(src_gate), grad_out, grad_k)
        if need_q or need_v:
            shape = (csr.num_src, src_feat.shape[1])
            grad_q = torch.empty(shape, dtype=src_gate.dtype) if need_q else None
            grad_v = torch.empty(shape, dtype=src_feat.dtype) if need_v else None
            module.gated_sum_grad_source(*csr.by_source, dst_gate, src_gate, src_feat, *factors(dst_gate), grad_out,
                                         empty if grad_q is None else grad_q, empty if grad_v is None else grad_v)
        return grad_k, grad_q, grad_v, None


def accumulates_in_place(out: torch.Tensor) -> bool:
    """Whether a kernel can add its rows into ``out`` where it is: float32, 2-d, unit column stride, rows
    that do not overlap (an expanded tensor's do)."""
    return out.dtype == torch.float32 and out.dim() == 2 and out.stride(1) == 1 and out.stride(0) >= out.shape[1]


def gated_sum(graph, dst_gate: torch.Tensor, src_gate: torch.Tensor, src_feat: torch.Tensor,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """The gated sum with the fused kernel (:func:`supports` must hold); float32 result. ``out``
    (float32) is added to: in place without autograd (rows a stride apart, such as a column slice of a
    wider projection, are written where they are)."""
    csr = GatedCSR.of(graph)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (dst_gate, src_gate, src_feat))
    if needs_grad:
        return _NativeGatedSum.apply(dst_gate, src_gate, src_feat, csr)
    target = out
    if out is None or not accumulates_in_place(out):
        target = torch.zeros((csr.num_dst, src_feat.shape[1]), dtype=torch.float32)
    kernel().gated_sum_forward(csr.dst_indptr, csr.dst_index, dst_gate, src_gate, src_feat,
                               *factors(src_gate, keep=True), target)
    return target if out is None or target is out else out.add_(target)
