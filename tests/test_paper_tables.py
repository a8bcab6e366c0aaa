"""benchmarks/paper_tables.py: seed-major runs into a ledger, resuming from it, tables with paired gaps."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

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
    assert "| GPSE |" in table and "vs RWSE (2; " in table and "Budget: 1 epochs" in table
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
    gap = script.paired_gap(cells)
    assert gap["other"] == "RWSE" and gap["pairs"] == 2 and (gap["wins"], gap["losses"]) == (2, 0)
    assert abs(gap["mean"] - (-0.02)) < 1e-12 and abs(gap["std"] - 0.01) < 1e-12
    assert gap["sign_p"] == 0.5 and gap["t_p"] == pytest.approx(0.2952, abs=1e-4)  # t = -2 on 1 df
    runs = [{"column": "gcn", "source": "RWSE", "seed": k, "best_epoch": b, "epochs": 15} for k, b in enumerate((3, 4, 15))]
    assert script.early_best_line(runs) == ("Best validation epoch in the first fifth of the schedule: 1 of 3 runs "
                                            "(gcn/RWSE/seed0 at 3/15).")
    by_epoch = lambda *v: dict(enumerate(v, start=1))  # noqa: E731
    curves = {0: (by_epoch(0.5, 0.4, 0.3, *[0.6] * 12), by_epoch(0.6, 0.5, 0.35, *[0.9] * 12))}  # diverges after 3
    assert script.early_best_line(runs, lambda run: curves.get(run["seed"])) == (
        "Best validation epoch in the first fifth of the schedule: 1 of 3 runs (gcn/RWSE/seed0 at 3/15: validation "
        "0.350 there, 0.900 at epoch 15; training 0.300 there, 0.600 at epoch 15).")
    assert script.gap_text(gap) == "-0.0200 ± 0.0100 vs RWSE (2; 2-0, sign p 0.5, t p 0.3)"
    # another encoder's row gets its own paired rows
    cells["GPSE:moses"] = [{"seed": k, "test": t} for k, t in enumerate((0.12, 0.14))]
    assert script.paired_gap(cells, gpse="GPSE:moses")["mean"] == pytest.approx(0.0)
    table = script.markdown("solubility", {"gine": cells})
    assert "| GPSE − best explicit" in table and "| GPSE:moses − best explicit" in table
    assert "+0.0000 ± 0.0100 vs RWSE (2; 1-1," in table
    assert "| GPSE:moses − GPSE (paired" in table and "+0.0200 ± 0.0000 vs GPSE (2; 0-2," in table


def _plan(script, sources=("none", "RWSE", "GPSE")):
    return [("solubility", "gine", source, {"seed": 0, "source": source}) for source in sources]


def test_workers_share_the_pending_runs_without_overlap_and_in_seed_major_order(tmp_path, monkeypatch):
    script = _script()
    monkeypatch.setattr(script, "budget_key", lambda recipe: "b")
    ledger = script.Ledger(tmp_path / "ledger.json")
    ledger.add("solubility/gine/none/seed0", {"budget": "b"})  # finished: nobody runs it again
    ledger.add("solubility/gine/RWSE/seed0", {"budget": "old"})  # another budget: pending
    plan = _plan(script)
    everything = [(seed, source) for seed, _, _, source, _ in script.pending_runs(plan, range(2), ledger)]
    assert everything == [(0, "RWSE"), (0, "GPSE"), (1, "none"), (1, "RWSE"), (1, "GPSE")]
    shares = [[(seed, source) for seed, _, _, source, _ in script.pending_runs(plan, range(2), ledger, (i, 3))]
              for i in range(3)]
    assert shares == [[(0, "RWSE"), (1, "RWSE")], [(0, "GPSE"), (1, "GPSE")], [(1, "none")]]
    assert sorted(sum(shares, [])) == sorted(everything)


def test_merge_takes_what_the_ledger_lacks_and_keeps_what_it_has(tmp_path):
    script = _script()
    main, other = script.Ledger(tmp_path / "main.json"), script.Ledger(tmp_path / "other.json")
    main.add("t/c/none/seed0", {"budget": "b", "test": 1.0})
    other.add("t/c/none/seed0", {"budget": "b", "test": 2.0})  # same run elsewhere: ours stays
    other.add("t/c/none/seed1", {"budget": "b", "test": 3.0})
    other.add("t/c/GPSE/seed0", {"budget": "new", "test": 4.0})
    assert main.merge(other) == 2
    assert main.merge(other) == 0
    stored = json.loads((tmp_path / "main.json").read_text())["runs"]
    assert {k: r["test"] for k, r in stored.items()} == {"t/c/none/seed0": 1.0, "t/c/none/seed1": 3.0,
                                                         "t/c/GPSE/seed0": 4.0}


def test_a_killed_sweeps_worker_ledgers_are_joined_before_a_new_pass_removes_them(tmp_path):
    """--processes N unlinks its worker ledgers at the end of each pass; those of a sweep killed mid-pass (any
    N) are joined first when it starts again, and an unreadable one is named and kept, never deleted unread."""
    ledger_module = load_benchmark("_ledger")
    main = ledger_module.Ledger(tmp_path / "sweep.json")
    main.add("t/c/none/seed0", {"budget": "b", "test": 1.0})
    for index, key in enumerate(("t/c/none/seed1", "t/c/RWSE/seed0", "t/c/GPSE/seed0")):
        ledger_module.Ledger(tmp_path / f"sweep.worker{index}.json").add(key, {"budget": "b", "test": 2.0})
    (tmp_path / "sweep.worker3.json").write_text('{"runs": {"t/c/none/seed2": {"bud')  # killed mid-write
    lines = []
    assert ledger_module.recover_worker_ledgers(main, lines.append) == 3
    assert sorted(main.runs) == ["t/c/GPSE/seed0", "t/c/RWSE/seed0", "t/c/none/seed0", "t/c/none/seed1"]
    assert sorted(json.loads((tmp_path / "sweep.json").read_text())["runs"]) == sorted(main.runs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.json", "sweep.worker3.json"]
    assert lines[-1].startswith(f"ledger {tmp_path / 'sweep.worker3.json'} is not valid JSON") and \
        lines[-1].endswith("; left in place")


def test_worker_argument_is_checked():
    script = _script()
    assert script.parse_worker("2/3") == (2, 3)
    for bad in ("3/3", "-1/2", "1", "a/b", "0/0"):
        try:
            script.parse_worker(bad)
        except SystemExit as exc:
            assert "--worker expects I/N" in str(exc)
        else:
            raise AssertionError(bad)


def test_a_gpse_cell_is_budgeted_by_its_encoder_file(tmp_path):
    """Two encoders never share a cell (the default model changes between releases); the same file under
    another name or path does."""
    from gpse_dgl.encode.models import DEFAULT_MODEL, get_model, model_path
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    script = _script()

    def budget(source, checkpoint=None):
        overrides = [f"model.pe.source={source}"] + ([f"model.pe.checkpoint={checkpoint}"] if checkpoint else [])
        return script.budget_key(load_downstream_recipe(REPO / "recipes" / "downstream" / "csl.yaml", overrides))

    default = model_path(get_model(DEFAULT_MODEL))
    copy = tmp_path / "copy.pt"
    shutil.copyfile(default, copy)
    assert budget("GPSE") == budget("GPSE", DEFAULT_MODEL) == budget("GPSE", copy)
    assert budget("GPSE", "quickstart") != budget("GPSE")
    copy.write_bytes(model_path(get_model("quickstart")).read_bytes())  # the same path, another encoder
    assert budget("GPSE", copy) == budget("GPSE", "quickstart")


def _report_argv(tmp_path, ledger, *extra):
    return ["--tables", "solubility", "--sources", "none,GPSE", "--epochs", "1", "--ledger", str(ledger),
            "--out", str(tmp_path / "out"), "--figures", str(tmp_path / "figures"), *extra]


def _error(script, argv) -> str:
    try:
        script.main(argv)
    except SystemExit as exc:
        return str(exc.code)
    raise AssertionError(f"no error for {argv}")


def test_unusable_ledgers_give_one_line_naming_the_file(tmp_path):
    """Empty, truncated or ``{}`` ledgers, as --ledger or --merge, stop the script with one line and leave
    the ledger as it was; a missing --merge file is an error too, not "0 run(s) taken"."""
    script = _script()
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"about": "x", "runs": {}}))
    bad = {"empty.json": ("", "is empty"), "cut.json": ('{"runs": {"solubility/gine/none/seed0": {"bud',
                                                         "is not valid JSON (truncated?"),
           "object.json": ("{}", "has no 'runs' object"), "list.json": ("[1, 2]", "has no 'runs' object"),
           "record.json": ('{"runs": {"k": {"budget": "b"}}}', "run 'k' lacks 'table'")}
    for name, (text, expected) in bad.items():
        (tmp_path / name).write_text(text)
        for argv in (_report_argv(tmp_path, tmp_path / name, "--report-only"),
                     _report_argv(tmp_path, good, "--merge", str(tmp_path / name), "--report-only")):
            message = _error(script, argv)
            assert message.startswith(f"error: ledger {tmp_path / name} {expected}") or \
                message.startswith(f"error: ledger {tmp_path / name}: {expected}"), message
            assert "\n" not in message
        assert (tmp_path / name).read_text() == text
    assert json.loads(good.read_text())["runs"] == {}
    message = _error(script, _report_argv(tmp_path, good, "--merge", str(tmp_path / "absent.json"), "--report-only"))
    assert message == f"error: no ledger at {tmp_path / 'absent.json'}"
    message = _error(script, _report_argv(tmp_path, tmp_path / "absent.json", "--report-only"))
    assert message.startswith(f"error: no ledger at {tmp_path / 'absent.json'}: nothing to report")


def test_a_row_run_with_another_encoder_says_why_it_is_empty(tmp_path, capsys):
    """The none row matches this call's budget, the GPSE row's runs were made with another encoder: the
    report shows the table and a line naming the encoders instead of a silent empty row."""
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    script = _script()
    recipe = load_downstream_recipe(REPO / "recipes" / "downstream" / "huuskonen-solubility.yaml",
                                    ["general_pipeline.num_epochs=1", "model.pe.source=none"])
    record = {"table": "solubility", "column": "gine", "seed": 0, "test": 0.5, "seconds": 1.0, "host": "h",
              "train": 0.4, "val": 0.6, "best_epoch": 1, "epochs": 1}
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({"runs": {
        "solubility/gine/none/seed0": {**record, "source": "none", "budget": script.budget_key(recipe)},
        "solubility/gine/GPSE/seed0": {**record, "source": "GPSE", "budget": "0123456789abcdef",
                                       "encoder": "feedfacefeedface"}}}))
    script.main(_report_argv(tmp_path, ledger, "--report-only"))
    out = capsys.readouterr().out
    assert "## solubility" in out and "| none |" in out
    line = next(line for line in out.splitlines() if line.startswith("solubility/gine/GPSE: empty"))
    assert "1 run(s)" in line and "another GPSE encoder (feedfacefeedface; this call's is " in line
    runs = json.loads(ledger.read_text())["runs"]
    del runs["solubility/gine/GPSE/seed0"]["encoder"]  # a record from before encoders were recorded
    ledger.write_text(json.dumps({"runs": runs}))
    script.main(_report_argv(tmp_path, ledger, "--report-only"))
    assert "solubility/gine/GPSE: empty: the ledger's 1 run(s) of it were made with another GPSE encoder (the " \
           "column's other rows are at this budget)" in capsys.readouterr().out


def test_the_grid_collapses_input_dropout_only_for_encoders_that_ignore_it():
    """A grid setting an encoder ignores would run the same model twice: the DeepSet takes no input dropout
    (its config has no such key), every other tunable encoder does."""
    import dgl
    from gpse_dgl.train.downstream.schema import default_downstream_recipe
    from gpse_dgl.train.downstream.pe_sources import get_source
    from gpse_dgl.train.downstream.pe_sources.encoder import encoder_config

    script = _script()
    graph = dgl.graph(([0, 1, 2], [1, 2, 0]), num_nodes=3)
    pe = dict(default_downstream_recipe()["model"]["pe"], source="LapPE")
    table = get_source("LapPE").compute([dgl.to_bidirected(graph)], pe, None, False)
    for kind in ("deepset", "linear", "mlp"):
        configs = [encoder_config(dict(pe, model=kind, dropout_in=p), table, dim_hidden=8) for p in (0.0, 0.5)]
        assert (configs[0] == configs[1]) == (kind in script.NO_INPUT_DROPOUT), kind


def test_every_arm_gets_the_same_grid_and_the_setting_is_chosen_on_validation():
    script = _script()
    labels = {source: [label for label, _ in script.grid_settings(source)] for source in ("RWSE", "LapPE", "GPSE",
                                                                                           "none", "rand")}
    assert labels["RWSE"] == ["linear in 0", "linear in 0.5", "mlp in 0", "mlp in 0.5"]
    assert labels["LapPE"] == ["deepset in 0", "mlp in 0", "mlp in 0.5"]  # the DeepSet has no input dropout
    assert labels["GPSE"] == ["mlp in 0", "mlp in 0.5", "linear in 0", "linear in 0.5"]
    assert labels["none"] == labels["rand"] == ["-"]
    cells = {"gine": {"RWSE|linear in 0": [{"seed": 0, "val": 0.2, "test": 0.9}],
                      "RWSE|mlp in 0.5": [{"seed": 0, "val": 0.3, "test": 0.1}],
                      "none|-": [{"seed": 0, "val": 0.5, "test": 0.5}]}}
    runs, chosen = script.select_settings(cells)
    assert chosen == {"gine": {"RWSE": "linear in 0", "none": "-"}}  # the better validation, not the better test
    assert runs["gine"]["RWSE"][0]["test"] == 0.9


def test_the_fingerprint_names_the_code_and_the_device(monkeypatch):
    script = _script()
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    recipe = load_downstream_recipe(REPO / "recipes" / "downstream" / "huuskonen-solubility.yaml",
                                    ["model.pe.source=RWSE"])
    first = script.budget_key(recipe)
    monkeypatch.setattr(script, "DEVICE", ["cuda:NVIDIA H200"])
    on_gpu = script.budget_key(recipe)
    monkeypatch.setattr(script, "_code_digest_once", lambda: "another code version")
    assert len({first, on_gpu, script.budget_key(recipe)}) == 3


def _grid_plan():
    return [("solubility", "gine", label, {"label": label}) for label in ("none|-", "RWSE|a", "RWSE|b")]


def test_a_grid_arm_is_tuned_on_seed_0_and_reported_on_fresh_seeds(tmp_path, monkeypatch):
    script = _script()
    monkeypatch.setattr(script, "budget_key", lambda recipe: "b")
    ledger = script.Ledger(tmp_path / "ledger.json")
    runs, waiting = script.sweep_runs(_grid_plan(), range(2), ledger, tune_seeds=1)
    assert [(seed, label) for seed, _, _, label, _ in runs] == [(0, "RWSE|a"), (0, "RWSE|b"), (1, "none|-"),
                                                                (2, "none|-")]
    assert waiting == 1  # RWSE's reported seeds wait for its choice
    ledger.add("solubility/gine/RWSE|a/seed0", {"budget": "b", "seed": 0, "val": 0.3})
    assert script.sweep_runs(_grid_plan(), range(2), ledger, tune_seeds=1)[1] == 1
    ledger.add("solubility/gine/RWSE|b/seed0", {"budget": "b", "seed": 0, "val": 0.2})
    runs, waiting = script.sweep_runs(_grid_plan(), range(2), ledger, tune_seeds=1)
    assert waiting == 0
    assert [(seed, label) for seed, _, _, label, _ in runs][2:] == [(1, "none|-"), (1, "RWSE|b"), (2, "none|-"),
                                                                    (2, "RWSE|b")]
    ledger.add("solubility/gine/RWSE|b/seed0", {"budget": "b", "seed": 0, "val": None})  # diverged: the worst
    runs, _ = script.sweep_runs(_grid_plan(), range(2), ledger, tune_seeds=1)
    assert {label for _, _, _, label, _ in runs[2:]} == {"none|-", "RWSE|a"}
    # without tuning, every setting runs every seed
    assert len(script.sweep_runs(_grid_plan(), range(2), ledger)[0]) == 6


def test_reported_runs_took_no_part_in_the_choice():
    script = _script()
    cells = {"gine": {"RWSE|a": [{"seed": 0, "val": 0.2, "test": 0.9}, {"seed": 1, "val": 0.9, "test": 0.4},
                                 {"seed": 2, "val": 0.9, "test": 0.5}],
                      "RWSE|b": [{"seed": 0, "val": 0.3, "test": 0.1}],
                      "none|-": [{"seed": 1, "val": 0.5, "test": 0.5}]}}
    runs, chosen = script.select_settings(cells, tune_seeds=1)
    assert chosen == {"gine": {"RWSE": "a", "none": "-"}}  # seed 0's validation, not the later seeds'
    assert [r["seed"] for r in runs["gine"]["RWSE"]] == [1, 2]
    assert [r["seed"] for r in runs["gine"]["none"]] == [1]


def test_one_process_runs_both_stages_and_a_worker_says_what_waits(tmp_path, monkeypatch):
    script = _script()
    monkeypatch.setattr(script, "budget_key", lambda recipe: "b")
    vals = {"RWSE|a": 0.3, "RWSE|b": 0.2, "none|-": 0.5}

    def train_one(run, ledger, out, threads, log=print):
        seed, table, column, label, _ = run
        ledger.add(script.run_key(table, column, label, seed), {"budget": "b", "seed": seed, "val": vals[label]})

    monkeypatch.setattr(script, "_train_one", train_one)
    ledger = script.Ledger(tmp_path / "one.json")
    script.run_all(_grid_plan(), range(2), ledger, tmp_path, None, log=lambda m: None, tune_seeds=1)
    assert sorted(ledger.runs) == ["solubility/gine/RWSE|a/seed0", "solubility/gine/RWSE|b/seed0",
                                   "solubility/gine/RWSE|b/seed1", "solubility/gine/RWSE|b/seed2",
                                   "solubility/gine/none|-/seed1", "solubility/gine/none|-/seed2"]
    lines = []
    worker = script.Ledger(tmp_path / "worker.json")
    script.run_all(_grid_plan(), range(2), worker, tmp_path, None, log=lines.append, worker=(0, 2), tune_seeds=1)
    assert sorted(worker.runs) == ["solubility/gine/RWSE|a/seed0", "solubility/gine/none|-/seed1"]
    assert lines == [f"1 arm(s) wait for tuning runs not in {worker.path}: join the workers' ledgers (--merge) "
                     f"and run again"]


@pytest.mark.slow
def test_local_processes_run_the_grid_in_passes_and_join_their_runs(tmp_path, capsys):
    """--processes 2: the tuning runs in the first pass, the chosen setting's in the second, one ledger."""
    shutil.copytree(FIXTURES / "huuskonen-solubility", tmp_path / "data" / "huuskonen-solubility")
    ledger = tmp_path / "ledger.json"
    argv = ["--tables", "solubility", "--sources", "none,RWSE", "--grid", "--seeds", "1", "--epochs", "1",
            "--set", "model.num_layers=1", "--set", f"data.root={tmp_path / 'data'}",
            "--set", f"data.cache_dir={tmp_path / 'cache'}", "--threads", "1", "--ledger", str(ledger),
            "--out", str(tmp_path / "out"), "--figures", str(tmp_path / "figures"), "--processes", "2"]
    _script().main(argv)
    runs = json.loads(ledger.read_text())["runs"]
    tuning = {f"solubility/gine/RWSE|{s}/seed0" for s in ("linear in 0", "linear in 0.5", "mlp in 0", "mlp in 0.5")}
    assert tuning | {"solubility/gine/none|-/seed1"} < set(runs) and len(runs) == 6
    chosen = (set(runs) - tuning - {"solubility/gine/none|-/seed1"}).pop()
    assert chosen.startswith("solubility/gine/RWSE|") and chosen.endswith("/seed1")
    out = capsys.readouterr().out
    assert "pass 1: 5 run(s)" in out and "pass 2: 1 run(s)" in out and "pass 3: 0 run(s)" in out
    assert not list(tmp_path.glob("ledger.worker*.json"))


