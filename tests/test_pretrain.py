"""GPSE pretraining on CPU with a tiny model: data assembly, learning, outputs, resume equivalence."""
from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from _clock import WorkClock, install_clock
from gpse_dgl.train.pretraining import build_model, checkpoints, evaluation, loop, pretrain, run as run_module
from gpse_dgl.train.pretraining.data import GraphCollection, build_pretraining_data
from gpse_dgl.train.pretraining.schema import load_pretrain_recipe, validate_pretrain_recipe
from gpse_dgl.train.schedule import CosineWithWarmup, LRSchedule
from gpse_dgl.utils.checkpoint import load_pretrain_checkpoint
from gpse_dgl.utils.errors import CheckpointError, RecipeError

NUM_GRAPHS = 60


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("targets_cache")


def tiny_recipe(save_path, cache_dir, **general) -> dict:
    recipe = validate_pretrain_recipe({
        "data": {"max_graphs": NUM_GRAPHS, "cache_dir": str(cache_dir), "split": [0.8, 0.1, 0.1]},
        "model": {"dim_hidden": 16, "num_layers": 2, "head_hidden": 8, "graph_head_hidden": 16,
                  "dropout": 0.1},
        "general_pipeline": {"num_epochs": 2, "batch_size": 16, "save_path": str(save_path),
                             "num_threads": 1, "optimizer": {"lr": 0.01},
                             "lr_scheduler": {"warmup_epochs": 1}, **general},
        "device": "cpu",
    }, "test")
    return recipe


def run(recipe, **kwargs):
    return pretrain(copy.deepcopy(recipe), progress=False, **kwargs)


# ------------------------------------------------------------------ data


def test_data_split_targets_and_cache_reuse(cache_dir):
    recipe = tiny_recipe("unused", cache_dir)
    first = build_pretraining_data(recipe["data"], log=lambda m: None)
    again = build_pretraining_data(recipe["data"], log=lambda m: None)
    assert again.info["cache"] == "reused"
    sizes = [len(first.splits[s]) for s in ("train", "val", "test")]
    assert sum(sizes) == NUM_GRAPHS and sizes == [48, 6, 6]
    assert first.num_node_columns == 51 and first.num_graph_columns == 11
    assert len(first.columns) == 62 and first.columns[0] == ("ElstaticPE", 0)
    for name in ("train", "val", "test"):
        assert torch.equal(first.splits[name].src, again.splits[name].src)
        assert torch.equal(first.splits[name].node_targets, again.splits[name].node_targets)
        assert torch.equal(first.splits[name].graph_targets, again.splits[name].graph_targets)
    other = copy.deepcopy(recipe["data"])
    other["split_seed"] = 1
    reseeded = build_pretraining_data(other, log=lambda m: None)
    assert reseeded.info["cache"] == "written"
    assert not torch.equal(reseeded.splits["val"].num_nodes, first.splits["val"].num_nodes)


def test_collection_batches_match_dgl_batch(cache_dir):
    import dgl

    data = build_pretraining_data(tiny_recipe("unused", cache_dir)["data"], log=lambda m: None)
    train = data.splits["train"]
    order = torch.tensor([5, 0, 7, 3])
    graph, node_targets, graph_targets = train.batch(order)
    singles = [train.batch(torch.tensor([i]))[0] for i in order.tolist()]
    reference = dgl.batch(singles)
    assert torch.equal(graph.batch_num_nodes(), reference.batch_num_nodes())
    assert torch.equal(graph.batch_num_edges(), reference.batch_num_edges())
    assert all(torch.equal(a, b) for a, b in zip(graph.edges(), reference.edges()))
    expected_rows = torch.cat([train.batch(torch.tensor([i]))[1] for i in order.tolist()])
    assert torch.equal(node_targets, expected_rows)
    assert torch.equal(graph_targets, train.graph_targets[order])


