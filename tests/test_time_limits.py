"""Time limits that hold: a pretraining run ends inside ``time_limit_minutes`` even when the machine slows
down mid-run (the schedule re-fitted, an overrunning epoch cut, the report skipped when it would not fit).

Time is simulated by ``tests/_clock.WorkClock``: reading it is free and it advances only by the work done
(each training step, each evaluation batch), so the tests are deterministic and model a machine's speed.
"""
from __future__ import annotations

import copy

import pytest

from _clock import WorkClock, install_clock
from gpse_dgl.train.pretraining import loop, pretrain
from gpse_dgl.train.pretraining.schema import validate_pretrain_recipe
from gpse_dgl.train.pretraining import time_budget
from gpse_dgl.train.pretraining.time_budget import STEP_WINDOW, TimeBudget
from gpse_dgl.utils.checkpoint import load_pretrain_checkpoint


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("targets_cache")


@pytest.fixture
def use_clock(monkeypatch):
    return lambda clock: install_clock(monkeypatch, clock)


def limited_recipe(save_path, cache_dir, minutes, **general) -> dict:
    """60 graphs (48 / 6 / 6), 12 steps per epoch, 2 batches per evaluation split."""
    return validate_pretrain_recipe({
        "data": {"max_graphs": 60, "cache_dir": str(cache_dir), "split": [0.8, 0.1, 0.1]},
        "model": {"dim_hidden": 8, "num_layers": 1, "head_hidden": 4, "graph_head_hidden": 8},
        "general_pipeline": {"num_epochs": 40, "batch_size": 4, "eval_batch_size": 4, "save_path": str(save_path),
                             "num_threads": 1, "time_limit_minutes": minutes,
                             "lr_scheduler": {"warmup_epochs": 1, "interval": "step"}, **general},
        "device": "cpu",
    }, "test")


def test_a_machine_that_slows_down_gets_a_refitted_schedule_inside_the_limit(tmp_path, cache_dir, use_clock):
    """Fitted after the warm-up at 2.6 s per epoch; from epoch ~9 on steps take 1.5x longer: the rest of
    the cosine is fitted again, the run decays to a rate near 0 and ends inside the minute."""
    clock = use_clock(WorkClock(slow_after=100, factor=1.5))
    summary = pretrain(copy.deepcopy(limited_recipe(tmp_path / "run", cache_dir, 1.0, fit_to_time_limit=True)),
                       progress=False)
    assert summary["refits"] and summary["fitted_to_time_limit"]
    assert summary["refits"][0]["after_epoch"] >= 9
    assert clock.now <= 60.0, clock.now
    done = summary["epochs_completed"]
    assert done >= summary["num_epochs"] - 1, summary["status"]  # at most the last epoch cut
    last = load_pretrain_checkpoint(tmp_path / "run" / "last.pt")
    assert last["refits"] == summary["refits"]
    peak = 0.01
    assert last["optimizer_state"]["param_groups"][0]["lr"] <= 0.02 * peak


def test_without_refits_the_slowed_run_would_overrun(tmp_path, cache_dir, use_clock, monkeypatch):
    """The same slow-down with re-fitting disabled: the limit still holds (the run is cut), but the
    schedule is cut before its end: what the re-fit is for."""
    monkeypatch.setattr(loop.Trainer, "refit", lambda self, *args: None)
    clock = use_clock(WorkClock(slow_after=100, factor=1.5))
    summary = pretrain(copy.deepcopy(limited_recipe(tmp_path / "run", cache_dir, 1.0, fit_to_time_limit=True)),
                       progress=False)
    assert clock.now <= 60.0 and not summary["refits"]
    assert summary["epochs_completed"] < summary["num_epochs"] - 1
    last = load_pretrain_checkpoint(tmp_path / "run" / "last.pt")
    assert last["optimizer_state"]["param_groups"][0]["lr"] > 0.02 * 0.01


