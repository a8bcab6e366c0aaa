#!/usr/bin/env python
"""Time to compute explicit PSEs vs time to encode with GPSE on Erdos-Renyi graphs of growing size
(the paper's graph-size scaling experiment, appendix table ``graph_size_scaling``), on our code.

For every size n, G(n, p) graphs with a fixed average degree (``--avg-degree``, default 10: p = 10 / (n - 1);
the paper does not publish its p) totalling about ``--nodes-per-size`` nodes (100 graphs of 100 nodes,
10 of 1,000, one of 10,000 or more) are timed, best of ``--repeats``, as seconds per graph:

* ``5 PSEs (dense)``: :func:`gpse_dgl.pse.compute_pses` with ElstaticPE, LapPE, RWSE, HKdiagSE and
  EigVals, for n <= ``--dense-max`` (CycleGE is left out, as in the paper: counting cycles up to length
  10 on ER graphs of average degree 10 is infeasible, their number grows like 10^k / 2k);
* ``3 PSEs (sparse path)``: LapPE, EigVals and RWSE on the sparse solvers (``dense_limit=1``), every size
  (the path the dense-only ElstaticPE and HKdiagSE do not have; its RWSE is a seeded estimate on large
  graphs, see :mod:`gpse_dgl.pse.sparse`);
* ``GPSE encode``: :func:`gpse_dgl.encode.encode` (random input features, virtual node) with the shipped
  default model (``rdkit-base``, 16 x 256) and, with ``--paper-size`` (default on), a 20 x 512 encoder of
  the paper's size with random weights (the time does not depend on the weights), once per
  ``--precisions`` entry.

The figure is log-log with the slope of a least-squares power-law fit per curve (time ~ n^slope);
dense eigendecompositions go like n^3 per graph, GPSE like its edge count (n at a fixed degree).

Run::

    python benchmarks/er_scaling.py                       # 100 .. 1,000 nodes, about 3 CPU minutes
    python benchmarks/er_scaling.py --max-nodes 100000    # + 3,000 .. 100,000 nodes (dense PSEs to 3,000;
                                                          # minutes per size at the top)
    python benchmarks/er_scaling.py --quick               # smaller sets, about a minute
    python benchmarks/er_scaling.py --precisions fp32,bf16   # a bf16 GPSE curve (encode(precision=...))
    python benchmarks/er_scaling.py --threads 1 --clock cpu  # steadier on a machine shared with other jobs

Output: a markdown table on stdout and ``benchmarks/figures/er_scaling.png`` (``--figure``).
Timings depend on the machine and its load; the script prints both.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import CLOCK_HELP, CLOCKS, load_average, machine_line, markdown_table, today  # noqa: E402
from _figures import figure_path, loglog_with_slopes  # noqa: E402

DENSE_PSES = ["ElstaticPE", "LapPE", "RWSE", "HKdiagSE", "EigVals"]
SPARSE_PSES = ["LapPE", "EigVals", "RWSE"]
LARGE_SIZES = (3000, 10000, 30000, 100000)


def er_set(n: int, nodes_per_size: int, avg_degree: float, seed: int) -> list:
    """ER graphs of ``n`` nodes totalling about ``nodes_per_size`` nodes (at least one graph)."""
    from gpse_dgl.data.synthetic import erdos_renyi_graphs

    return erdos_renyi_graphs(max(1, round(nodes_per_size / n)), n, avg_degree=avg_degree, seed=seed)


def best_time(run, repeats: int, clock=time.perf_counter) -> float:
    """Smallest time on ``clock`` of ``repeats`` calls of ``run()``."""
    times = []
    for _ in range(repeats):
        started = clock()
        run()
        times.append(clock() - started)
    return min(times)


def pse_runner(graphs, names, dense_limit=None):
    from gpse_dgl.pse import compute_pses

    extra = {} if dense_limit is None else {"dense_limit": dense_limit}
    # the PSEs are written to ndata in place; a repeat overwrites them at the same cost
    return lambda: compute_pses(graphs, names, **extra)


def encode_runner(model, graphs, precision: str):
    import dgl

    from gpse_dgl.encode import encode

    batch = dgl.batch(graphs)
    # precision is passed only when it is not fp32, so the call also works where encode has no such argument
    extra = {} if precision == "fp32" else {"precision": precision}
    return lambda: encode(model, batch, seed=0, **extra)


def encoders(paper_size: bool) -> dict:
    """``{label: model}``: the shipped model, and a paper-sized one with seeded random weights."""
    import torch

    from gpse_dgl.encode import load_gpse
    from gpse_dgl.nn.gpse import GPSE

    shipped = load_gpse(None)
    models = {f"GPSE {shipped.num_layers} x {shipped.dim_hidden} (shipped)": shipped}
    if paper_size:
        torch.manual_seed(0)
        models["GPSE 20 x 512 (paper size)"] = GPSE(dim_hidden=512, num_layers=20).eval()
    return models


def measure(args) -> dict:
    """``{curve label: {n: seconds per graph}}``."""
    sizes = sorted(set(args.sizes) | {n for n in LARGE_SIZES if n <= args.max_nodes})
    sizes = [n for n in sizes if n <= args.max_nodes]
    models = encoders(args.paper_size)
    for model in models.values():  # first call pays for lazy imports and kernel set-up
        encode_runner(model, er_set(50, 50, args.avg_degree, 0), "fp32")()
    pse_runner(er_set(50, 50, args.avg_degree, 0), DENSE_PSES)()
    curves: dict = {}
    for n in sizes:
        graphs = er_set(n, args.nodes_per_size, args.avg_degree, seed=n)
        jobs = {}
        if n <= args.dense_max:
            jobs["5 PSEs (dense)"] = pse_runner(graphs, DENSE_PSES)
        jobs["3 PSEs (sparse path)"] = pse_runner(graphs, SPARSE_PSES, dense_limit=1)
        for label, model in models.items():
            for precision in args.precisions:
                jobs[f"{label}, {precision}"] = encode_runner(model, graphs, precision)
        for label, run in jobs.items():
            seconds = best_time(run, args.repeats if n <= 10000 else 1, CLOCKS[args.clock]) / len(graphs)
            curves.setdefault(label, {})[n] = seconds
            print(f"n = {n:>7,} ({len(graphs):>3} graphs): {label:<42} {seconds:10.4f} s/graph", flush=True)
    return curves


def table(curves: dict) -> str:
    sizes = sorted({n for values in curves.values() for n in values})
    rows = [[label] + [f"{values[n]:.3g}" if n in values else "" for n in sizes] for label, values in curves.items()]
    return markdown_table(["seconds per graph"] + [f"n = {n:,}" for n in sizes], rows)


def plot(curves: dict, args, path: Path) -> Path:
    series = {label: (list(values), list(values.values())) for label, values in curves.items()}
    styles = {label: {"linestyle": "--"} for label in curves if not label.startswith("GPSE")}
    import torch

    title = (f"Explicit PSEs vs GPSE encoding on Erdos-Renyi graphs (average degree {args.avg_degree:g}; "
             f"CPU, {torch.get_num_threads()} thread(s))")
    return loglog_with_slopes(series, path, title, "nodes per graph", f"{args.clock} time per graph (s)", styles)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")], default=[100, 200, 500, 1000],
                        help="graph sizes (default: %(default)s); --max-nodes adds 3,000 .. 100,000")
    parser.add_argument("--max-nodes", type=int, default=1000, help="largest graph size (default: %(default)s)")
    parser.add_argument("--dense-max", type=int, default=3000,
                        help="largest size timed with the dense PSEs (default: %(default)s)")
    parser.add_argument("--avg-degree", type=float, default=10.0, help="expected degree (default: %(default)s)")
    parser.add_argument("--nodes-per-size", type=int, default=10000,
                        help="nodes per size, in graphs of that size (default: %(default)s)")
    parser.add_argument("--precisions", type=lambda s: s.split(","), default=["fp32"],
                        help="GPSE encode precisions, comma-separated (default: fp32; e.g. fp32,bf16)")
    parser.add_argument("--no-paper-size", dest="paper_size", action="store_false",
                        help="time only the shipped default model, not also a 20 x 512 one")
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help=CLOCK_HELP)
    parser.add_argument("--quick", action="store_true", help="sizes 100,300,1000 and 5,000 nodes per size")
    parser.add_argument("--figure", type=Path, default=figure_path("er_scaling.png"), help="PNG path")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.nodes_per_size, args.repeats = [100, 300, 1000], 5000, 1
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{today()}; {machine_line()}; {torch.get_num_threads()} threads; {args.clock} clock; "
          f"load average {load_average()}")
    curves = measure(args)
    print("\n" + table(curves))
    plot(curves, args, args.figure)


if __name__ == "__main__":
    main()