def test_scheduler_warms_up_then_follows_a_cosine():
    general = tiny_recipe("unused", "unused")["general_pipeline"]
    general.update(num_epochs=10)
    general["lr_scheduler"].update(warmup_epochs=2, interval="epoch")
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = LRSchedule.from_recipe(optimizer, general, steps_per_epoch=7).scheduler  # the torch scheduler
    rates = []
    for _ in range(10):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[0] == pytest.approx(1e-6) and rates[1] == pytest.approx(0.5) and rates[2] == 1.0
    assert rates[6] == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert all(a > b for a, b in zip(rates[2:], rates[3:]))


# ------------------------------------------------------------------ training


def test_tiny_run_learns_and_writes_all_outputs(tmp_path, cache_dir):
    recipe = tiny_recipe(tmp_path / "run", cache_dir, num_epochs=5)
    summary = run(recipe)
    losses = [record["train"]["loss"] for record in summary["history"]]
    assert len(losses) == 5 and losses[-1] < 0.92 * losses[0], losses

    paths = summary["paths"]
    metrics = json.loads(open(paths["metrics"], encoding="utf-8").read())
    assert metrics["status"] == "completed" and metrics["epochs_completed"] == 5
    assert 1 <= metrics["best_epoch"] <= 5
    table = {row["pse"]: row for row in metrics["r2_table"]}
    assert set(table) == {"ElstaticPE", "LapPE", "RWSE", "HKdiagSE", "EigVals", "CycleGE", "Overall"}
    assert metrics["final"]["test"]["r2"] == table["Overall"]["test"]
    assert metrics["final"]["val"]["r2"] == pytest.approx(metrics["best_val_r2"])

    best = torch.load(paths["best_checkpoint"], weights_only=True)
    assert best["epoch"] == metrics["best_epoch"] and best["format"] == "gpse-dgl-pretrain"
    model = build_model(best["model_config"])
    model.load_state_dict(best["model_state"])
    assert best["model_config"] == model.to_config()
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert load_pretrain_recipe(paths["recipe"]) == recipe


class Killed(Exception):
    pass


