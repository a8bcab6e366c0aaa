#!/usr/bin/env python
"""Encoding throughput of the shipped GPSE models, in each precision, against the quickstart model in fp32.

Every shipped model (``gpse-dgl models``: the default ``rdkit-base`` and ``quickstart``) encodes the same
RDKit molecules (``embedded-molecules``) with ``encode_dataset`` in batches, in each precision of
``--precisions``; the ratio column is each row's throughput over the first row's (quickstart, fp32),
measured in the same run. Each row is the best of ``--repeats`` timings, after one untimed warm-up batch.
A last column gives the smallest cosine between a row's encodings and the same model's fp32 encodings
(1 for fp32 itself): what the lower precision costs in accuracy.

Usage::

    python benchmarks/shipped_models.py --threads 2
    python benchmarks/shipped_models.py --threads 1 --clock cpu --precisions fp32 --limit 500
    python benchmarks/shipped_models.py --device cuda --precisions fp32,bf16,fp16
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (CLOCKS, add_molecule_timing_options, command_line, load_average, machine_line,  # noqa: E402
                     markdown_table, set_threads_env, timing_molecules, today)

MODELS = ("quickstart", "rdkit-base")


def time_encoding(model, graphs, precision: str, batch_size: int, repeats: int, clock) -> tuple[float, list]:
    """``(best seconds, encodings)`` of ``encode_dataset`` over ``graphs`` in ``precision`` on the model's
    device (the encodings come back to the CPU, so every timing ends with the device's work done)."""
    from gpse_dgl.encode import encode_dataset

    encode_dataset(model, graphs[:batch_size], batch_size=batch_size, progress=False, precision=precision)
    best, encodings = float("inf"), None
    for _ in range(repeats):
        start = clock()
        encodings = encode_dataset(model, graphs, batch_size=batch_size, progress=False, precision=precision)
        best = min(best, clock() - start)
    return best, encodings


def smallest_cosine(encodings, reference) -> float:
    """Smallest per-node cosine similarity between two lists of encodings of the same graphs."""
    import torch

    low, ref = torch.cat(encodings), torch.cat(reference)
    return float(torch.nn.functional.cosine_similarity(low, ref, dim=1).min())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=2, help="timings per row, best kept (default: %(default)s)")
    parser.add_argument("--device", default="cpu", help="where the models run: cpu or cuda (default: %(default)s)")
    add_molecule_timing_options(parser)
    args = parser.parse_args(argv)
    set_threads_env(args.threads)

    import torch

    from gpse_dgl.encode import load_gpse

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")

    graphs = timing_molecules(args.threads, args.limit)
    precisions = [p for p in args.precisions.split(",") if p]
    rows, base = [], None
    for name in MODELS:
        model = load_gpse(name, device=args.device)
        reference = None
        for precision in precisions:
            seconds, encodings = time_encoding(model, graphs, precision, args.batch_size, args.repeats,
                                               CLOCKS[args.clock])
            if precision == "fp32":
                reference = encodings
            base = base or seconds
            cosine = "" if reference is None else f"{smallest_cosine(encodings, reference):.4f}"
            rows.append((name, f"{model.num_layers} x {model.dim_hidden}", precision, f"{seconds:.2f}",
                         f"{len(graphs) / seconds:,.0f}", f"{base / seconds:.2f}x", cosine))
    print(markdown_table(["model", "size", "precision", f"{args.clock} s", "graphs/s", "vs first row",
                          "min cosine vs fp32"], rows))
    print(f"\n{len(graphs)} molecules ({sum(g.num_nodes() for g in graphs):,} nodes), batch size {args.batch_size}")
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"{machine_line()}; device {device}; torch threads {torch.get_num_threads()}; load average {load_average()}; {today()}")
    print(f"command: {command_line()}")


if __name__ == "__main__":
    main()