def test_an_earlier_code_versions_tables_are_reported_by_its_digest(tmp_path, monkeypatch, capsys):
    """After a code change the ledger's runs join no cell of today's code; ``--code`` reports them as the
    tables of the version that made them, and refuses to make runs under a digest that is not this code's."""
    shutil.copytree(FIXTURES / "huuskonen-solubility", tmp_path / "data" / "huuskonen-solubility")
    ledger = tmp_path / "ledger.json"
    argv = ["--tables", "solubility", "--sources", "none", "--seeds", "1", "--epochs", "1",
            "--set", "model.num_layers=1", "--set", f"data.root={tmp_path / 'data'}",
            "--set", f"data.cache_dir={tmp_path / 'cache'}", "--threads", "1", "--ledger", str(ledger),
            "--out", str(tmp_path / "out"), "--figures", str(tmp_path / "figures"), "--skip-report"]
    _script().main(argv)
    run = next(iter(json.loads(ledger.read_text())["runs"].values()))
    made_by = run["code"]
    train, val = _script().run_curve(tmp_path / "out", run)  # the run's folder has its TensorBoard curve
    assert list(train) == list(val) == [1] and val[1] == pytest.approx(run["val"], rel=1e-6)
    assert _script().run_curve(tmp_path / "elsewhere", run) is None
    report = argv[:-1] + ["--report-only"]

    newer = _script()
    monkeypatch.setattr(newer, "result_code_digest", lambda: "a later code version")
    newer.main(report)
    assert "no run at this budget" in capsys.readouterr().out
    newer.main(report + ["--code", made_by])
    table = capsys.readouterr().out
    assert "| none |" in table and f"code digest {made_by}." in table
    with pytest.raises(SystemExit, match="--code only reports"):
        _script().main(argv + ["--code", made_by])


