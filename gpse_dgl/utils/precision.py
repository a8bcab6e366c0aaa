"""Numeric precision of a run: ``fp32`` (the reference), or mixed ``bf16`` / ``fp16`` through autocast.

Precision is an option of the drivers (encoding, pretraining and downstream loops), never a property of
the model classes. It is decided once, at the entry point that reads the recipe or the flag
(:func:`decide_precision`): one :class:`Precision` (what runs, its dtype, the device, whether autocast is on,
and why) that is passed down, recorded once in ``metrics.json`` (:meth:`Precision.record`) and read, never
parsed again, below; the forward pass runs inside :meth:`Precision.autocast`. Under autocast the dense
products (linear layers, attention) run in the low precision while the model code keeps its accumulations
in float32 where they are (:func:`accumulation_dtype`): scatter sums, pooling, normalisation, the residual stream, losses.
Parameters, optimiser state and checkpoints stay float32; fp16 training needs a gradient scaler
(:meth:`Precision.grad_scaler`), bf16 does not.

``auto`` picks :func:`suggested_precision` for the device (:func:`select_precision`): bf16 where it is
native, else fp32, so one recipe runs fast on a bf16 machine and exactly on the others.

Native support (:func:`native_support`): bf16 on CUDA GPUs that report it (Ampere and later) and on
CPUs with ``avx512_bf16`` or AMX; fp16 on CUDA only. bf16 elsewhere on a CPU is emulated by torch, so
it runs, with a warning, several times slower than fp32.

Example
-------
>>> import torch
>>> from gpse_dgl.utils.precision import decide_precision
>>> precision = decide_precision("fp32", "cpu")
>>> precision.name, precision.dtype, precision.why
('fp32', torch.float32, 'asked for')
>>> lin = torch.nn.Linear(4, 2)
>>> with precision.autocast():
...     lin(torch.ones(3, 4)).dtype
torch.float32
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from dataclasses import dataclass

import torch

from .errors import GPSEError
from .row_buckets import RowBuckets

__all__ = ["PRECISIONS", "PRECISION_CHOICES", "Precision", "PrecisionError", "as_precision", "decide_precision",
           "select_precision", "autocast", "native_support", "suggested_precision", "accumulation_dtype",
           "to_accumulation", "product_input"]

PRECISIONS = ("fp32", "bf16", "fp16")
PRECISION_CHOICES = PRECISIONS + ("auto",)  # what users may write: auto = the device's suggestion
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# CPU feature flags (/proc/cpuinfo) that give native bf16 dot products.
_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


class PrecisionError(GPSEError, ValueError):
    """An unknown precision, or one the device cannot run."""


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> frozenset:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _cpu_native_bf16() -> bool:
    if any(flag in _cpu_flags() for flag in _CPU_BF16_FLAGS):
        return True
    # torch's own query (covers systems without /proc/cpuinfo); a private API, so guarded
    probe = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # noqa: BLE001 - an unavailable probe means "unknown", treated as no
        return False


def native_support(device) -> dict:
    """``{"bf16": bool, "fp16": bool}``: whether each low precision runs natively on ``device``."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        # bf16 tensor cores from compute capability 8 (Ampere); fp16 ones on every GPU torch supports
        return {"bf16": torch.cuda.get_device_capability(index)[0] >= 8, "fp16": True}
    if device.type == "cpu":
        return {"bf16": _cpu_native_bf16(), "fp16": False}
    return {"bf16": False, "fp16": False}


def suggested_precision(device) -> str:
    """The fastest precision that runs natively on ``device`` (bf16 where it is native, else fp32)."""
    return "bf16" if native_support(device)["bf16"] else "fp32"


def select_precision(precision: str, device) -> str:
    """The concrete precision name ``precision`` stands for on ``device``: ``auto`` becomes
    :func:`suggested_precision`, the others stay. Unknown names raise :class:`PrecisionError`.

    >>> select_precision("fp32", "cpu")
    'fp32'
    >>> select_precision("auto", "cpu") in ("fp32", "bf16")
    True
    """
    if precision == "auto":
        return suggested_precision(device)
    if precision not in _DTYPES:
        raise PrecisionError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISION_CHOICES)}")
    return precision


