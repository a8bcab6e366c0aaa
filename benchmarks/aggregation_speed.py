#!/usr/bin/env python
"""The fused neighbour sums of the downstream layers against DGL's kernels, from a small batch to a large graph.

Each op runs forward and backward (float32, ``--dim`` columns, the sum of the output as the loss) on the
``"torch"`` backend, where the compiled CPU kernel takes it, and on ``"dgl"`` (DGL's sparse kernels), over the
same graphs, interleaved, ``--rounds`` rounds of ``--repeats`` calls; medians per call and the ratio DGL / fused
(above 1: the kernel faster). The ops, as :mod:`gpse_dgl.nn.ops` names them:

* ``copy_u_sum``: GIN's sum with its self term (``self_weight=1``; GCN's without it);
* ``copy_u_mean``: GraphSAGE's mean (the same kernel's sum over the in-degree);
* ``relu_sum``: GINE's ``relu(x[u] + e)`` sum with its self term;
* ``edge_gated_sum``: GatedGCN's gated mean with edge gates.

Graphs: batches of RDKit's embedded molecules (``--batches``, molecules per batch: a training batch up to a
large evaluation batch) and uniform random graphs (``--random``, ``nodes:edges``), whose rows are read in no
order a cache likes. ``"auto"`` sends ``relu_sum`` and ``edge_gated_sum`` to their kernels at every size
(``kernels.TORCH_FIRST``), ``copy_u_sum`` and ``copy_u_mean`` to theirs on graphs of at most
``kernels.KERNEL_GRAPH_EDGES`` edges and to DGL above (``kernels.KERNEL_FIRST``); this script is where that rule is
checked. Needs the compiled kernels (``gpse-dgl info``).

Usage::

    python benchmarks/aggregation_speed.py --threads 2
    python benchmarks/aggregation_speed.py --quick      # one small batch, one round (the test)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
from _common import command_line, machine_line, markdown_table, set_threads_env, today  # noqa: E402

OPS = ("copy_u_sum", "copy_u_mean", "relu_sum", "edge_gated_sum")
PATHS = ("torch", "dgl")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="32,128,512,2048", help="molecules per batch (comma-separated)")
    parser.add_argument("--random", default="25000:200000,100000:800000",
                        help="uniform random graphs as nodes:edges (comma-separated; empty for none)")
    parser.add_argument("--dim", type=int, default=128, help="feature columns (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="calls per path and round (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="one batch of 32 molecules, one round: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.random, args.rounds, args.repeats = "32", "", 1, 1
    return args


def graphs(args) -> list[tuple[str, object]]:
    """``(label, graph)`` of every graph timed."""
    import dgl
    import torch

    from gpse_dgl.data.molecules import load_embedded_molecules

    molecules = load_embedded_molecules()
    chosen = []
    for size in (int(s) for s in args.batches.split(",") if s):
        chosen.append((f"{size} molecules", dgl.batch(molecules[:size])))
    for spec in (s for s in args.random.split(",") if s):
        nodes, edges = (int(part) for part in spec.split(":"))
        generator = torch.Generator().manual_seed(0)
        src, dst = (torch.randint(0, nodes, (edges,), generator=generator) for _ in range(2))
        chosen.append((f"random, {nodes:,} nodes", dgl.graph((src, dst), num_nodes=nodes)))
    return chosen


def operands(op: str, graph, dim: int) -> tuple:
    """Seeded float32 inputs of ``op`` on ``graph``, the ones a gradient flows into marked so."""
    import torch

    generator = torch.Generator().manual_seed(1)
    node = lambda: torch.randn(graph.num_nodes(), dim, generator=generator).requires_grad_()  # noqa: E731
    edge = lambda: torch.randn(graph.num_edges(), dim, generator=generator).requires_grad_()  # noqa: E731
    return {"copy_u_sum": lambda: (node(),), "copy_u_mean": lambda: (node(),), "relu_sum": lambda: (node(), edge()),
            "edge_gated_sum": lambda: (node(), node(), node(), edge())}[op]()


def call(op: str, graph, inputs: tuple, backend: str):
    """One forward and backward of ``op`` on ``backend``; the output."""
    from gpse_dgl.nn import ops

    if op == "copy_u_sum":
        out = ops.copy_u_sum(graph, *inputs, backend=backend, self_weight=1.0)
    elif op == "copy_u_mean":
        out = ops.copy_u_mean(graph, *inputs, backend=backend)
    elif op == "relu_sum":
        out = ops.relu_sum(graph, *inputs, backend=backend, self_weight=1.0)
    else:
        out = ops.edge_gated_sum(graph, *inputs, eps=1e-6, backend=backend)[0]
    out.sum().backward()
    return out.detach()


def time_op(op: str, graph, args) -> dict:
    """Median milliseconds per call of each path, interleaved by round."""
    import torch

    inputs = operands(op, graph, args.dim)
    # warm-up (the CSR of the graph, DGL's formats, the allocator), and the check that both paths do the same sum
    fused, by_dgl = (call(op, graph, inputs, path) for path in PATHS)
    torch.testing.assert_close(fused, by_dgl.to(fused.dtype), rtol=1e-4, atol=1e-4)
    seconds = {path: [] for path in PATHS}
    for _ in range(args.rounds):
        for path in PATHS:
            started = time.perf_counter()
            for _ in range(args.repeats):
                call(op, graph, inputs, path)
            seconds[path].append((time.perf_counter() - started) / args.repeats)
    return {path: 1e3 * statistics.median(values) for path, values in seconds.items()}


def main(argv=None) -> dict:
    args = parse_args(argv)
    set_threads_env(args.threads)
    import torch

    from gpse_dgl import kernels

    torch.set_num_threads(args.threads)
    if kernels.cpu.kernel() is None:
        raise SystemExit(f"aggregation_speed: the compiled kernels are not available here ({kernels.cpu.describe()})")
    rows, records = [], []
    for label, graph in graphs(args):
        for op in OPS:
            ms = time_op(op, graph, args)
            records.append({"graph": label, "edges": graph.num_edges(), "op": op, **ms})
            rows.append([label, f"{graph.num_edges():,}", op, f"{ms['torch']:.2f}", f"{ms['dgl']:.2f}",
                         f"{ms['dgl'] / ms['torch']:.2f}x"])
    print(markdown_table(["graph", "edges", "op", "fused kernel (ms)", "DGL (ms)", "DGL / fused"], rows))
    print(f"\nforward + backward, float32, {args.dim} columns, {args.threads} thread(s), median of {args.rounds} "
          f"interleaved rounds of {args.repeats} calls")
    print(machine_line())
    print(f"{today()}; command: {command_line()}")
    return {"records": records}


if __name__ == "__main__":
    main()
