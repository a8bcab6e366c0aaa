"""``gpse-dgl encode``: GPSE encodings of a dataset, a DGL binary file or a SMILES file."""
from __future__ import annotations

import contextlib
import logging
import time

import click


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


def _check_device(name: str):
    """``torch.device(name)``, refusing devices this machine does not have with a usage error."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise click.BadParameter(f"{name!r} is not a torch device (e.g. cpu, cuda, cuda:1)",
                                 param_hint="--device") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise click.BadParameter("CUDA is not available on this machine", param_hint="--device")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise click.BadParameter("MPS is not available on this machine", param_hint="--device")
    return device


def _load_graphs(dataset, input_path, smiles, root):
    """``(graphs, labels_dict, description)`` from exactly one of the three inputs."""
    import dgl

    if dataset is not None:
        from ..data.registry import load_dataset

        ds = load_dataset(dataset, root=root)
        labels = {} if ds.labels is None else {"label": ds.labels}  # per graph, or per node (one graph)
        return list(ds.graphs), labels, f"dataset {ds.name} ({ds.task}-level)"
    if input_path is not None:
        try:
            graphs, labels = dgl.load_graphs(str(input_path))
        except Exception as exc:  # noqa: BLE001 - DGL raises assorted errors for foreign files
            from ..utils.errors import GPSEError

            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise GPSEError(f"{input_path}: not a DGL graph file ({reason[:100]})") from None
        return graphs, dict(labels), f"{input_path}"
    from ..data.molecules import read_smiles_file, smiles_to_skeleton

    graphs, kept = [], []
    entries = list(read_smiles_file(str(smiles)))
    for index, text in enumerate(entries):
        graph = smiles_to_skeleton(text)
        if graph is not None:
            graphs.append(graph)
            kept.append(index)
    if not graphs:
        from ..utils.errors import GPSEError

        raise GPSEError(f"{smiles}: no valid SMILES found")
    import torch

    skipped = len(entries) - len(graphs)
    note = f", {skipped} invalid skipped" if skipped else ""
    return graphs, {"smiles_index": torch.tensor(kept)}, f"{smiles} ({len(graphs)} molecules{note})"


@click.command("encode")
@click.option("--checkpoint", "checkpoint", type=click.Path(dir_okay=False), default=None,
              help="GPSE checkpoint: ours or the authors' (gpse_model_<name>_1.0.pt, auto-detected). "
                   "Default: the small quickstart model shipped with gpse-dgl.")
@click.option("--dataset", default=None, help="Registered dataset name (see the error for a bad name).")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="DGL binary graph file (dgl.save_graphs).")
@click.option("--smiles", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Text file with one SMILES per line; molecules become bare skeleton graphs.")
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
              help="fp32, bf16 (native on CPUs with avx512_bf16/AMX and on recent GPUs) or fp16 (CUDA): "
                   "precision of the dense products; encodings are stored as float32 in every case.")
def command(checkpoint, dataset, input_path, smiles, root, out_path, device, batch_size, seed, samples,
            sampled, fanouts, directed, precision):
    """Encode graphs with a pretrained GPSE and save them with ndata['gpse'] to a DGL binary file.

    Exactly one input: --dataset, --input or --smiles. Graph datasets are encoded in batches; a large
    single graph (node-level datasets such as ogbn-arxiv) is encoded layer by layer with bounded
    memory, exactly, or approximately with --sampled. Directed graphs are symmetrised (GPSE was
    pretrained on undirected graphs) unless --directed is given.

    \b
    Examples:
      gpse-dgl encode --smiles mols.smi --out mols_gpse.bin
      gpse-dgl encode --dataset ogbg-molhiv --root data --checkpoint gpse_model_molpcba_1.0.pt --out hiv.bin
      gpse-dgl encode --dataset ogbn-proteins --root data --sampled --fanouts 30,20,10,5 --out prot.bin
    """
    chosen = [name for name, value in (("--dataset", dataset), ("--input", input_path),
                                       ("--smiles", smiles)) if value is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --dataset, --input, --smiles"
                               + (f" (got {', '.join(chosen)})" if chosen else ""))
    if fanouts is not None and not sampled:
        raise click.UsageError("--fanouts only applies with --sampled")

    import dgl

    from ..encode import describe_checkpoint, encode_dataset, load_gpse

    device = _check_device(device)
    from ..utils.precision import resolve_precision

    resolve_precision(precision, device, warn=False)  # a bad name fails before the model loads

    with _silenced("gpse_dgl.encode"):  # the line below says the same, once
        model = load_gpse(checkpoint, device=device)
    click.echo(f"model: {describe_checkpoint(model)}", err=True)
    if checkpoint is None:
        click.echo("       (the small quickstart model shipped with gpse-dgl; pass --checkpoint "
                   "gpse_model_molpcba_1.0.pt or your own best.pt for other weights)", err=True)
    graphs, labels, description = _load_graphs(dataset, input_path, smiles, root)
    num_nodes = sum(g.num_nodes() for g in graphs)
    click.echo(f"input: {description}: {len(graphs)} graph(s), {num_nodes} nodes", err=True)

    start = time.perf_counter()
    sizes = {"sample_batch_size": batch_size} if sampled else {"batch_size": batch_size}
    encode_dataset(model, graphs, seed=seed, samples=samples, device=device, undirected=not directed,
                   sampled=sampled, fanouts=fanouts, store="gpse", progress=True, precision=precision,
                   **{k: v for k, v in sizes.items() if v is not None})
    elapsed = max(time.perf_counter() - start, 1e-9)

    dgl.save_graphs(str(out_path), graphs, labels or None)
    rate = f"{num_nodes / elapsed:,.0f} nodes/s"
    if len(graphs) > 1:
        rate = f"{len(graphs) / elapsed:,.1f} graphs/s, {rate}"
    click.echo(f"encoded {len(graphs)} graph(s), {num_nodes} nodes in {elapsed:.2f} s ({rate}) "
               f"on {device} in {precision}; wrote {out_path} (ndata['gpse'])", err=True)
