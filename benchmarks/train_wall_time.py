#!/usr/bin/env python
"""Wall time of a whole ``gpse-dgl train`` job: this checkout against another checkout of the project.

Each round runs the same command, ``python -m gpse_dgl train RECIPE --set ... --out <fresh dir>``, once in
each checkout (the two in alternating order, so a slow minute of a shared machine falls on both sides),
each in its own process with that checkout first on ``PYTHONPATH``; the table gives every round's times,
the medians and the ratio baseline / this checkout (above 1: this checkout is faster). The recipe path and
its ``--set`` keys are resolved in each checkout, so both run their own version of the recipe: give keys
that exist in both. A first, untimed run in each checkout fills the caches both share (compiled kernels,
the dataset's cache), as a user's second run would find them.

Usage::

    git worktree add ../baseline <commit>
    python benchmarks/train_wall_time.py --baseline ../baseline --rounds 3 \\
        --set general_pipeline.num_epochs=2 --set general_pipeline.num_seeds=1
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]

from _common import command_line, load_average, machine_line, markdown_table, set_threads_env, today  # noqa: E402

DEFAULT_RECIPE = "recipes/downstream/zinc-replica-gine.yaml"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="root of the other checkout (a git worktree)")
    parser.add_argument("--recipe", default=DEFAULT_RECIPE, help="recipe path inside each checkout "
                        "(default: %(default)s)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="recipe override passed to both sides (repeatable)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="OMP / torch threads (default: %(default)s)")
    parser.add_argument("--no-warm-up", action="store_true", help="skip the untimed first run of each side")
    args = parser.parse_args(argv)
    for side in (ROOT, args.baseline):
        if not os.path.isfile(os.path.join(side, "gpse_dgl", "__init__.py")):
            parser.error(f"{side} is not a checkout of gpse-dgl (no gpse_dgl/__init__.py)")
        if not os.path.isfile(os.path.join(side, args.recipe)):
            parser.error(f"{side} has no recipe {args.recipe}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def run_train(checkout: str, args, out_dir: str) -> float:
    """Seconds of one ``gpse-dgl train`` in ``checkout``; raises with its stderr's last line on failure."""
    command = [sys.executable, "-m", "gpse_dgl", "train", args.recipe, "--out", out_dir, "--no-progress", "--quiet"]
    for override in args.overrides:
        command += ["--set", override]
    env = {**os.environ, "PYTHONPATH": checkout, "GPSE_DGL_PROGRESS": "0"}
    start = time.perf_counter()
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"train_wall_time: {checkout}: exit {done.returncode}: {last}")
    return seconds


def main(argv=None):
    args = parse_args(argv)
    set_threads_env(args.threads)
    sides = {"this checkout": ROOT, "baseline": os.path.abspath(args.baseline)}
    times = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="train_wall_time_") as scratch:
        def timed(name, label):
            return run_train(sides[name], args, os.path.join(scratch, f"{label}-{name.replace(' ', '-')}"))

        if not args.no_warm_up:
            for name in sides:
                timed(name, "warm-up")
        for i in range(args.rounds):
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for name in order:
                times[name].append(timed(name, f"round{i}"))
                print(f"round {i + 1}: {name} {times[name][-1]:.1f} s", flush=True)
    ratios = [b / t for b, t in zip(times["baseline"], times["this checkout"])]
    rows = [[f"round {i + 1}", f"{b:.1f}", f"{t:.1f}", f"{r:.2f}x"]
            for i, (b, t, r) in enumerate(zip(times["baseline"], times["this checkout"], ratios))]
    rows.append(["median", f"{statistics.median(times['baseline']):.1f}",
                 f"{statistics.median(times['this checkout']):.1f}", f"{statistics.median(ratios):.2f}x"])
    print()
    print(f"`{command_line(argv and ['benchmarks/train_wall_time.py', *argv])}`, {today()}, load {load_average()}")
    print(machine_line())
    print(markdown_table(["", "baseline (s)", "this checkout (s)", "baseline / this"], rows))


if __name__ == "__main__":
    main()
