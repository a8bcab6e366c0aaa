"""The pretraining report's three figures, drawn with matplotlib (imported inside each function).

* :func:`r2_bars` - held-out R^2 per PSE (ours on validation and test, the paper's test value beside)
  and per target column (ours on test; the paper's per-PSE value as a line over that PSE's columns);
* :func:`predicted_vs_true` - one panel per PSE: prediction against target on the test split, a
  scatter for few points and a 2-D histogram (log colour scale) for many, with the y = x line;
* :func:`training_curves` - training and validation loss, and validation R^2 (overall and per PSE),
  against the epoch.

Every function writes one PNG (atomically) and returns its path. Inputs are plain numbers and arrays
(:class:`gpse_dgl.train.pretraining.report.HeldOut`), so the figures can be drawn without a model.

Example
-------
>>> import os, tempfile
>>> from gpse_dgl.train.pretraining.report_figures import training_curves
>>> history = [{"epoch": e, "train": {"loss": 1 / e}, "val": {"loss": 1.2 / e, "r2": 1 - 1 / e,
...             "r2_per_pse": {"RWSE": 1 - 0.5 / e}}} for e in (1, 2, 3)]
>>> training_curves(history, os.path.join(tempfile.mkdtemp(), "curves.png")).name
'curves.png'
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ...utils.io import atomic_path

#: Above this many points a panel is a 2-D histogram instead of a scatter (overplotting hides density).
SCATTER_LIMIT = 3000
DPI = 100
OURS, OURS_LIGHT, PAPER = "#1f77b4", "#9ecae1", "#ff7f0e"
# one colour per PSE in the per-column bars; no orange, which marks the paper's values
PSE_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def _pyplot():
    # matplotlib: optional for the library (the report says how to install it) and a heavy import
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path) -> Path:
    """Write ``fig`` to ``path`` atomically and close it."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")
    _pyplot().close(fig)
    return path


def _finite(value) -> float:
    return math.nan if value is None else float(value)


def r2_bars(per_pse: dict, per_column: list, columns: list, paper: dict, path) -> Path:
    """Bars of R^2 per PSE and per column.

    Parameters
    ----------
    per_pse : dict
        ``{split: {pse: r2}}`` with split ``"val"`` and/or ``"test"`` (an ``"Overall"`` key included).
    per_column : list of float
        Test R^2 of every column, in the order of ``columns``.
    columns : list of (str, int)
        ``(pse, column within the PSE)`` per column (:func:`gpse_dgl.pse.target_columns`).
    paper : dict
        The paper's test R^2 per PSE (and ``"Overall"``); PSEs it lacks get no orange bar.
    """
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.4), gridspec_kw={"height_ratios": [1, 1.1]})
    names = list(next(iter(per_pse.values())))
    series = [(f"ours, {split}", per_pse[split], colour)
              for split, colour in (("val", OURS_LIGHT), ("test", OURS)) if split in per_pse]
    series.append(("paper, test (20 x 512, 5 % MolPCBA)", paper, PAPER))
    width = 0.8 / len(series)
    x = np.arange(len(names))
    for i, (label, values, colour) in enumerate(series):
        heights = [_finite(values.get(name)) for name in names]
        bars = top.bar(x + (i - (len(series) - 1) / 2) * width, heights, width, label=label, color=colour)
        top.bar_label(bars, fmt="%.2f", fontsize=6.5, padding=1)
    top.set_xticks(x, names)
    top.set_ylabel("R$^2$ (held-out)")
    top.set_title("Held-out R$^2$ per PSE")
    floor = _r2_floor([v for _, s, _ in series for v in s.values()])
    top.set_ylim(floor, 1.25)  # headroom for the legend; R^2 ticks stop at 1
    top.set_yticks(np.round(np.arange(floor, 1.001, 0.2), 1))
    top.legend(fontsize=8, loc="upper center", ncol=len(series), frameon=False)
    _column_bars(bottom, per_column, columns, paper)
    fig.tight_layout()
    return _save(fig, path)


