#!/usr/bin/env python
"""Time and peak memory of LapPE, EigVals and RWSE on graph families of 10^4-10^6 nodes (sparse path).

Families (:mod:`gpse_dgl.data.shape_families`): hubs (star, star plus 100 isolated nodes, double star, K(4, n-4)),
chains and meshes (path, cycle, 2-D grid), a power law (Barabasi-Albert, 2 edges per node), many tiny
components, half the nodes isolated, and a cycle given with self-loops and every edge three times. Each
(family, size) runs ``compute_pses([g], ["LapPE", "EigVals", "RWSE"])`` in its own subprocess, so that its
peak resident memory (``ru_maxrss``) is its own; the graph is built before the clock starts. Columns:
simple undirected edges, wall and CPU seconds of the call, peak RSS of the process (imports and graph included) and the resident memory
before the call, the LapPE solver per large component (from the ``gpse_dgl`` log) and the RWSE method.
A graph above ``--sparse-limit`` nodes is refused; the row then shows the one-line message and its time.

Usage::

    python benchmarks/pse_families.py --quick                   # 10^4 nodes, every family: ~1 minute
    python benchmarks/pse_families.py --sizes 10000,100000,1000000 --threads 2
    python benchmarks/pse_families.py --families star,path --sizes 1000000 --timeout 600

Timings depend on the machine and its load; the script prints the CPU model, thread count and load average.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import command_line, current_rss_mb, load_average, machine_line, markdown_table, peak_rss_mb  # noqa: E402

NAMES = ["LapPE", "EigVals", "RWSE"]
DEFAULT_FAMILIES = ("star", "star+isolated", "double_star", "complete_bipartite", "path", "cycle", "grid",
                    "barabasi_albert", "tiny_components", "isolated", "loops_multi")


def run_one(family: str, size: int, sparse_limit: int) -> dict:
    """One (family, size) in this process."""
    import logging

    import torch

    from gpse_dgl.data.shape_families import family_graph
    from gpse_dgl.pse import compute_pses
    from gpse_dgl.utils.errors import GPSEError
    from gpse_dgl.utils.graph import graph_simple_edges

    solvers = []

    class _Solvers(logging.Handler):
        def emit(self, record):
            solvers.append(record.args[0])

    log = logging.getLogger("gpse_dgl.pse.sparse")
    log.setLevel(logging.INFO)
    log.addHandler(_Solvers())
    g = family_graph(family, size)
    if family == "star+isolated":
        g = family_graph("star", size - 100)
        g.add_nodes(100)
    n, edges = g.num_nodes(), int(graph_simple_edges(g)[0].shape[0])
    row = {"family": family, "nodes": n, "edges": edges, "threads": torch.get_num_threads(),
           "rss_before_mb": round(current_rss_mb())}
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        compute_pses([g], NAMES, sparse_limit=sparse_limit)
        row["refused"] = ""
    except GPSEError as err:
        row["refused"] = str(err)
    row["wall_s"] = round(time.perf_counter() - wall, 2)
    row["cpu_s"] = round(time.process_time() - cpu, 2)
    row["peak_rss_mb"] = round(peak_rss_mb())
    row["solver"] = "/".join(sorted(set(solvers))) or "dense components"
    row["rwse"] = "exact" if n * (2.0 * edges + n) <= 2e8 else "powers + probes"  # sparse_rwse's "auto" rule
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(DEFAULT_FAMILIES))
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated node counts")
    parser.add_argument("--threads", type=int, default=2, help="OpenMP / BLAS / torch threads of each run")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per (family, size) before it is stopped")
    parser.add_argument("--sparse-limit", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="10^4 nodes only")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # internal: FAMILY SIZE in this process
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.sparse_limit)))
        return 0
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    print(f"# {command_line(argv if argv is None else [sys.argv[0]] + list(argv))}")
    print(f"# {machine_line()}; {args.threads} threads; load average {load_average()}", flush=True)
    env = dict(os.environ, **{v: str(args.threads) for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                             "OPENBLAS_NUM_THREADS")})
    rows = []
    for size in sizes:
        for family in families:
            cmd = [sys.executable, os.path.abspath(__file__), "--one", family, str(size),
                   "--sparse-limit", str(args.sparse_limit)]
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                rows.append({"family": family, "nodes": size, "stopped": f"stopped after {args.timeout:g} s"})
                print(f"{family} {size:,}: stopped after {args.timeout:g} s", flush=True)
                continue
            if proc.returncode != 0:
                print(f"{family} {size:,}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                return 1
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{family} {row['nodes']:,}: {row['wall_s']} s wall, {row['cpu_s']} s CPU, "
                  f"peak {row['peak_rss_mb']:,} MB {row['refused']}", flush=True)
    print(markdown_table(
        ["family", "nodes", "edges", "wall s", "CPU s", "peak RSS MB", "RSS before MB", "LapPE solver", "RWSE"],
        [[r["family"], f"{r['nodes']:,}", f"{r['edges']:,}" if "edges" in r else "–",
          r.get("wall_s", "–"), r.get("cpu_s", "–"), f"{r['peak_rss_mb']:,}" if "peak_rss_mb" in r else "–",
          f"{r['rss_before_mb']:,}" if "rss_before_mb" in r else "–",
          "refused" if r.get("refused") else r.get("stopped", r.get("solver")), r.get("rwse", "–")] for r in rows]))
    for r in rows:
        if r.get("refused"):
            print(f"{r['family']} {r['nodes']:,}: {r['refused']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
