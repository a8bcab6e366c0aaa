#!/usr/bin/env python
"""GPSE pretraining throughput: gpse-dgl vs PyTorch Geometric's GPSE, same weights, same batches, same loss.

One training step = forward + loss + backward + AdamW step (lr 5e-3, weight decay 1e-4, as in
``recipes/molpcba.yaml``; the optimiser of ``gpse-dgl pretrain``, :mod:`gpse_dgl.train.optimizer`, fused on CPU
and CUDA, on both sides) of the paper-size model: 20 ResGatedGCN layers x 512, virtual node, 51 node
heads + graph head, dropout 0.2, train mode. Both sides get:

* the same batches of embedded molecules (bare skeletons from
  :func:`gpse_dgl.data.molecules.load_embedded_molecules`, in order) with their real pretraining targets
  (:func:`gpse_dgl.pse.targets.pretraining_targets`: 51 node + 11 graph columns) and the same N(0, 1)
  input features; batches, features and targets are built before timing;
* the same initial weights: ours from ``torch.manual_seed(seed)``, copied into
  ``torch_geometric.nn.GPSE`` with :func:`gpse_dgl.nn.pyg_compat.to_authors_state_dict` (strict load);
* the same loss, :func:`gpse_dgl.nn.loss.gpse_loss`: on PyG's side it takes the node and graph blocks of
  the padded ``(pred, true)`` stack that PyG's ``GNNInductiveHybridMultiHead`` returns (that head drops
  the virtual nodes itself).

PyG's batches are ``Batch.from_data_list`` of ``Data(edge_index, x, y)`` passed through
``torch_geometric.transforms.VirtualNode`` (virtual node appended last per graph, zero features, as in
``precompute_GPSE``), plus ``y_graph``. Each side runs in its own child process (so peak RSS is its own);
the first ``--warmup`` steps are not timed. As a parity check each side also reports the eval-mode loss
on the first batch before training (should agree to ~1e-6).

On ``--device cuda`` the model, inputs and targets of both sides live on the GPU (our graphs stay on the
CPU, as in ``gpse-dgl pretrain``), every timed step ends with a device synchronisation, use ``--clock
wall``, and the memory columns are the GPU's peak allocation instead of the process's RSS.

Precisions (``--precisions fp32,bf16``): every side runs once per precision, the forward pass inside
``torch.autocast`` of that dtype (ours through :class:`gpse_dgl.train.mixed_precision.MixedPrecision`,
as ``gpse-dgl pretrain`` does; PyG under plain autocast), loss and optimiser in fp32. Each row's
``peak`` is the step's encoder FLOPs (3 x the forward's of ``encode_speed.forward_flops``: forward plus
a backward of twice its cost; the heads are not counted) per second over the matmul peak of its
precision measured in the same run. ``results["records"]`` holds the rows as plain dicts (see
``benchmarks/_precision.py``) for a figure.

Usage::

    python benchmarks/train_speed.py --small --steps 3                # quick check (8 layers x 64)
    python benchmarks/train_speed.py                                  # paper size, CPU time, 1 thread
    python benchmarks/train_speed.py --clock wall --threads 2         # quiet machine, wall clock
    python benchmarks/train_speed.py --small --steps 2 --quick        # smallest run of every row
    python benchmarks/train_speed.py --device cuda --clock wall --precisions fp32,bf16,fp16
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import (CLOCK_HELP, CLOCKS, command_line, current_rss_mb, load_average,  # noqa: E402
                     machine_line, markdown_table, peak_rss_mb, set_threads_env, today)
from _figures import figure_arg, figure_path, speed_bars, speed_rows  # noqa: E402
from _precision import (DEFAULT_PRECISIONS, label, matmul_peak_gflops, parse_precisions, record,  # noqa: E402
                        sync_device)

SIDES = ("ours", "pyg")
LABELS = {"ours": "gpse-dgl", "pyg": "PyG torch_geometric.nn.GPSE"}
_MARK = "@@RESULT@@"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per side (default 10)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    ap.add_argument("--small", action="store_true", help="8 layers x 64 instead of 20 x 512 (quick check)")
    ap.add_argument("--layers", type=int, help="override the number of layers")
    ap.add_argument("--dim", type=int, help="override the width")
    ap.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads (default 1)")
    ap.add_argument("--clock", choices=tuple(CLOCKS), default="cpu", help=CLOCK_HELP + " (default cpu)")
    ap.add_argument("--backend", default=None, help="our message-passing backend (dgl, torch; default auto)")
    ap.add_argument("--sides", default="ours,pyg", help="comma-separated subset of ours,pyg")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--figure", type=figure_arg, default=figure_path("train_speed.png"),
                    help="bar chart of the training-step throughput per side and precision "
                         "(default: %(default)s; '' for none)")
    ap.add_argument("--precisions", default=DEFAULT_PRECISIONS, help="comma-separated: fp32, bf16, fp16 (CUDA)")
    ap.add_argument("--quick", action="store_true", help="batch 32, 2 timed steps, no warm-up")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # internal: run one side, print JSON
    ap.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)  # internal: the side's precision
    args = ap.parse_args(argv)
    if args.quick:
        args.batch_size, args.steps, args.warmup = 32, 2, 0
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no CUDA device here")
        if args.clock == "cpu":
            ap.error("--device cuda needs --clock wall (the process's CPU time misses the GPU's work)")
    args.layers = args.layers or (8 if args.small else 20)
    args.dim = args.dim or (64 if args.small else 512)
    return args


# --------------------------------------------------------------------------- one side (child process)
def prepare_data(args):
    """``[(graphs, x, graph_targets)]`` for warm-up + timed steps (cycling if the molecules run out)."""
    import torch

    from gpse_dgl.data.molecules import load_embedded_molecules
    from gpse_dgl.pse.targets import pretraining_targets

    mols = load_embedded_molecules()
    n_batches = min(args.warmup + args.steps, len(mols) // args.batch_size)
    if n_batches < 1:
        raise SystemExit(f"--batch-size {args.batch_size} exceeds the {len(mols)} molecules")
    mols = [g.clone() for g in mols[:n_batches * args.batch_size]]
    y_graph = pretraining_targets(mols)
    gen = torch.Generator().manual_seed(args.seed)
    batches = []
    for b in range(n_batches):
        sl = slice(b * args.batch_size, (b + 1) * args.batch_size)
        num_nodes = sum(g.num_nodes() for g in mols[sl])
        batches.append((mols[sl], torch.randn(num_nodes, 20, generator=gen), y_graph[sl]))
    return batches


def ours_batch(graphs, x, y_graph, device="cpu"):
    import dgl

    g = dgl.batch(graphs)  # stays on the CPU: the model moves what it needs (DGL may be a CPU-only build)
    return g, x.to(device), g.ndata["gpse_node_target"].to(device), y_graph.to(device)


def pyg_batch(graphs, x, y_graph, device="cpu"):
    import torch
    import torch_geometric.transforms as T
    from torch_geometric.data import Batch, Data

    add_vn, data, start = T.VirtualNode(), [], 0
    for i, g in enumerate(graphs):
        n = g.num_nodes()
        d = add_vn(Data(edge_index=torch.stack(g.edges()).long(), x=x[start:start + n],
                        y=g.ndata["gpse_node_target"], num_nodes=n))
        d.y_graph = y_graph[i:i + 1]
        data.append(d)
        start += n
    batch = Batch.from_data_list(data)
    return batch.to(device), (torch.diff(batch.ptr) - 1).to(device)  # nodes per graph without the virtual node


def run_side(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from gpse_dgl.nn.gpse import GPSEForPretraining
    from gpse_dgl.nn.loss import gpse_loss
    from gpse_dgl.train.optimizer import build_optimizer

    device = torch.device(args.device)
    clock = _device_clock(CLOCKS[args.clock], device)
    data = prepare_data(args)
    torch.manual_seed(args.seed)
    model = GPSEForPretraining.from_config(
        {"encoder": {"dim_hidden": args.dim, "num_layers": args.layers},
         "heads": {"graph_hidden": args.dim}}, backend=args.backend)
    k_n = model.heads.num_node_targets

    from gpse_dgl.train.mixed_precision import MixedPrecision
    from gpse_dgl.utils.precision import decide_precision

    mixed = MixedPrecision(decide_precision(args.precision, device))  # fp32: plain autocast-free steps
    if args.side == "ours":
        model = model.to(device)
        batches = [ours_batch(*b, device=device) for b in data]

        def loss_of(batch):
            g, x, node_true, graph_true = batch
            with mixed.autocast():
                node_pred, graph_pred = model(g, x)
            return gpse_loss(node_pred, node_true, graph_pred, graph_true, g.batch_num_nodes())[0]
    else:
        from torch_geometric.nn import GPSE as PyGGPSE

        from gpse_dgl.nn.pyg_compat import to_authors_state_dict

        theirs = PyGGPSE(dim_inner=args.dim, layers_mp=args.layers)
        theirs.load_state_dict(to_authors_state_dict(model.state_dict(), prefix=""), strict=True)
        model = theirs.to(device)
        batches = [pyg_batch(*b, device=device) for b in data]

        def loss_of(batch):
            pb, bnn = batch
            with mixed.autocast():
                pred, true = model(pb)
            pred = pred.float()  # the loss in fp32, as on our side
            n = int(bnn.sum())
            return gpse_loss(pred[:n, :k_n], true[:n, :k_n], pred[n:, k_n:], true[n:, k_n:], bnn)[0]

    model.eval()
    with torch.no_grad():
        parity_loss = float(loss_of(batches[0]))
    model.train()
    # the optimiser of `gpse-dgl pretrain` (fused AdamW on CPU and CUDA) on both sides
    optimizer = build_optimizer(model, {"name": "adamw", "lr": 5e-3, "weight_decay": 1e-4})
    memory = _memory_meter(device)
    rss_before = memory()
    seconds, graphs, losses, per_step = 0.0, 0, [], []
    for step in range(args.warmup + args.steps):
        i = step % len(batches)
        start = clock()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(batches[i])
        mixed.backward_and_step(loss, optimizer, model.parameters())
        elapsed = clock() - start
        losses.append(float(loss.detach()))
        if step >= args.warmup:
            seconds += elapsed
            per_step.append(round(elapsed, 4))
            graphs += len(data[i][0])
    parts = _parts(model, batches[:args.steps], mixed, clock) if args.side == "ours" else {}
    return {"side": args.side, "precision": args.precision, "graphs_per_s": graphs / seconds, "s_per_step": seconds / args.steps,
            **parts, "steps": args.steps, "graphs": graphs, "eval_loss_batch0": parity_loss,
            "first_loss": losses[0], "last_loss": losses[-1], "peak_rss_mb": memory(peak=True),
            "rss_before_training_mb": rss_before, "step_seconds": per_step, "threads": torch.get_num_threads(),
            "nodes_per_batch": sum(d[1].shape[0] for d in data) / len(data), "distinct_batches": len(data),
            "edges_per_batch": sum(sum(g.num_edges() for g in d[0]) for d in data) / len(data)}


def _parts(model, batches, mixed, clock) -> dict:
    """Seconds per step of our encoder's products alone, of its edges alone and of its residual steps alone,
    forward and backward, in the run's precision, measured after the timed steps on the same batches: the four
    maps of a layer over every row of a batch (with its virtual nodes) and one gated sum over its edges, each
    times the layers; the step ``h + normalize(relu(dropout(z)))`` of every layer and of the input stage (float32
    rows, as under autocast), ours (:func:`gpse_dgl.nn.residual.normalized_residual`) and the ops it replaces
    (:func:`gpse_dgl.nn.dropout.dropout` with the same masks, then torch's ``relu``, ``F.normalize`` and sum) on
    the same rows. The residual steps are measured on the CPU only: elsewhere both are the torch ops."""
    import torch
    import torch.nn.functional as F

    from gpse_dgl.nn.dropout import dropout
    from gpse_dgl.nn.ops import gated_sum
    from gpse_dgl.nn.residual import normalized_residual

    def ours(h, z, p):
        return normalized_residual(h, z, p, training=True)

    def torch_ops(h, z, p):  # the same masks (gpse_dgl.nn.dropout), then the torch ops
        return h + F.normalize(F.relu(dropout(z, p, True)), p=2.0, dim=1)

    encoder = model.encoder
    conv, layers = encoder.convs[0], len(encoder.convs)
    device = conv.weight.device  # rows drawn on the CPU (the same numbers on every device), then moved
    products = edges = 0.0
    steps = {"ours": 0.0, "torch": 0.0}
    gen = torch.Generator().manual_seed(0)
    for i, (g, *_) in enumerate(batches):
        aug, _ = encoder.prepare(g)
        h = torch.randn(aug.num_nodes(), conv.in_feats, generator=gen).to(device).requires_grad_()
        start = clock()
        with mixed.autocast():
            maps = conv.projections(h)  # as a training step runs them
        sum(m.float().sum() for m in maps).backward()
        products += clock() - start
        dtype = maps[0].dtype
        k, q, v = (torch.randn(aug.num_nodes(), conv.out_feats, generator=gen).to(device, dtype).requires_grad_()
                   for _ in range(3))
        start = clock()
        gated_sum(aug, k, q, v).sum().backward()
        edges += clock() - start
        if device.type != "cpu":
            continue
        rows = torch.randn(2, aug.num_nodes(), conv.out_feats, generator=gen)
        sides = [("ours", ours), ("torch", torch_ops)]
        for side, step in sides if i % 2 == 0 else sides[::-1]:  # alternating who goes first
            h, z = rows.clone().requires_grad_()  # fresh gradients for each side
            start = clock()
            step(h, z, encoder.dropout.p).backward(torch.ones_like(h))
            steps[side] += clock() - start
    per_step = (layers + 1) / len(batches)
    parts = {"products_s_per_step": products * layers / len(batches), "edges_s_per_step": edges * layers / len(batches),
             "row_bytes_per_edge": 2 * conv.out_feats * torch.empty(0, dtype=dtype).element_size()}
    if device.type == "cpu":
        parts.update(residual_s_per_step=steps["ours"] * per_step, torch_residual_s_per_step=steps["torch"] * per_step)
    return parts


def _device_clock(clock, device):
    """``clock`` that first waits for the device's queued work (CUDA runs asynchronously)."""
    if device.type != "cuda":
        return clock

    def synced():
        sync_device(device)
        return clock()
    return synced


def _memory_meter(device):
    """``memory(peak=False)`` in MiB: the process's RSS on the CPU, the GPU's allocation on CUDA."""
    import torch

    if device.type != "cuda":
        return lambda peak=False: peak_rss_mb() if peak else current_rss_mb()
    torch.cuda.reset_peak_memory_stats(device)
    return lambda peak=False: (torch.cuda.max_memory_allocated(device) if peak
                               else torch.cuda.memory_allocated(device)) / 2**20


# --------------------------------------------------------------------------- driver
def run_child(side, argv, precision="fp32") -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--side", side, "--precision", precision]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)]
    if proc.returncode or not lines:
        raise SystemExit(f"{side} run failed (exit {proc.returncode})\n{proc.stdout}")
    return json.loads(lines[-1][len(_MARK):])


def report(args, results, argv, load_start) -> str:
    model = f"{args.layers} layers x {args.dim}, virtual node, 51 node heads + graph head, dropout 0.2"
    first = next(iter(results.values()))
    lines = [
        "## GPSE training throughput: gpse-dgl vs PyG",
        "",
        f"- command: `{command_line([sys.argv[0], *argv])}`",
        f"- machine: {machine_line()}; device {args.device}",
        f"- date: {today()}; load average (1/5/15 min) {load_start} at start, {load_average()} at end",
        f"- clock: {args.clock} ({'process CPU time' if args.clock == 'cpu' else 'elapsed'}), "
        f"torch threads {first['threads']}",
        f"- model: {model}; train mode; fused AdamW (lr 5e-3, wd 1e-4); our backend: {args.backend or 'auto'}",
        f"- work per step: forward + gpse_dgl.nn.loss.gpse_loss (both sides) + backward + optimizer step; "
        f"batch {args.batch_size} embedded molecules (~{first['nodes_per_batch']:.0f} nodes), "
        f"{args.steps} timed steps after {args.warmup} warm-up"
        + (f" ({first['distinct_batches']} distinct batches, cycled)"
           if first["distinct_batches"] < args.warmup + args.steps else ""),
        "",
    ]
    rows = []
    for key, r in results.items():
        parts = (f"{r['products_s_per_step']:.3f} / {r['edges_s_per_step']:.3f} ({r['row_bytes_per_edge']:,} B)"
                 if "products_s_per_step" in r else "")
        residual = (f"{r['residual_s_per_step']:.3f} / {r['torch_residual_s_per_step']:.3f}"
                    if "residual_s_per_step" in r else "")
        rows.append([f"{LABELS[r['side']]}, {key.split(' ', 1)[1]}", f"{r['graphs_per_s']:,.1f}", f"{r['s_per_step']:.3f}",
                     parts, residual, f"{r['peak_rss_mb']:,.0f}",
                     f"{r['peak_rss_mb'] - r['rss_before_training_mb']:,.0f}",
                     f"{r['eval_loss_batch0']:.6f}", f"{r['first_loss']:.4f} -> {r['last_loss']:.4f}"])
    if "ours fp32" in results and "PyG fp32" in results:
        o, p = results["ours fp32"], results["PyG fp32"]
        rows.append(["**ratio gpse-dgl / PyG**", f"**{o['graphs_per_s'] / p['graphs_per_s']:.2f}x**",
                     f"{o['s_per_step'] / p['s_per_step']:.2f}", "", "", f"{o['peak_rss_mb'] / p['peak_rss_mb']:.2f}",
                     "", f"diff {abs(o['eval_loss_batch0'] - p['eval_loss_batch0']):.1e}", ""])
    memory = "GPU memory" if args.device.startswith("cuda") else "RSS"
    lines.append(markdown_table(["", "graphs/s", "s/step", "products alone / edges alone, s/step (source-row bytes "
                                 "per edge)", "residual steps alone, fused / unfused, s/step", f"peak {memory} (MiB)",
                                 f"{memory} growth in training (MiB)",
                                 "eval loss, batch 0", "train loss first -> last"], rows))
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    set_threads_env(args.threads)
    if args.side:
        print(_MARK + json.dumps(run_side(args)), flush=True)
        return 0
    load_start = load_average()
    results = {}
    precisions = parse_precisions(args.precisions)
    for precision in precisions:
        for side in [s.strip() for s in args.sides.split(",") if s.strip()]:
            if side not in SIDES:
                raise SystemExit(f"unknown side {side!r}; choose from {', '.join(SIDES)}")
            print(f"running {side} in {precision} ...", file=sys.stderr, flush=True)
            results[label(side, precision)] = run_child(side, argv, precision)
    records = precision_records(args, results)
    print(report(args, results, argv, load_start))
    print("\n" + "\n".join(f"- {r['label']}: {r['throughput']:,.2f} graphs/s, {r['peak']:.0%} of the "
                             f"{r['precision']} matmul peak ({r['peak_gflops']:,.0f} GFLOP/s)" for r in records))
    if records and args.figure:
        speed_bars(speed_rows(records), args.figure, "GPSE training step (forward, loss, backward, AdamW), "
                   f"batch {args.batch_size}", "graphs/s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": {k: str(v) for k, v in vars(args).items()}, "results": results, "records": records},
                      fh, indent=2)
    return 0


def precision_records(args, results) -> list:
    """One record per row (``benchmarks/_precision.py``), ``peak`` against this run's matmul peak of its
    precision (measured now, after the sides ran, with the same thread count)."""
    import torch

    from encode_speed import forward_flops

    torch.set_num_threads(args.threads)
    peaks = {p: matmul_peak_gflops(args.device, p) for p in {r["precision"] for r in results.values()}}
    records = []
    for r in results.values():
        graphs_per_step = r["graphs"] / r["steps"]
        flops = 3 * forward_flops(r["nodes_per_batch"], r["edges_per_batch"], graphs_per_step, dim=args.dim,
                                  layers=args.layers)
        gflops = flops / r["s_per_step"] / 1e9
        records.append(record(r["side"], r["precision"], r["graphs_per_s"], "graphs/s", gflops / peaks[r["precision"]],
                              mode="train step", peak_gflops=peaks[r["precision"]]))
    return records


if __name__ == "__main__":
    sys.exit(main())
