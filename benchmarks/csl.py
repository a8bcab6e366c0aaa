#!/usr/bin/env python
"""CSL (Circular Skip Link) with GIN and five input encodings: the CSL half of the paper's table `synthetic`.

GIN, 5 layers x 128 (recipes/downstream/csl.yaml: the paper's `hp_wl_bench` settings) trained on the
150 CSL graphs with no encoding, random features, a GPSE encoding, LapPE or RWSE, evaluated by
stratified five-fold cross-validation (3 folds train, 1 validation, 1 test), repeated ``--repeats``
times with fresh folds and seeds; the table reports train / test accuracy at the best validation
epoch, mean ± std over all folds of all repeats, next to the paper's numbers.

The GPSE row should use an encoder pretrained by our own pretraining on the embedded molecules
(``gpse-dgl pretrain recipes/quickstart.yaml`` -> ``runs/quickstart/best.pt``, or the shipped
``gpse_dgl/assets`` model); pass it with ``--checkpoint``. Without one the GPSE row is skipped.

Run (paper protocol: ten repeats of 25 runs of 200 epochs; one run took about 50 s on a 2-core machine
shared with other jobs, so ~20 min per repeat there; use ``--repeats 3`` when time-bound)::

    python benchmarks/csl.py --checkpoint runs/quickstart/best.pt --out benchmarks/results/csl
    python benchmarks/csl.py --repeats 2 --epochs 50          # a quicker look

Outputs: ``<out>/csl.md`` (table), ``<out>/csl.json`` (all runs), ``<out>/runs/`` (jobs; ``--resume``) and
``benchmarks/figures/csl.png`` (accuracy per encoding with error bars, the paper's beside; ``--figure``;
``--plot-only`` redraws it from ``<out>/csl.json``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_downstream_sweep import (PAPER, ROOT, add_script_options, describe_setup, load_jobs,  # noqa: E402
                                  markdown_table, plot_scores, publish, read_results, rows_and_checkpoint,
                                  run_sweep)

SOURCES = ("none", "random", "GPSE", "LapPE", "RWSE")  # the paper's row order
RECIPE = ROOT / "recipes" / "downstream" / "csl.yaml"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_script_options(parser, "csl")
    parser.add_argument("--repeats", type=int, default=10, help="repeats of the 5-fold CV (paper: 10)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per run (default: the recipe's 200)")
    parser.add_argument("--folds", type=int, default=None, help="run only the first N folds of each repeat")
    parser.add_argument("--sources", default=",".join(SOURCES), help="rows (default: %(default)s)")
    parser.add_argument("--gpse-samples", type=int, default=None,
                        help="draws of GPSE's random input averaged per encoding (default: the recipe's 1)")
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(read_results(args.out, "csl"), args.figure)
        return

    sources, checkpoint, notes = rows_and_checkpoint(args.sources, args.checkpoint)
    overrides = [f"general_pipeline.num_epochs={args.epochs}"] if args.epochs else []
    overrides += [f"data.max_folds={args.folds}"] if args.folds else []
    overrides += [f"device={args.device}"] if args.device else []
    overrides += [f"model.pe.gpse_samples={args.gpse_samples}"] if args.gpse_samples else []

    from gpse_dgl.utils.errors import GPSEError

    try:
        jobs = load_jobs([RECIPE], overrides, checkpoint)
        results = run_sweep(jobs, sources, args.out, args.repeats, args.resume, not args.no_progress)
    except GPSEError as exc:
        sys.exit(f"error: {exc}")
    recipe = jobs[0][1]
    table = markdown_table(results, splits=("train", "test"))
    notes.insert(0, f"CSL, GIN {recipe['model']['num_layers']} x {recipe['model']['dim_hidden']}, "
                    f"{recipe['general_pipeline']['num_epochs']} epochs; stratified 5-fold CV x {args.repeats} "
                    f"repeat(s) (paper: x 10); accuracy (%) at the best validation epoch, mean ± std over all "
                    f"folds. Train = accuracy of that epoch's training pass.")
    if checkpoint and "GPSE" in sources:
        notes.append(f"GPSE checkpoint: {checkpoint}; {recipe['model']['pe']['gpse_samples']} random-input "
                     f"draw(s) averaged per encoding")
    notes.append(describe_setup(results))
    publish(args.out, "csl", table, results, notes)
    plot(results, args.figure)


def plot(results: dict, path: Path) -> Path:
    """Train and test accuracy per encoding, mean ± std over folds and repeats; the paper's test beside."""
    by_source = results["csl"]
    runs = next(iter(by_source.values()))["num_runs"]
    return plot_scores(by_source, path, f"CSL, GIN: accuracy per input encoding (mean ± std over {runs} runs)",
                       "accuracy (%)", splits=("train", "test"), percent=True, paper=PAPER["csl"])


if __name__ == "__main__":
    main()