def assert_same_run(a: dict, b: dict, path_a, path_b):
    """Bit-identical weights, optimiser moments and metrics."""
    last_a, last_b = load_pretrain_checkpoint(path_a / "last.pt"), load_pretrain_checkpoint(path_b / "last.pt")
    for key, tensor in last_a["model_state"].items():
        assert torch.equal(tensor, last_b["model_state"][key]), key
    for slot, state in last_a["optimizer_state"]["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(last_b["optimizer_state"]["state"][slot][name]))
    assert a["final"] == b["final"]
    assert [r["train"] for r in a["history"]] == [r["train"] for r in b["history"]]
    assert a["best_epoch"] == b["best_epoch"]


def test_resume_after_an_epoch_gives_identical_results(tmp_path, cache_dir):
    straight = run(tiny_recipe(tmp_path / "straight", cache_dir))

    def kill_after_first_epoch(record):
        if record["epoch"] == 1:
            raise Killed

    interrupted = tiny_recipe(tmp_path / "interrupted", cache_dir)
    with pytest.raises(Killed):
        run(interrupted, on_epoch_end=kill_after_first_epoch)
    assert load_pretrain_checkpoint(tmp_path / "interrupted" / "last.pt")["epoch"] == 1
    resumed = run(interrupted, resume=True)
    assert_same_run(straight, resumed, tmp_path / "straight", tmp_path / "interrupted")


def test_kill_mid_epoch_loses_only_that_epoch(tmp_path, cache_dir, monkeypatch):
    straight = run(tiny_recipe(tmp_path / "straight", cache_dir))
    recipe = tiny_recipe(tmp_path / "killed", cache_dir)
    original, calls = loop.training_features, []
    steps_per_epoch = 3  # 48 training graphs / batch 16

    def die_in_second_epoch(*args, **kwargs):
        calls.append(1)
        if len(calls) == steps_per_epoch + 2:
            raise Killed
        return original(*args, **kwargs)

    monkeypatch.setattr(loop, "training_features", die_in_second_epoch)
    with pytest.raises(Killed):
        run(recipe)
    monkeypatch.setattr(loop, "training_features", original)
    assert load_pretrain_checkpoint(tmp_path / "killed" / "last.pt")["epoch"] == 1
    resumed = run(recipe, resume=True)
    assert_same_run(straight, resumed, tmp_path / "straight", tmp_path / "killed")


def test_run_directory_guards(tmp_path, cache_dir):
    recipe = tiny_recipe(tmp_path / "run", cache_dir, num_epochs=1)
    with pytest.raises(CheckpointError, match="nothing to resume"):
        run(recipe, resume=True)
    run(recipe)
    with pytest.raises(CheckpointError, match="already holds a run"):
        run(recipe)
    changed = copy.deepcopy(recipe)
    changed["model"]["num_layers"] = 3
    with pytest.raises(RecipeError, match=r"recipe differs from the run's \(model.num_layers: 2 -> 3\)"):
        run(changed, resume=True)
    summary = run(recipe, overwrite=True)
    assert summary["epochs_completed"] == 1


def test_stop_early_from_callback_still_evaluates_best(tmp_path, cache_dir):
    def stop(record):
        raise StopIteration

    recipe = tiny_recipe(tmp_path / "run", cache_dir, num_epochs=3)
    recipe["data"]["graph_target_scaling"] = "standardize"
    summary = run(recipe, on_epoch_end=stop)
    assert summary["epochs_completed"] == 1 and summary["status"].startswith("stopped")
    assert summary["r2_table"][-1]["pse"] == "Overall"
    scaling = load_pretrain_checkpoint(summary["paths"]["best_checkpoint"])["graph_target_scaling"]
    assert scaling["mean"].shape == scaling["std"].shape == (11,)


def test_cli_prints_where_outputs_went(tmp_path, cache_dir, capsys):
    from gpse_dgl.cli import main

    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(
        f"data: {{max_graphs: {NUM_GRAPHS}, cache_dir: '{cache_dir}', split: [0.8, 0.1, 0.1]}}\n"
        "model: {dim_hidden: 8, num_layers: 1, head_hidden: 4, graph_head_hidden: 8}\n"
        "general_pipeline: {num_epochs: 1, batch_size: 32, num_threads: 1}\n", encoding="utf-8")
    main(["pretrain", str(recipe_file), "--out", str(tmp_path / "out"), "--device", "cpu", "--no-progress"])
    out = capsys.readouterr().out
    assert f"best checkpoint:  {tmp_path / 'out' / 'best.pt'}" in out
    assert "metrics:" in out and "tensorboard logs:" in out
    assert "Overall" in out and "R^2 test" in out


# ------------------------------------------------------------------ sources and target scaling


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "datasets"


def test_ogb_molecules_become_unique_skeletons(tmp_path):
    import pandas as pd

    from gpse_dgl.data.molecules import unique_skeleton_graphs

    recipe = validate_pretrain_recipe({"data": {"source": "ogbg-molhiv", "root": str(FIXTURES),
                                       "cache_dir": str(tmp_path), "split": [0.6, 0.2, 0.2]}}, "test")
    data = build_pretraining_data(recipe["data"], log=lambda m: None)
    smiles = pd.read_csv(FIXTURES / "ogbg_molhiv" / "mapping" / "mol.csv.gz")["smiles"].tolist()
    expected, stats = unique_skeleton_graphs(smiles)
    assert data.info["source"] == "ogbg-molhiv" and data.info["kept"] == stats["kept"] == len(expected)
    assert sum(len(part) for part in data.splits.values()) == len(expected)
    expected_nodes = sorted(g.num_nodes() for g in expected)
    assert sorted(n for part in data.splits.values() for n in part.num_nodes.tolist()) == expected_nodes


def test_unique_structures_drops_repeats_and_trivial_graphs():
    import dgl

    from gpse_dgl.train.pretraining.data import unique_structures

    path = dgl.graph(([0, 1], [1, 2]))
    relabelled_path = dgl.graph(([2, 0], [0, 1]))  # same path, other node numbering and direction
    triangle = dgl.graph(([0, 1, 2], [1, 2, 0]))
    single = dgl.graph(([], []), num_nodes=1)
    no_edge = dgl.graph(([], []), num_nodes=2)
    kept, stats = unique_structures([path, relabelled_path, triangle, single, no_edge])
    assert [g.num_nodes() for g in kept] == [3, 3] and kept[1].num_edges() == 3
    assert stats == {"total": 5, "too_small": 2, "duplicates": 1, "kept": 2}


def test_standardized_graph_targets_use_training_statistics(cache_dir):
    raw_recipe = tiny_recipe("unused", cache_dir)
    scaled_recipe = copy.deepcopy(raw_recipe)
    scaled_recipe["data"]["graph_target_scaling"] = "standardize"
    raw = build_pretraining_data(raw_recipe["data"], log=lambda m: None)
    scaled = build_pretraining_data(scaled_recipe["data"], log=lambda m: None)
    assert raw.graph_target_scaling is None
    mean, std = scaled.graph_target_scaling["mean"], scaled.graph_target_scaling["std"]
    train = scaled.splits["train"].graph_targets
    varying = raw.splits["train"].graph_targets.std(0) > 1e-8
    assert torch.allclose(train.mean(0), torch.zeros_like(mean), atol=1e-5)
    assert torch.allclose(train.std(0)[varying], torch.ones(int(varying.sum())), atol=1e-5)
    for name in ("val", "test"):  # held-out graphs use the training split's statistics
        restored = scaled.splits[name].graph_targets * std + mean
        assert torch.allclose(restored, raw.splits[name].graph_targets, atol=1e-4)


def test_resume_check_fills_keys_added_to_the_schema(tmp_path):
    """A checkpoint written before a recipe key existed still matches a recipe that has it at its
    default; a non-default value is a different run."""
    recipe = validate_pretrain_recipe({})
    old = copy.deepcopy(recipe)
    del old["model"]["learn_input_norm"]
    payload = {"recipe": old, "model_config": {"encoder": {}}}
    checkpoints.check_same_run(tmp_path / "last.pt", payload, recipe, {"encoder": {}})
    changed = copy.deepcopy(recipe)
    changed["model"]["learn_input_norm"] = False
    with pytest.raises(RecipeError, match="learn_input_norm"):
        checkpoints.check_same_run(tmp_path / "last.pt", payload, changed, {"encoder": {}})


def test_loss_options_reach_the_loss(tmp_path, cache_dir, monkeypatch):
    """general_pipeline.loss is what training and validation minimise / report."""
    seen = []
    real = evaluation.gpse_loss

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "gpse_loss", spy)
    recipe = tiny_recipe(tmp_path / "run", cache_dir, num_epochs=1,
                         loss={"regression": "l1+mse", "graph_weight": 5.0})
    summary = run(recipe)
    assert seen and all(kw == {"regression": "l1+mse", "graph_weight": 5.0} for kw in seen)
    assert {"loss_l1", "loss_mse", "loss_cosine"} <= set(summary["history"][0]["train"])