def test_a_column_override_reaches_every_row_of_that_column_only():
    """The Transformer's longer warm-up is a property of the column: every arm of it gets it (the rows stay
    comparable), no other column does."""
    script = _script()
    cells = script.cell_recipes("zinc-pse", ["gine", "transformer"], ["none", "RWSE"], [], None, {}, grid=True)
    warmup = {(column, label): recipe["general_pipeline"]["lr_scheduler"]["warmup_epochs"]
              for column, label, recipe in cells}
    assert {w for (column, _), w in warmup.items() if column == "transformer"} == {5}
    assert {w for (column, _), w in warmup.items() if column == "gine"} == {1}
    assert len(warmup) == 2 * (1 + 4)  # none, and RWSE's grid of four settings, per column
    assert "; Transformer: general_pipeline.lr_scheduler.warmup_epochs=5;" in script.budget_line(
        [("zinc-pse", c, label, recipe) for c, label, recipe in cells], "zinc-pse", [])


def test_extra_gpse_rows_go_only_into_the_columns_named():
    """``--extra-columns``: a lever's encoder runs where it is tested, as ``column`` (every table) or
    ``table/column`` (one table's, e.g. GINE on the replica but not on solubility)."""
    script = _script()

    def labels(table, extra_columns):
        cells = script.cell_recipes(table, None, ["none"], [], None, {"other": "quickstart"}, False, extra_columns)
        return {(column, label) for column, label, _ in cells if label.startswith("GPSE:")}

    assert labels("zinc-pse", ["zinc-pse/gine", "gcn"]) == {("gine", "GPSE:other"), ("gcn", "GPSE:other")}
    assert labels("solubility", ["zinc-pse/gine"]) == set()
    assert labels("solubility", ["gine"]) == {("gine", "GPSE:other")}
    assert len(labels("zinc-pse", None)) == 5


