"""The shared learning-rate schedule (gpse_dgl.train.schedule) gives exactly the rates of the schedulers
the pretraining and downstream loops built before it, for every recipe, across resume and re-length."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gpse_dgl.train.pretraining.schema import load_pretrain_recipe
from gpse_dgl.train.downstream.schema import load_downstream_recipe
from gpse_dgl.train.schedule import LRSchedule

REPO = Path(__file__).resolve().parent.parent
PRETRAIN_RECIPES = sorted((REPO / "recipes").glob("*.yaml"))
DOWNSTREAM_RECIPES = sorted((REPO / "recipes" / "downstream").glob("*.yaml"))
PLATEAU = {"name": "reduce_on_plateau", "warmup_epochs": 5, "factor": 0.5, "patience": 2, "min_lr": 1e-4}


# ------------------------------------------------------------------ the schedulers as they were written
# before LRSchedule (pretrain.build_scheduler / set_schedule_length, downstream._scheduler and the
# downstream loop's stepping rule), kept verbatim as the reference


class _OldCosineWithWarmup:
    def __init__(self, warmup: float, total: float):
        self.warmup, self.total = float(warmup), float(total)

    def __call__(self, tick: int) -> float:
        if tick < self.warmup:
            return max(1e-6, tick / max(1.0, self.warmup))
        progress_ = (tick - self.warmup) / max(1.0, self.total - self.warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress_)))


def _old_constant(tick: int) -> float:
    return 1.0


def _old_ticks_per_epoch(general: dict, steps_per_epoch: int) -> int:
    return steps_per_epoch if general["lr_scheduler"]["interval"] == "step" else 1


def _old_build_scheduler(optimizer, general: dict, steps_per_epoch: int):
    schedule = general["lr_scheduler"]
    unit = _old_ticks_per_epoch(general, steps_per_epoch)
    total = general["num_epochs"] * unit
    factor = (_OldCosineWithWarmup(schedule["warmup_epochs"] * unit, total)
              if schedule["name"] == "cosine_with_warmup" else _old_constant)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _old_set_schedule_length(scheduler, general: dict, steps_per_epoch: int, num_epochs: int) -> None:
    factor = scheduler.lr_lambdas[0]
    if isinstance(factor, _OldCosineWithWarmup):
        unit = _old_ticks_per_epoch(general, steps_per_epoch)
        factor.warmup = float(general["lr_scheduler"]["warmup_epochs"] * unit)
        factor.total = float(num_epochs * unit)
        rates = [base * factor(scheduler.last_epoch) for base in scheduler.base_lrs]
        for group, rate in zip(scheduler.optimizer.param_groups, rates):
            group["lr"] = rate
        scheduler._last_lr = rates


def _old_downstream_scheduler(optimizer, general: dict, higher_is_better: bool):
    schedule = general["lr_scheduler"]
    if schedule["name"] == "reduce_on_plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max" if higher_is_better else "min", factor=schedule["factor"],
            patience=schedule["patience"], min_lr=schedule["min_lr"])
    if schedule["name"] == "none":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0)
    shaped = {"num_epochs": general["num_epochs"],
              "lr_scheduler": {"name": "cosine_with_warmup", "warmup_epochs": schedule["warmup_epochs"],
                               "interval": "epoch"}}
    return _old_build_scheduler(optimizer, shaped, steps_per_epoch=1)


def _old_downstream_step(scheduler, name: str, metric) -> None:
    if name == "cosine_with_warmup":
        scheduler.step()
    elif name == "reduce_on_plateau" and metric is not None and math.isfinite(metric):
        scheduler.step(metric)


# ------------------------------------------------------------------ helpers


def _optimizer(lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=lr)


def _metric(epoch: int) -> float | None:
    """A validation metric with plateaus, gaps (no evaluation) and NaNs, so ReduceLROnPlateau acts."""
    if epoch % 7 == 3:
        return None
    if epoch % 11 == 5:
        return math.nan
    return round(math.sin(epoch / 5.0) + epoch / 50.0, 1)


def _pretrain_rates(schedule_or_scheduler, optimizer, epochs: range, steps_per_epoch: int, per_step: bool,
                    new: bool) -> list[float]:
    rates = []
    for _ in epochs:
        for _ in range(steps_per_epoch):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            if new:
                schedule_or_scheduler.after_step()
            elif per_step:
                schedule_or_scheduler.step()
        if new:
            schedule_or_scheduler.after_epoch()
        elif not per_step:
            schedule_or_scheduler.step()
    return rates


def _downstream_rates(schedule_or_scheduler, optimizer, epochs: range, name: str, new: bool) -> list[float]:
    rates = []
    for epoch in epochs:
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if new:
            schedule_or_scheduler.after_epoch(_metric(epoch))
        else:
            _old_downstream_step(schedule_or_scheduler, name, _metric(epoch))
    return rates


# ------------------------------------------------------------------ pretraining recipes


@pytest.mark.parametrize("interval", ["epoch", "step"])
@pytest.mark.parametrize("path", PRETRAIN_RECIPES, ids=lambda p: p.stem)
def test_pretraining_rates_equal_the_previous_scheduler(path, interval):
    general = load_pretrain_recipe(path)["general_pipeline"]
    general["lr_scheduler"]["interval"] = interval
    # enough steps per epoch that short schedules (a 6-epoch fine-tuning stage) still give >= 60 rates
    steps, lr = max(3, -(-60 // general["num_epochs"])), general["optimizer"]["lr"]
    epochs = range(general["num_epochs"])
    old_opt, new_opt = _optimizer(lr), _optimizer(lr)
    old = _pretrain_rates(_old_build_scheduler(old_opt, general, steps), old_opt, epochs, steps,
                          interval == "step", new=False)
    new = _pretrain_rates(LRSchedule(new_opt, general["lr_scheduler"], general["num_epochs"], steps), new_opt,
                          epochs, steps, interval == "step", new=True)
    assert len(new) == steps * len(epochs) >= 60 and new == old  # warm-up and a long cosine, not a stub


@pytest.mark.parametrize("interval", ["epoch", "step"])
def test_resume_and_new_length_equal_the_previous_scheduler(interval):
    """A checkpoint of either scheduler resumes into LRSchedule; set_length matches set_schedule_length."""
    general = load_pretrain_recipe(REPO / "recipes" / "quickstart.yaml")["general_pipeline"]
    general["lr_scheduler"]["interval"] = interval
    steps, lr, per_step = 4, general["optimizer"]["lr"], interval == "step"
    old_opt = _optimizer(lr)
    old = _old_build_scheduler(old_opt, general, steps)
    before = _pretrain_rates(old, old_opt, range(10), steps, per_step, new=False)
    fitted = 30  # the epochs a time-fitted or a longer resumed run runs to
    for saved, new in ((old.state_dict(), False), (None, True)):
        new_opt = _optimizer(lr)
        schedule = LRSchedule(new_opt, general["lr_scheduler"], general["num_epochs"], steps)
        new_opt.load_state_dict(old_opt.state_dict())
        if new:  # a checkpoint written by LRSchedule itself, after the same ten epochs
            replay_opt = _optimizer(lr)
            replay = LRSchedule(replay_opt, general["lr_scheduler"], general["num_epochs"], steps)
            assert _pretrain_rates(replay, replay_opt, range(10), steps, per_step, new=True) == before
            saved = replay.state_dict()
        schedule.load_state_dict(saved)
        schedule.set_length(fitted)
        assert schedule.scheduler.get_last_lr() == [new_opt.param_groups[0]["lr"]]
        reference_opt = _optimizer(lr)
        reference = _old_build_scheduler(reference_opt, general, steps)
        reference_opt.load_state_dict(old_opt.state_dict())
        reference.load_state_dict(old.state_dict())
        _old_set_schedule_length(reference, general, steps, fitted)
        assert schedule.lr == reference_opt.param_groups[0]["lr"]
        expected = _pretrain_rates(reference, reference_opt, range(10, fitted), steps, per_step, new=False)
        assert _pretrain_rates(schedule, new_opt, range(10, fitted), steps, per_step, new=True) == expected
        assert expected[-1] < expected[0]


# ------------------------------------------------------------------ downstream recipes


def _downstream_sections():
    for path in DOWNSTREAM_RECIPES:
        general = load_downstream_recipe(path)["general_pipeline"]
        yield pytest.param(general["lr_scheduler"], general["num_epochs"], general["optimizer"]["lr"],
                           id=path.stem)
    for name in ("none", "cosine_with_warmup", "reduce_on_plateau"):
        yield pytest.param({**PLATEAU, "name": name}, 300, 0.01, id=f"section-{name}")


@pytest.mark.parametrize("higher_is_better", [True, False])
@pytest.mark.parametrize("section, num_epochs, lr", list(_downstream_sections()))
def test_downstream_rates_equal_the_previous_scheduler(section, num_epochs, lr, higher_is_better):
    general = {"num_epochs": num_epochs, "lr_scheduler": section}
    old_opt, new_opt = _optimizer(lr), _optimizer(lr)
    old_scheduler = _old_downstream_scheduler(old_opt, general, higher_is_better)
    schedule = LRSchedule(new_opt, section, num_epochs, higher_is_better=higher_is_better)
    half = range(num_epochs // 2)
    old = _downstream_rates(old_scheduler, old_opt, half, section["name"], new=False)
    assert _downstream_rates(schedule, new_opt, half, section["name"], new=True) == old
    # resume the second half from the previous scheduler's checkpoint state
    # in the loops' order: optimiser and schedule built, then the optimiser's and schedule's states loaded
    resumed_opt = _optimizer(lr)
    resumed = LRSchedule(resumed_opt, section, num_epochs, higher_is_better=higher_is_better)
    resumed_opt.load_state_dict(old_opt.state_dict())
    resumed.load_state_dict(old_scheduler.state_dict())
    rest = range(num_epochs // 2, num_epochs)
    old = _downstream_rates(old_scheduler, old_opt, rest, section["name"], new=False)
    assert _downstream_rates(resumed, resumed_opt, rest, section["name"], new=True) == old
    if section["name"] == "reduce_on_plateau":
        assert min(old) < lr  # the metric sequence makes the plateau schedule reduce the rate


def test_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="unknown learning-rate schedule"):
        LRSchedule(_optimizer(0.1), {"name": "linear"}, 10)
