"""Plotting helpers of the benchmark scripts: every figure goes to ``benchmarks/figures/`` as a small PNG.

* :func:`bars_with_errors` - grouped bars with error bars (scores per encoding, mean ± std);
* :func:`speed_bars` - throughput bars (ours fp32 / bf16 vs PyG) with the dense-matmul peak as a line;
* :func:`loglog_with_slopes` - time against size on log-log axes, with the fitted power-law exponent
  of every curve in its legend entry (time ~ size^slope);
* :func:`curves_by_epoch` - training curves, one colour per run and one line style per split.

matplotlib is imported inside each function (it is a dependency of gpse-dgl; the import stays out of
the scripts' start-up). Every function writes the PNG atomically, prints ``figure: <path>`` and
returns the path. Figures are 8 inches wide at 100 dpi: 800 px, the width of a README column.

Example
-------
>>> import os, tempfile
>>> from _figures import speed_bars
>>> rows = [{"label": "ours", "precision": "fp32", "throughput": 40.0, "peak": 100.0},
...         {"label": "PyG", "precision": "fp32", "throughput": 25.0, "peak": 100.0}]
>>> speed_bars(rows, os.path.join(tempfile.mkdtemp(), "speed.png"), "Encoding speed", "GFLOP/s").name  # doctest: +ELLIPSIS
figure: .../speed.png
'speed.png'
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from gpse_dgl.utils.io import atomic_path

FIGURES = Path(__file__).resolve().parent / "figures"
WIDTH, DPI = 8.0, 100
PRECISION_COLOURS = {"fp32": "#1f77b4", "bf16": "#2ca02c", "fp16": "#17becf"}
OTHER_COLOUR = "#ff7f0e"


def figure_path(name: str, folder=None) -> Path:
    """``<folder or benchmarks/figures>/<name>``."""
    return Path(folder or FIGURES) / name


def figure_arg(text: str) -> Path | None:
    """An argparse ``type`` for ``--figure``: a path, or none for an empty string (``--figure ''``)."""
    return Path(text) if text else None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path) -> Path:
    """Write ``fig`` to ``path`` atomically, close it, print where it went."""
    path = Path(path)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    _pyplot().close(fig)
    print(f"figure: {path}")
    return path


def bars_with_errors(groups, series, path, title: str, ylabel: str, reference=None, height: float = 3.6,
                     value_format: str = "{:.1f}") -> Path:
    """Grouped bars, one group per entry of ``groups``.

    Parameters
    ----------
    groups : list of str
        Group labels on the x axis (e.g. encodings).
    series : list of (str, list of float, list of float)
        ``(legend label, means, stds)`` per bar colour; NaN means leave the bar out.
    reference : (str, list of float), optional
        ``(legend label, values)`` drawn as a short black tick over each group (e.g. the paper's value).
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH, height))
    x = np.arange(len(groups))
    width = 0.8 / max(len(series), 1)
    for i, (label, means, stds) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        bars = ax.bar(x + offset, means, width, yerr=stds, capsize=3, label=label, color=f"C{i}")
        ax.bar_label(bars, labels=["" if math.isnan(m) else value_format.format(m) for m in means],
                     fontsize=7, padding=2)
    if reference is not None:
        label, values = reference
        ax.hlines(values, x - 0.45, x + 0.45, colors="black", linewidth=1.5, linestyles="--", label=label)
    ax.set_xticks(x, groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    top = np.nanmax([m + (0 if math.isnan(e) else e) for _, means, stds in series for m, e in zip(means, stds)]
                    + ([v for v in reference[1] if not math.isnan(v)] if reference else []) + [0.0])
    ax.set_ylim(0, 1.25 * top if top > 0 else 1.0)  # headroom for the legend above the bars
    ax.legend(fontsize=8, loc="upper center", ncol=len(series) + (reference is not None), frameon=False)
    return save(fig, path)


def speed_bars(rows, path, title: str, unit: str) -> Path:
    """Throughput bars with the dense-matmul peak as a horizontal line.

    Parameters
    ----------
    rows : list of dict
        Plain dicts with ``label`` (e.g. ``"ours"``, ``"PyG"``), ``precision`` (``"fp32"``, ``"bf16"``),
        ``throughput`` (in ``unit``) and ``peak`` (the machine's matmul peak at that precision, in
        ``unit``; None when not measured). One bar per row, in the given order.
    unit : str
        Unit of ``throughput`` and ``peak`` (axis label), e.g. ``"GFLOP/s"`` or ``"graphs/s"``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH, 3.6))
    labels = [f"{row['label']}\n{row['precision']}" for row in rows]
    colours = [PRECISION_COLOURS.get(row["precision"], OTHER_COLOUR) if row["label"].lower().startswith("ours")
               else OTHER_COLOUR for row in rows]
    bars = ax.bar(range(len(rows)), [row["throughput"] for row in rows], 0.6, color=colours)
    ax.bar_label(bars, labels=[_short(row["throughput"]) + (f"\n{row['throughput'] / row['peak']:.0%} of peak"
                                                           if row.get("peak") else "") for row in rows],
                 fontsize=8, padding=2)
    peaks = {}
    for row in rows:
        if row.get("peak") is not None:
            peaks.setdefault(row["precision"], row["peak"])
    for precision, peak in peaks.items():
        ax.axhline(peak, color=PRECISION_COLOURS.get(precision, "grey"), linestyle="--", linewidth=1.2,
                   label=f"dense matmul peak, {precision}: {_short(peak)} {unit}")
    ax.set_xticks(range(len(rows)), labels)
    ax.set_ylabel(f"throughput ({unit})")
    # headroom above the highest bar or line for the legend
    ax.set_ylim(0, 1.4 * max([row["throughput"] for row in rows] + list(peaks.values()) + [1e-9]))
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if peaks:
        ax.legend(fontsize=8, loc="upper right")
    return save(fig, path)


def speed_rows(records) -> list:
    """:func:`speed_bars` rows from the benchmarks' precision records (``benchmarks/_precision.py``), whose
    ``peak`` is the fraction of the matmul peak reached: the line is then the throughput at 100 %."""
    return [{"label": r["side"], "precision": r["precision"], "throughput": r["throughput"],
             "peak": r["throughput"] / r["peak"] if r.get("peak") else None} for r in records]


def fitted_slope(x, y) -> float:
    """Exponent ``b`` of the least-squares fit ``log y = a + b log x`` (NaN with fewer than 2 points)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = (x > 0) & (y > 0) & np.isfinite(y)
    if keep.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


def loglog_with_slopes(series: dict, path, title: str, xlabel: str, ylabel: str, styles: dict | None = None) -> Path:
    """``series[label] = (x, y)`` on log-log axes; each legend entry ends with its fitted slope."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH, 4.4))
    for i, (label, (x, y)) in enumerate(series.items()):
        style = {"marker": "o", "color": f"C{i}", **(styles or {}).get(label, {})}
        ax.plot(x, y, label=f"{label}: slope {fitted_slope(x, y):.2f}", **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=8)
    return save(fig, path)


def curves_by_epoch(runs: dict, path, title: str, ylabel: str, log_y: bool = False) -> Path:
    """``runs[label] = {split: [(epoch, value), ...]}``: one colour per run, one line style per split (the
    first split solid, the next dashed, then dotted)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH, 4.0))
    styles = ("-", "--", ":")
    for i, (label, splits) in enumerate(runs.items()):
        for style, (split, points) in zip(styles, splits.items()):
            epochs, values = zip(*points)
            ax.plot(epochs, values, style, marker="o", markersize=3, color=f"C{i}", label=f"{label}, {split}")
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=8)
    return save(fig, path)


def _short(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