def fitted_recipe(save_path, cache_dir, interval="step", warmup=1, **general):
    settings = {"num_epochs": 40, "time_limit_minutes": 1.0, "fit_to_time_limit": True, **general}
    recipe = tiny_recipe(save_path, cache_dir, **settings)
    recipe["general_pipeline"]["lr_scheduler"].update(interval=interval, warmup_epochs=warmup)
    return recipe


@pytest.mark.parametrize("interval, warmup", [("step", 1), ("epoch", 2), ("step", 1.5)])
def test_schedule_fitted_to_the_time_limit_decays_fully_and_can_be_repeated(tmp_path, cache_dir, monkeypatch,
                                                                             interval, warmup):
    install_clock(monkeypatch, WorkClock(step_seconds=1.0, eval_seconds=0.5))  # ~3.5 s per epoch
    fitted = run(fitted_recipe(tmp_path / "fitted", cache_dir, interval, warmup))
    n = fitted["num_epochs"]
    assert fitted["fitted_to_time_limit"] and 3 <= n < 40, n
    assert fitted["status"] == "completed" and fitted["epochs_completed"] == n
    last = load_pretrain_checkpoint(tmp_path / "fitted" / "last.pt")
    assert last["fitted_num_epochs"] == n
    # the schedule reached its end: the rate after the last step is 0
    assert last["optimizer_state"]["param_groups"][0]["lr"] == pytest.approx(0.0, abs=1e-12)

    # the same run with num_epochs set to the fitted length from the start, no limit: identical
    monkeypatch.undo()
    explicit = fitted_recipe(tmp_path / "explicit", cache_dir, interval, warmup)
    explicit["general_pipeline"].update(num_epochs=n, fit_to_time_limit=False, time_limit_minutes=None)
    repeated = run(explicit)
    assert not repeated["fitted_to_time_limit"] and repeated["num_epochs"] == n
    assert [r["lr"] for r in fitted["history"]] == [r["lr"] for r in repeated["history"]]
    assert_same_run(fitted, repeated, tmp_path / "fitted", tmp_path / "explicit")


