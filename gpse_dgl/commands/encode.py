"""``gpse-dgl encode``: GPSE encodings of a dataset, a DGL binary file or a SMILES file."""
from __future__ import annotations

import contextlib
import logging
import os
import time

import click

from ..utils.devices import resolve_device
from ..utils.errors import GPSEError, RunFailedError
from ..utils.preflight import check_output_file
from ..utils.progress import is_quiet
from ..utils.text import plural
from . import output_options, require_one_input


def _parse_fanouts(ctx, param, value):
    if value is None:
        return None
    try:
        fanouts = tuple(int(tok) for tok in value.replace(" ", "").split(",") if tok)
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers such as 30,20,10,5") from None
    if not fanouts or any(f == 0 or f < -1 for f in fanouts):
        raise click.BadParameter(f"{value!r}: fan-outs must be positive (or -1 for all neighbours)")
    return fanouts


@contextlib.contextmanager
def _silenced(name: str):
    logger = logging.getLogger(name)
    previous = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = previous


def _load_graphs(dataset, input_path, smiles, root, smiles_column=None):
    """``(graphs, labels_dict, description)`` from exactly one of the three inputs."""
    if dataset is not None:
        from ..data.registry import load_dataset

        ds = load_dataset(dataset, root=root)
        labels = {} if ds.labels is None else {"label": ds.labels}  # per graph, or per node (one graph)
        return list(ds.graphs), labels, f"dataset {ds.name} ({ds.task}-level)"
    if input_path is not None:
        from .graph_io import read_graph_file

        graphs, labels = read_graph_file(input_path)
        return graphs, labels, f"{input_path}"
    from ..data.tables import columns_note, records_note, skeleton_table

    graphs, labels, invalid, text = skeleton_table(str(smiles), smiles_column)
    if not graphs:
        raise GPSEError(f"{smiles}: no valid SMILES found")
    note = f", {len(invalid)} invalid skipped ({records_note(invalid)})" if invalid else ""
    kept = [name for name in labels if name != "smiles_index"]
    columns = f"; labels kept: {', '.join(kept)}" if kept else ""
    columns += f"; not numbers, not kept: {columns_note(text)}" if text else ""
    return graphs, labels, f"{smiles} ({plural(len(graphs), 'molecule')}{note}{columns})"


@click.command("encode")
@click.option("--checkpoint", "checkpoint", type=click.Path(dir_okay=False), default=None,
              help="GPSE checkpoint: a registered model name (see `gpse-dgl models`) or a file, ours or "
                   "the authors' (gpse_model_<name>_1.0.pt, auto-detected). Default: the model shipped "
                   "with gpse-dgl.")
@click.option("--dataset", default=None,
              help="Registered dataset name (see the error for a bad name), dgl:<Class>[:<arg>...] for a "
                   "dgl.data dataset, or csv-dir:PATH for a dgl.data.CSVDataset directory.")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="DGL binary graph file (dgl.save_graphs).")
