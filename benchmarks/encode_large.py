"""Time and peak memory of GPSE inference on an arXiv-size graph (exact layer-wise and neighbour-sampled).

The graph is a uniform random directed graph with ogbn-arxiv's size (169,343 nodes, 1,166,243 edges;
symmetrised before encoding, as GPSE expects), encoded with a randomly initialised 20 x 512 encoder (the
published architecture; weights do not change the cost). Each mode runs in its own subprocess so that
its peak resident memory (``ru_maxrss``) is its own; the report gives the peak and the resident memory
before encoding (graph + model), so the difference is what inference needs.

Sampled inference with the paper's fan-outs (30, 20, 10, then 5) builds a 20-hop computation graph per
mini-batch, which covers most of the graph after a few hops. By default all nodes form one mini-batch
(the library default); with ``--sample-batch-size 1024`` (the paper's GPU setting) ``--sampled-batches K``
times only the first ``K`` mini-batches and extrapolates to all seed nodes.

Each mode runs once per precision (``--precisions fp32,bf16``: ``encode_large`` / ``encode_sampled``
with ``precision=...``); ``results["records"]`` holds plain-dict rows (``benchmarks/_precision.py``) with
nodes/s and, for exact layer-wise inference, the fraction of the matmul peak of that precision measured
in the same run (PyG has no layer-wise large-graph inference to compare with).

Each runs once per CPU path of the gated sum (``--paths fused-cpu,torch``: the C++ kernels of
:mod:`gpse_dgl.kernels.cpu`, or torch ops with ``GPSE_DGL_NATIVE=0``). Beside each layer-wise time the
report gives, measured in the same process, the products alone (one layer's four maps over every node,
times the layers) and the edges alone (one gated sum over the whole graph, times the layers), the bytes
of source rows the fused kernel reads per edge, and the largest difference between the paths' encodings
(first and last 1,024 rows).

Usage::

    python benchmarks/encode_large.py                      # arXiv size, both modes
    python benchmarks/encode_large.py --quick              # 20,000 nodes, 4 layers: a smoke test
    python benchmarks/encode_large.py --modes layerwise --threads 2 --json out.json
    python benchmarks/encode_large.py --modes layerwise --threads 2 --paths fused-cpu,torch --precisions fp32,bf16
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _precision import DEFAULT_PRECISIONS, matmul_peak_gflops, parse_precisions, record, records_table  # noqa: E402

ARXIV_NODES, ARXIV_EDGES = 169_343, 1_166_243
PRODUCT_CHUNK_ROWS = 8192  # about the destination rows of one chunk of the default 131,072 edges at arXiv's degree


def _rss_gb() -> float:
    """Peak resident set size of this process so far, in GB (Linux reports KiB)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e9


def _current_rss_gb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9
    except OSError:
        return float("nan")


def run_one(args) -> dict:
    """One mode in this process; returns the measurements."""
    import torch

    torch.set_num_threads(args.threads)
    from gpse_dgl.data.synthetic import random_graph
    from gpse_dgl.encode import encode_large, encode_sampled
    from gpse_dgl.encode.graphs import as_simple_undirected
    from gpse_dgl.nn.gpse import GPSE

    graph = random_graph(args.nodes, args.edges, seed=0, directed=True)
    t0 = time.perf_counter()
    graph = as_simple_undirected(graph)
    prep_s = time.perf_counter() - t0
    torch.manual_seed(0)
    model = GPSE(dim_hidden=args.dim, num_layers=args.layers).eval()
    baseline = _current_rss_gb()
    result = {"mode": args.mode, "precision": args.precision, "nodes": graph.num_nodes(),
              "directed_edges": graph.num_edges(), "layers": args.layers, "dim": args.dim,
              "threads": torch.get_num_threads(),
              "symmetrise_s": round(prep_s, 2), "rss_before_gb": round(baseline, 3)}
    t0, c0 = time.perf_counter(), time.process_time()
    if args.mode == "layerwise":
        out = encode_large(model, graph, seed=0, chunk_edges=args.chunk_edges, undirected=False,
                           progress=args.progress, precision=args.precision)
        elapsed = time.perf_counter() - t0
        result.update(seconds=round(elapsed, 2), nodes_per_s=round(graph.num_nodes() / elapsed, 1))
    else:
        fanouts = tuple(int(f) for f in args.fanouts.split(","))
        if args.sampled_batches and args.sample_batch_size:
            out, seeds = _sampled_prefix(model, graph, fanouts, args)
            elapsed = time.perf_counter() - t0
            rate = seeds / elapsed
            result.update(seeds_timed=seeds, seconds_timed=round(elapsed, 2), nodes_per_s=round(rate, 1),
                          seconds_extrapolated=round(graph.num_nodes() / rate, 1))
        else:
            out = encode_sampled(model, graph, seed=0, fanouts=fanouts, undirected=False, progress=args.progress,
                                 batch_size=args.sample_batch_size or None, precision=args.precision)
            elapsed = time.perf_counter() - t0
            result.update(seconds=round(elapsed, 2), nodes_per_s=round(graph.num_nodes() / elapsed, 1))
        result.update(fanouts=args.fanouts, sample_batch_size=args.sample_batch_size or graph.num_nodes())
    # CPU seconds of all threads: with a busy machine, cpu_s / threads estimates the wall time of a quiet one.
    result["cpu_s"] = round(time.process_time() - c0, 1)
    from gpse_dgl import kernels

    result["path"] = kernels.paths("cpu")["gated_sum"]  # fused-cpu, or torch with GPSE_DGL_NATIVE=0
    result["peak_rss_gb"] = round(_rss_gb(), 3)  # of the encode, before the parts below allocate theirs
    if args.mode == "layerwise":
        result.update(_parts(model, graph, args))
    if args.sample_out:
        torch.save(torch.cat([out[:1024], out[-1024:]]).float(), args.sample_out)
    result["finite"] = bool(out.isfinite().all())
    return result