@dataclass(frozen=True)
class Precision:
    """A run's precision, decided once (:func:`decide_precision`) and passed down: ``name`` runs (``fp32``,
    ``bf16`` or ``fp16``) on ``device`` because of ``why``; ``requested`` is what the recipe or flag said."""

    name: str
    device: torch.device
    requested: str
    why: str

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the dense products (float32 for fp32)."""
        return _DTYPES[self.name]

    @property
    def autocast_enabled(self) -> bool:
        """Whether the forward pass runs under autocast (every precision but fp32)."""
        return self.name != "fp32"

    def autocast(self, device=None):
        """The context of the forward pass on ``device`` (default: the device decided for; a no-op for fp32).

        On the CPU it also pads the rows of linear layers to a few bucket sizes
        (:class:`~gpse_dgl.utils.row_buckets.RowBuckets`): the CPU's low-precision kernels are compiled per
        shape, and graph batches would otherwise bring a new shape at every step.
        """
        if not self.autocast_enabled:
            return contextlib.nullcontext()
        device = torch.device(device) if device is not None else self.device
        if device.type != "cpu":
            return torch.autocast(device_type=device.type, dtype=self.dtype)
        return _cpu_autocast(self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A gradient scaler, enabled only for fp16 (bf16 and fp32 have fp32's exponent range)."""
        return torch.amp.GradScaler(self.device.type, enabled=self.name == "fp16")

    def record(self) -> dict:
        """What ``metrics.json`` keeps of it (``environment.precision``)."""
        return {"name": self.name, "requested": self.requested, "dtype": str(self.dtype).removeprefix("torch."),
                "device": str(self.device), "autocast": self.autocast_enabled, "why": self.why}


def decide_precision(requested: str, device, warn: bool = True) -> Precision:
    """The one place a precision's name is read: ``requested`` (``fp32``, ``bf16``, ``fp16`` or ``auto``) for
    ``device``. Unknown names and fp16 off CUDA raise :class:`PrecisionError`; bf16 where it is not native warns
    that it will be slow.

    >>> decide_precision("auto", "cpu").why.startswith("auto: bf16 is")
    True
    """
    device = torch.device(device)
    name = select_precision(requested, device)
    if name == "fp16" and device.type != "cuda":
        raise PrecisionError(f"fp16 needs a CUDA GPU ({device.type} has no fast fp16 path); use bf16 or fp32")
    native = native_support(device)["bf16"]
    if name == "bf16" and warn and not native:
        warnings.warn(f"bf16 is not native on this {device.type} (no avx512_bf16/AMX or bf16 GPU): it runs "
                      f"emulated, slower than fp32", RuntimeWarning, stacklevel=2)
    if requested == "auto":
        why = f"auto: bf16 {'is' if native else 'is not'} native on this {device.type}"
    else:
        why = "asked for" if name != "bf16" or native else "asked for; emulated on this device, slow"
    return Precision(name, device, requested, why)


def as_precision(precision: Precision | str, device, warn: bool = True) -> Precision:
    """``precision`` itself when it is already decided, else :func:`decide_precision` of the name: for the
    library's public functions, which take a name from Python callers and a decided precision from the entry
    points and from each other."""
    if isinstance(precision, Precision):
        return precision
    return decide_precision(precision, device, warn=warn)


def autocast(precision: Precision | str, device):
    """:meth:`Precision.autocast` on ``device``, of a precision or of a name (decided here without the bf16
    warning): for scripts and tests; the package's drivers pass a decided :class:`Precision` down."""
    return as_precision(precision, device, warn=False).autocast(device)


@contextlib.contextmanager
def _cpu_autocast(dtype: torch.dtype):
    with torch.autocast(device_type="cpu", dtype=dtype), RowBuckets():
        yield


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype sums and norms over ``dtype`` values accumulate in: float32 for bf16/fp16, else ``dtype``."""
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def to_accumulation(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in its :func:`accumulation_dtype` (the same object when that is its dtype)."""
    return tensor.to(accumulation_dtype(tensor.dtype))


def product_input(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in the dtype autocast casts it to for a product (itself outside autocast).

    For an input that several products read: cast once, where each product would cast it again (on a
    large graph each cast of the node states costs about a third of a bf16 product).
    """
    device_type = tensor.device.type
    if not torch.is_autocast_enabled(device_type) or not tensor.is_floating_point():
        return tensor
    return tensor.to(torch.get_autocast_dtype(device_type))
