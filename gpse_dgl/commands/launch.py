"""``gpse-dgl launch``: GPSE encoding of a partitioned graph by graph servers and trainers (dgl.distributed)."""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import click

from ..utils.progress import is_quiet
from . import output_options


@click.command("launch")
@click.argument("part_dir", type=click.Path(exists=True, file_okay=False), required=False)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output directory: one shard per trainer (DGL binary files) and manifest.json; "
                   "logs/ holds every process's log.")
@click.option("--overwrite", is_flag=True, help="Replace the outputs of an earlier launch in --out (removed "
                                               "when the new run starts).")
@click.option("--cleanup", "cleanup_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="Only remove the shared memory a killed launch into this --out directory left on its hosts "
                   "(a new launch into the same --out does it too).")
@click.option("--checkpoint", default=None,
              help="GPSE checkpoint (a registered model name or a file); default: the shipped model.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random input features (as `gpse-dgl encode --seed`: same seed, same encodings).")
@click.option("--gather", "gather_path", type=click.Path(dir_okay=False), default=None,
              help="Also write all encodings into this one DGL binary file (ndata['gpse'] of the input graph "
                   "when its file still exists, else of an edgeless graph); needs N x d floats in this process.")
@click.option("--trainers-per-part", type=click.IntRange(min=1), default=1, show_default=True,
              help="Trainer processes per partition (they split the partition's nodes).")
@click.option("--hosts", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Host file: one 'HOST [PORT]' line per partition (default: every partition on this host, "
                   "over loopback).")
@click.option("--via", type=click.Choice(["local", "ssh", "srun"]), default=None,
              help="How processes start on the hosts of --hosts (default ssh; srun inside a SLURM allocation).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Threads per trainer (default: the host's cores shared among its trainers).")
@click.option("--chunk-edges", type=click.IntRange(min=1), default=None,
              help="Most in-edges per destination chunk (bounds the rows pulled at once); default 16384.")
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help="Seconds the whole run may take; then every process is stopped.")
@output_options
def command(part_dir, out_dir, overwrite, cleanup_dir, checkpoint, seed, gather_path, trainers_per_part, hosts, via,
            threads, chunk_edges, timeout):
    """Encode a partitioned graph with GPSE: one graph server per partition and its trainers.

    Each trainer computes its partition's nodes layer by layer, reading neighbours' rows through the
    servers; the result equals a one-process `gpse-dgl encode` of the graph with the same seed (up to
    float rounding). If any process fails, all are stopped and one line says which.

    \b
    Examples:
      gpse-dgl partition arxiv.bin --parts 2 --out parts/
      gpse-dgl launch parts/ --out enc/ --gather arxiv_gpse.bin
      gpse-dgl launch /shared/parts/ --out /shared/enc/ --hosts hosts.txt --via ssh
      gpse-dgl launch --cleanup enc/    # after the launcher was killed (kill -9): its shared memory
    """
    from ..distributed.launch import read_host_file
    from ..distributed.leftovers import clean_directory
    from ..distributed.partition import read_partition_info
    from ..utils.lock import RunLock

    say = (lambda *a: None) if is_quiet() else click.echo
    if cleanup_dir is not None:
        if part_dir is not None or out_dir is not None:
            raise click.UsageError("--cleanup DIR takes no PART_DIR and no --out")
        _say_cleaned(say, clean_directory(cleanup_dir), cleanup_dir, always=True)
        return
    if part_dir is None or out_dir is None:
        raise click.UsageError("give PART_DIR and --out (or --cleanup DIR)")
    if via is not None and via != "local" and hosts is None:
        raise click.UsageError(f"--via {via} needs --hosts")
    info = read_partition_info(part_dir)
    host_list = None if hosts is None else read_host_file(hosts, info["num_parts"])
    via = via or ("local" if host_list is None else "ssh")
    with RunLock(out_dir, label=f"--out {out_dir}"):
        _say_cleaned(say, clean_directory(out_dir), out_dir)
        _clear_outputs(out_dir, overwrite)
        _run(part_dir, out_dir, info, host_list, via, checkpoint, seed, gather_path, trainers_per_part, threads,
             chunk_edges, timeout, say)


def _say_cleaned(say, removed: list, directory, always: bool = False) -> None:
    if removed or always:
        size = sum(_size(p) for p in removed) / 2**20
        say(f"removed {len(removed)} shared-memory file(s) ({size:,.1f} MiB) a killed launch into {directory} "
            f"left on this host" + (" (and asked its other hosts to remove theirs)" if removed else ""))


def _size(path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _clear_outputs(out_dir, overwrite: bool) -> None:
    """Refuse an earlier launch's outputs in ``out_dir`` unless ``overwrite``; then remove them (the
    manifest first, so that no reader takes the old shards for a finished run)."""
    from ..distributed.shards import MANIFEST
    from ..utils.errors import GPSEError

    out = Path(out_dir)
    earlier = [out / MANIFEST, *sorted(out.glob("shard-*.bin")), out / "logs"]
    earlier = [p for p in earlier if p.exists()]
    if earlier and not overwrite:
        raise GPSEError(f"--out {out_dir} holds an earlier launch ({earlier[0].name}); pass --overwrite to "
                        f"replace it")
    for path in earlier:
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def _run(part_dir, out_dir, info, host_list, via, checkpoint, seed, gather_path, trainers_per_part, threads,
         chunk_edges, timeout, say) -> None:
    from ..distributed.launch import launch
    from ..distributed.shards import gather
    from ..utils.text import plural

    command_line = [sys.executable, "-m", "gpse_dgl.distributed.worker", "encode", "--out", str(out_dir),
                    "--seed", str(seed)]
    if checkpoint is not None:
        command_line += ["--checkpoint", checkpoint]
    if chunk_edges is not None:
        command_line += ["--chunk-edges", str(chunk_edges)]
    start = time.perf_counter()
    result = launch(part_dir, command_line, f"{out_dir}/logs", trainers_per_part, host_list, via, timeout, threads)
    for row in result.table():
        rss = "" if row["peak_rss_bytes"] is None else f", peak RSS {row['peak_rss_bytes'] / 2**20:,.0f} MiB"
        say(f"{row['role']} {row['index']} (partition {row['part']}): {row['seconds']:.1f} s{rss}")
    trainers = info["num_parts"] * trainers_per_part
    say(f"encoded {info['num_nodes']:,} nodes with {plural(info['num_parts'], 'server')} and "
        f"{plural(trainers, 'trainer')} in {time.perf_counter() - start:.1f} s: {out_dir}")
    if gather_path is not None:
        gather(out_dir, gather_path)
        say(f"gathered into {gather_path}")