def test_the_time_limit_ends_an_epoch_midway_keeping_the_best_checkpoint(tmp_path, cache_dir, use_clock):
    """Steps become 8x slower in the middle of epoch 3, with no fitting: epoch 3 is cut before the step
    that would overrun, its steps discarded, and the best checkpoint of epochs 1-2 evaluated, all inside
    the 12 s limit (the old rule, stop after the epoch that overruns, ended at ~16 s)."""
    clock = use_clock(WorkClock(slow_after=30, factor=8.0))
    summary = pretrain(copy.deepcopy(limited_recipe(tmp_path / "run", cache_dir, 0.2, num_epochs=6)),
                       progress=False)
    assert "reached during epoch 3" in summary["status"] and "steps discarded" in summary["status"]
    assert summary["epochs_completed"] == 2
    assert load_pretrain_checkpoint(tmp_path / "run" / "last.pt")["epoch"] == 2
    assert summary["evaluated_checkpoint"].endswith("best.pt") and summary["final"]["test"]["r2"] is not None
    assert clock.now <= 12.0, clock.now
    assert summary["time_left_seconds"] == pytest.approx(12.0 - clock.now, abs=1e-6)


def test_the_first_epoch_of_a_fresh_run_is_not_cut(tmp_path, cache_dir, use_clock):
    """With nothing saved yet, a first epoch slower than the whole limit still ends (and is kept)."""
    use_clock(WorkClock(step_seconds=2.0))
    summary = pretrain(copy.deepcopy(limited_recipe(tmp_path / "run", cache_dir, 0.2, num_epochs=3)),
                       progress=False)
    assert summary["epochs_completed"] == 1 and "after epoch 1" in summary["status"]


@pytest.mark.parametrize("final_factor, written", [(1.0, True), (9.0, False)])
def test_the_report_is_written_when_the_time_left_holds_it(tmp_path, cache_dir, use_clock, monkeypatch, capsys,
                                                           final_factor, written):
    """``gpse-dgl pretrain`` keeps the report's share of the limit. A final evaluation 9x slower than the
    validations eats into it: the command still ends inside the limit and says it did not write the report.
    (Training stops after epoch 3 at 7.8 s; the final evaluation takes 0.4 s, or 3.6 s when 9x slower.)"""
    pytest.importorskip("matplotlib")
    from gpse_dgl.cli import main

    monkeypatch.setattr(time_budget, "REPORT_SECONDS", 1.0)  # the simulated clock does not count the report
    clock = use_clock(WorkClock(final_factor=final_factor))
    recipe_file = tmp_path / "r.yaml"
    recipe_file.write_text(
        f"data: {{max_graphs: 60, cache_dir: '{cache_dir}', split: [0.8, 0.1, 0.1]}}\n"
        "model: {dim_hidden: 8, num_layers: 1, head_hidden: 4, graph_head_hidden: 8}\n"
        "general_pipeline: {num_epochs: 40, batch_size: 4, eval_batch_size: 4, num_threads: 1,\n"
        "                   time_limit_minutes: 0.2}\n", encoding="utf-8")
    main(["pretrain", str(recipe_file), "--out", str(tmp_path / "run"), "--device", "cpu", "--no-progress"])
    out = capsys.readouterr().out
    assert clock.now <= 12.0 - (1.0 if written else 0.0), clock.now
    assert (tmp_path / "run" / "report.html").exists() == written
    assert ("report: not written: the time limit leaves" in out) != written
    if not written:
        assert f"gpse-dgl report {tmp_path / 'run'}" in out


def test_budget_holds_what_follows_training():
    budget = TimeBudget.start(started=10.0, limit_minutes=0.5)
    assert budget.deadline == 40.0 and budget.allows(now=39.0, seconds=1.0)
    budget.record_validation(1.0, {"val": 2, "test": 3})  # 0.5 s per batch, 5 batches, twice
    assert budget.finish_seconds == pytest.approx(5.0)
    assert TimeBudget.start(10.0, 0.5, reserve_seconds=2.0).finish_seconds == 2.0
    assert not budget.allows(now=30.0, seconds=5.5) and budget.allows(now=30.0, seconds=5.0)
    assert budget.epochs_that_fit(now=35.0, epoch_seconds=10.0) == 1  # at least one
    assert TimeBudget.start(0.0, None).allows(now=1e9, seconds=1e9)
    assert budget.longest_step == 0.0
    for seconds in [0.1, 3.0] + [0.2] * (STEP_WINDOW - 1):
        budget.record_step(seconds)
    assert budget.longest_step == 3.0  # still among the latest STEP_WINDOW
    budget.record_step(0.2)
    assert budget.longest_step == 0.2