def test_resume_with_more_epochs_follows_the_new_schedule(tmp_path, cache_dir):
    """The schedule object stored in a checkpoint does not override the recipe's lengths on resume."""
    recipe = tiny_recipe(tmp_path / "run", cache_dir, num_epochs=2)
    recipe["general_pipeline"]["lr_scheduler"]["interval"] = "epoch"
    run(recipe)
    longer = copy.deepcopy(recipe)
    longer["general_pipeline"]["num_epochs"] = 4
    with pytest.raises(RecipeError, match=r"general_pipeline.num_epochs: 2 -> 4\).*--allow-recipe-change"):
        run(longer, resume=True)
    resumed = run(longer, resume=True, allow_recipe_change=True)
    expected = CosineWithWarmup(warmup=1, total=4)
    assert [r["lr"] for r in resumed["history"]] == pytest.approx([0.01 * expected(t) for t in range(4)])
    assert resumed["recipe_changes"] == ["general_pipeline.num_epochs: 2 -> 4"]
    recorded = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert recorded["recipe_changes"] == ["general_pipeline.num_epochs: 2 -> 4"]


def test_resume_keeps_the_fitted_schedule(tmp_path, cache_dir, monkeypatch):
    install_clock(monkeypatch, WorkClock(step_seconds=1.0, eval_seconds=0.5))
    straight = run(fitted_recipe(tmp_path / "straight", cache_dir))

    def kill_after_third_epoch(record):
        if record["epoch"] == 3:
            raise Killed

    monkeypatch.undo()
    install_clock(monkeypatch, WorkClock(step_seconds=1.0, eval_seconds=0.5))
    interrupted = fitted_recipe(tmp_path / "interrupted", cache_dir)
    with pytest.raises(Killed):
        run(interrupted, on_epoch_end=kill_after_third_epoch)
    assert load_pretrain_checkpoint(tmp_path / "interrupted" / "last.pt")["fitted_num_epochs"] == straight["num_epochs"]
    # resumed on a machine ten times faster: the fitted length stays (a schedule is never lengthened)
    monkeypatch.undo()
    install_clock(monkeypatch, WorkClock(step_seconds=0.1, eval_seconds=0.05))
    resumed = run(interrupted, resume=True)
    assert resumed["num_epochs"] == straight["num_epochs"]
    assert_same_run(straight, resumed, tmp_path / "straight", tmp_path / "interrupted")


