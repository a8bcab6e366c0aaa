"""MoleculeACE: the loader on the wheel's layout, the real split sizes, cliff RMSE, the recipe, the benchmark."""
from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gpse_dgl.cli import main as cli_main
from gpse_dgl.data import moleculeace
from gpse_dgl.data.dataset import GraphDataset
from gpse_dgl.data.registry import load_dataset
from gpse_dgl.utils.errors import DatasetNotFoundError, GPSEError

from _benchmarks import load_benchmark

REPO = Path(__file__).resolve().parent.parent
WHEEL = REPO / "tests" / "fixtures" / "datasets" / "moleculeace-wheel"  # MoleculeACE/Data/benchmark_data/*.csv
FIXTURE_CSV = WHEEL / "MoleculeACE" / "Data" / "benchmark_data" / "CHEMBL2835_Ki.csv"


@pytest.fixture
def wheel(monkeypatch):
    """The fixture package first on sys.path: the loader finds its files as it finds the installed wheel's."""
    monkeypatch.syspath_prepend(str(WHEEL))
    assert "MoleculeACE" not in sys.modules  # located, never imported
    return WHEEL


@pytest.fixture
def no_wheel(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "MoleculeACE" else real(name, *a))


def test_loader_reads_the_wheel_layout(wheel, tmp_path):
    data = load_dataset("moleculeace:chembl2835_ki", root=tmp_path)  # names match case-insensitively
    rows = FIXTURE_CSV.read_text().splitlines()[1:]
    split = [r.rsplit(",", 1)[1] for r in rows]
    cliff = [int(r.rsplit(",", 2)[1]) for r in rows]
    assert data.name == "moleculeace:CHEMBL2835_Ki" and data.metric == "rmse" and data.task_type == "regression"
    assert len(data) == len(rows) == 32 and data.info["source"].startswith(str(wheel))
    assert data.splits["test"].tolist() == [i for i, s in enumerate(split) if s == "test"]
    train_val = sorted(data.splits["train"].tolist() + data.splits["val"].tolist())
    assert train_val == [i for i, s in enumerate(split) if s == "train"]
    assert data.groups["cliff"].tolist() == [c == 1 for c in cliff]
    # a tenth of each cliff class of train (12 + 12 rows): one of each
    assert data.groups["cliff"][data.splits["val"]].tolist().count(True) == 1 and len(data.splits["val"]) == 2
    assert torch.allclose(data.labels[:, 0], torch.tensor([float(r.split(",")[2]) for r in rows]))
    assert data.graphs[0].ndata["feat"].shape[1] == 9 and data.graphs[0].edata["feat"].shape[1] == 3
    subset = data.subset("test")
    assert subset.groups["cliff"].tolist() == data.groups["cliff"][data.splits["test"]].tolist()


def test_validation_draw_is_seeded(wheel, tmp_path):
    first, again = (load_dataset("moleculeace:CHEMBL2047_EC50", root=tmp_path, seed=3) for _ in range(2))
    other = load_dataset("moleculeace:CHEMBL2047_EC50", root=tmp_path, seed=4)
    assert torch.equal(first.splits["val"], again.splits["val"])
    assert not torch.equal(first.splits["val"], other.splits["val"])


def test_a_copy_under_the_root_comes_first(no_wheel, tmp_path):
    (tmp_path / "moleculeace").mkdir()
    shutil.copy(FIXTURE_CSV, tmp_path / "moleculeace" / "CHEMBL2835_Ki.csv")
    assert len(load_dataset("moleculeace:CHEMBL2835_Ki", root=tmp_path)) == 32


