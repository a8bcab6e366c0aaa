#!/usr/bin/env python
"""Pretraining steps in bf16 on the CPU with and without row buckets, against fp32, in one run.

Each variant runs ``--steps`` training steps of a recipe's model over its real training batches (the
same batches in the same order: every step a new number of nodes and edges) in a fresh process, and
reports milliseconds per step over the first and the second half of the steps and the process's memory
at the end:

* ``fp32``: no autocast;
* ``bf16``: ``torch.autocast`` alone: oneDNN compiles a kernel for each new row count;
* ``bf16 + buckets``: :func:`gpse_dgl.utils.precision.autocast`, which pads the rows of every linear layer
  to a few bucket sizes (:mod:`gpse_dgl.utils.row_buckets`).

Ratios are against plain ``bf16`` in the same run. Needs a CPU with native bf16 (``avx512_bf16`` or AMX)
to mean anything.

Usage::

    python benchmarks/row_buckets.py --recipe recipes/quickstart.yaml --steps 1200 --threads 2
    python benchmarks/row_buckets.py --recipe recipes/rdkit-base.yaml --steps 400 --threads 2
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, machine_line, markdown_table, set_threads_env, today  # noqa: E402

VARIANTS = ("fp32", "bf16", "bf16 + buckets")


def run_variant(recipe_path: str, variant: str, steps: int) -> dict:
    """Time ``steps`` training steps of ``variant`` in this process; return the figures."""
    import contextlib

    import torch

    from gpse_dgl.nn.loss import gpse_loss
    from gpse_dgl.train.pretraining.schema import load_pretrain_recipe
    from gpse_dgl.train.pretraining.data import build_pretraining_data
    from gpse_dgl.train.pretraining import build_model, build_optimizer, model_config_from_recipe, training_features
    from gpse_dgl.utils.precision import autocast

    recipe = load_pretrain_recipe(recipe_path, ["device=cpu"])
    general = recipe["general_pipeline"]
    data = build_pretraining_data(recipe["data"], log=lambda message: None)
    config = model_config_from_recipe(recipe["model"], data)
    torch.manual_seed(0)
    model = build_model(config, recipe["model"]["backend"]).train()
    optimizer = build_optimizer(model, general["optimizer"])
    order = torch.Generator().manual_seed(0)
    features = torch.Generator().manual_seed(1)
    contexts = {"fp32": contextlib.nullcontext, "bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
                "bf16 + buckets": lambda: autocast("bf16", "cpu")}
    train = data.splits["train"]

    def batches():  # epoch after epoch, each in a new order
        while True:
            yield from train.batches(general["batch_size"], shuffle=True, generator=order)

    times = []
    for _, (graph, node_true, graph_true) in zip(range(steps), batches()):
        start = time.perf_counter()
        x = training_features(graph, config["encoder"]["dim_in"], features)
        with contexts[variant]():
            node_pred, graph_pred = model(graph, x)
        loss, _ = gpse_loss(node_pred, node_true, graph_pred, graph_true, graph.batch_num_nodes(), **general["loss"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    with open("/proc/self/statm") as statm:
        rss_mb = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    half = len(times) // 2
    return {"variant": variant, "steps": len(times), "first_ms": 1000 * sum(times[:half]) / half,
            "second_ms": 1000 * sum(times[half:]) / (len(times) - half), "rss_mb": rss_mb}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/quickstart.yaml")
    parser.add_argument("--steps", type=int, default=1200, help="training steps per variant")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # a child process: time one variant
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.recipe, args.variant, args.steps)))
        return 0
    set_threads_env(args.threads)  # exported: the children inherit it
    results = []
    for variant in VARIANTS:
        child = subprocess.run([sys.executable, __file__, "--recipe", args.recipe, "--steps", str(args.steps),
                                "--variant", variant], capture_output=True, text=True, check=True)
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
    base = next(r for r in results if r["variant"] == "bf16")
    mean = lambda r: (r["first_ms"] + r["second_ms"]) / 2  # noqa: E731
    rows = [[r["variant"], f"{r['first_ms']:.1f}", f"{r['second_ms']:.1f}", f"{mean(base) / mean(r):.2f}x",
             f"{r['rss_mb']:,.0f}"] for r in results]
    print(markdown_table(["variant", "ms/step, first half", "ms/step, second half", "speed vs bf16",
                          "RSS at the end (MB)"], rows))
    print(f"\n{args.recipe}: {results[0]['steps']} training steps per variant, each in a fresh process")
    print(machine_line())
    print(f"{today()}; command: {command_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