def test_a_resumed_runs_curve_joins_its_events_files_by_epoch(tmp_path):
    """A run resumed after an interruption wrote two events files and repeated the interrupted epoch; a
    diverged epoch logged no validation score. The curve takes the last value per epoch from both files, and
    gives up when the best epoch has no score rather than quote another epoch's."""
    from torch.utils.tensorboard import SummaryWriter

    script = _script()
    run = {"table": "zinc-pse", "column": "gcn", "source": "RWSE|mlp in 0", "seed": 2, "budget": "b", "metric": "mae",
           "best_epoch": 2, "epochs": 4}
    folder = tmp_path / "b" / "zinc-pse" / "gcn" / "RWSE|mlp in 0" / "seed2" / "seed2" / "tensorboard"
    first = SummaryWriter(str(folder))
    for epoch, (train, val) in enumerate([(0.9, 0.8), (0.7, 0.6), (0.75, 0.99)], start=1):  # epoch 3 cut short
        first.add_scalar("train/mae", train, epoch)
        first.add_scalar("val/mae", val, epoch)
    first.close()
    second = SummaryWriter(str(folder), purge_step=3)
    second.add_scalar("train/mae", 0.65, 3)
    second.add_scalar("val/mae", 0.7, 3)
    second.add_scalar("train/mae", 0.6, 4)  # a non-finite validation score is not logged
    second.close()
    train, val = script.run_curve(tmp_path, run)
    assert train == pytest.approx({1: 0.9, 2: 0.7, 3: 0.65, 4: 0.6}) and val == pytest.approx({1: 0.8, 2: 0.6, 3: 0.7})
    assert script.run_curve(tmp_path, dict(run, best_epoch=4)) is None


