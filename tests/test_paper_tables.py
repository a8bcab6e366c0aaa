"""benchmarks/paper_tables.py: seed-major runs into a ledger, resuming from it, tables with paired gaps."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from _benchmarks import load_benchmark

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "datasets"


def _script():
    return load_benchmark("paper_tables")


def test_runs_land_in_the_ledger_and_a_second_call_resumes_from_it(tmp_path, capsys):
    shutil.copytree(FIXTURES / "huuskonen-solubility", tmp_path / "data" / "huuskonen-solubility")
    ledger = tmp_path / "ledger.json"
    argv = ["--tables", "solubility", "--sources", "none,RWSE,GPSE", "--seeds", "2", "--epochs", "1",
            "--set", "model.num_layers=1", "--set", f"data.root={tmp_path / 'data'}",
            "--set", f"data.cache_dir={tmp_path / 'cache'}", "--threads", "1", "--ledger", str(ledger),
            "--out", str(tmp_path / "out"), "--figures", str(tmp_path / "figures")]
    script = _script()
    script.main(argv)
    runs = json.loads(ledger.read_text())["runs"]
    assert sorted(runs) == sorted(f"solubility/gine/{s}/seed{k}" for s in ("none", "RWSE", "GPSE") for k in (0, 1))
    assert all(r["metric"] == "rmse" and r["test"] > 0 and r["epochs"] == 1 for r in runs.values())
    assert len({r["budget"] for r in runs.values() if r["source"] == "none"}) == 1
    table = capsys.readouterr().out
    assert "## solubility" in table
    assert "| GPSE |" in table and "vs RWSE (2)" in table and "Budget: 1 epochs" in table
    assert (tmp_path / "figures" / "paper_solubility.png").is_file()

    script.main(argv)  # everything is in the ledger: nothing is trained again
    assert json.loads(ledger.read_text())["runs"] == runs
    capsys.readouterr()
    script.main(argv[:6] + ["--epochs", "2"] + argv[8:] + ["--report-only"])  # another budget: no rows yet
    assert "## solubility" not in capsys.readouterr().out


def test_paired_gap_uses_the_best_explicit_encoding_seed_by_seed():
    script = _script()

    def runs(*tests):
        return [{"seed": k, "test": t} for k, t in enumerate(tests)]

    cells = {"GPSE": runs(0.10, 0.12), "RWSE": runs(0.11, 0.15), "LapPE": runs(0.20, 0.21), "none": runs(0.3, 0.3)}
    best, mean, std, pairs = script.paired_gap(cells)
    assert best == "RWSE" and pairs == 2
    assert abs(mean - (-0.02)) < 1e-12 and abs(std - 0.01) < 1e-12
