"""A simulated clock for time-limited pretraining runs in tests.

Reading :class:`WorkClock` is free; it advances only by the work done (each training step, each
evaluation batch), so time-limited runs are deterministic and model a machine's speed, including a
machine that slows down mid-run.
"""
from __future__ import annotations

from gpse_dgl.train.pretraining import loop, run as run_module


class WorkClock:
    """Stands in for the ``time`` module of the run: ``step_seconds`` per training step (``factor`` times
    that after the first ``slow_after`` steps), ``eval_seconds`` per evaluation batch (``final_factor`` times that
    once training has ended)."""

    def __init__(self, step_seconds=0.2, eval_seconds=0.1, slow_after=None, factor=1.0, final_factor=1.0):
        self.now, self.steps, self.training_over = 0.0, 0, False
        self.step_seconds, self.eval_seconds = step_seconds, eval_seconds
        self.slow_after, self.factor, self.final_factor = slow_after, factor, final_factor

    def perf_counter(self) -> float:
        return self.now

    def step(self) -> None:
        self.steps += 1
        slow = self.slow_after is not None and self.steps > self.slow_after
        self.now += self.step_seconds * (self.factor if slow else 1.0)

    def evaluation(self, batches: int) -> None:
        self.now += batches * self.eval_seconds * (self.final_factor if self.training_over else 1.0)


def install_clock(monkeypatch, clock: WorkClock) -> WorkClock:
    """Let ``clock`` stand for the ``time`` module of the run and of its loop, advanced by the loop's
    training steps and evaluations."""
    for module in (run_module, loop):
        monkeypatch.setattr(module, "time", clock)
    step, evaluate, final = loop.Trainer.training_step, loop.Trainer.evaluate, loop.Trainer.final_evaluation

    def timed_step(self, *args):
        out = step(self, *args)
        clock.step()
        return out

    def timed_evaluate(self, split):
        out = evaluate(self, split)
        clock.evaluation(len(self.eval_batches[split]))
        return out

    def timed_final(self, stop_reason):
        clock.training_over = True
        return final(self, stop_reason)

    monkeypatch.setattr(loop.Trainer, "training_step", timed_step)
    monkeypatch.setattr(loop.Trainer, "evaluate", timed_evaluate)
    monkeypatch.setattr(loop.Trainer, "final_evaluation", timed_final)
    return clock
