#!/usr/bin/env python
"""Held-out R^2 of a pretrained GPSE checkpoint, per PSE (the paper's table ``pse_perf``) and per column.

Evaluates a pretraining checkpoint (``best.pt`` / ``last.pt`` of ``gpse-dgl pretrain``, or a shipped model
by name: ``rdkit-base``, the default, or ``quickstart``) on the validation and test splits of its recipe's
data, with the metric of :mod:`gpse_dgl.train.pretraining.r2` (the authors' ``eval_r2``). Besides the seeded
random input features that ``gpse-dgl pretrain`` evaluates with, it can score two diagnostics of how much
the model uses its random input:

* ``--input zeros``: every input feature 0 (a model that ignores its random input scores the same);
* ``--input mean-of-K``: predictions averaged over K independent draws.

It also reports, per split, how many graphs make each graph-level column non-constant and each node
column scorable, so that columns decided by a handful of graphs are visible.

Run::

    python benchmarks/pretrain_quality.py                                   # shipped default model
    python benchmarks/pretrain_quality.py --checkpoint quickstart --input seeded --input zeros
    python benchmarks/pretrain_quality.py --checkpoint runs/quickstart/best.pt --columns
    python benchmarks/pretrain_quality.py --input seeded --input zeros --input mean-of-8
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpse_dgl.utils import checkpoint as ckpt  # noqa: E402
from gpse_dgl.train import pretraining as pt  # noqa: E402
from gpse_dgl.train.pretraining.data import build_pretraining_data  # noqa: E402
from gpse_dgl.train.pretraining.r2 import R2Accumulator  # noqa: E402
from gpse_dgl.train.runtime import derive_seed  # noqa: E402
from gpse_dgl.train.pretraining.schema import validate_pretrain_recipe  # noqa: E402
# the paper's table pse_perf: test R^2 of the 20 x 512 model trained on 5 % of MolPCBA (16,177 graphs)
from gpse_dgl.train.pretraining.report import PAPER_TEST_R2 as PAPER_TEST  # noqa: E402


def evaluate(model, batches, data, seed: int, dim_in: int, mode: str) -> dict:
    """R^2 report (:meth:`R2Accumulator.compute`: ``r2``, ``r2_per_pse``, ``r2_per_column``) of ``model``
    on ``batches`` with inputs of kind ``mode``."""
    if mode == "seeded":  # exactly what gpse-dgl pretrain reports
        return pt.evaluate(model, batches, data, seed, torch.device("cpu"), dim_in)
    accumulator = R2Accumulator(data.columns, data.num_node_columns)
    feature_seed = derive_seed(seed, "evaluation features")
    with torch.no_grad():
        for graph, node_true, graph_true in batches:
            if mode == "zeros":
                node_pred, graph_pred = model(graph, torch.zeros(graph.num_nodes(), dim_in))
            elif mode.startswith("mean-of-"):
                draws = int(mode.split("-")[-1])
                outputs = [model(graph, pt.evaluation_features(graph, dim_in, feature_seed + d))
                           for d in range(draws)]
                node_pred = sum(o[0] for o in outputs) / draws
                graph_pred = sum(o[1] for o in outputs) / draws
            else:
                raise SystemExit(f"unknown --input {mode!r}: use seeded, zeros or mean-of-K")
            accumulator.update(node_pred, node_true, graph_pred, graph_true, graph.batch_num_nodes())
    return accumulator.compute()


def scored_graphs(collection, num_node_columns: int) -> list[int]:
    """Per column: graphs where a node column is non-constant / graphs off a graph column's minimum."""
    counts = []
    bounds = collection.node_offsets.tolist()
    targets = collection.node_targets
    for column in range(num_node_columns):
        counts.append(sum(int(targets[a:b, column].std(unbiased=False) > 1e-6) for a, b in zip(bounds, bounds[1:])
                          if b > a))
    graph = collection.graph_targets
    counts += ((graph > graph.min(0).values + 1e-6).sum(0)).tolist()
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None,
                        help="pretraining checkpoint: a file or a shipped model's name (default: the shipped default model)")
    parser.add_argument("--input", action="append", default=None,
                        help="seeded (default), zeros or mean-of-K; repeat to compare")
    parser.add_argument("--columns", action="store_true", help="also print the R^2 of every column")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from gpse_dgl.encode.models import resolve_checkpoint

    path = str(resolve_checkpoint(args.checkpoint)[0])
    payload = ckpt.load_pretrain_checkpoint(path)
    recipe = validate_pretrain_recipe(payload["recipe"], source=path)
    data = build_pretraining_data(recipe["data"], log=lambda *a: None)
    model = pt.build_model(payload["model_config"], "auto")
    model.load_state_dict(payload["model_state"])
    model.eval()
    dim_in = payload["model_config"]["encoder"]["dim_in"]
    batches = {split: list(data.splits[split].batches(512)) for split in ("val", "test")}
    modes = args.input or ["seeded"]
    print(f"checkpoint {path} (epoch {payload.get('best_epoch', payload.get('epoch'))}); "
          f"splits {len(data.splits['val'])} / {len(data.splits['test'])} graphs")
    reports = {(mode, split): evaluate(model, batches[split], data, recipe["seed"], dim_in, mode)
               for mode in modes for split in ("val", "test")}
    header = " ".join(f"{mode[:10] + ' ' + split:>16}" for mode in modes for split in ("val", "test"))
    print(f"\n{'PSE':<11} {header} {'paper test':>11}")
    for name in list(dict.fromkeys(n for n, _ in data.columns)) + ["Overall"]:
        row = [report["r2"] if name == "Overall" else report["r2_per_pse"][name] for report in reports.values()]
        print(f"{name:<11} " + " ".join(f"{v:>16.4f}" for v in row) + f" {PAPER_TEST.get(name, float('nan')):>11.4f}")
    if args.columns:
        counts = {split: scored_graphs(data.splits[split], data.num_node_columns) for split in ("val", "test")}
        print(f"\n{'column':<14} " + " ".join(f"{mode[:10] + ' ' + split:>16}" for mode in modes
                                              for split in ("val", "test")) + "   scored graphs (val / test)")
        for i, (name, column) in enumerate(data.columns):
            values = " ".join(f"{report['r2_per_column'][i]:>16.3f}" for report in reports.values())
            print(f"{name + '[' + str(column) + ']':<14} {values}   {counts['val'][i]} / {counts['test'][i]}")


if __name__ == "__main__":
    main()
