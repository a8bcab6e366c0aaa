"""Pretraining report: ``report.html`` and the PNGs it shows, written next to a run's ``metrics.json``.

The report evaluates a checkpoint on held-out graphs exactly as ``gpse-dgl pretrain`` does (same seeded
input features, same R^2 of :mod:`gpse_dgl.train.pretraining.r2`) and draws (:mod:`.report_figures`):

* ``report_r2.png`` - held-out R^2 per PSE, with the paper's (table ``pse_perf``) beside ours, and per
  target column;
* ``report_scatter.png`` - predicted against true values on the test split, one panel per PSE
  (node-level values are the per-graph standardised targets; graph-level ones are raw);
* ``report_curves.png`` - training / validation loss and validation R^2 against the epoch, from the
  run's per-epoch history (absent from inference-only checkpoints).

``report.html`` embeds the PNGs as base64 data URIs and uses no external file, style sheet, script or
link, so it opens offline and can be mailed as one file. Graph-level values are compared in the data's
units: predictions of a model trained on z-scored graph targets are mapped back with the checkpoint's
scaling, also when the report scores another data source (an older checkpoint that lacks it falls back,
with one line, to the scaling of the data rebuilt for the report, which is the training scaling when the
data is the checkpoint's own).

Example
-------
>>> from gpse_dgl.train.pretraining.report import write_run_report
>>> write_run_report("runs/quickstart")                     # doctest: +SKIP
PosixPath('runs/quickstart/report.html')
"""
from __future__ import annotations

import base64
import copy
import html
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ...utils import checkpoint as ckpt
from ...utils.errors import CheckpointError, GPSEError
from ...utils.io import atomic_write_text
from .r2 import R2Accumulator
from ..runtime import derive_seed, resolve_device
from . import report_figures
from .data import build_pretraining_data
from .model import build_model, evaluation_features
from .schema import load_pretrain_recipe, validate_pretrain_recipe

REPORT_NAME = "report.html"
FIGURE_NAMES = {"r2": "report_r2.png", "scatter": "report_scatter.png", "curves": "report_curves.png"}
#: The paper's table ``pse_perf``: test R^2 of its 20 x 512 GPSE trained on 5 % of MolPCBA (16,177 graphs).
PAPER_TEST_R2 = {"ElstaticPE": 0.964, "LapPE": 0.973, "RWSE": 0.984, "HKdiagSE": 0.981, "EigVals": 0.982,
                 "CycleGE": 0.977, "Overall": 0.979}
GRAPH_VALUE_LABELS = {"EigVals": "eigenvalue of L$_{sym}$", "CycleGE": "cycle count"}
MATPLOTLIB_HINT = "pip install matplotlib"


class MissingPlotLibraryError(GPSEError, ImportError):
    """matplotlib is not installed; the message says how to get the report."""


@dataclass
class HeldOut:
    """Targets, predictions and R^2 report of one split; graph values in the data's raw units."""

    split: str
    report: dict
    node_true: np.ndarray
    node_pred: np.ndarray
    graph_true: np.ndarray
    graph_pred: np.ndarray


# ----------------------------------------------------------------------------------------------
# entry points


def write_run_report(run_dir, log=print) -> Path:
    """Re-create the report of a ``gpse-dgl pretrain`` output directory from its files.

    Reads ``metrics.json`` (per-epoch history), ``recipe.yaml`` and ``best.pt`` (``last.pt`` when no
    epoch was validated), rebuilds the data from the recipe (its targets come from the cache) and
    evaluates the checkpoint on the validation and test splits.
    """
    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.json"
    if not metrics_path.is_file():
        raise CheckpointError(f"{run_dir}: no metrics.json here; is it a gpse-dgl pretrain output directory?")
    metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    checkpoint = run_dir / "best.pt" if (run_dir / "best.pt").is_file() else run_dir / "last.pt"
    payload = ckpt.load_pretrain_checkpoint(checkpoint)
    recipe = _run_recipe(run_dir, payload)
    history = metrics.get("history") or payload.get("history") or []
    about = {"run": str(run_dir), "checkpoint": str(checkpoint), "status": metrics.get("status"),
             "epochs completed": metrics.get("epochs_completed"), "best epoch": metrics.get("best_epoch"),
             "wall time": _minutes(metrics.get("wall_time_seconds")),
             "parameters": f"{metrics.get('model', {}).get('num_parameters', 0):,}"}
    return _write(run_dir, payload, recipe["data"], recipe, history, about, log)