def _column_bars(ax, per_column: list, columns: list, paper: dict) -> None:
    pses = list(dict.fromkeys(name for name, _ in columns))
    colours = {name: PSE_COLOURS[i % len(PSE_COLOURS)] for i, name in enumerate(pses)}
    values = [_finite(v) for v in per_column]
    floor = _r2_floor(values)
    ax.bar(range(len(values)), [max(v, floor) for v in values], 0.8,
           color=[colours[name] for name, _ in columns])
    centres = []
    for name in pses:
        where = [i for i, (n, _) in enumerate(columns) if n == name]
        centres.append((where[0] + where[-1]) / 2)
        if name in paper:
            ax.hlines(paper[name], where[0] - 0.4, where[-1] + 0.4, colors=PAPER, linewidth=2)
    ax.set_xticks(centres, pses, fontsize=8)
    ax.tick_params(axis="x", length=0)
    ax.set_xlim(-0.7, len(values) - 0.3)
    ax.set_ylim(floor, 1.05)
    ax.set_xlabel("target column, grouped by PSE")
    ax.set_ylabel("test R$^2$")
    clipped = f"; bars clipped at {floor:.1f}" if min(values, default=0.0) < floor else ""
    ax.set_title(f"Test R$^2$ per column (orange: the paper's R$^2$ of the PSE{clipped})")


def _r2_floor(values) -> float:
    """Lower y limit: a little under the smallest finite R^2, never below -1 (worse is clipped)."""
    finite = [v for v in (_finite(v) for v in values) if not math.isnan(v)]
    lowest = min(finite, default=0.0)
    return max(-1.0, min(0.0, math.floor((lowest - 0.05) * 10) / 10))


def predicted_vs_true(panels: list, path, title: str) -> Path:
    """One panel per PSE; ``panels`` holds ``(pse, true, predicted, r2, axis label)`` with 1-D arrays."""
    plt = _pyplot()
    from matplotlib.colors import LogNorm  # matplotlib: optional and heavy (see _pyplot)

    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(8, 2.75 * rows + 0.4), squeeze=False)
    for ax, (name, true, pred, r2, label) in zip(axes.flat, panels):
        true, pred = np.asarray(true, dtype=float), np.asarray(pred, dtype=float)
        low, high = np.percentile(np.concatenate([true, pred]), [0.1, 99.9]) if len(true) else (0.0, 1.0)
        if high <= low:
            low, high = low - 0.5, high + 0.5
        if len(true) > SCATTER_LIMIT:
            *_, image = ax.hist2d(true, pred, bins=80, range=[[low, high], [low, high]], norm=LogNorm(),
                                  cmap="viridis")
            bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
            bar.set_label("points per bin", fontsize=7)
            bar.ax.tick_params(labelsize=7)
        else:
            ax.scatter(true, pred, s=6, alpha=0.5, color=OURS, linewidths=0)
        ax.plot([low, high], [low, high], color="black", linewidth=0.8, linestyle="--")
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_title(f"{name}: R$^2$ {r2:.3f} ({len(true):,} values)", fontsize=9)
        ax.set_xlabel(f"true {label}", fontsize=8)
        ax.set_ylabel(f"predicted {label}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def training_curves(history: list, path) -> Path:
    """Loss (training, validation) and validation R^2 (overall, per PSE) against the epoch."""
    plt = _pyplot()
    fig, (loss_ax, r2_ax) = plt.subplots(1, 2, figsize=(8, 3.4))
    epochs = [record["epoch"] for record in history]
    loss_ax.plot(epochs, [record["train"]["loss"] for record in history], marker=".", label="training")
    validated = [record for record in history if record.get("val")]
    val_epochs = [record["epoch"] for record in validated]
    loss_ax.plot(val_epochs, [record["val"]["loss"] for record in validated], marker=".", label="validation")
    loss_ax.set_xlabel("epoch")
    loss_ax.set_ylabel("loss (recipe's loss, per graph)")
    loss_ax.set_yscale("log")
    loss_ax.set_title("Loss", fontsize=10)
    loss_ax.legend(fontsize=8)
    if validated:
        r2_ax.plot(val_epochs, [_finite(record["val"]["r2"]) for record in validated], color="black",
                   linewidth=2, marker=".", label="overall")
        for name in validated[-1]["val"].get("r2_per_pse", {}):
            r2_ax.plot(val_epochs, [_finite(record["val"]["r2_per_pse"].get(name)) for record in validated],
                       linewidth=1, label=name)
        values = [_finite(record["val"]["r2"]) for record in validated]
        r2_ax.set_ylim(max(-1.0, min(0.0, min(values, default=0.0))), 1.0)
        r2_ax.legend(fontsize=7, ncol=2)
    r2_ax.set_xlabel("epoch")
    r2_ax.set_ylabel("validation R$^2$")
    r2_ax.set_title("Validation R$^2$ (training R$^2$ is not recorded)", fontsize=10)
    for ax in (loss_ax, r2_ax):
        ax.grid(alpha=0.3)
        if len(epochs) < 10:
            ax.set_xticks(epochs)
    fig.tight_layout()
    return _save(fig, path)
