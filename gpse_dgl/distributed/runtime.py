"""What a process started by :mod:`gpse_dgl.distributed.launch` does first, from its environment.

The launcher sets the variables ``dgl.distributed.initialize`` reads (DGL 1.1 and 2.x read the same):

=====================  =======================================================================
``DGL_DIST_MODE``      ``distributed`` (DGL's default, ``standalone``, takes one partition only)
``DGL_ROLE``           ``server`` or ``client`` (a trainer)
``DGL_IP_CONFIG``      the IP configuration: one line ``IP PORT`` per machine (= partition)
``DGL_NUM_SERVER``     graph servers per machine (1: the main server of the partition)
``DGL_NUM_CLIENT``     trainers in all (servers wait for this many to connect)
``DGL_SERVER_ID``      a server's id (machine ``m``'s first server is ``m * DGL_NUM_SERVER``)
``DGL_CONF_PATH``      the partition config (``<name>.json`` written by ``partition_graph``)
``DGL_GRAPH_FORMAT``   ``csc`` (the formats a server builds)
``DGL_NUM_SAMPLER``    0 (no sampler processes: the encoding reads whole neighbourhoods)
=====================  =======================================================================

and ours: ``GPSE_DGL_PART`` (the partition this process belongs to: its machine id for DGL),
``GPSE_DGL_PART_DIR`` (the ``gpse-dgl partition`` directory), ``GPSE_DGL_LOCAL_RANK`` and
``GPSE_DGL_TRAINERS`` (trainers per partition) and, for trainers, torch's ``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` (a gloo group for the few collectives of the encoding).

Servers run with DGL's shared memory between server and trainer *graph structure* off (a trainer reads
its partition's structure from the partition files), and every shared-memory tensor name carries the
partition (:func:`gpse_dgl._private.isolate_dgl_shared_memory`): DGL names them after the tensor only,
so two partitions on one host would otherwise map the same memory (measured: they read each other's
rows). The trainer's machine id is pinned to its partition (:func:`gpse_dgl._private.pin_dgl_machine_id`),
since DGL derives it from the host's IP address, the same for every partition on one host.
"""
from __future__ import annotations

import datetime
import json
import os
import resource
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .. import _env  # noqa: F401
import dgl

from .. import _private
from ..utils.distributed import leave_group
from ..utils.errors import GPSEError
from .partition import read_partition_info

__all__ = ["Trainer", "join_trainer", "run_server", "peak_rss_bytes", "memory_status", "write_stats",
           "DEFAULT_TIMEOUT"]

#: seconds a collective (or joining the group) waits for the other trainers (GPSE_DGL_DIST_TIMEOUT)
DEFAULT_TIMEOUT = 300


def _env(name: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise GPSEError(f"{name} is not set: start this process with `gpse-dgl launch` "
                        "(gpse_dgl.distributed.launch)")
    return value


def shared_memory_prefix(run_id: str, part: int) -> str:
    """Prefix of the shared-memory names of partition ``part`` in run ``run_id`` (the launcher removes
    what a killed process leaves in ``/dev/shm`` by this prefix)."""
    return f"gpse-{run_id}-p{part}-"


def _isolate(part: int) -> None:
    _private.isolate_dgl_shared_memory(shared_memory_prefix(os.environ.get("GPSE_DGL_RUN_ID", "0"), part))
    _private.pin_dgl_machine_id(part)


def peak_rss_bytes() -> int:
    """This process's peak resident set size since it started its program (``VmHWM``).

    Not ``getrusage``'s ``ru_maxrss``: that one carries over a forked parent's resident size (a process
    started by a large launcher would report the launcher's size).
    """
    peak = memory_status().get("peak_rss")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_status() -> dict:
    """This process's resident memory now: ``rss`` (all), ``shared_memory`` (its part that is ``/dev/shm``
    pages, e.g. DistTensor rows a trainer shares with its server) and ``peak_rss`` (bytes, Linux)."""
    fields = {"VmRSS": "rss", "RssShmem": "shared_memory", "VmHWM": "peak_rss"}
    out = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in fields:
                    out[fields[key]] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def write_stats(name: str, stats: dict) -> None:
    """Write ``stats`` as ``$GPSE_DGL_STATS_DIR/<name>.json`` (nothing when the variable is unset)."""
    directory = os.environ.get("GPSE_DGL_STATS_DIR")
    if directory:
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"{name}.json"), "w") as fh:
            json.dump(stats, fh, indent=1)


def run_server() -> None:
    """Serve this process's partition until every trainer has left (DGL's ``DistGraphServer``)."""
    from dgl.distributed import rpc  # noqa: E402  (dgl.distributed's RPC reset, as initialize does)
    from dgl.distributed.dist_graph import DistGraphServer  # noqa: E402

    part = int(_env("GPSE_DGL_PART"))
    _isolate(part)
    start = time.perf_counter()
    rpc.reset()
    server = DistGraphServer(int(_env("DGL_SERVER_ID")), _env("DGL_IP_CONFIG"), int(_env("DGL_NUM_SERVER")),
                             int(_env("DGL_NUM_CLIENT")), _env("DGL_CONF_PATH"), disable_shared_mem=True,
                             graph_format=os.environ.get("DGL_GRAPH_FORMAT", "csc").split(","))
    server.start()
    write_stats(f"server{_env('DGL_SERVER_ID')}", {"role": "server", "part": part,
                                                   "seconds": time.perf_counter() - start,
                                                   "peak_rss_bytes": peak_rss_bytes(), "memory": memory_status()})


@dataclass
class Trainer:
    """A joined trainer: DGL's distributed graph, its partition and its place among the trainers."""

    graph: object          # dgl.distributed.DistGraph
    partition_book: object
    part: int              # this trainer's partition
    rank: int              # torch.distributed rank (trainers of partition p are p * T ... p * T + T - 1)
    world_size: int
    info: dict             # gpse_partition.json
    local_graph: dgl.DGLGraph | None  # the partition's structure (inner and halo nodes, inner nodes' in-edges)

    def barrier(self) -> None:
        dist.barrier()


def join_trainer() -> Trainer:
    """Connect to the graph servers and the other trainers (call once, before any other DGL call)."""
    part = int(_env("GPSE_DGL_PART"))
    _isolate(part)
    info = read_partition_info(_env("GPSE_DGL_PART_DIR"))
    ip_config = _env("DGL_IP_CONFIG")
    _env("DGL_NUM_SERVER")
    if os.environ.get("DGL_DIST_MODE") != "distributed":
        raise GPSEError("DGL_DIST_MODE must be 'distributed' (set by gpse-dgl launch)")
    dgl.distributed.initialize(ip_config)
    timeout = float(os.environ.get("GPSE_DGL_DIST_TIMEOUT", DEFAULT_TIMEOUT))
    rank, world = int(_env("RANK")), int(_env("WORLD_SIZE"))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout))
    local_graph, _, _, book, name, _, _ = dgl.distributed.load_partition(info["part_config_path"], part,
                                                                            load_feats=False)
    graph = dgl.distributed.DistGraph(name, gpb=book)
    return Trainer(graph, book, part, rank, world, info, local_graph)


def leave_trainer() -> None:
    """Leave the torch group (DGL's client leaves at interpreter exit, shutting the servers down)."""
    if dist.is_initialized():
        leave_group()
    sys.stdout.flush()