def report_after_run(run_dir, log=print) -> Path | None:
    """:func:`write_run_report` at the end of ``gpse-dgl pretrain``: without matplotlib the run still
    succeeds, and one line says how to get the report."""
    try:
        return write_run_report(run_dir, log=log)
    except MissingPlotLibraryError:
        log(f"report: not written (matplotlib is not installed: {MATPLOTLIB_HINT}, then "
            f"gpse-dgl report {run_dir})")
        return None


def write_checkpoint_report(checkpoint, out_dir, dataset: str | None = None, root: str | None = None,
                            max_graphs: int | None = None, log=print) -> Path:
    """Report of a pretraining checkpoint on the held-out splits of a data source.

    Parameters
    ----------
    checkpoint : path
        ``best.pt`` / ``last.pt`` of ``gpse-dgl pretrain``, or an inference export (the shipped model).
    out_dir : path
        Where ``report.html`` and its PNGs go.
    dataset : str, optional
        A ``data.source`` value (e.g. ``embedded-molecules`` or ``ogbg-molpcba``); default: the
        checkpoint's own. Another source is split as the checkpoint's recipe says (fractions, seed) and
        its validation and test splits are scored; ring-edited copies (training-only) are not added.
    root : str, optional
        ``data.root`` of an on-disk dataset.
    max_graphs : int, optional
        Seeded subset of the source before the split (fewer targets to compute).
    """
    payload = ckpt.load_pretrain_checkpoint(checkpoint)
    recipe = _checkpoint_recipe(checkpoint, payload)
    data_recipe = copy.deepcopy(recipe["data"])
    if dataset is not None and dataset != data_recipe["source"]:
        data_recipe.update(source=dataset, root=root, skeleton_edits=0.0, regular_graphs=0.0,
                           cayley_graphs=0.0)
    if max_graphs is not None:
        data_recipe.update(max_graphs=max_graphs, skeleton_edits=0.0, regular_graphs=0.0, cayley_graphs=0.0)
    history = payload.get("history") or []
    about = {"checkpoint": str(checkpoint), "data": data_recipe["source"],
             "best epoch": payload.get("best_epoch"), "epochs trained": payload.get("epoch")}
    return _write(Path(out_dir), payload, data_recipe, recipe, history, about, log)


def _run_recipe(run_dir: Path, payload: dict) -> dict:
    recipe_path = run_dir / "recipe.yaml"
    return load_pretrain_recipe(recipe_path) if recipe_path.is_file() else _checkpoint_recipe(run_dir, payload)


def _checkpoint_recipe(source, payload: dict) -> dict:
    if "recipe" not in payload:
        raise CheckpointError(f"{source}: the checkpoint holds no recipe, so its data cannot be rebuilt")
    return validate_pretrain_recipe(payload["recipe"], source=str(source))


def _write(out_dir: Path, payload: dict, data_recipe: dict, recipe: dict, history: list, about: dict,
           log) -> Path:
    _require_matplotlib()

    data = build_pretraining_data(data_recipe, log=log)
    device = resolve_device(recipe["device"])
    model = _load_model(payload).to(device)
    scaling = training_scaling(payload, data, about.get("checkpoint") or about.get("run"), data_recipe["source"],
                               log)
    held_out = {split: predict_split(model, data, split, recipe["seed"], scaling, device=device)
                for split in ("val", "test") if len(data.splits[split])}
    if not held_out:
        raise GPSEError(f"{data_recipe['source']}: no validation or test graphs to report on")
    figures = draw_figures(out_dir, data, held_out, history)
    about["held-out graphs"] = " / ".join(f"{split} {item.report['num_graphs']:,}" for split, item in held_out.items())
    path = write_html(out_dir / REPORT_NAME, figures, held_out, about)
    log(f"report: {path}")
    return path


