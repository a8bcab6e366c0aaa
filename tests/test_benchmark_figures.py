"""Benchmark figures: the plotting helpers of benchmarks/_figures.py on synthetic numbers, er_scaling end to end."""
from __future__ import annotations

import math
import pathlib
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _figures  # noqa: E402


def assert_png(path, width=800):
    from PIL import Image

    image = Image.open(path)
    image.load()
    assert image.width == width and image.height > 200
    low, high = image.convert("L").getextrema()
    assert high - low > 100


def test_speed_bars_draws_rows_and_one_peak_line_per_precision(tmp_path, capsys, monkeypatch):
    rows = [{"label": "ours", "precision": "fp32", "throughput": 41.5, "peak": 120.0},
            {"label": "ours", "precision": "bf16", "throughput": 70.0, "peak": 240.0},
            {"label": "PyG", "precision": "fp32", "throughput": 22.0, "peak": 120.0}]
    drawn = []
    monkeypatch.setattr(_figures, "save", lambda fig, path: drawn.append(fig) or _save(fig, path))
    path = _figures.speed_bars(rows, tmp_path / "speed.png", "Encoding speed (synthetic)", "GFLOP/s")
    assert_png(path)
    assert f"figure: {path}" in capsys.readouterr().out
    ax = drawn[0].axes[0]
    assert [round(bar.get_height(), 1) for bar in ax.patches] == [41.5, 70.0, 22.0]
    peaks = sorted(line.get_ydata()[0] for line in ax.get_lines())
    assert peaks == [120.0, 240.0]
    assert ax.get_ylabel() == "throughput (GFLOP/s)"


_save = _figures.save


def test_fitted_slope_recovers_power_laws():
    sizes = [100, 300, 1000, 3000]
    assert _figures.fitted_slope(sizes, [2e-9 * n ** 3 for n in sizes]) == pytest.approx(3.0)
    assert _figures.fitted_slope(sizes, [5e-4 * n for n in sizes]) == pytest.approx(1.0)
    assert math.isnan(_figures.fitted_slope([100], [1.0]))


def test_bars_with_errors_and_loglog_write_pngs(tmp_path):
    bars = _figures.bars_with_errors(["none", "GPSE"], [("ours, test", [10.0, 95.0], [0.0, 2.5])],
                                     tmp_path / "bars.png", "title", "accuracy (%)",
                                     reference=("paper, test", [10.0, math.nan]))
    assert_png(bars)
    loglog = _figures.loglog_with_slopes({"a": ([10, 100], [1.0, 100.0])}, tmp_path / "loglog.png", "title",
                                         "nodes", "seconds")
    assert_png(loglog)


def test_curves_by_epoch_draw_one_colour_per_run_and_one_style_per_split(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(_figures, "save", lambda fig, path: drawn.append(fig) or _save(fig, path))
    runs = {"before": {"val": [(1, 1.2), (2, 0.9), (3, 2.5)], "train": [(1, 1.2), (2, 0.6), (3, 0.5)]},
            "after": {"val": [(1, 1.2), (2, 0.4), (3, 0.3)], "train": [(1, 1.2), (2, 0.5), (3, 0.4)]}}
    path = _figures.curves_by_epoch(runs, tmp_path / "curves.png", "title", "MAE", log_y=True)
    assert_png(path)
    lines = drawn[0].axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["before, val", "before, train", "after, val", "after, train"]
    assert [line.get_linestyle() for line in lines] == ["-", "--", "-", "--"]
    assert lines[0].get_color() == lines[1].get_color() != lines[2].get_color()
    assert list(lines[2].get_ydata()) == [1.2, 0.4, 0.3] and drawn[0].axes[0].get_yscale() == "log"


def test_er_scaling_runs_on_tiny_sizes(tmp_path, capsys):
    sys.path.insert(0, str(BENCHMARKS))
    import er_scaling

    figure = tmp_path / "er.png"
    er_scaling.main(["--sizes", "20,40", "--nodes-per-size", "40", "--no-paper-size", "--repeats", "1",
                     "--threads", "1", "--figure", str(figure)])
    from gpse_dgl.encode.models import DEFAULT_MODEL, get_model

    shipped = get_model(DEFAULT_MODEL)
    out = capsys.readouterr().out
    assert "5 PSEs (dense)" in out and "3 PSEs (sparse path)" in out
    assert f"{shipped.num_layers} x {shipped.dim_hidden} (shipped), fp32" in out
    assert_png(figure)


def test_score_bars_of_a_sweep_show_every_source_with_the_papers_value(tmp_path, monkeypatch):
    import run_downstream_sweep

    def summary(train, test):
        return {"num_runs": 5, "summary": {"train": {"mean": train, "std": 0.01}, "test": {"mean": test, "std": 0.02}}}

    by_source = {"none": summary(0.1, 0.1), "random": summary(0.12, 0.11), "GPSE": summary(0.99, None)}
    drawn = []
    monkeypatch.setattr(_figures, "save", lambda fig, path: drawn.append(fig) or _save(fig, path))
    path = run_downstream_sweep.plot_scores(by_source, tmp_path / "csl.png", "CSL", "accuracy (%)",
                                            splits=("train", "test"), percent=True,
                                            paper={"none": "10.0 ± 0.0", "GPSE": "42.9 ± 7.9"})
    assert_png(path)
    ax = drawn[0].axes[0]
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["none", "rand", "GPSE"]
    heights = [round(bar.get_height(), 6) for bar in ax.patches]
    assert heights[:3] == [10.0, 12.0, 99.0] and heights[3:5] == [10.0, 11.0] and math.isnan(heights[5])