def test_missing_package_names_the_install_command(no_wheel, tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("moleculeace:CHEMBL234_Ki", root=tmp_path)
    message = str(info.value)
    assert "pip install --no-deps moleculeace" in message and "\n" not in message


def test_suite_name_and_unknown_target_are_one_line_errors(wheel, tmp_path):
    with pytest.raises(GPSEError, match="suite of 30 targets: name one, e.g. moleculeace:CHEMBL234_Ki"):
        load_dataset("moleculeace", root=tmp_path)
    with pytest.raises(GPSEError, match="no target 'CHEMBL1_Ki'"):
        load_dataset("moleculeace:CHEMBL1_Ki", root=tmp_path)
    with pytest.raises(GPSEError, match="not a target name"):
        load_dataset("moleculeace:aspirin", root=tmp_path)


def test_malformed_file_names_it(no_wheel, tmp_path):
    (tmp_path / "moleculeace").mkdir()
    (tmp_path / "moleculeace" / "CHEMBL2835_Ki.csv").write_text("smiles,y\nCCO,1.0\n")
    with pytest.raises(GPSEError, match="CHEMBL2835_Ki.csv: expected the columns"):
        load_dataset("moleculeace:CHEMBL2835_Ki", root=tmp_path)


def test_real_split_sizes_of_one_target():
    if importlib.util.find_spec("MoleculeACE") is None:
        pytest.skip("pip install --no-deps moleculeace")
    data = load_dataset("moleculeace:CHEMBL234_Ki")
    # the published file: 3,657 molecules, 2,924 train (1,284 cliff) / 733 test (320 cliff)
    assert len(data) == 3657 and len(data.splits["test"]) == 733
    assert len(data.splits["val"]) == round(0.1 * 1284) + round(0.1 * 1640) == 292
    assert len(data.splits["train"]) == 2924 - 292
    assert int(data.groups["cliff"][data.splits["test"]].sum()) == 320


def test_cliff_rmse_by_hand():
    y_true, y_pred, cliff = [1.0, 2.0, 3.0, 4.0, 5.0], [1.5, 0.0, 3.0, 1.0, 5.0], [1, 0, 1, 1, 0]
    # cliff members 0, 2, 3: errors 0.5, 0, 3 -> sqrt((0.25 + 0 + 9) / 3)
    assert moleculeace.cliff_rmse(y_true, y_pred, cliff) == pytest.approx(math.sqrt(9.25 / 3))
    assert math.isnan(moleculeace.cliff_rmse(y_true, y_pred, [0] * 5))


def test_training_scores_each_group_on_its_members(tmp_path):
    """A group of every graph scores as the whole split; an empty group is NaN."""
    from gpse_dgl.train.downstream import train_downstream
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    base = load_dataset("huuskonen-solubility", root=REPO / "tests" / "fixtures" / "datasets")
    everything = torch.ones(len(base), dtype=torch.bool)
    data = GraphDataset(graphs=base.graphs, labels=base.labels, splits=base.splits, name="groups",
                        task_type="regression", metric="rmse", node_feat_key="feat", edge_feat_key="feat",
                        groups={"all": everything, "none": ~everything}, info=base.info)
    recipe = load_downstream_recipe(REPO / "recipes" / "downstream" / "moleculeace.yaml", [
        "model.pe.source=none", "model.num_layers=1", "general_pipeline.num_epochs=2",
        f"general_pipeline.save_path={tmp_path / 'run'}", f"data.cache_dir={tmp_path / 'cache'}"])
    summary = train_downstream(recipe, seeds=1, progress=False, dataset=data)
    run = summary["runs"][0]
    assert run["test_all"] == run["test"] and run["val_all"] == run["val"]
    assert math.isnan(run["test_none"])
    assert set(summary["summary"]) == {"train", "val", "test", "val_all", "test_all", "val_none", "test_none"}


def test_recipe_one_short_epoch_reports_test_and_cliff_rmse(wheel, tmp_path, capsys):
    try:
        cli_main(["train", str(REPO / "recipes" / "downstream" / "moleculeace.yaml"),
                  "--set", "data.name=moleculeace:CHEMBL2835_Ki", "--set", "model.pe.source=GPSE",
                  "--set", f"data.root={tmp_path / 'data'}", "--set", f"data.cache_dir={tmp_path / 'cache'}",
                  "--set", "general_pipeline.num_epochs=1", "--seeds", "1", "--device", "cpu",
                  "--out", str(tmp_path / "run"), "--no-progress"])
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "| test (cliff) |" in out
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    run = results["runs"][0]
    assert results["metric"] == "rmse" and run["test"] > 0 and run["test_cliff"] > 0
    assert results["summary"]["test_cliff"]["mean"] == run["test_cliff"]


def test_sign_test_and_paired_differences():
    script, stats = load_benchmark("moleculeace"), load_benchmark("_stats")
    assert stats.sign_test([-1, -2, -0.5, -1, 3]) == (4, 1, pytest.approx(2 * 6 / 32))
    assert stats.sign_test([0.0, 0.0]) == (0, 0, 1.0)
    t, p = stats.paired_t([-1, -2, -0.5, -1, 3])  # scipy.stats.ttest_rel's figures for these differences
    assert t == pytest.approx(-0.3487, abs=1e-4) and p == pytest.approx(0.7449, abs=1e-4)
    assert stats.paired_t([-0.1, -0.1]) == (float("-inf"), 0.0) and stats.paired_t([0.0, 0.0]) == (0.0, 1.0)
    cells = {"a": {"t1": (0.5, 0.9, 1), "t2": (0.7, 1.0, 1)}, "b": {"t1": (0.6, 0.8, 1), "t2": (0.9, 1.2, 1)}}
    diff = script.paired(cells, "a", "b", ["t1", "t2", "t3"])
    assert diff["targets"] == 2 and diff["mean"] == pytest.approx(-0.15) and diff["arm_better"] == 2
    cliff = script.paired(cells, "a", "b", ["t1", "t2"], column=1)
    assert cliff["mean"] == pytest.approx(-0.05) and (cliff["arm_better"], cliff["other_better"]) == (1, 1)


def test_svr_on_precomputed_distances_matches_the_rbf_svr():
    from sklearn.svm import SVR

    svr = load_benchmark("_svr")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 5)), rng.normal(size=40)
    train, test = np.arange(30), np.arange(30, 40)
    kernel = np.exp(-0.1 * svr.squared_distances(x))
    ours = svr._fit_predict(kernel, y, train, test, 10.0)
    theirs = SVR(kernel="rbf", gamma=0.1, C=10.0, epsilon=svr.EPSILON).fit(x[train], y[train]).predict(x[test])
    assert np.abs(ours - theirs).max() < 2e-3  # libsvm stops at tol 1e-3: two kernel forms, two stopping points
    assert np.abs(ours - theirs).max() < 0.01 * np.abs(theirs - y[train].mean()).max()


