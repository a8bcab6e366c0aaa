#!/usr/bin/env python
"""How `gpse-dgl pretrain` runs on a real machine: an epoch under torchrun, and a time limit under load.

Two measurements, each of the real command on the quickstart recipe (unchanged unless said):

* ``torchrun``: one epoch in one process against one epoch in ``torchrun --standalone --nproc_per_node=N``
  (each process takes its share of the cores by default); the epoch's seconds come from ``metrics.json``
  (``history[0].seconds``, validation included), the world size and threads from its ``environment``.
  Alternated ``--repeats`` times; the ratio is N-process / 1-process of the medians.
* ``time-limit``: ``--set general_pipeline.time_limit_minutes=L`` with ``--busy`` processes spinning on
  the CPU from ``--busy-after`` seconds on (a machine that becomes busier mid-run): the run's own wall
  time (``wall_time_seconds``, from the start of pretraining to the end of the final evaluation), the
  command's (imports and the report included), how training stopped, the schedule's re-fits, and
  whether the report was written.

Usage::

    python benchmarks/run_limits.py torchrun --repeats 2
    python benchmarks/run_limits.py time-limit --limit-minutes 2 --busy 2 --busy-after 45
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, load_average, machine_line, markdown_table, today  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PRETRAIN = [sys.executable, "-m", "gpse_dgl", "pretrain"]


def run_pretrain(prefix: list, recipe: str, out: Path, sets: list) -> tuple[dict, float]:
    """Run ``prefix + [recipe, --out out, --set ...]``; return its metrics.json and the command's wall time."""
    argv = prefix + [recipe, "--out", str(out), "--overwrite", "--no-progress"]
    for item in sets:
        argv += ["--set", item]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return json.loads((out / "metrics.json").read_text()), seconds


def torchrun_epochs(args, work: Path) -> str:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={args.processes}", "-m", "gpse_dgl", "pretrain"]
    sets = ["general_pipeline.num_epochs=1"]
    epochs = {1: [], args.processes: []}
    environments = {}
    for repeat in range(args.repeats):
        for processes, prefix in ((1, PRETRAIN), (args.processes, torchrun)):
            metrics, _ = run_pretrain(prefix, args.recipe, work / f"p{processes}-{repeat}", sets)
            epochs[processes].append(metrics["history"][0]["seconds"])
            environments[processes] = metrics["environment"]
    one = statistics.median(epochs[1])
    rows = [[processes, environments[processes]["world_size"], environments[processes]["threads"],
             " / ".join(f"{s:.1f}" for s in seconds), f"{statistics.median(seconds):.1f}",
             f"{statistics.median(seconds) / one:.2f}x"] for processes, seconds in epochs.items()]
    return markdown_table(["processes", "world_size (metrics.json)", "threads per process", "epoch seconds",
                           "median", "vs 1 process"], rows)


def time_limit_under_load(args, work: Path) -> str:
    busy: list = []

    def start_busy():
        busy.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy))

    timer = threading.Timer(args.busy_after, start_busy)
    timer.start()
    try:
        metrics, seconds = run_pretrain(PRETRAIN, args.recipe, work / "limited",
                                        [f"general_pipeline.time_limit_minutes={args.limit_minutes}"])
    finally:
        timer.cancel()
        for process in busy:
            process.kill()
    limit = 60 * args.limit_minutes
    report = (work / "limited" / "report.html").exists()
    row = [f"{limit:.0f}", args.busy, f"{args.busy_after:g}", f"{metrics['wall_time_seconds']:.1f}",
           f"{metrics['wall_time_seconds'] - limit:+.1f}", f"{seconds:.1f}", metrics["epochs_completed"],
           metrics["num_epochs"], len(metrics.get("refits", [])), f"{metrics['final_evaluation_seconds']:.1f}",
           "yes" if report else "no", metrics["status"]]
    return markdown_table(["limit (s)", "busy processes", "from (s)", "run wall (s)", "vs limit", "command (s)",
                           "epochs", "schedule", "re-fits", "final evaluation (s)", "report", "status"],
                          [row], align="rrrrrrrrrrll")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("torchrun", "time-limit"))
    parser.add_argument("--recipe", default="recipes/quickstart.yaml")
    parser.add_argument("--processes", type=int, default=2, help="torchrun: processes (default 2)")
    parser.add_argument("--repeats", type=int, default=2, help="torchrun: alternated repeats (default 2)")
    parser.add_argument("--limit-minutes", type=float, default=2.0, help="time-limit: the limit (default 2)")
    parser.add_argument("--busy", type=int, default=2, help="time-limit: busy processes (default 2)")
    parser.add_argument("--busy-after", type=float, default=45.0,
                        help="time-limit: seconds after the start when they begin (default 45)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpse-run-limits-") as work:
        table = (torchrun_epochs if args.what == "torchrun" else time_limit_under_load)(args, Path(work))
    print(f"{today()}; {machine_line()}; load before {load_average()}")
    print(command_line())
    print(table)


if __name__ == "__main__":
    main()
