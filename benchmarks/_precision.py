"""Precision columns shared by the speed benchmarks: matmul peaks per dtype and plain-dict result records.

Every speed benchmark that compares precisions (``encode_speed.py``, ``train_speed.py``,
``encode_large.py``) reports one *record* per (implementation, precision)::

    {"label": "ours bf16", "side": "ours", "precision": "bf16", "throughput": 351.0,
     "unit": "molecules/s", "peak": 0.42}

``peak`` is the fraction of the same run's measured dense-matmul peak *in that precision* (fp32 rows:
the fp32 peak; bf16 rows: the bf16 peak), or None where the FLOPs are not counted. A list of records
is what a figure is drawn from (one bar per record); :func:`records_table` prints it.

Example
-------
>>> rec = record("ours", "bf16", 350.0, "molecules/s", 0.4)
>>> rec["label"], rec["peak"]
('ours bf16', 0.4)
"""
from __future__ import annotations

import time

__all__ = ["DEFAULT_PRECISIONS", "parse_precisions", "matmul_peak_gflops", "label", "record", "records_table"]

DEFAULT_PRECISIONS = "fp32,bf16"
_SIDES = {"ours": "ours", "pyg": "PyG"}


def parse_precisions(text: str) -> list:
    """``"fp32,bf16"`` -> ``["fp32", "bf16"]`` (validated against gpse-dgl's names)."""
    from gpse_dgl.utils.precision import PRECISIONS

    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PRECISIONS]
    if unknown or not names:
        raise SystemExit(f"--precisions: {','.join(unknown) or 'none given'}; choose from {', '.join(PRECISIONS)}")
    return names


def matmul_peak_gflops(device: str = "cpu", precision: str = "fp32", size: int | None = None, repeats: int = 10,
                       budget_s: float = 5.0) -> float:
    """Best-of-``repeats`` GFLOP/s of a ``size x size`` dense product in ``precision`` on ``device``.

    Low precisions are timed the way the models run them: ``F.linear`` on float32 inputs under
    ``torch.autocast`` (on CPUs without native bf16 this takes a faster route than a plain bf16 ``@``).
    Short products and the best of many make the estimate robust to other processes on the machine.
    ``size`` defaults to 2048 for fp32 and 1024 for bf16/fp16 (where they are emulated, a 2048 product
    takes tens of seconds); timing stops early once ``budget_s`` is spent (at least two products).
    """
    import torch
    import torch.nn.functional as F

    from gpse_dgl.utils.precision import autocast

    size = size or (2048 if precision == "fp32" else 1024)
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    best, spent = float("inf"), 0.0
    for run in range(repeats + 1):  # the first run warms up
        sync_device(device)
        start = time.perf_counter()
        with autocast(precision, device):
            F.linear(a, b)
        sync_device(device)
        elapsed = time.perf_counter() - start
        best, spent = min(best, elapsed), spent + elapsed
        if run >= 2 and spent > budget_s:
            break
    return 2 * size ** 3 / best / 1e9


def sync_device(device) -> None:
    """Wait for the work queued on ``device`` (CUDA runs asynchronously; nothing to wait for on the CPU)."""
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def label(side: str, precision: str) -> str:
    """``"ours bf16"``, ``"PyG fp32"``, ``"PyG bf16 autocast"`` (PyG has no precision option of its own)."""
    name = f"{_SIDES.get(side, side)} {precision}"
    return name + " autocast" if side == "pyg" and precision != "fp32" else name


def record(side: str, precision: str, throughput: float, unit: str, peak: float | None, **extra) -> dict:
    """One plain-dict result (see the module docstring); ``extra`` keys are kept (e.g. ``mode``)."""
    return {"label": label(side, precision), "side": side, "precision": precision,
            "throughput": float(throughput), "unit": unit, "peak": None if peak is None else float(peak), **extra}


def records_table(records: list, baseline: str = "ours fp32") -> str:
    """A plain-text table of ``records`` with each throughput's ratio to the ``baseline`` label's."""
    groups: dict = {}
    for rec in records:
        groups.setdefault(rec.get("mode", ""), []).append(rec)
    lines = []
    for mode, recs in groups.items():
        base = next((r["throughput"] for r in recs if r["label"] == baseline), None)
        for r in recs:
            ratio = f"{r['throughput'] / base:5.2f}x {baseline}" if base else ""
            peak = f"{r['peak']:4.0%} of its peak" if r["peak"] is not None else ""
            lines.append(f"  {mode:<12} {r['label']:<18} {r['throughput']:10,.1f} {r['unit']:<12} {peak:<16} {ratio}")
    return "\n".join(lines)