def test_benchmark_quick_path_fills_the_ledger_and_resumes(wheel, tmp_path, capsys):
    script = load_benchmark("moleculeace")
    ledger = tmp_path / "ledger.json"
    argv = ["--quick", "--set", f"data.root={tmp_path / 'data'}", "--set", f"data.cache_dir={tmp_path / 'cache'}",
            "--threads", "1", "--ledger", str(ledger), "--out", str(tmp_path / "out"),
            "--figures", str(tmp_path / "figures")]
    script.main(argv)
    runs = json.loads(ledger.read_text())["runs"]
    arms = ("ecfp-svm", "gpse-svm[mean]", "ecfp+gpse-svm[mean,w=1]", "gine-none", "gine-GPSE")
    assert sorted(runs) == sorted(f"{t}/{a}/seed0" for t in script.QUICK_TARGETS for a in arms)
    assert all(r["rmse"] > 0 and r["cliff_rmse"] > 0 for r in runs.values())
    out = capsys.readouterr().out
    assert "## design targets (2)" in out and "gine-GPSE − gine-none" in out
    summary = json.loads((tmp_path / "out" / "moleculeace_summary.json").read_text())
    assert set(summary["sets"]["design"]["arms"]) == set(arms)
    assert (tmp_path / "figures" / "moleculeace_design.png").is_file()
    script.main(argv)  # everything is in the ledger: nothing runs again
    assert json.loads(ledger.read_text())["runs"] == runs


DESIGN, REPORT = ("CHEMBL1862_Ki", "CHEMBL2047_EC50"), "CHEMBL214_Ki"
SVR_SETTINGS = {"pooling": "mean", "weight": 1.0, "checkpoint": None}