def _parts(model, graph, args) -> dict:
    """Seconds of the products alone and of the edges alone for the whole encode (one layer's worth of
    each over every node / edge, times the layers), and the bytes of source data the fused kernel reads per edge (two
    rows; packed, the same bytes in one record per block of columns, mostly from the cache)."""
    import torch

    from gpse_dgl import kernels
    from gpse_dgl.nn.gated_conv import product_dtype
    from gpse_dgl.nn.ops import gated_sum
    from gpse_dgl.utils import memory
    from gpse_dgl.utils.precision import autocast, product_input

    conv = model.encoder.convs[0] if hasattr(model, "encoder") else model.convs[0]
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(graph.num_nodes(), args.dim, generator=gen)
    with torch.no_grad(), autocast(args.precision, "cpu"):
        dtype = product_dtype(h)
        sources = memory.empty((h.shape[0], 2 * args.dim), dtype=dtype)
        destinations = memory.empty((PRODUCT_CHUNK_ROWS, 2 * args.dim), dtype=dtype)

        def products():
            # as the encode does them: sources over every node, destinations over chunks of rows, each
            # into a buffer kept from layer to layer
            h_in = product_input(h)
            query, value = conv.source_projections(h_in, out=sources)
            for start in range(0, h_in.shape[0], PRODUCT_CHUNK_ROWS):
                rows = h_in[start:start + PRODUCT_CHUNK_ROWS]
                conv.destination_projections(rows, out=destinations[:rows.shape[0]])
            return query, value

        def edges():
            # as the encode does them: on the CPU kernel's path the sources packed once into a kept slab and
            # summed by column blocks, elsewhere gated sums; into a sum kept from layer to layer
            if packed:
                kernels.packed_gated_sum(indptr, index, key, kernels.pack_sources(query, value, out=slab), summed)
            else:
                gated_sum(graph, key, query, value, out=summed)

        query, value = products()  # warm: kernels compiled, shapes seen
        key = conv.destination_projections(product_input(h))[0]
        summed = torch.zeros(graph.num_nodes(), args.dim)
        packed = kernels.packs_sources(h.device, query.dtype)
        if packed:
            csr = kernels.GatedCSR.of(graph)
            indptr, index = csr.dst_indptr, csr.dst_index
            slab = memory.empty(kernels.packed_shape(*query.shape, query.dtype), dtype=query.dtype)
        edges()
        t0 = time.perf_counter()
        query, value = products()
        products_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        edges()
        edges_s = time.perf_counter() - t0
    return {"products_s": round(products_s * args.layers, 2), "edges_s": round(edges_s * args.layers, 2),
            "row_bytes_per_edge": 2 * args.dim * query.element_size()}


