#!/usr/bin/env python
"""Speed of the batched PSE computation against a per-graph baseline and PyG's per-graph transforms.

Datasets:

* ``molecules``: the ~3,070 unique skeletons of RDKit's bundled NCI molecules
  (:func:`gpse_dgl.data.molecules.load_embedded_molecules`), sizes 2-122 nodes, ~19 on average;
* ``ER-n``: Erdos-Renyi G(n, p) graphs with n = 100, 300, 500, 1000 nodes (the paper's graph-size
  scaling setup uses 1000 graphs per size; its p is not published, default here 0.1). CycleGE is left
  out on them, as in the paper (cycle counting on large dense graphs is infeasible), so "all" means the
  five spectral PSEs there.

Rows: each PSE alone and all of them together (``all``), as ``graphs/s`` of
:func:`gpse_dgl.pse.compute_pses` (writing ``ndata`` included; best of ``--repeats`` runs on fresh graph
clones, alternating with the baseline's runs), of the per-graph baseline :mod:`gpse_dgl.pse.reference` (dense numpy per graph and per PSE,
networkx for cycles; timed on the same graphs, or on a seeded uniform sample of ``--baseline-graphs``
of them, best of ``--baseline-repeats`` runs), and, for LapPE and RWSE, of PyG's ``AddLaplacianEigenvectorPE(k=4)`` (default
``is_undirected=False`` -> general ``numpy.linalg.eig``; and ``is_undirected=True`` -> ``eigh``) and
``AddRandomWalkPE(walk_length=20)`` applied graph by graph, if torch_geometric imports. PyG's LapPE fails on graphs with at most k = 4 nodes; those are left out of its
timing (only).

Examples::

    python benchmarks/pse_speed.py --quick              # ~1 minute: molecules + small ER sets
    python benchmarks/pse_speed.py                      # the full set (ER-1000 takes long)
    python benchmarks/pse_speed.py --er-sizes 100,300 --er-graphs 200 --baseline-graphs 50

Timings depend on the machine and its load; the script prints the thread count and load average.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time


def _early_threads(argv):
    """``--threads N`` must reach OpenBLAS / MKL / OpenMP before numpy and torch are imported."""
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return None


if _early_threads(sys.argv[1:]):
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = _early_threads(sys.argv[1:])

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpse_dgl.pse import ALL_PSES, compute_pses  # noqa: E402
from gpse_dgl.pse import reference as ref  # noqa: E402

CLOCK = time.perf_counter  # --clock cpu switches to time.process_time

REF_FUNCS = {
    "ElstaticPE": ref.ref_elstatic_pe,
    "LapPE": ref.ref_lap_pe,
    "RWSE": ref.ref_rwse,
    "HKdiagSE": ref.ref_hkdiag_se,
    "EigVals": ref.ref_eigvals,
    "CycleGE": ref.ref_cycle_ge,
}


def run_ours(graphs, names) -> float:
    """Wall time of one compute_pses call on fresh clones (clone time excluded)."""
    fresh = [g.clone() for g in graphs]
    start = CLOCK()
    compute_pses(fresh, names)
    return CLOCK() - start


def run_baseline(graphs, names) -> float:
    """Wall time of the per-graph reference: dense adjacency, then each PSE's plain implementation."""
    start = CLOCK()
    for g in graphs:
        adj = ref.dense_adjacency(g)
        for name in names:
            REF_FUNCS[name](adj)
    return CLOCK() - start


def time_interleaved(graphs, base, names, repeats: int, baseline_repeats: int) -> tuple[float, float]:
    """Best times ``(ours, baseline)`` of ``repeats`` / ``baseline_repeats`` runs, taken in alternation.

    Alternating the two sides (ours, baseline, ours, ...) spreads the runs of each over the same stretch
    of time, so a slow spell of a shared machine lands on both sides instead of on all runs of one.
    """
    best_ours = best_base = float("inf")
    for i in range(max(repeats, baseline_repeats if base else 0)):
        if i < repeats:
            best_ours = min(best_ours, run_ours(graphs, names))
        if base and i < baseline_repeats:
            best_base = min(best_base, run_baseline(base, names))
    return best_ours, (best_base if base else float("nan"))