def _grid_plan(script, ledger):
    return script.plan_runs(["gine-none", "gine-RWSE"], [REPORT], 2, SVR_SETTINGS, [], None, ledger, grid=True,
                            design_targets=DESIGN)


def _record(item, val):
    key, budget, target, method, seed, _ = item
    return {"budget": budget, "target": target, "method": method, "arm": key.split("/")[1], "seed": seed,
            "rmse": 1.0, "cliff_rmse": 1.0, "val": val, "seconds": 0.0, "host": "test"}


def test_grid_settings_are_chosen_on_the_design_targets_validation_only(tmp_path):
    script = load_benchmark("moleculeace")
    ledger = script.Ledger(tmp_path / "ledger.json")
    plan = _grid_plan(script, ledger)
    settings = ["linear in 0", "linear in 0.5", "mlp in 0", "mlp in 0.5"]
    tuning = [f"{t}/gine-RWSE|{s}/seed0" for s in settings for t in DESIGN]
    assert [item[0] for item in plan] == tuning + [f"{REPORT}/gine-none/seed0", f"{REPORT}/gine-none/seed1"]
    assert plan.waiting == 1 and plan.chosen == {"gine-none": "-"}
    vals = {"linear in 0": 0.9, "linear in 0.5": 0.8, "mlp in 0": 0.7, "mlp in 0.5": None}  # None: diverged
    for item in plan[:-2]:
        ledger.add(item[0], _record(item, vals[item[0].split("|")[1].split("/")[0]]))
    ledger.add(f"{REPORT}/gine-RWSE|linear in 0/seed0", {**_record(plan[0], 0.01), "target": REPORT})  # never read
    plan = _grid_plan(script, ledger)
    assert plan.waiting == 0 and plan.chosen == {"gine-none": "-", "gine-RWSE": "mlp in 0"}
    assert plan.grid["gine-RWSE"]["mlp in 0.5"] == math.inf
    assert [item[0] for item in plan[len(tuning):]] == [
        f"{REPORT}/gine-none/seed0", f"{REPORT}/gine-RWSE|mlp in 0/seed0", f"{REPORT}/gine-none/seed1",
        f"{REPORT}/gine-RWSE|mlp in 0/seed1"]
    cells = {"gine-none": {REPORT: (1.0, 1.0, 2)}, "gine-RWSE|mlp in 0": {REPORT: (0.5, 0.6, 2)},
             "gine-RWSE|linear in 0": {REPORT: (0.1, 0.1, 1)}}
    assert script.arm_cells(cells, plan) == {"gine-none": {REPORT: (1.0, 1.0, 2)},
                                             "gine-RWSE": {REPORT: (0.5, 0.6, 2)}}
    assert "| gine-RWSE | mlp in 0 | 0.7000 | chosen |" in script.grid_markdown(plan)


def test_one_process_tunes_then_runs_the_choice_and_a_worker_says_what_waits(tmp_path, monkeypatch):
    script = load_benchmark("moleculeace")
    monkeypatch.setattr(script, "run_one", lambda item, ledger, *a, **k: ledger.add(item[0], _record(
        item, 0.5 if "|" not in item[0] else {"linear": 0.4, "mlp": 0.6}[item[0].split("|")[1].split()[0]])))
    ledger = script.Ledger(tmp_path / "one.json")
    script.run_all(lambda: _grid_plan(script, ledger), ledger, tmp_path, SVR_SETTINGS, None, log=lambda m: None)
    plan = _grid_plan(script, ledger)
    assert plan.chosen["gine-RWSE"] in ("linear in 0", "linear in 0.5") and not script.pending(plan, ledger)
    assert sum(f"{REPORT}/gine-RWSE|" in key for key in ledger.runs) == 2
    lines, worker = [], script.Ledger(tmp_path / "worker.json")
    script.run_all(lambda: _grid_plan(script, worker), worker, tmp_path, SVR_SETTINGS, None, worker=(1, 2),
                   log=lines.append)
    assert len(worker.runs) == 5  # every other of the 8 tuning runs and 2 none runs
    assert lines == [f"1 arm(s) wait for tuning runs not in {worker.path}: join the workers' ledgers (--merge) and "
                     f"run again"]
