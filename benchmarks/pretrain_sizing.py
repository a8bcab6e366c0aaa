#!/usr/bin/env python
"""Size a long pretraining run before starting it: corpus scan, PSE targets, seconds per epoch per model size.

For a recipe (default ``recipes/rdkit-base.yaml``) this measures

1. the scan of the source corpus (``rdkit-molecules``: reading every molecule file inside RDKit and
   reducing it to unique skeletons, with the dataset cache bypassed);
2. the PSE targets of every graph the recipe trains and evaluates on (``build_pretraining_data`` into a
   fresh temporary cache, so they are computed, not reused);
3. for each candidate size ``LAYERSxWIDTH``: fp32 training steps of the recipe's loss, optimiser,
   batch size and head settings (the graph head as wide as the encoder), timed with this process's
   CPU time over ``--steps`` steps after one untimed step; seconds per epoch = seconds per step x steps
   per epoch of the training split. The whole run is then estimated as ``num_epochs`` epochs plus one
   forward pass over validation per epoch (an eval step is costed at a third of a training step).

CPU time with one thread is steady on a shared machine; the figures are per thread, so a run with two
threads on an idle 2-core machine takes roughly its CPU time / 1.3 of wall time (RESULTS section 2b).

Usage::

    python benchmarks/pretrain_sizing.py --quick          # 500 graphs, 2 timed steps per size (~1-2 min)
    python benchmarks/pretrain_sizing.py                  # the full corpus, 20x512, 16x256, 12x128
    python benchmarks/pretrain_sizing.py --sizes 16x256 --steps 10 --recipe recipes/quickstart.yaml
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import command_line, machine_line, markdown_table, set_threads_env, today  # noqa: E402

EVAL_STEP_COST = 1 / 3   # a forward pass without backward or optimiser step, relative to a training step


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default=os.path.join(os.path.dirname(HERE), "recipes", "rdkit-base.yaml"))
    ap.add_argument("--sizes", default="20x512,16x256,12x128", help="comma-separated LAYERSxWIDTH candidates")
    ap.add_argument("--steps", type=int, default=5, help="timed training steps per size (default 5)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--quick", action="store_true",
                    help="check the script: 500 graphs, no corpus scan, 2 timed steps per size")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="recipe override key=value")
    args = ap.parse_args(argv)
    args.sizes = [tuple(int(t) for t in size.lower().split("x")) for size in args.sizes.split(",") if size]
    if args.quick:
        args.overrides.append("data.max_graphs=500")
        args.steps = min(args.steps, 2)
    return args


def time_scan() -> dict:
    from gpse_dgl.data.rdkit_corpus import scan_rdkit_molecules

    start = time.perf_counter()
    graphs, _, report = scan_rdkit_molecules()
    return {"seconds": time.perf_counter() - start, "skeletons": len(graphs), "molecules": report["total"],
            "files": report["files_used"]}


def time_targets(recipe: dict):
    from gpse_dgl.train.pretraining.data import build_pretraining_data

    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        data = build_pretraining_data({**recipe["data"], "cache_dir": cache}, log=lambda *a: None)
        return data, time.perf_counter() - start


def time_steps(recipe: dict, data, layers: int, width: int, steps: int) -> dict:
    import torch

    from gpse_dgl.train.pretraining.evaluation import pretraining_loss
    from gpse_dgl.train.pretraining.model import (build_model, build_optimizer, model_config_from_recipe,
                                                  num_parameters, training_features)

    general = recipe["general_pipeline"]
    model_recipe = {**recipe["model"], "num_layers": layers, "dim_hidden": width, "graph_head_hidden": width}
    torch.manual_seed(0)
    model = build_model(model_config_from_recipe(model_recipe, data), backend=model_recipe["backend"])
    optimizer = build_optimizer(model, general["optimizer"])
    generator = torch.Generator().manual_seed(0)
    train = data.splits["train"]
    batches = train.batches(general["batch_size"], generator, shuffle=True)
    model.train()
    elapsed = 0.0
    for step in range(steps + 1):
        graph, node_true, graph_true = next(batches)
        x = training_features(graph, model_recipe["dim_in"], generator)
        start = time.perf_counter()
        node_pred, graph_pred = model(graph, x)
        loss, _ = pretraining_loss(node_pred, node_true, graph_pred, graph_true, graph.batch_num_nodes(),
                                   general["loss"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if general["clip_grad_norm"] is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), general["clip_grad_norm"], foreach=True)
        optimizer.step()
        if step:  # the first step allocates and warms caches
            elapsed += time.perf_counter() - start
    per_step = elapsed / steps
    steps_per_epoch = train.num_batches(general["batch_size"])
    eval_steps = data.splits["val"].num_batches(general["eval_batch_size"] or general["batch_size"])
    eval_scale = (general["eval_batch_size"] or general["batch_size"]) / general["batch_size"]
    per_epoch = per_step * (steps_per_epoch + EVAL_STEP_COST * eval_scale * eval_steps)
    return {"size": f"{layers} x {width}", "parameters": num_parameters(model),
            "checkpoint_mb": num_parameters(model) * 4 / 2 ** 20, "seconds_per_step": per_step,
            "steps_per_epoch": steps_per_epoch, "seconds_per_epoch": per_epoch,
            "run_hours": per_epoch * general["num_epochs"] / 3600}


def main(argv=None):
    args = parse_args(argv)
    set_threads_env(args.threads)
    import torch

    from gpse_dgl.train.pretraining.schema import load_pretrain_recipe

    torch.set_num_threads(args.threads)
    recipe = load_pretrain_recipe(args.recipe, args.overrides)
    print(f"# pretraining sizing, {today()}\n{machine_line()}\n`{command_line()}`\n")
    if recipe["data"]["source"] == "rdkit-molecules" and not args.quick:
        scan = time_scan()
        print(f"corpus scan: {scan['files']} files, {scan['molecules']:,} molecules, {scan['skeletons']:,} unique "
              f"skeletons in {scan['seconds']:.1f} s (wall)")
    data, seconds = time_targets(recipe)
    sizes = {name: len(part) for name, part in data.splits.items()}
    print(f"targets: {sum(sizes.values()):,} graphs ({sizes}) in {seconds:.1f} s (wall, data preparation "
          f"included, {torch.get_num_threads()} thread(s))\n")
    rows = [time_steps(recipe, data, layers, width, args.steps) for layers, width in args.sizes]
    epochs = recipe["general_pipeline"]["num_epochs"]
    print(markdown_table(
        ["size", "parameters", "fp32 MB", "s / step", "steps / epoch", "s / epoch", f"{epochs} epochs (h)"],
        [[r["size"], f"{r['parameters']:,}", f"{r['checkpoint_mb']:.1f}", f"{r['seconds_per_step']:.3f}",
          r["steps_per_epoch"], f"{r['seconds_per_epoch']:.0f}", f"{r['run_hours']:.1f}"] for r in rows]))
    print(f"\nfp32 wall seconds with {args.threads} thread(s), batch {recipe['general_pipeline']['batch_size']}, "
          f"{args.steps} timed steps per size after one untimed step.")


if __name__ == "__main__":
    main()
