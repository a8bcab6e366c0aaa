"""``gpse-dgl partition``: cut one graph into partitions for distributed encoding (``gpse-dgl launch``)."""
from __future__ import annotations

import time

import click

from ..utils.progress import is_quiet
from ..utils.text import plural
from . import output_options


@click.command("partition")
@click.argument("graph", type=click.Path(exists=True, dir_okay=False))
@click.option("--parts", type=click.IntRange(min=1), required=True,
              help="Number of partitions: one graph server (a machine, or a share of this one) each.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Output directory: DGL's partition files plus gpse_partition.json.")
@click.option("--method", type=click.Choice(["metis", "random"]), default="metis", show_default=True,
              help="metis: fewer cut edges, so fewer rows travel between machines; random: no METIS run.")
@click.option("--directed", is_flag=True,
              help="Partition the edges exactly as given instead of the simple undirected graph GPSE encodes.")
@click.option("--name", default="graph", show_default=True, help="DGL's name of the graph.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --method random's assignment.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out directory (the old one stays until "
                                               "the new one is complete).")
@output_options
def command(graph, parts, out_dir, method, directed, name, seed, overwrite):
    """Partition one graph (a DGL binary file) with dgl.distributed.partition_graph for `gpse-dgl launch`.

    The partitioned graph is the one a one-process `gpse-dgl encode` encodes (the simple undirected
    version unless --directed); the directory also records what makes the distributed encoding equal the
    one-process encoding with the same seed (original node ids, the random-feature key).

    \b
    Examples:
      gpse-dgl partition arxiv.bin --parts 2 --out parts/
      gpse-dgl partition papers.bin --parts 16 --method metis --out /shared/papers-16/
    """
    from .graph_io import read_graph_file
    from ..distributed.partition import partition
    from ..utils.errors import InputDataError
    from ..utils.io import check_replaceable
    from ..utils.preflight import check_output_dir

    say = (lambda *a: None) if is_quiet() else click.echo
    check_output_dir(out_dir, "--out")
    check_replaceable(out_dir, overwrite)  # before reading a graph that may take minutes
    graphs, _ = read_graph_file(graph)
    if len(graphs) != 1:
        raise InputDataError(f"{graph}: holds {plural(len(graphs), 'graph')}; partitioning takes one graph")
    start = time.perf_counter()
    info = partition(graphs[0], out_dir, parts, method=method, undirected=not directed, name=name, source=graph,
                     overwrite=overwrite, seed=seed)
    sizes = ", ".join(f"{n:,}" for n in info["part_nodes"])
    say(f"{info['num_nodes']:,} nodes, {info['num_edges']:,} directed edges -> {plural(parts, 'partition')} "
        f"({method}; nodes per partition: {sizes}) in {time.perf_counter() - start:.1f} s: {out_dir}")