def training_scaling(payload: dict, data, checkpoint, source: str, log) -> dict | None:
    """The ``{"mean", "std"}`` that map the model's graph outputs to raw values: the statistics of the
    graph targets it was trained on, which checkpoints carry (``graph_target_scaling``; None when it was
    trained on raw targets). Another data source's own statistics would mis-scale graph-level R^2.

    An older checkpoint without them falls back to ``data``'s statistics, with one line: exact when
    ``data`` is the checkpoint's own training data (rebuilt from its recipe), approximate otherwise.
    """
    if "graph_target_scaling" in payload:
        return payload["graph_target_scaling"]
    if data.graph_target_scaling is not None:
        log(f"report: {checkpoint} carries no statistics of its training graph targets (an older checkpoint); "
            f"graph outputs are mapped back with those of {source}'s training split")
    return data.graph_target_scaling


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingPlotLibraryError(f"matplotlib is not installed ({MATPLOTLIB_HINT}); the report "
                                      f"needs it") from None


def _load_model(payload: dict) -> torch.nn.Module:
    model = build_model(payload["model_config"], "auto")
    model.load_state_dict(payload["model_state"])
    return model.eval()


# ----------------------------------------------------------------------------------------------
# predictions


@torch.no_grad()
def predict_split(model: torch.nn.Module, data, split: str, seed: int, scaling: dict | None,
                  batch_size: int = 512, device=None) -> HeldOut:
    """Targets, predictions and R^2 report of ``data.splits[split]`` with the run's evaluation inputs.

    ``scaling`` (``{"mean", "std"}``) maps the model's graph outputs to raw values; the data's own
    ``graph_target_scaling`` maps its targets back (R^2 is scored on the raw values).
    """
    dim_in = model.encoder.dim_in
    feature_seed = derive_seed(seed, "evaluation features")
    accumulator = R2Accumulator(data.columns, data.num_node_columns)
    parts = {"node_true": [], "node_pred": [], "graph_true": [], "graph_pred": []}
    for graph, node_true, graph_true in data.splits[split].batches(batch_size):
        x = evaluation_features(graph, dim_in, feature_seed).to(device or "cpu")
        node_pred, graph_pred = (out.cpu() for out in model(graph, x))
        graph_true = _unscale(graph_true, data.graph_target_scaling)
        graph_pred = _unscale(graph_pred, scaling)
        accumulator.update(node_pred, node_true, graph_pred, graph_true, graph.batch_num_nodes())
        for key, value in zip(parts, (node_true, node_pred, graph_true, graph_pred)):
            parts[key].append(value.float().numpy())
    arrays = {key: np.concatenate(values) for key, values in parts.items()}
    return HeldOut(split, accumulator.compute(), **arrays)


def _unscale(values: torch.Tensor, scaling: dict | None) -> torch.Tensor:
    if scaling is None:
        return values
    return values * torch.as_tensor(scaling["std"]) + torch.as_tensor(scaling["mean"])


def _per_pse(report: dict) -> dict:
    return {**report["r2_per_pse"], "Overall": report["r2"]}


# ----------------------------------------------------------------------------------------------
# figures and page


def draw_figures(out_dir: Path, data, held_out: dict, history: list) -> dict:
    """Draw the report's PNGs into ``out_dir``; return ``{kind: path}`` (no curves without history)."""
    test = held_out.get("test") or next(iter(held_out.values()))
    per_pse = {split: _per_pse(item.report) for split, item in held_out.items()}
    paths = {"r2": report_figures.r2_bars(per_pse, test.report["r2_per_column"], data.columns, PAPER_TEST_R2,
                                          out_dir / FIGURE_NAMES["r2"])}
    title = (f"Predicted vs true on the {test.split} split ({test.report['num_graphs']:,} graphs; "
             f"dashed: y = x)")
    paths["scatter"] = report_figures.predicted_vs_true(scatter_panels(data, test),
                                                        out_dir / FIGURE_NAMES["scatter"], title)
    if history:
        paths["curves"] = report_figures.training_curves(history, out_dir / FIGURE_NAMES["curves"])
    return paths