def test_no_fit_when_the_recipe_fits_in_time(tmp_path, cache_dir, monkeypatch):
    install_clock(monkeypatch, WorkClock(step_seconds=1e-3, eval_seconds=1e-3))
    summary = run(fitted_recipe(tmp_path / "run", cache_dir, num_epochs=4))
    assert summary["num_epochs"] == 4 and not summary["fitted_to_time_limit"]
    assert summary["epochs_completed"] == 4


# ------------------------------------------------------------------ model.init_from


def with_init(recipe: dict, init_from) -> dict:
    recipe = copy.deepcopy(recipe)
    recipe["model"]["init_from"] = str(init_from)
    return validate_pretrain_recipe(recipe, "test")


def test_init_from_starts_from_the_checkpoint_weights(tmp_path, cache_dir, monkeypatch):
    first = run(tiny_recipe(tmp_path / "first", cache_dir, num_epochs=1))
    started_with = {}
    real_build = run_module.build_optimizer

    def record_initial_weights(model, optimizer_recipe):  # called right after the weights are set
        started_with.update({k: v.detach().clone() for k, v in model.state_dict().items()})
        return real_build(model, optimizer_recipe)

    monkeypatch.setattr(run_module, "build_optimizer", record_initial_weights)
    lines = []
    recipe = with_init(tiny_recipe(tmp_path / "second", cache_dir, num_epochs=1), first["paths"]["best_checkpoint"])
    second = pretrain(recipe, progress=False, log=lines.append)
    saved = load_pretrain_checkpoint(first["paths"]["best_checkpoint"])["model_state"]
    assert started_with.keys() == saved.keys()
    assert all(torch.equal(started_with[k], saved[k]) for k in saved)
    assert any(line.startswith("init: weights from") and "after epoch 1" in line for line in lines), lines
    # a fresh optimiser: the second run's schedule starts at its own warm-up, not where the first ended
    assert second["history"][0]["lr"] < 0.01 and second["epochs_completed"] == 1


def test_init_from_another_model_shape_is_refused(tmp_path, cache_dir):
    first = run(tiny_recipe(tmp_path / "first", cache_dir, num_epochs=1))
    wider = with_init(tiny_recipe(tmp_path / "wider", cache_dir), first["paths"]["best_checkpoint"])
    wider["model"]["dim_hidden"] = 24
    with pytest.raises(CheckpointError, match=r"model.init_from: .*dim_hidden: checkpoint 16, recipe 24"):
        run(wider)
    assert not (tmp_path / "wider" / "last.pt").exists()


@pytest.mark.parametrize("target, message", [
    ("missing.pt", "checkpoint not found"),
    ("corrupt.pt", "not a readable checkpoint"),
    ("no-such-model", "unknown model 'no-such-model'"),
])
def test_bad_init_from_fails_before_the_data_is_built(tmp_path, cache_dir, monkeypatch, target, message):
    (tmp_path / "corrupt.pt").write_bytes(b"PK\x03\x04 truncated")
    init = target if target == "no-such-model" else tmp_path / target
    monkeypatch.setattr(run_module, "build_pretraining_data",
                        lambda *a, **k: pytest.fail("the data was built before init_from was checked"))
    with pytest.raises(Exception, match=f"model.init_from: .*{message}"):
        run(with_init(tiny_recipe(tmp_path / "run", cache_dir), init))


def test_resume_ignores_init_from(tmp_path, cache_dir):
    first = run(tiny_recipe(tmp_path / "first", cache_dir, num_epochs=1))
    recipe = with_init(tiny_recipe(tmp_path / "second", cache_dir, num_epochs=1), first["paths"]["best_checkpoint"])
    run(recipe)
    (tmp_path / "first" / "best.pt").unlink()  # resuming reads last.pt only
    recipe["general_pipeline"]["num_epochs"] = 2
    resumed = run(recipe, resume=True, allow_recipe_change=True)
    assert resumed["epochs_completed"] == 2
