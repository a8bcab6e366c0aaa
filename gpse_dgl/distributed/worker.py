"""Entry point of the processes :mod:`gpse_dgl.distributed.launch` starts.

``python -m gpse_dgl.distributed.worker server``: serve this process's partition (environment from the
launcher). ``python -m gpse_dgl.distributed.worker encode --out DIR [--checkpoint C] [--seed S]``: join
as a trainer and run :func:`gpse_dgl.distributed.encode.encode_distributed`. A failure prints one line
``error: ...`` (the last line of the process's log, which the launcher reports) and exits with status 1
without DGL's exit handshake (the servers may be gone).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

import torch

from ..encode.loading import load_gpse
from .encode import DEFAULT_DIST_CHUNK_EDGES, encode_distributed
from .runtime import join_trainer, leave_trainer, run_server


def _encode(args) -> None:
    start = time.perf_counter()
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    trainer = join_trainer()
    print(f"trainer {trainer.rank}: joined ({time.perf_counter() - start:.1f} s), partition {trainer.part}",
          flush=True)
    encoder = load_gpse(args.checkpoint)
    stats = encode_distributed(trainer, encoder, args.out, seed=args.seed, chunk_edges=args.chunk_edges,
                               log=lambda line: print(f"trainer {trainer.rank}: {line}", flush=True))
    print(f"trainer {trainer.rank}: {stats['nodes']} nodes in {stats['seconds']:.1f} s, "
          f"peak RSS {stats['peak_rss_bytes'] / 2**20:.0f} MiB", flush=True)
    leave_trainer()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpse_dgl.distributed.worker")
    sub = parser.add_subparsers(dest="role", required=True)
    sub.add_parser("server")
    enc = sub.add_parser("encode")
    enc.add_argument("--out", required=True)
    enc.add_argument("--checkpoint", default=None)
    enc.add_argument("--seed", type=int, default=0)
    enc.add_argument("--chunk-edges", type=int, default=DEFAULT_DIST_CHUNK_EDGES)
    args = parser.parse_args(argv)
    try:
        if args.role == "server":
            run_server()
        else:
            _encode(args)
    except BaseException as exc:  # one line for the launcher; the traceback above it in the log
        if os.environ.get("GPSE_DGL_DEBUG") or not isinstance(exc, Exception):
            traceback.print_exc()
        else:
            traceback.print_exc(limit=-3)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"error: {args.role}: {message}", flush=True)
        sys.stderr.flush()
        os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