def _sampled_prefix(model, graph, fanouts, args):
    """Sampled inference for the seed nodes of the first ``args.sampled_batches`` mini-batches."""
    import torch

    from gpse_dgl.encode.large_graph import sampled_forward
    from gpse_dgl.nn.random_features import random_node_features

    seeds = min(graph.num_nodes(), args.sampled_batches * args.sample_batch_size)
    from gpse_dgl.utils.precision import autocast

    encoder = getattr(model, "encoder", model).eval()
    x = random_node_features(graph, model.dim_in, seed=0)
    with torch.no_grad(), autocast(args.precision, "cpu"):
        out = sampled_forward(encoder, graph, x, fanouts=fanouts, batch_size=args.sample_batch_size, seed=0,
                              nodes=torch.arange(seeds), progress=args.progress)
    return out, seeds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=ARXIV_NODES)
    parser.add_argument("--edges", type=int, default=ARXIV_EDGES, help="undirected edges before symmetrising")
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    parser.add_argument("--modes", default="layerwise,sampled", help="comma-separated: layerwise, sampled")
    parser.add_argument("--chunk-edges", type=int, default=1 << 17)
    parser.add_argument("--fanouts", default="30,20,10,5")
    parser.add_argument("--sample-batch-size", type=int, default=0, help="seed nodes per batch (0: all in one)")
    parser.add_argument("--sampled-batches", type=int, default=4,
                        help="with --sample-batch-size: time only this many mini-batches and extrapolate (0: all)")
    parser.add_argument("--quick", action="store_true", help="20,000 nodes, 60,000 edges, 4 layers")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--precisions", default=DEFAULT_PRECISIONS, help="comma-separated: fp32, bf16")
    parser.add_argument("--paths", default="fused-cpu", help="comma-separated CPU paths of the gated sum: fused-cpu "
                        "(the C++ kernels, where they build), torch (torch ops: GPSE_DGL_NATIVE=0)")
    parser.add_argument("--sample-out", help=argparse.SUPPRESS)  # internal: where to save rows of the encoding
    parser.add_argument("--mode", help=argparse.SUPPRESS)  # internal: run one mode in this process
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)  # internal: its precision
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.edges, args.layers = 20_000, 60_000, 4
    if args.mode:
        print(json.dumps(run_one(args)))
        return 0
    results = []
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    samples = tempfile.mkdtemp(prefix="gpse-encode-large-")
    forwarded = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--json" and not a.endswith(".json")]
    for precision in parse_precisions(args.precisions):
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            for path in paths:
                sample = os.path.join(samples, f"{mode}-{precision}-{path}.pt")
                cmd = [sys.executable, os.path.abspath(__file__), "--mode", mode, "--precision", precision,
                       "--sample-out", sample] + forwarded
                env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
                if path == "torch":
                    env["GPSE_DGL_NATIVE"] = "0"
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if proc.returncode != 0:
                    print(f"{mode} {precision} {path}: failed\n{proc.stderr}", file=sys.stderr)
                    return 1
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                if path != result["path"]:
                    print(f"{mode} {precision}: asked for the {path} path, ran {result['path']}", file=sys.stderr)
                    return 1
                results.append(result)
                print(_format(result), flush=True)
            _compare_paths(samples, mode, precision, paths)
    records = precision_records(args, results)
    print(records_table(records), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"results": results, "records": records}, fh, indent=2)
    return 0


def _compare_paths(samples: str, mode: str, precision: str, paths: list) -> None:
    """Print the largest difference between the paths' encodings (the same graph, seed and weights)."""
    import torch

    if len(paths) < 2:
        return
    first = torch.load(os.path.join(samples, f"{mode}-{precision}-{paths[0]}.pt"), weights_only=True)
    for other in paths[1:]:
        rows = torch.load(os.path.join(samples, f"{mode}-{precision}-{other}.pt"), weights_only=True)
        print(f"{mode} {precision}: largest difference {paths[0]} vs {other}: {float((first - rows).abs().max()):.2e} "
              f"(encodings are unit rows)", flush=True)


def precision_records(args, results) -> list:
    """One record per (mode, precision) with nodes/s; layer-wise rows also get the fraction of this
    run's matmul peak of their precision (FLOPs of ``encode_speed.forward_flops``)."""
    import torch

    from encode_speed import forward_flops

    torch.set_num_threads(args.threads)
    peaks = {p: matmul_peak_gflops("cpu", p) for p in {r["precision"] for r in results}}
    records = []
    for r in results:
        peak = None
        if r["mode"] == "layerwise":
            flops = forward_flops(r["nodes"], r["directed_edges"], 1, dim=r["dim"], layers=r["layers"])
            peak = flops / r["seconds"] / 1e9 / peaks[r["precision"]]
        records.append(record(f"ours ({r['path']})", r["precision"], r["nodes_per_s"], "nodes/s", peak,
                              mode=r["mode"], seconds=r.get("seconds"), peak_rss_gb=r["peak_rss_gb"]))
    return records


def _format(r: dict) -> str:
    head = (f"{r['mode']:<9} {r['precision']} {r['path']:<9} {r['nodes']:,} nodes, {r['directed_edges']:,} directed edges, "
            f"{r['layers']} x {r['dim']}, {r['threads']} threads: ")
    if "seconds_extrapolated" in r:
        time_part = (f"{r['seconds_timed']} s for {r['seeds_timed']:,} seeds -> {r['nodes_per_s']:,} nodes/s, "
                     f"~{r['seconds_extrapolated']:,} s for all nodes (fan-outs {r['fanouts']}, "
                     f"{r['sample_batch_size']:,} seeds per batch)")
    else:
        time_part = f"{r['seconds']} s ({r['nodes_per_s']:,} nodes/s)"
        if "products_s" in r:
            time_part += (f" [products alone {r['products_s']} s, edges alone {r['edges_s']} s, "
                          f"{r['row_bytes_per_edge']:,} B of source data read per edge]")
        if "fanouts" in r:
            time_part += f" (fan-outs {r['fanouts']}, {r['sample_batch_size']:,} seeds per batch)"
    return (f"{head}{time_part}; CPU time {r['cpu_s']} s; peak RSS {r['peak_rss_gb']} GB "
            f"(before encoding {r['rss_before_gb']} GB)"
            f"{'' if r['finite'] else '; NON-FINITE OUTPUT'}")


if __name__ == "__main__":
    sys.exit(main())