def to_pyg(graphs):
    from torch_geometric.data import Data

    out = []
    for g in graphs:
        src, dst = g.edges()
        out.append(Data(edge_index=torch.stack([src, dst]).long(), num_nodes=g.num_nodes()))
    return out


def time_pyg(data_list, transform) -> float:
    start = CLOCK()
    for d in data_list:
        transform(d.clone())
    return CLOCK() - start


def er_graphs(num, n, p, seed):
    try:
        from gpse_dgl.data.synthetic import erdos_renyi_graphs

        return erdos_renyi_graphs(num, n, p=p, seed=seed)
    except ImportError:  # pragma: no cover - data.synthetic missing: inline G(n, p)
        import dgl

        rng = np.random.default_rng(seed)
        iu, ju = np.triu_indices(n, 1)
        graphs = []
        for _ in range(num):
            keep = rng.random(iu.shape[0]) < p
            s, d = iu[keep], ju[keep]
            graphs.append(dgl.graph((torch.from_numpy(np.concatenate([s, d])),
                                     torch.from_numpy(np.concatenate([d, s]))), num_nodes=n))
        return graphs


def baseline_sample(graphs, limit):
    """The graphs the per-graph baseline is timed on: all of them, or a seeded uniform sample of ``limit``.

    A sample, not the first ``limit`` graphs: the embedded molecules are not in random order (the first
    500 average 16.2 nodes, all 3,071 average 19.0), and graphs/s of the two sides only compare on
    graphs of the same size distribution.
    """
    if limit is None or limit >= len(graphs):
        return list(graphs)
    keep = np.sort(np.random.default_rng(0).choice(len(graphs), size=limit, replace=False))
    return [graphs[i] for i in keep]


def bench_dataset(label, graphs, names, args, baseline_graphs, rows, notes):
    pyg = None
    if not args.no_pyg:
        try:
            from torch_geometric.transforms import AddLaplacianEigenvectorPE, AddRandomWalkPE
            pyg = (AddLaplacianEigenvectorPE, AddRandomWalkPE)
        except Exception as exc:  # noqa: BLE001
            notes.append(f"torch_geometric unavailable ({type(exc).__name__}): no PyG rows")
            args.no_pyg = True
    base = baseline_sample(graphs, baseline_graphs)
    if len(base) < len(graphs):
        notes.append(f"{label}: baseline timed on a uniform random sample (seed 0) of {len(base)} of "
                     f"{len(graphs)} graphs")
    pyg_data = to_pyg(graphs) if pyg else None
    for row_names in [[n] for n in names] + [names]:
        row = "all" if len(row_names) > 1 else row_names[0]
        t_ours, t_base = time_interleaved(graphs, base, row_names, args.repeats, args.baseline_repeats)
        ours = len(graphs) / t_ours
        baseline = len(base) / t_base if base else float("nan")
        entry = {"dataset": label, "pse": row, "graphs": len(graphs), "ours": ours, "baseline": baseline}
        rows.append(entry)
        print(f"  {label:<10} {row:<10} ours {ours:>10,.1f} g/s   baseline {baseline:>9,.1f} g/s", flush=True)
        if pyg and row in ("LapPE", "RWSE"):
            if row == "LapPE":
                usable = [d for d in pyg_data if d.num_nodes > 4]
                for undirected in (False, True):
                    t = time_pyg(usable, pyg[0](k=4, attr_name="pe", is_undirected=undirected))
                    rows.append({**entry, "pse": f"LapPE vs PyG{' (eigh)' if undirected else ''}",
                                 "pyg": len(usable) / t})
                if len(usable) < len(pyg_data):
                    notes.append(f"{label}: PyG LapPE timed on the {len(usable)} graphs with > 4 nodes")
            else:
                t = time_pyg(pyg_data, pyg[1](walk_length=20, attr_name="pe"))
                entry["pyg"] = len(pyg_data) / t


