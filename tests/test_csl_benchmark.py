"""``benchmarks/csl.py``: a one-fold, one-epoch smoke run and its ``--gpse-samples`` override."""
from __future__ import annotations

import json

from _benchmarks import load_benchmark


def test_one_fold_with_averaged_gpse_draws(tmp_path, capsys):
    out = tmp_path / "csl"
    load_benchmark("csl").main(["--checkpoint", "quickstart", "--sources", "GPSE", "--repeats", "1", "--folds", "1",
                                "--epochs", "1", "--gpse-samples", "2", "--device", "cpu", "--no-progress",
                                "--out", str(out), "--figure", str(tmp_path / "csl.png")])
    text = (out / "csl.md").read_text()
    assert "| GIN+GPSE |" in text and "2 random-input draw(s) averaged per encoding" in text
    recipe = (out / "runs" / "csl" / "GPSE" / "recipe.yaml").read_text()
    assert "gpse_samples: 2" in recipe
    results = json.loads((out / "csl.json").read_text())
    assert results and "written:" in capsys.readouterr().out