@click.option("--smiles", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Molecules: a SMILES file (one per line), a CSV / TSV with a header (numeric columns are "
                   "kept as graph labels) or an SD file; molecules become bare skeleton graphs.")
@click.option("--smiles-column", default=None,
              help="With --smiles: the CSV column holding the SMILES (default: the one named smiles, else "
                   "the first).")
@click.option("--root", type=click.Path(file_okay=False), default=None,
              help="Directory holding on-disk datasets (for --dataset).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True,
              help="Output DGL binary file; encodings go to ndata['gpse'] (float32, one column per encoder "
                   "channel: 512 for the published models).")
@click.option("--device", default="cpu", show_default=True, help="torch device, e.g. cpu or cuda:0.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Graphs per forward pass (default 256); with --sampled: seed nodes per batch "
                   "(default all in one: 20-layer sampled batches cover most of the graph, so each "
                   "costs almost a full pass; the paper used 1024 on a GPU).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random input features; a graph's encoding depends only on the graph, "
                   "the seed and the model.")
@click.option("--samples", type=click.IntRange(min=1), default=1, show_default=True,
              help="Average the encodings of this many independent draws of random features.")
@click.option("--sampled", is_flag=True,
              help="Neighbour-sampled inference (approximate) instead of exact full-graph inference.")
@click.option("--fanouts", callback=_parse_fanouts, default=None,
              help="Neighbours per hop for --sampled, nearest hop first; the last value repeats for the "
                   "remaining layers (default 30,20,10,5; -1 = all).")
@click.option("--directed", is_flag=True,
              help="Use edges exactly as given instead of the simple undirected graph GPSE was trained on.")
@click.option("--precision", default="fp32", show_default=True,
              help="fp32, bf16 (native on CPUs with avx512_bf16/AMX and on recent GPUs), fp16 (CUDA) or auto "
                   "(bf16 where native, else fp32): precision of the dense products; encodings are stored as "
                   "float32 in every case.")
@output_options
def command(checkpoint, dataset, input_path, smiles, smiles_column, root, out_path, device, batch_size, seed,
            samples, sampled, fanouts, directed, precision):
    """Encode graphs with a pretrained GPSE and save them with ndata['gpse'] to a DGL binary file.

    Exactly one input: --dataset, --input or --smiles. Graph datasets are encoded in batches; a large
    single graph (node-level datasets such as ogbn-arxiv) is encoded layer by layer with bounded
    memory, exactly, or approximately with --sampled. Directed graphs are symmetrised (GPSE was
    pretrained on undirected graphs) unless --directed is given.

    \b
    Examples:
      gpse-dgl encode --smiles mols.smi --out mols_gpse.bin
      gpse-dgl encode --smiles data.csv --smiles-column smiles --out data_gpse.bin
      gpse-dgl encode --dataset dgl:TUDataset:MUTAG --out mutag.bin      # DGL's files in DGL's raw_dir
      gpse-dgl encode --dataset csv-dir:my_graphs --out my_graphs.bin    # a dgl.data.CSVDataset directory
      gpse-dgl encode --dataset ogbg-molhiv --root data --checkpoint gpse_model_molpcba_1.0.pt --out hiv.bin
      gpse-dgl encode --dataset ogbn-proteins --root data --sampled --fanouts 30,20,10,5 --out prot.bin
    """
    require_one_input(dataset=dataset, input=input_path, smiles=smiles)
    if fanouts is not None and not sampled:
        raise click.UsageError("--fanouts only applies with --sampled")
    if smiles_column is not None and smiles is None:
        raise click.UsageError("--smiles-column only applies with --smiles")

    from ..utils.distributed import local_device, process_group
    from ..utils.precision import decide_precision

    device = resolve_device(device)
    precision = decide_precision(precision, device)  # once, here: a bad name fails before any work
    check_output_file(out_path, "--out")
    with process_group("auto", device) as ctx:  # under torchrun: each process encodes its share
        with contextlib.ExitStack() as quiet:
            if not ctx.is_main:  # rank 0 alone reports
                quiet.enter_context(contextlib.redirect_stderr(quiet.enter_context(open(os.devnull, "w"))))
            _encode(device=local_device(device, ctx), is_main=ctx.is_main, checkpoint=checkpoint, dataset=dataset,
                    input_path=input_path, smiles=smiles, smiles_column=smiles_column, root=root, out_path=out_path,
                    batch_size=batch_size, seed=seed, samples=samples, sampled=sampled, fanouts=fanouts,
                    directed=directed, precision=precision)


def _encode(*, device, is_main, checkpoint, dataset, input_path, smiles, smiles_column, root, out_path, batch_size,
            seed, samples, sampled, fanouts, directed, precision):
    from ..encode import describe_checkpoint, load_gpse
    from ..encode.inference import DEFAULT_BATCH_SIZE
    from ..encode.sharded import encode_dataset_sharded
    from .graph_io import check_input_graphs, write_graph_file

    say = (lambda message: None) if is_quiet() else (lambda message: click.echo(message, err=True))

    graphs, labels, description = _load_graphs(dataset, input_path, smiles, root, smiles_column)
    check_input_graphs(graphs, str(input_path or smiles or dataset))
    with _silenced("gpse_dgl.encode"):  # the line below says the same, once
        model = load_gpse(checkpoint, device=device)
    say(f"model: {describe_checkpoint(model)}")
    num_nodes = sum(g.num_nodes() for g in graphs)
    say(f"input: {description}: {plural(len(graphs), 'graph')}, {plural(num_nodes, 'node')}")

    start = time.perf_counter()
    # --batch-size is one of encode_dataset's two sizes: graphs per forward pass, or with --sampled seed nodes
    # per mini-batch (None: all nodes of the graph at once)
    graphs_per_pass = batch_size if batch_size is not None and not sampled else DEFAULT_BATCH_SIZE
    encode_dataset_sharded(model, graphs, batch_size=graphs_per_pass, sample_batch_size=batch_size if sampled else None,
                           seed=seed, samples=samples, device=device, undirected=not directed, sampled=sampled,
                           fanouts=fanouts, store="gpse", progress=not is_quiet(), precision=precision)
    elapsed = max(time.perf_counter() - start, 1e-9)
    if not is_main:  # rank 0 holds every encoding and alone checks and writes them
        return
    _check_finite_encodings(graphs)
    write_graph_file(out_path, graphs, labels)
    rate = f"{num_nodes / elapsed:,.0f} nodes/s"
    if len(graphs) > 1:
        rate = f"{len(graphs) / elapsed:,.1f} graphs/s, {rate}"
    click.echo(f"encoded {plural(len(graphs), 'graph')}, {plural(num_nodes, 'node')} in {elapsed:.2f} s ({rate}) "
               f"on {device} in {precision.name}; wrote {out_path} (ndata['gpse'])", err=True)


def _check_finite_encodings(graphs) -> None:
    """Refuse to write NaN/Inf encodings (a model that diverged on these inputs) as if they were results."""
    import torch

    for index, graph in enumerate(graphs):
        if not bool(torch.isfinite(graph.ndata["gpse"]).all()):
            raise RunFailedError(f"graph {index}: the encoder produced NaN or Inf values; nothing written")
