#!/usr/bin/env python
"""How much of the pretraining R^2 can a model bounded by 1-WL reach at most?

A message-passing encoder given identical inputs on every node (or one that ignores its random input)
is bounded by 1-WL colour refinement: two nodes of a graph with the same stable colour get the same
encoding, and two graphs with the same colour histogram the same graph prediction. This script scores
the best predictions such a model can make on a pretraining split, with the metric of
``gpse_dgl.train.pretraining.r2`` (per-graph R^2 for node columns, across graphs for graph columns):

* node columns: every node predicts the mean target of its colour class within its graph (the
  least-squares optimum under the constraint);
* graph columns: every graph predicts the mean target of the split's graphs with the same colour
  histogram (an oracle that has seen the split's own targets: an upper bound, not a model).

Refinement runs with the virtual node the model uses (one extra node joined to every node) until the
partition is stable. If the bound is near 1, the R^2 a small model loses is lost to optimisation and
capacity, not to 1-WL expressivity.

Run::

    python benchmarks/wl_ceiling.py --recipe recipes/quickstart.yaml --split val

Prints the bound per PSE and overall, the columns below 0.99, and how many colour histograms are
distinct among the split's graphs.
"""
from __future__ import annotations

import argparse
import hashlib

import torch

from gpse_dgl.train.pretraining.schema import load_pretrain_recipe
from gpse_dgl.train.pretraining.data import build_pretraining_data
from gpse_dgl.train.pretraining.r2 import R2Accumulator, group_scores, nanmean


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def wl_colours(num_nodes: int, src: list[int], dst: list[int]) -> tuple[list[str], str]:
    """Stable 1-WL colours of the real nodes (virtual node added) and the graph's colour-histogram hash."""
    neighbours = [[] for _ in range(num_nodes + 1)]
    for u, v in zip(src, dst):
        neighbours[v].append(u)  # edges are stored in both directions
    for i in range(num_nodes):
        neighbours[i].append(num_nodes)
        neighbours[num_nodes].append(i)
    colour = ["node"] * num_nodes + ["virtual"]
    classes = len(set(colour))
    while True:
        colour = [_digest(colour[i] + "|" + ",".join(sorted(colour[j] for j in neighbours[i])))
                  for i in range(num_nodes + 1)]
        refined = len(set(colour))
        if refined == classes:
            break
        classes = refined
    return colour[:num_nodes], _digest(f"{num_nodes}|" + ",".join(sorted(colour)))


def wl_bound(collection):
    """Best 1-WL-constrained ``(node_pred, graph_pred)`` for a :class:`GraphCollection` and the number
    of distinct colour histograms."""
    node_pred = torch.zeros_like(collection.node_targets)
    histograms = []
    for g in range(len(collection)):
        n = int(collection.num_nodes[g])
        e0, e1 = int(collection.edge_offsets[g]), int(collection.edge_offsets[g + 1])
        n0 = int(collection.node_offsets[g])
        colours, histogram = wl_colours(n, collection.src[e0:e1].tolist(), collection.dst[e0:e1].tolist())
        histograms.append(histogram)
        members: dict[str, list[int]] = {}
        for i, c in enumerate(colours):
            members.setdefault(c, []).append(n0 + i)
        for rows in members.values():
            node_pred[rows] = collection.node_targets[rows].mean(0)
    graph_pred = torch.zeros_like(collection.graph_targets)
    same: dict[str, list[int]] = {}
    for g, histogram in enumerate(histograms):
        same.setdefault(histogram, []).append(g)
    for rows in same.values():
        graph_pred[rows] = collection.graph_targets[rows].mean(0)
    return node_pred, graph_pred, len(same)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="recipes/quickstart.yaml", help="pretraining recipe")
    parser.add_argument("--split", default="val", choices=("train", "val", "test"))
    args = parser.parse_args(argv)
    recipe = load_pretrain_recipe(args.recipe)
    data = build_pretraining_data(recipe["data"], log=lambda *a: None)
    collection = data.splits[args.split]
    node_pred, graph_pred, distinct = wl_bound(collection)
    accumulator = R2Accumulator(data.columns, data.num_node_columns)
    accumulator.update(node_pred, collection.node_targets, graph_pred, collection.graph_targets,
                       collection.num_nodes)
    r2, _ = accumulator.column_scores()
    print(f"{args.recipe}, {args.split} split: {len(collection)} graphs, "
          f"{distinct} distinct 1-WL colour histograms")
    print(f"{'PSE':<12} {'1-WL bound':>10}")
    for name, score in group_scores(r2, data.columns).items():
        print(f"{name:<12} {score:>10.4f}")
    print(f"{'Overall':<12} {nanmean(r2):>10.4f}")
    below = [f"{name}[{col}] {score:.3f}" for (name, col), score in zip(data.columns, r2) if score < 0.99]
    print("columns below 0.99:", ", ".join(below) or "none")


if __name__ == "__main__":
    main()