def print_table(rows, notes):
    print()
    print("| dataset | PSE | graphs | ours (graphs/s) | per-graph baseline (graphs/s) | speed-up | "
          "PyG per-graph (graphs/s) | ours / PyG |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        pyg = r.get("pyg")
        speedup = r["ours"] / r["baseline"] if r["baseline"] == r["baseline"] else float("nan")
        pyg_rate = "" if pyg is None else f"{pyg:,.0f}"
        pyg_ratio = "" if pyg is None else f"{r['ours'] / pyg:,.1f}x"
        print(f"| {r['dataset']} | {r['pse']} | {r['graphs']:,} | {r['ours']:,.0f} | {r['baseline']:,.1f} | "
              f"{speedup:,.1f}x | {pyg_rate} | {pyg_ratio} |")
    if notes:
        print()
        for note in dict.fromkeys(notes):
            print(f"- {note}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--molecules", type=int, default=None, help="use only the first N molecules")
    ap.add_argument("--baseline-graphs", type=int, default=None,
                    help="molecules timed with the per-graph baseline: a seeded uniform sample of this "
                         "many (default: all of them, the same graphs as ours)")
    ap.add_argument("--er-sizes", default=None,
                    help="comma-separated ER graph sizes, '' for none (default 100,300,500,1000; --quick: 100,300)")
    ap.add_argument("--er-graphs", type=int, default=None, help="ER graphs per size (default and paper: 1000)")
    ap.add_argument("--er-p", type=float, default=0.1, help="ER edge probability")
    ap.add_argument("--er-baseline-graphs", type=int, default=10,
                    help="ER graphs timed with the baseline (a seeded uniform sample)")
    ap.add_argument("--repeats", type=int, default=5,
                    help="runs of ours per row, alternating with the baseline's; the best counts")
    ap.add_argument("--baseline-repeats", type=int, default=5,
                    help="runs of the per-graph baseline per row; the best counts (as for ours)")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads of torch, OpenMP, MKL and OpenBLAS, for ours and the baseline alike "
                         "(default: the libraries' own; on a busy machine 1 avoids oversubscription)")
    ap.add_argument("--no-pyg", action="store_true", help="skip the PyG comparison")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time (default), or this process's CPU time: steadier on a shared machine, "
                         "but it adds up all threads, so use it with --threads 1")
    ap.add_argument("--quick", action="store_true",
                    help="short run: baseline on 200 molecules, ER sizes 100,300 with 100 graphs")
    args = ap.parse_args(argv)
    if args.quick:
        args.baseline_graphs = min(args.baseline_graphs or 200, 200)
        args.er_baseline_graphs, args.repeats = 5, 2
    if args.er_sizes is None:
        args.er_sizes = "100,300" if args.quick else "100,300,500,1000"
    if args.er_graphs is None:
        args.er_graphs = 100 if args.quick else 1000
    if args.threads:
        torch.set_num_threads(args.threads)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter

    print(f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"torch threads {torch.get_num_threads()}, {args.clock} clock, load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    rows, notes = [], []

    from gpse_dgl.data.molecules import load_embedded_molecules

    mols = load_embedded_molecules()
    if args.molecules:
        mols = mols[:args.molecules]
    bench_dataset("molecules", mols, list(ALL_PSES), args, args.baseline_graphs, rows, notes)

    sizes = [int(s) for s in args.er_sizes.split(",") if s.strip()]
    spectral = [n for n in ALL_PSES if n != "CycleGE"]
    for n in sizes:
        graphs = er_graphs(args.er_graphs, n, args.er_p, seed=n)
        if args.er_graphs < 1000:
            notes.append(f"ER-{n}: {args.er_graphs} graphs (paper: 1000)")
        bench_dataset(f"ER-{n}", graphs, spectral, args, args.er_baseline_graphs, rows, notes)
    notes.append("ER: CycleGE excluded (as in the paper); 'all' = the five spectral PSEs")
    notes.append(f"ER edge probability p = {args.er_p}")
    notes.append(f"{args.clock} clock; load average at the end: {os.getloadavg()[0]:.2f}")
    print_table(rows, notes)


if __name__ == "__main__":
    main()
