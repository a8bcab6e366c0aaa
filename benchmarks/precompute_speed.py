#!/usr/bin/env python
"""GPSE encodings of a dataset: per-graph ``AddGPSE`` transform vs batched ``precompute_gpse``, same run.

Three ways to give every graph of RDKit's bundled NCI molecules (``embedded-molecules``, ~3,070 bare
skeletons of ~19 nodes) its ``ndata["gpse"]``, with the same model and seed:

* **AddGPSE, per graph**: the transform applied to each graph in turn, as a ``dgl.data`` dataset's
  ``transform`` does (one forward pass per graph);
* **precompute_gpse**: the whole dataset in batches of ``--batch-size`` graphs, written in place;
* **precompute_gpse, cached**: the same call again with ``cache=``: the encodings are read from disk.

The ratio column is each way's throughput over the per-graph transform's, measured in the same run. A
parity line gives the largest difference between the per-graph and batched encodings (expected ~1e-6:
a graph's encoding does not depend on its batch). The model is the one shipped with gpse-dgl unless
``--checkpoint`` names another.

Usage::

    python benchmarks/precompute_speed.py                  # all molecules, torch's default threads
    python benchmarks/precompute_speed.py --quick          # the first 300 molecules
    python benchmarks/precompute_speed.py --threads 1 --clock cpu --checkpoint gpse_model_molpcba_1.0.pt
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (CLOCKS, add_molecule_timing_options, command_line, load_average, machine_line,  # noqa: E402
                     markdown_table, set_threads_env, timing_molecules, today)


def _fresh(graphs):
    """Bare copies of the graphs (no ndata), so every way starts from the same input."""
    from gpse_dgl.utils.graph import structure_only

    return [structure_only(g) for g in graphs]


def measure(graphs, model, batch_size: int, clock) -> tuple[list, float]:
    """``(rows, parity)``: one table row per way (name, seconds, graphs/s, ratio) and the largest difference."""
    from gpse_dgl.encode import AddGPSE, precompute_gpse

    add = AddGPSE(model)
    per_graph = _fresh(graphs)
    start = clock()
    for g in per_graph:
        add(g)
    seconds = {"AddGPSE, per graph": clock() - start}

    batched = _fresh(graphs)
    start = clock()
    precompute_gpse(batched, model=model, batch_size=batch_size)
    seconds["precompute_gpse"] = clock() - start

    with tempfile.TemporaryDirectory() as cache:
        precompute_gpse(_fresh(graphs), model=model, batch_size=batch_size, cache=cache, name="bench")
        cached = _fresh(graphs)
        start = clock()
        precompute_gpse(cached, model=model, batch_size=batch_size, cache=cache, name="bench")
        seconds["precompute_gpse, cached"] = clock() - start

    parity = max(float((a.ndata["gpse"] - b.ndata["gpse"]).abs().max()) for a, b in zip(per_graph, batched))
    parity = max(parity, max(float((a.ndata["gpse"] - b.ndata["gpse"]).abs().max())
                             for a, b in zip(batched, cached)))
    base = seconds["AddGPSE, per graph"]
    rows = [(name, f"{t:.2f}", f"{len(graphs) / t:,.0f}", f"{base / t:.1f}x") for name, t in seconds.items()]
    return rows, parity


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the first 300 molecules")
    parser.add_argument("--checkpoint", default=None, help="GPSE checkpoint (default: the shipped model)")
    add_molecule_timing_options(parser)
    args = parser.parse_args(argv)
    set_threads_env(args.threads)

    import torch

    from gpse_dgl.encode import describe_checkpoint, load_gpse

    graphs = timing_molecules(args.threads, args.limit or (300 if args.quick else None))
    model = load_gpse(args.checkpoint)
    rows, parity = measure(graphs, model, args.batch_size, CLOCKS[args.clock])
    print(markdown_table(["way", f"{args.clock} s", "graphs/s", "vs per graph"], rows))
    print(f"\n{len(graphs)} molecules ({sum(g.num_nodes() for g in graphs):,} nodes), batch size {args.batch_size}; "
          f"model {describe_checkpoint(model)}")
    print(f"largest difference per-graph vs batched vs cached: {parity:.1e}")
    print(f"{machine_line()}; torch threads {torch.get_num_threads()}; load average {load_average()}; {today()}")
    print(f"command: {command_line()}")


if __name__ == "__main__":
    main()
