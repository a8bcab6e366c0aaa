"""The wall-clock budget of a pretraining run: ``general_pipeline.time_limit_minutes``.

The budget counts from the start of :func:`~gpse_dgl.train.pretraining.run.pretrain` (data included) and
holds what follows training: the final evaluation of the best checkpoint, and what the caller keeps for
itself (``reserve_seconds``: ``gpse-dgl pretrain`` keeps :data:`REPORT_SECONDS` for its report, and skips
the report with a line saying so when less is left). Training is kept inside what is left:

- no epoch starts that would not end in time (its validation included);
- an epoch that would overrun anyway, because the machine slowed down during it, is cut before the
  step that would cross the line: its steps are discarded, the checkpoints of the epoch before kept;
- with ``fit_to_time_limit`` the schedule is shortened after the warm-up to the epochs that fit, and
  fitted again when the machine slows down so much that more than one epoch would not fit (a shortfall
  of one epoch is left to the cut, in the cosine's tail where the rate is near 0).

Every estimate is a duration measured in the same run: the longest of the latest steps, the latest
epochs, the latest validation (the final evaluation is counted twice, a margin for a machine that slows
down during it). The limit holds unless a single step, or the final evaluation, takes longer than these
say (on a CPU shared with busy processes one step of 0.1-0.4 s can take 10 s): the run then ends late by
about the difference.

Example
-------
>>> budget = TimeBudget.start(started=0.0, limit_minutes=1.0)
>>> budget.record_validation(2.0, eval_batches={"val": 4, "test": 4})
>>> budget.finish_seconds             # the final evaluation of validation + test, counted twice
8.0
>>> budget.allows(now=40.0, seconds=10.0), budget.allows(now=45.0, seconds=10.0)
(True, False)
>>> budget.epochs_that_fit(now=20.0, epoch_seconds=10.0)
3
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["FINISH_EVALUATIONS", "REPORT_SECONDS", "STEP_WINDOW", "TimeBudget"]

#: The final evaluation of the validation and test splits is budgeted as this many: one, and one more as
#: a margin for a machine that slows down during it.
FINISH_EVALUATIONS = 2
#: What ``gpse-dgl pretrain`` keeps for its report (data, predictions, three figures): about 3 s on an
#: idle 2-core machine with the quickstart recipe (``benchmarks/run_limits.py``), 3x that when it is busy.
REPORT_SECONDS = 10.0
#: The next step is taken to last as long as the longest of this many latest ones: on a CPU shared with
#: other processes single steps take several times the typical one.
STEP_WINDOW = 32


@dataclass
class TimeBudget:
    """Deadline and measured durations of one run; ``deadline`` is None without a time limit."""

    limit_minutes: float | None = None
    deadline: float | None = None  # time.perf_counter() reading by which the run must have ended
    reserve_seconds: float = 0.0  # kept for what the caller does after the run
    evaluation_seconds: float = 0.0  # the final evaluation, estimated from the latest validation
    recent_steps: deque = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))  # seconds each

    @classmethod
    def start(cls, started: float, limit_minutes: float | None, reserve_seconds: float = 0.0) -> "TimeBudget":
        return cls(limit_minutes, None if limit_minutes is None else started + 60.0 * limit_minutes,
                   reserve_seconds)

    @property
    def finish_seconds(self) -> float:
        """Seconds held back for what follows training."""
        return FINISH_EVALUATIONS * self.evaluation_seconds + self.reserve_seconds

    @property
    def limited(self) -> bool:
        return self.deadline is not None

    def record_validation(self, seconds: float, eval_batches: dict) -> None:
        """Re-estimate what follows training from the latest validation (``seconds`` for its
        ``eval_batches["val"]`` batches; the test split is taken to cost the same per batch)."""
        val = eval_batches.get("val", 0)
        if val:
            self.evaluation_seconds = seconds / val * (val + eval_batches.get("test", 0))

    def record_step(self, seconds: float) -> None:
        self.recent_steps.append(seconds)

    @property
    def longest_step(self) -> float:
        """The longest of the latest :data:`STEP_WINDOW` training steps (0 before the first)."""
        return max(self.recent_steps, default=0.0)

    def left(self, now: float) -> float | None:
        """Seconds until the deadline; None without a limit."""
        return None if self.deadline is None else self.deadline - now

    def allows(self, now: float, seconds: float) -> bool:
        """Whether ``seconds`` more of training still leave room for what follows it."""
        return self.deadline is None or now + seconds + self.finish_seconds <= self.deadline

    def epochs_that_fit(self, now: float, epoch_seconds: float) -> int:
        """Whole epochs of ``epoch_seconds`` that fit before the deadline, what follows training held
        back; at least 1 (the caller has a time limit)."""
        return max(1, int((self.deadline - now - self.finish_seconds) / epoch_seconds))
