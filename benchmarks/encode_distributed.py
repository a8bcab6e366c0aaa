"""Time and memory per process of GPSE encoding on dgl.distributed: 1 and 2 partitions against one process.

The graph is a uniform random directed graph of ogbn-arxiv's degree (6.89 edges per node before
symmetrising; 200,000 nodes by default), encoded with the shipped default model (or ``--checkpoint``).
Three runs, each of its own processes, one thread per process:

* ``single``: ``encode_large`` (exact layer-wise) in one process: the reference (with glibc's
  ``MALLOC_MMAP_THRESHOLD_`` at 128 KiB, as the launcher sets it for its processes);
* ``parts=1`` and ``parts=2``: ``gpse-dgl partition`` (METIS) then the launcher with one graph server and
  one trainer per partition on loopback (``gpse_dgl.distributed``).

Per process: wall seconds, CPU seconds (user + system, from ``wait4``: steady on a shared machine) and
peak RSS (``VmHWM``, reported by the process itself; a trainer's includes the shared-memory pages of its partition's query/value rows
it writes, which its server's RSS counts too: the trainers' statistics give that part). Each distributed result is compared with the reference
(max abs difference; must be below 1e-5 in fp32). The trainers' statistics (nodes, rows pulled per layer,
phases) come from ``logs/stats``.

Usage::

    python benchmarks/encode_distributed.py                     # 200,000 nodes, shipped model
    python benchmarks/encode_distributed.py --quick             # 20,000 nodes: a smoke test
    python benchmarks/encode_distributed.py --json out.json --keep /tmp/dist-bench
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import set_threads_env  # noqa: E402

ARXIV_EDGES_PER_NODE = 1_166_243 / 169_343


def _reference(args) -> None:
    """The one-process encode (run in its own process; writes encodings and measurements)."""
    import torch

    import dgl
    from gpse_dgl.encode import encode_large
    from gpse_dgl.distributed.runtime import peak_rss_bytes
    from gpse_dgl.encode.loading import load_gpse

    torch.set_num_threads(1)
    graphs, _ = dgl.load_graphs(os.path.join(args.work, "graph.bin"))
    model = load_gpse(args.checkpoint)
    t0, c0 = time.perf_counter(), time.process_time()
    out = encode_large(model, graphs[0], seed=args.seed)
    result = {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
              "peak_rss_bytes": peak_rss_bytes()}
    torch.save(out, os.path.join(args.work, "reference.pt"))
    with open(os.path.join(args.work, "reference.json"), "w") as fh:
        json.dump(result, fh)


def _run(argv: list, env: dict) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{done.stderr[-2000:]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--parts", default="1,2", help="comma-separated partition counts")
    parser.add_argument("--method", default="metis", choices=["metis", "random"])
    parser.add_argument("--checkpoint", default=None, help="GPSE checkpoint (default: the shipped model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="20,000 nodes")
    parser.add_argument("--keep", default=None, help="work directory to keep (default: a temporary one)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--reference-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reference_worker:
        _reference(args)
        return 0
    set_threads_env(1)
    # as the launcher sets it for its processes: the single-process reference runs with the same allocator
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(1 << 17))
    import torch

    import dgl
    from gpse_dgl.data.synthetic import random_graph
    from gpse_dgl.distributed.launch import launch
    from gpse_dgl.distributed.partition import partition
    from gpse_dgl.distributed.shards import read_encodings

    nodes = 20_000 if args.quick else args.nodes
    work = args.keep or tempfile.mkdtemp(prefix="gpse-dist-bench-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    try:
        graph = random_graph(nodes, round(nodes * ARXIV_EDGES_PER_NODE), seed=0, directed=True)
        dgl.save_graphs(os.path.join(work, "graph.bin"), [graph])
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                   "unknown")
        results = {"malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"), "nodes": nodes, "directed_edges_before_symmetrising": graph.num_edges(), "cpu": cpu,
                   "cores": os.cpu_count(), "load_before": os.getloadavg()[0], "runs": []}
        command = [sys.executable, os.path.abspath(__file__), "--reference-worker", "--work", work,
                   "--seed", str(args.seed)] + (["--checkpoint", args.checkpoint] if args.checkpoint else [])
        _run(command, env)
        with open(os.path.join(work, "reference.json")) as fh:
            single = json.load(fh)
        results["runs"].append({"setup": "single", "processes": [dict(role="single", **single)]})
        print(f"single process: {single['seconds']:.1f} s wall, {single['cpu_seconds']:.1f} s CPU, "
              f"peak RSS {single['peak_rss_bytes'] / 2**20:,.0f} MiB", flush=True)
        reference = torch.load(os.path.join(work, "reference.pt"), weights_only=True)
        for parts in [int(p) for p in args.parts.split(",")]:
            part_dir, out_dir = os.path.join(work, f"parts{parts}"), os.path.join(work, f"enc{parts}")
            t0 = time.perf_counter()
            info = partition(graph, part_dir, parts, method=args.method)
            partition_s = time.perf_counter() - t0
            trainer = [sys.executable, "-m", "gpse_dgl.distributed.worker", "encode", "--out", out_dir,
                       "--seed", str(args.seed)] + (["--checkpoint", args.checkpoint] if args.checkpoint else [])
            result = launch(part_dir, trainer, os.path.join(out_dir, "logs"), threads=1, env=env, timeout=3600)
            diff = (read_encodings(out_dir) - reference).abs().max().item()
            stats = {}
            stats_dir = os.path.join(out_dir, "logs", "stats")
            for name in os.listdir(stats_dir):
                with open(os.path.join(stats_dir, name)) as fh:
                    stats[name[:-5]] = json.load(fh)
            rows = result.table()
            for row in rows:
                row["stats"] = stats.get(f"{row['role']}{row['index']}")
            results["runs"].append({"setup": f"parts={parts}", "partition_seconds": partition_s,
                                    "part_nodes": info["part_nodes"], "launch_seconds": result.seconds,
                                    "max_abs_diff": diff, "processes": rows})
            print(f"{parts} partition(s) ({args.method}, partition {partition_s:.1f} s), whole run "
                  f"{result.seconds:.1f} s, max |diff| vs single {diff:.2e}", flush=True)
            for row in rows:
                extra = ""
                if row["role"] == "trainer" and row["stats"]:
                    s = row["stats"]
                    shared = s["memory"]["end"].get("shared_memory", 0)
                    extra = (f" (of it {shared / 2**20:,.0f} MiB shared memory: its partition's query/value "
                             f"rows, counted by its server too), {s['nodes']:,} nodes, encode {s['seconds']:.1f} s, "
                             f"{s['rows_pulled_per_layer']:,} rows pulled per layer")
                print(f"  {row['role']} {row['index']}: {row['seconds']:.1f} s wall, {row['cpu_seconds']:.1f} s CPU, "
                      f"peak RSS {row['peak_rss_bytes'] / 2**20:,.0f} MiB{extra}", flush=True)
        results["load_after"] = os.getloadavg()[0]
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(results, fh, indent=1)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
