"""GPSE encoding throughput: gpse-dgl vs PyTorch Geometric's GPSE with the same weights, same graphs, same run.

Measured (eval mode, no autograd, same batch size for both):

* **molecules/s, end to end**: ``gpse_dgl.encode.encode_dataset`` vs PyG's ``precompute_GPSE`` (the
  reference pipeline: ``VirtualNode`` transform, random features, ``DataLoader``, forward, un-collating).
* **molecules/s, forward only**: pre-built batches and input features, only the encoder's forward.
* **nodes/s on a large random graph** (exact layer-wise inference, :func:`gpse_dgl.encode.encode_large`).
* **fraction of this machine's dense matmul peak**: the peak is measured in the same run with a large
  ``torch.matmul``; the forward's FLOPs are counted analytically (see :func:`forward_flops`).
* **precisions** (``--precisions fp32,bf16``, :func:`bench_precisions`): ours in each precision
  (``encode_dataset(..., precision=...)``) next to PyG's GPSE under ``torch.autocast`` of the same dtype,
  end to end and forward only, each as a fraction of the matmul peak *of its precision* measured in
  the same run, plus the cosine of our low-precision encodings to fp32's. The records are plain dicts
  (``results["precision_records"]``, see ``benchmarks/_precision.py``) that a figure is drawn from.

The graphs are RDKit's bundled NCI molecules as bare skeletons (``embedded-molecules``, ~3,000 graphs,
~19 nodes each). A parity line reports the largest difference between the two encoders' outputs on the
first batch with the same input features (expected ~1e-6). With CUDA available, GPU columns are added.

Usage::

    python benchmarks/encode_speed.py                 # full run, all cores
    python benchmarks/encode_speed.py --quick         # 256 molecules, 5,000-node large graph
    python benchmarks/encode_speed.py --threads 1 --batch-size 64 --json speed.json
    python benchmarks/encode_speed.py --quick --precisions fp32,bf16   # precision records only
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import markdown_table  # noqa: E402
from _figures import figure_arg, figure_path, speed_bars, speed_rows  # noqa: E402
from _precision import (DEFAULT_PRECISIONS, matmul_peak_gflops, parse_precisions, record, records_table,  # noqa: E402
                        sync_device)


def forward_flops(num_nodes: int, num_edges: int, num_graphs: int, dim_in: int = 20, dim: int = 512,
                  layers: int = 20, virtual_node: bool = True) -> float:
    """Floating-point operations of one GPSE forward (multiply-add = 2).

    Rows ``R = N + B`` (one virtual node per graph), edges ``E' = E + 2N`` (virtual-node edges).
    Pre-layer ``2 R d_in d``; per layer the four ``d x d`` linears ``8 R d^2``, per-edge gate work
    ``4 E' d`` (add, sigmoid counted as 1, multiply, accumulate), per-row BatchNorm/ReLU/normalise/
    residual ``8 R d``; final normalisation ``3 R d``. The linears dominate.
    """
    rows = num_nodes + (num_graphs if virtual_node else 0)
    edges = num_edges + (2 * num_nodes if virtual_node else 0)
    per_layer = 8 * rows * dim * dim + 4 * edges * dim + 8 * rows * dim
    return 2 * rows * dim_in * dim + layers * per_layer + 3 * rows * dim


def _molecules(count):
    from gpse_dgl.data.molecules import load_embedded_molecules

    graphs = load_embedded_molecules()
    return graphs[:count] if count else graphs


def _models(device):
    """Our encoder and PyG's, with identical random weights and non-trivial BatchNorm statistics."""
    import torch
    from torch_geometric.nn import GPSE as PyGGPSE
    from torch_geometric.nn.models.gpse import IdentityHead

    from gpse_dgl.nn.gpse import GPSE
    from gpse_dgl.nn.pyg_compat import to_authors_state_dict

    torch.manual_seed(0)
    ours = GPSE()
    for module in ours.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.normal_(0, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    theirs = PyGGPSE()
    theirs.load_state_dict(to_authors_state_dict(ours.state_dict(), prefix=""), strict=False)
    theirs.post_mp = IdentityHead()  # what GPSE.from_pretrained does for encodings
    return ours.to(device).eval(), theirs.to(device).eval()


def _pyg_dataset(graphs):
    import torch
    from torch_geometric.data import Data, InMemoryDataset

    class _ListDataset(InMemoryDataset):
        def __init__(self, data_list):
            super().__init__(None)
            self.data, self.slices = self.collate(data_list)

    return _ListDataset([Data(edge_index=torch.stack(g.edges()).long(), num_nodes=g.num_nodes()) for g in graphs])


def _pyg_batches(graphs, batch_size, xs):
    import torch
    import torch_geometric.transforms as T
    from torch_geometric.data import Batch, Data

    add_vn = T.VirtualNode()
    batches = []
    for i, x in zip(range(0, len(graphs), batch_size), xs):
        data, start = [], 0
        for g in graphs[i:i + batch_size]:
            n = g.num_nodes()
            data.append(add_vn(Data(edge_index=torch.stack(g.edges()).long(), x=x[start:start + n], num_nodes=n)))
            start += n
        batches.append(Batch.from_data_list(data))
    return batches


def _time(fn, device, repeats=1):
    best = float("inf")
    for _ in range(repeats):
        sync_device(device)
        start = time.perf_counter()
        fn()
        sync_device(device)
        best = min(best, time.perf_counter() - start)
    return best


def bench_molecules(graphs, batch_size, device, repeats) -> dict:
    """End-to-end and forward-only molecules/s for both encoders, plus the parity check."""
    import torch

    import dgl
    from torch_geometric.nn.models.gpse import precompute_GPSE

    from gpse_dgl import kernels
    from gpse_dgl.encode import encode_dataset
    from gpse_dgl.nn.random_features import random_node_features

    ours, theirs = _models(device)
    chunks = [graphs[i:i + batch_size] for i in range(0, len(graphs), batch_size)]
    dgl_batches = [dgl.batch(c) for c in chunks]
    xs = [random_node_features(b, 20, seed=0) for b in dgl_batches]
    pyg_batches = _pyg_batches(graphs, batch_size, xs)
    dev_pyg = [b.to(device) for b in pyg_batches]
    dev_xs = [x.to(device) for x in xs]

    with torch.no_grad():
        # parity on the first batch, same x
        got = ours(dgl_batches[0], dev_xs[0]).cpu()
        out, _ = theirs(dev_pyg[0])
        keep = torch.ones(out.shape[0], dtype=torch.bool)
        keep[pyg_batches[0].ptr[1:] - 1] = False
        parity = (got - out.cpu()[keep]).abs().max().item()
        ours(dgl_batches[0], dev_xs[0])  # warm-up
        theirs(dev_pyg[0])
        ours_fwd = _time(lambda: [ours(b, x) for b, x in zip(dgl_batches, dev_xs)], device, repeats)
        pyg_fwd = _time(lambda: [theirs(b) for b in dev_pyg], device, repeats)

    def ours_end_to_end():
        encode_dataset(ours, graphs, batch_size=batch_size, seed=0, progress=False, device=device)

    ours_e2e = _time(ours_end_to_end, device, repeats)
    # On CUDA, the same forward and encode without the Triton kernels (the torch ops they replace), same run.
    torch_ops = {}
    if str(device).startswith("cuda") and kernels.available("triton"):
        with kernels.disabled("triton"), torch.no_grad():
            ours(dgl_batches[0], dev_xs[0])  # warm-up
            torch_ops["forward"] = _time(lambda: [ours(b, x) for b, x in zip(dgl_batches, dev_xs)], device, repeats)
            torch_ops["end_to_end"] = _time(ours_end_to_end, device, repeats)

    def pyg_end_to_end():
        dataset = _pyg_dataset(graphs)
        with contextlib.redirect_stderr(io.StringIO()):  # its tqdm bar and pin_memory warning
            precompute_GPSE(theirs, dataset, batch_size=batch_size)

    # precompute_GPSE always moves the model to CUDA when CUDA exists: its CPU column is then meaningless.
    on_its_device = str(device).startswith("cuda") == torch.cuda.is_available()
    pyg_e2e = _time(pyg_end_to_end, device, repeats) if on_its_device else None
    n_nodes = sum(g.num_nodes() for g in graphs)
    flops = sum(forward_flops(b.num_nodes(), b.num_edges(), b.batch_size) for b in dgl_batches)
    count = len(graphs)
    return {
        "device": str(device), "graphs": count, "nodes": n_nodes, "batch_size": batch_size,
        "ours_forward_graphs_per_s": count / ours_fwd, "pyg_forward_graphs_per_s": count / pyg_fwd,
        "ours_end_to_end_graphs_per_s": count / ours_e2e,
        "pyg_end_to_end_graphs_per_s": count / pyg_e2e if pyg_e2e else None,
        "ours_forward_gflops": flops / ours_fwd / 1e9, "pyg_forward_gflops": flops / pyg_fwd / 1e9,
        "parity_max_abs_diff": parity,
        "ours_torch_ops_forward_graphs_per_s": count / torch_ops["forward"] if torch_ops else None,
        "ours_torch_ops_end_to_end_graphs_per_s": count / torch_ops["end_to_end"] if torch_ops else None,
    }


def bench_precisions(graphs, batch_size, device, repeats, precisions) -> list:
    """Records (``benchmarks/_precision.py``) of ours and PyG in each of ``precisions``.

    Per precision: end-to-end molecules/s (ours ``encode_dataset(precision=...)``, PyG
    ``precompute_GPSE`` inside ``torch.autocast``) and forward-only molecules/s with the fraction of the
    matmul peak of that precision; low-precision records of ours carry ``min_cosine``/``mean_cosine``
    of their encodings to our fp32 encodings of the same molecules.
    """
    import torch
    import torch.nn.functional as F

    import dgl
    from torch_geometric.nn.models.gpse import precompute_GPSE

    from gpse_dgl.encode import encode_dataset
    from gpse_dgl.nn.random_features import random_node_features
    from gpse_dgl.utils.precision import autocast

    ours, theirs = _models(device)
    chunks = [graphs[i:i + batch_size] for i in range(0, len(graphs), batch_size)]
    dgl_batches = [dgl.batch(c) for c in chunks]
    xs = [random_node_features(b, 20, seed=0).to(device) for b in dgl_batches]
    pyg_batches = [b.to(device) for b in _pyg_batches(graphs, batch_size, xs)]
    flops = sum(forward_flops(b.num_nodes(), b.num_edges(), b.batch_size) for b in dgl_batches)
    on_its_device = str(device).startswith("cuda") == torch.cuda.is_available()
    count, records, reference = len(graphs), [], None
    for precision in precisions:
        peak = matmul_peak_gflops(device, precision)
        with torch.no_grad(), autocast(precision, device):
            ours(dgl_batches[0], xs[0])  # warm-up
            theirs(pyg_batches[0])
            ours_fwd = _time(lambda: [ours(b, x) for b, x in zip(dgl_batches, xs)], device, repeats)
            pyg_fwd = _time(lambda: [theirs(b) for b in pyg_batches], device, repeats)
        encodings = []
        ours_e2e = _time(lambda: encodings.append(encode_dataset(
            ours, graphs, batch_size=batch_size, seed=0, progress=False, device=device, precision=precision)),
            device, repeats)

        def pyg_end_to_end():
            with contextlib.redirect_stderr(io.StringIO()), autocast(precision, device):
                precompute_GPSE(theirs, _pyg_dataset(graphs), batch_size=batch_size)

        pyg_e2e = _time(pyg_end_to_end, device, repeats) if on_its_device else None
        encoded = torch.cat(encodings[-1])
        reference = encoded if precision == "fp32" else reference
        accuracy = {}
        if reference is not None and precision != "fp32":
            cos = F.cosine_similarity(encoded.double(), reference.double(), dim=1)
            accuracy = {"min_cosine": float(cos.min()), "mean_cosine": float(cos.mean())}
        unit = "molecules/s"
        records += [record("ours", precision, count / ours_e2e, unit, None, mode="end to end", **accuracy),
                    record("ours", precision, count / ours_fwd, unit, flops / ours_fwd / 1e9 / peak, mode="forward",
                           peak_gflops=peak)]
        if pyg_e2e:
            records.append(record("pyg", precision, count / pyg_e2e, unit, None, mode="end to end"))
        records.append(record("pyg", precision, count / pyg_fwd, unit, flops / pyg_fwd / 1e9 / peak, mode="forward",
                              peak_gflops=peak))
    return records


def profile_forward(graphs, batch_size, device, precision, top=8) -> list:
    """Where our forward pass spends its time in ``precision``: the ``top`` operators by self time.

    Rows of ``(operator, share of the profiled time, milliseconds)`` from ``torch.profiler`` over two
    batches after one warm-up; the answer to "why is this precision not faster" on a given machine.
    """
    import torch

    import dgl
    from gpse_dgl.nn.random_features import random_node_features
    from gpse_dgl.utils.precision import autocast

    ours, _ = _models(device)
    size = max(1, min(batch_size, len(graphs) // 3))  # three batches: one warm-up, two profiled
    batches = [dgl.batch(graphs[i:i + size]) for i in range(0, 3 * size, size)]  # graphs stay on the CPU
    xs = [random_node_features(b, 20, seed=0).to(device) for b in batches]
    activities = [torch.profiler.ProfilerActivity.CPU]
    if str(device).startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.no_grad(), autocast(precision, device):
        ours(batches[0], xs[0])
        with torch.profiler.profile(activities=activities) as prof:
            for b, x in zip(batches[1:], xs[1:]):
                ours(b, x)
            sync_device(device)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return [(e.key, e.self_cpu_time_total / total, e.self_cpu_time_total / 1e3) for e in events[:top]]


def bench_large(nodes, edges, device, chunk_edges) -> dict:
    """Exact layer-wise nodes/s on a random graph with ``nodes`` nodes and ``edges`` undirected edges."""
    import torch

    from gpse_dgl.data.synthetic import random_graph
    from gpse_dgl.encode import encode_large
    from gpse_dgl.nn.gpse import GPSE

    graph = random_graph(nodes, edges, seed=0)
    torch.manual_seed(0)
    model = GPSE().to(device).eval()
    encode_large(model, random_graph(500, 1500, seed=1), device=device)  # warm-up
    seconds = _time(lambda: encode_large(model, graph, seed=0, device=device, undirected=False,
                                         chunk_edges=chunk_edges), device)
    flops = forward_flops(graph.num_nodes(), graph.num_edges(), 1)
    return {"device": str(device), "nodes": nodes, "directed_edges": graph.num_edges(), "seconds": seconds,
            "nodes_per_s": nodes / seconds, "gflops": flops / seconds / 1e9}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    parser.add_argument("--num-graphs", type=int, default=0, help="molecules to encode (0: all ~3,000)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1, help="timed repetitions (best is reported)")
    parser.add_argument("--large-nodes", type=int, default=50_000)
    parser.add_argument("--large-edges", type=int, default=175_000, help="undirected edges of the large graph")
    parser.add_argument("--chunk-edges", type=int, default=1 << 17)
    parser.add_argument("--no-cuda", action="store_true", help="skip GPU columns even if CUDA is available")
    parser.add_argument("--devices", default="cpu,cuda",
                        help="comma-separated devices to measure (cuda only where available; default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="256 molecules, 5,000-node large graph")
    parser.add_argument("--precisions", default=DEFAULT_PRECISIONS,
                        help="comma-separated precisions of the precision records (fp32, bf16, fp16 on CUDA); "
                             "'' skips them")
    parser.add_argument("--profile", action="store_true",
                        help="also print the operators our forward pass spends its time in, per precision")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--figure", type=figure_arg, default=figure_path("encode_speed.png"),
                        help="bar chart of the forward-pass precision records (default: %(default)s; '' for none)")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_graphs, args.large_nodes, args.large_edges = 256, 5_000, 17_500

    import torch

    torch.set_num_threads(args.threads)
    devices = [d for d in args.devices.split(",")
               if d == "cpu" or (d == "cuda" and torch.cuda.is_available() and not args.no_cuda)]
    graphs = _molecules(args.num_graphs)
    results = {"threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "runs": []}
    for device in devices:
        peak = matmul_peak_gflops(device)
        mol = bench_molecules(graphs, args.batch_size, device, args.repeats)
        large = bench_large(args.large_nodes, args.large_edges, device, args.chunk_edges)
        peak = max(peak, matmul_peak_gflops(device))  # again after the runs, in case the machine was busy
        results["runs"].append({"device": device, "matmul_peak_gflops": peak, "molecules": mol, "large": large})
        _print(device, peak, mol, large, torch.get_num_threads())
        if args.precisions:
            precisions = [p for p in parse_precisions(args.precisions) if p != "fp16" or device == "cuda"]
            records = bench_precisions(graphs, args.batch_size, device, args.repeats, precisions)
            results.setdefault("precision_records", []).extend(dict(r, device=device) for r in records)
            print(f"precisions on {device} ({len(graphs):,} molecules, batch {args.batch_size}):\n"
                  + records_table(records), flush=True)
            if args.profile:
                for precision in precisions:
                    rows = profile_forward(graphs, args.batch_size, device, precision)
                    results.setdefault("profiles", {})[f"{device}/{precision}"] = rows
                    print(f"profile of our forward pass on {device} in {precision} (self time, two batches):\n"
                          + markdown_table(["operator", "share", "ms"],
                                           [[name, f"{share:.0%}", f"{ms:,.1f}"] for name, share, ms in rows]),
                          flush=True)
    forward = [r for r in results.get("precision_records", []) if r.get("mode") == "forward" and r["device"] == "cpu"]
    if forward and args.figure:
        speed_bars(speed_rows(forward), args.figure, f"GPSE forward pass, {len(graphs):,} molecules, "
                   f"{torch.get_num_threads()} CPU thread(s)", "graphs/s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


def _print(device, peak, mol, large, threads):
    ratio_fwd = mol["ours_forward_graphs_per_s"] / mol["pyg_forward_graphs_per_s"]
    lines = [f"== {device} ({threads} threads) ==  dense matmul peak {peak:,.0f} GFLOP/s",
             f"molecules: {mol['graphs']:,} graphs, {mol['nodes']:,} nodes, batch {mol['batch_size']}; "
             f"parity max |ours - PyG| = {mol['parity_max_abs_diff']:.1e}",
             f"  forward only   ours {mol['ours_forward_graphs_per_s']:8,.1f} graphs/s "
             f"({mol['ours_forward_gflops']:,.0f} GFLOP/s, {mol['ours_forward_gflops'] / peak:.0%} of peak)   "
             f"PyG {mol['pyg_forward_graphs_per_s']:8,.1f} graphs/s "
             f"({mol['pyg_forward_gflops']:,.0f} GFLOP/s, {mol['pyg_forward_gflops'] / peak:.0%} of peak)   "
             f"ratio {ratio_fwd:.2f}x"]
    if not mol["pyg_end_to_end_graphs_per_s"]:
        lines.append(f"  end to end     ours {mol['ours_end_to_end_graphs_per_s']:8,.1f} graphs/s   "
                     "PyG precompute_GPSE n/a (it always runs on CUDA when CUDA exists)")
    else:
        ratio = mol["ours_end_to_end_graphs_per_s"] / mol["pyg_end_to_end_graphs_per_s"]
        lines.append(f"  end to end     ours {mol['ours_end_to_end_graphs_per_s']:8,.1f} graphs/s   "
                     f"PyG precompute_GPSE {mol['pyg_end_to_end_graphs_per_s']:8,.1f} graphs/s   ratio {ratio:.2f}x")
    if mol.get("ours_torch_ops_forward_graphs_per_s"):
        lines.append("  ours without the Triton kernels (torch ops): forward "
                     f"{mol['ours_torch_ops_forward_graphs_per_s']:8,.1f}"
                     f" graphs/s, end to end {mol['ours_torch_ops_end_to_end_graphs_per_s']:8,.1f} graphs/s")
    lines.append(f"large graph: {large['nodes']:,} nodes, {large['directed_edges']:,} directed edges, layer-wise: "
                 f"{large['seconds']:.1f} s, {large['nodes_per_s']:,.0f} nodes/s "
                 f"({large['gflops']:,.0f} GFLOP/s, {large['gflops'] / peak:.0%} of peak)")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