def test_extra_columns_and_code_digests_are_checked(tmp_path, capsys):
    script = _script()
    with pytest.raises(SystemExit, match="no column transfomer in zinc-pse"):
        script.check_extra_columns("gine, transfomer", ["zinc-pse"], True)
    with pytest.raises(SystemExit, match="give --gpse-extra too"):
        script.check_extra_columns("gine", ["zinc-pse"], False)
    assert script.check_extra_columns(" zinc-pse/gine ,gcn", ["zinc-pse"], True) == ["zinc-pse/gine", "gcn"]
    ledger = tmp_path / "ledger.json"
    ledger.write_text(json.dumps({"about": "", "runs": {"solubility/gine/none/seed0": {
        "budget": "b", "table": "solubility", "column": "gine", "source": "none", "seed": 0, "test": 0.5,
        "seconds": 1.0, "host": "h", "code": "c0de"}}}))
    with pytest.raises(SystemExit, match="no run of .* has it; its runs have c0de"):
        script.main(["--tables", "solubility", "--ledger", str(ledger), "--report-only", "--code", "c0ffee",
                     "--out", str(tmp_path / "out"), "--figures", str(tmp_path / "figures")])


def test_the_figure_takes_a_row_that_only_some_columns_have(tmp_path):
    """An extra GPSE row run in some columns only (--extra-columns) is a gap in the other columns' bars."""
    pytest.importorskip("matplotlib")
    script = _script()
    run = lambda test: {"test": test, "val": test}  # noqa: E731
    cells = {"gine": {"GPSE": [run(0.2), run(0.3)], "RWSE": [run(0.4)], "GPSE:moses": [run(0.25)]},
             "gcn": {"GPSE": [run(0.5)], "RWSE": [run(0.6)]}}
    path = script.plot("zinc-pse", cells, tmp_path / "paper_zinc-pse.png")
    assert path.is_file() and path.stat().st_size > 0
