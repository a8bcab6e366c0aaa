#!/usr/bin/env python
"""Data-parallel scaling: pretraining steps and encoding with 1 and N processes (1 thread each).

Each configuration starts its processes as ``torchrun`` does (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``
127.0.0.1, gloo on CPU, nccl with ``--device cuda``) and runs the library's own code paths:

* **pretraining step**: the code of ``gpse_dgl.train.pretraining`` under torchrun: every rank takes its share
  of each global batch (:class:`gpse_dgl.train.data_parallel.BatchShare`), the model is wrapped in DDP with
  BatchNorm synchronised, the loss is the global batch's (:func:`~gpse_dgl.train.data_parallel.gather_batch`),
  then AdamW. Embedded molecules (bare skeletons), random targets of the real shape (51 node + 11 graph
  columns: speed does not depend on their values), global batch ``--batch-size`` whatever N.
* **encoding**: :func:`gpse_dgl.encode.sharded.encode_dataset_sharded` of the embedded molecules with
  the same model in eval mode (each rank a node-balanced range of graphs, rank 0 gathers all).

Times are wall-clock seconds between two barriers on rank 0 (the slowest rank decides), after
``--warmup`` untimed steps; the ratio N / 1 is computed from the same run. On a machine shared with
other jobs the ratios move with the load (the load average is printed).

Usage::

    python benchmarks/scaling.py --quick               # 8 x 64 model, few steps, ~1 min
    python benchmarks/scaling.py                       # paper size 20 x 512, 1 and 2 processes
    python benchmarks/scaling.py --processes 1 2 4 --device cuda   # one GPU per process
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import command_line, load_average, machine_line, markdown_table, today  # noqa: E402

_MARK = "@@RESULT@@"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="world sizes (default 1 2)")
    ap.add_argument("--batch-size", type=int, default=128, help="global batch of graphs (default 128)")
    ap.add_argument("--steps", type=int, default=10, help="timed training steps (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed training steps first (default 2)")
    ap.add_argument("--encode-graphs", type=int, default=1024, help="molecules encoded (default 1024)")
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (nccl, one GPU per process)")
    ap.add_argument("--quick", action="store_true", help="8 layers x 64, 4 steps, 256 molecules")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.layers, args.dim, args.steps, args.warmup, args.encode_graphs = 8, 64, 4, 1, 256
    for n in args.processes:
        if args.batch_size % n:
            ap.error(f"--batch-size {args.batch_size} does not divide among {n} processes")
    return args


# ---------------------------------------------------------------------------------------------- worker


def worker(args) -> dict:
    import torch

    torch.set_num_threads(1)
    from gpse_dgl.data.molecules import load_embedded_molecules
    from gpse_dgl.nn.gpse import GPSEForPretraining
    from gpse_dgl.nn.loss import gpse_loss
    from gpse_dgl.train import distributed as data_parallel
    from gpse_dgl.train.optimizer import build_optimizer
    from gpse_dgl.train.pretraining.data import GraphCollection
    from gpse_dgl.utils import distributed as dist_utils

    device = torch.device(args.device)
    with dist_utils.process_group("auto", device) as ctx:
        device = dist_utils.local_device(device, ctx)
        graphs = load_embedded_molecules()
        collection = _collection(graphs, GraphCollection)
        torch.manual_seed(0)
        model = GPSEForPretraining.from_config({
            "encoder": {"dim_in": 20, "dim_hidden": args.dim, "num_layers": args.layers, "dropout": 0.2,
                        "virtual_node": True},
            "heads": {"dim_in": args.dim, "num_node_targets": 51, "num_graph_targets": 11, "dropout": 0.2,
                      "pooling": "mean"}}).to(device)
        trained = data_parallel.data_parallel(model, ctx, device, sync_batchnorm=True)
        optimizer = build_optimizer(model, {"name": "adamw", "lr": 5e-3, "weight_decay": 1e-4})  # as pretrain's
        generator = torch.Generator().manual_seed(0)
        batches = data_parallel.sharded_batches(collection, args.batch_size, generator, ctx)
        features = torch.Generator().manual_seed(1)

        def step():
            graph, node_true, graph_true, share = next(batches)
            x = share.features(20, features).to(device)
            node_pred, graph_pred = trained(graph, x)
            gathered = data_parallel.gather_batch(node_pred, node_true.to(device), graph_pred,
                                                  graph_true.to(device), graph.batch_num_nodes())
            loss, _ = gpse_loss(*gathered)
            optimizer.zero_grad(set_to_none=True)
            data_parallel.ddp_loss(loss, ctx).backward()
            optimizer.step()

        for _ in range(args.warmup):
            step()
        train_seconds = _timed(lambda: [step() for _ in range(args.steps)], device)

        from gpse_dgl.encode.sharded import encode_dataset_sharded

        model.eval()
        subset = graphs[:args.encode_graphs]
        encode_seconds = _timed(lambda: encode_dataset_sharded(model.encoder, subset, batch_size=128,
                                                               progress=False, device=device), device)
        return {"rank": ctx.rank, "world_size": ctx.world_size,
                "train_graphs_per_s": args.steps * args.batch_size / train_seconds,
                "encode_graphs_per_s": len(subset) / encode_seconds,
                "encode_nodes_per_s": sum(g.num_nodes() for g in subset) / encode_seconds}


def _collection(graphs, GraphCollection):
    """Embedded molecules with random targets of the pretraining shape (51 node, 11 graph columns)."""
    import torch

    num_nodes = torch.tensor([g.num_nodes() for g in graphs])
    num_edges = torch.tensor([g.num_edges() for g in graphs])
    src = torch.cat([g.edges()[0].long() for g in graphs])
    dst = torch.cat([g.edges()[1].long() for g in graphs])
    generator = torch.Generator().manual_seed(2)
    return GraphCollection(num_nodes, num_edges, src, dst, torch.randn(int(num_nodes.sum()), 51, generator=generator),
                           torch.randn(len(graphs), 11, generator=generator))


def _timed(work, device) -> float:
    """Wall seconds of ``work`` on every rank, from a common start to the last rank's end."""
    import torch

    from gpse_dgl.utils.distributed import barrier

    barrier()
    started = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    barrier()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------- launcher


