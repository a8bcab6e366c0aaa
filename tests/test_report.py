"""Pretraining report: written by ``gpse-dgl pretrain``, self-contained, images decode; ``gpse-dgl report``."""
from __future__ import annotations

import base64
import io
import json
import re
import sys

import pytest

from gpse_dgl.cli import main

NUM_GRAPHS = 40


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A 2-epoch run of a tiny model through the CLI (writes the report at its end)."""
    root = tmp_path_factory.mktemp("report_run")
    recipe_file = root / "r.yaml"
    recipe_file.write_text(
        f"data: {{max_graphs: {NUM_GRAPHS}, cache_dir: '{root / 'cache'}', split: [0.7, 0.15, 0.15], "
        "graph_target_scaling: standardize}\n"
        "model: {dim_hidden: 8, num_layers: 1, head_hidden: 4, graph_head_hidden: 8}\n"
        "general_pipeline: {num_epochs: 2, batch_size: 16, num_threads: 1, lr_scheduler: {warmup_epochs: 1}}\n",
        encoding="utf-8")
    main(["pretrain", str(recipe_file), "--out", str(root / "run"), "--device", "cpu", "--no-progress"])
    return root / "run"


def embedded_images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([^"]+)"', page)]


def assert_self_contained_with_images(page: str, expected_images: int) -> None:
    from PIL import Image

    assert not re.search(r'(src|href)\s*=\s*"(?!data:)', page), "a link to another file or site"
    assert "<link" not in page and "<script" not in page and "http://" not in page and "https://" not in page
    images = embedded_images(page)
    assert len(images) == expected_images
    for png in images:
        image = Image.open(io.BytesIO(png))
        image.load()
        assert image.width > 300 and image.height > 200
        low, high = image.convert("L").getextrema()
        assert high - low > 100  # drawn on, not a blank canvas


def test_pretrain_writes_a_self_contained_report_with_all_figures(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert_self_contained_with_images(page, expected_images=3)  # R^2 bars, predicted vs true, curves
    for name in ("report_r2.png", "report_scatter.png", "report_curves.png"):
        assert (run_dir / name).stat().st_size > 1000


def test_report_scores_equal_the_runs_final_evaluation(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    final = json.loads((run_dir / "metrics.json").read_text())["final"]
    row = re.search(r"<tr><td>Overall</td><td>([-\d.]+)</td><td>([-\d.]+)</td>", page)
    assert row, "no Overall row in the R^2 table"
    assert float(row.group(1)) == pytest.approx(final["val"]["r2"], abs=6e-5)
    assert float(row.group(2)) == pytest.approx(final["test"]["r2"], abs=6e-5)


def test_report_command_recreates_it_for_a_run_and_for_a_checkpoint(run_dir, tmp_path, capsys):
    (run_dir / "report.html").unlink()
    main(["report", str(run_dir)])
    assert_self_contained_with_images((run_dir / "report.html").read_text(encoding="utf-8"), 3)
    # an inference export has no history: no training curves
    from gpse_dgl.utils.checkpoint import export_inference_checkpoint

    export = export_inference_checkpoint(run_dir / "best.pt", tmp_path / "small.pt")
    main(["report", "--checkpoint", str(export), "--out", str(tmp_path / "out")])
    assert_self_contained_with_images((tmp_path / "out" / "report.html").read_text(encoding="utf-8"), 2)
    assert f"report: {tmp_path / 'out' / 'report.html'}" in capsys.readouterr().out


def test_report_command_usage_errors(tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["report"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path)])  # no metrics.json
    assert exit_info.value.code == 2


def test_missing_matplotlib_leaves_one_line_and_no_failure(run_dir, monkeypatch):
    from gpse_dgl.train.pretraining.report import report_after_run

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    lines = []
    assert report_after_run(run_dir, log=lines.append) is None
    assert len(lines) == 1 and "pip install matplotlib" in lines[0] and f"gpse-dgl report {run_dir}" in lines[0]


def test_a_report_on_other_graphs_maps_graph_outputs_back_with_the_training_statistics(run_dir, tmp_path,
                                                                                       monkeypatch, capsys):
    """`report --checkpoint X --dataset OTHER` (here: other graphs of the source) takes the statistics the
    model was trained with from the checkpoint, not those of the other graphs; an older checkpoint without
    them falls back to the other graphs' own, with one line."""
    import torch

    from gpse_dgl.train.pretraining import report
    from gpse_dgl.utils.checkpoint import export_inference_checkpoint, load_pretrain_checkpoint, save_checkpoint

    used = []
    real = report.predict_split

    def spy(model, data, split, seed, scaling, **kwargs):
        used.append((scaling, data.graph_target_scaling))
        return real(model, data, split, seed, scaling, **kwargs)

    monkeypatch.setattr(report, "predict_split", spy)
    export = export_inference_checkpoint(run_dir / "best.pt", tmp_path / "small.pt")
    trained = load_pretrain_checkpoint(export)["graph_target_scaling"]
    assert trained is not None
    other = ["--dataset", "embedded-molecules", "--max-graphs", str(2 * NUM_GRAPHS)]
    main(["report", "--checkpoint", str(export), *other, "--out", str(tmp_path / "new")])
    assert "carries no statistics" not in capsys.readouterr().out
    scaling, theirs = used[-1]
    assert torch.equal(scaling["mean"], trained["mean"]) and torch.equal(scaling["std"], trained["std"])
    assert not torch.equal(theirs["mean"], trained["mean"])  # the other graphs' statistics differ

    old = load_pretrain_checkpoint(export)
    del old["graph_target_scaling"]
    save_checkpoint(tmp_path / "old.pt", old)
    main(["report", "--checkpoint", str(tmp_path / "old.pt"), *other, "--out", str(tmp_path / "old")])
    lines = [line for line in capsys.readouterr().out.splitlines() if "carries no statistics" in line]
    assert len(lines) == 1 and "older checkpoint" in lines[0]
    assert used[-1][0] is used[-1][1]  # fell back to the other graphs' own
