"""The ``fused-cpu`` path's extension: the C++ kernels of ``csrc/``, their build and load.

Every C++ file of ``csrc/`` is compiled into one extension module (each binds its own entry points,
``gpse_native::Binding`` in ``csrc/native.h``), loaded by :func:`kernel`. The Python half of each kernel is the
module beside this one named after its source (``csrc/relu_sum.cpp``: :mod:`.relu_sum`; the list is the
registry, :data:`gpse_dgl.kernels.KERNELS`); they read a graph's edges from the layouts of :mod:`.csr`.

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
import hashlib
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import torch


__all__ = ["CFLAGS", "SOURCES", "available", "describe", "distinct_rows", "kernel", "require", "supports",
           "unit_stride_rows"]

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
    """Whether the kernels can take these rows: 2-D, on the CPU, float32 or bfloat16, one dtype, and the extension
    built. Any layout: the wrappers pass them through :func:`unit_stride_rows`."""
    dtype = tensors[0].dtype
    return (all(t.device.type == "cpu" and t.dtype == dtype and t.dim() == 2 for t in tensors)
            and dtype in (torch.float32, torch.bfloat16) and kernel() is not None)


def require(what: str):
    """The compiled extension, or a RuntimeError that says why ``what`` cannot run without it."""
    module = kernel()
    if module is None:
        raise RuntimeError(f"{what}: the compiled CPU kernels are not available ({_state['reason']})")
    return module


def unit_stride_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself where its rows have unit column stride, else a contiguous copy. The edge kernels read rows at
    any row stride (a column slice of a wider projection is read in place) but each row's entries in order; every
    wrapper passes its rows through this, so that no ``supports`` declines for layout alone. (The BatchNorm step
    is the exception: its column sums walk whole contiguous tensors, :mod:`.batch_norm_act`.)"""
    return t if t.stride(-1) == 1 else t.contiguous()


def distinct_rows(t: torch.Tensor) -> bool:
    """Whether a kernel can write the rows of ``t`` where they are: 2-D, unit column stride, and no two rows
    sharing memory (an expanded tensor's do; a single row cannot). Any row stride: a column slice of a wider
    tensor is written in place."""
    return t.dim() == 2 and t.stride(-1) == 1 and (t.shape[0] <= 1 or t.stride(0) >= t.shape[1])