def launch(args, world_size: int) -> dict:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--batch-size", str(args.batch_size),
            "--steps", str(args.steps), "--warmup", str(args.warmup), "--encode-graphs", str(args.encode_graphs),
            "--layers", str(args.layers), "--dim", str(args.dim), "--device", args.device]
    procs = []
    for rank in range(world_size):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
               "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": os.path.dirname(HERE)}
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    outputs = [proc.communicate()[0] for proc in procs]
    if any(proc.returncode for proc in procs):
        raise SystemExit(f"a worker of the {world_size}-process run failed (exit statuses "
                         f"{[proc.returncode for proc in procs]})")
    line = next(line for line in outputs[0].splitlines() if line.startswith(_MARK))
    return json.loads(line[len(_MARK):])


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        result = worker(args)
        if result["rank"] == 0:
            print(_MARK + json.dumps(result), flush=True)
        return
    print(f"# {command_line()}\n# {machine_line()}\n# {today()}; load average {load_average()} at the start")
    print(f"# model {args.layers} x {args.dim}, global batch {args.batch_size}, {args.steps} timed steps, "
          f"{args.encode_graphs} molecules encoded, device {args.device}, 1 thread per process")
    results = {n: launch(args, n) for n in args.processes}
    base = results[args.processes[0]]
    rows = []
    for n, result in results.items():
        rows.append([n, f"{result['train_graphs_per_s']:.1f}",
                     f"{result['train_graphs_per_s'] / base['train_graphs_per_s']:.2f}x",
                     f"{result['encode_graphs_per_s']:.1f}", f"{result['encode_nodes_per_s']:,.0f}",
                     f"{result['encode_graphs_per_s'] / base['encode_graphs_per_s']:.2f}x"])
    print(markdown_table(["processes", "pretraining (graphs/s)", "ratio", "encoding (graphs/s)",
                          "encoding (nodes/s)", "ratio"], rows))
    print(f"# load average {load_average()} at the end (a shared machine makes the ratios move)")


if __name__ == "__main__":
    main()