def scatter_panels(data, held_out: HeldOut) -> list:
    """``(pse, true, predicted, r2, value label)`` per PSE, its columns pooled."""
    panels = []
    for name in dict.fromkeys(pse for pse, _ in data.columns):
        where = [i for i, (pse, _) in enumerate(data.columns) if pse == name]
        if where[0] < data.num_node_columns:
            true, pred = held_out.node_true[:, where], held_out.node_pred[:, where]
            label = "value (z-score in graph)"
        else:
            where = [i - data.num_node_columns for i in where]
            true, pred = held_out.graph_true[:, where], held_out.graph_pred[:, where]
            label = GRAPH_VALUE_LABELS.get(name, "value")
        panels.append((name, true.ravel(), pred.ravel(), held_out.report["r2_per_pse"][name], label))
    return panels


SECTIONS = (
    ("r2", "Held-out R<sup>2</sup> per PSE and per column",
     "R<sup>2</sup> as the paper computes it: per column, node columns within each graph and averaged "
     "over graphs; a PSE's score is the mean of its columns, Overall the mean of all columns. "
     "The paper's values are its table <code>pse_perf</code> (20 x 512 GPSE, 5 % of MolPCBA)."),
    ("scatter", "Predicted vs true on the test split",
     "Every column of a PSE pooled into one panel; many points are binned (colour = points per bin)."),
    ("curves", "Training curves",
     "Loss of the training pass (fresh random inputs every step) and of the validation split; validation "
     "R<sup>2</sup> overall and per PSE."),
)

STYLE = """
body { font-family: sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; }
td, th { border: 1px solid #ccc; padding: 0.2rem 0.6rem; text-align: right; }
td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
p.note { color: #555; font-size: 0.9rem; }
"""


def write_html(path: Path, figures: dict, held_out: dict, about: dict) -> Path:
    """``report.html`` with ``figures`` embedded as data URIs, a summary and an R^2 table (atomic write)."""
    rows = "".join(f"<tr><td>{html.escape(str(key))}</td><td>{html.escape(str(value))}</td></tr>"
                   for key, value in about.items() if value is not None)
    body = ["<h1>GPSE pretraining report</h1>", f"<table>{rows}</table>", _r2_table(held_out)]
    for kind, heading, note in SECTIONS:
        if kind in figures:
            data = base64.b64encode(Path(figures[kind]).read_bytes()).decode("ascii")
            body += [f"<h2>{heading}</h2>", f'<p class="note">{note}</p>',
                     f'<img alt="{html.escape(heading)}" src="data:image/png;base64,{data}">']
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>GPSE pretraining report</title><style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")
    atomic_write_text(path, page)
    return path


def _r2_table(held_out: dict) -> str:
    splits = list(held_out)
    per_pse = {split: _per_pse(item.report) for split, item in held_out.items()}
    header = "".join(f"<th>R<sup>2</sup> {split}</th>" for split in splits) + "<th>paper test</th>"
    lines = [f"<table><tr><th>PSE</th>{header}</tr>"]
    for name in per_pse[splits[0]]:
        cells = "".join(f"<td>{_fmt(per_pse[split].get(name))}</td>" for split in splits)
        lines.append(f"<tr><td>{html.escape(name)}</td>{cells}<td>{_fmt(PAPER_TEST_R2.get(name))}</td></tr>")
    return "".join(lines) + "</table>"


def _fmt(value) -> str:
    return "n/a" if value is None or math.isnan(float(value)) else f"{float(value):.4f}"


def _minutes(seconds) -> str | None:
    return None if seconds is None else f"{float(seconds) / 60:.1f} min"


__all__ = ["write_run_report", "report_after_run", "write_checkpoint_report", "predict_split", "draw_figures", "write_html",
           "HeldOut", "MissingPlotLibraryError", "PAPER_TEST_R2", "REPORT_NAME", "MATPLOTLIB_HINT"]
