"""``gpse-dgl pse``: explicit PSEs (LapPE, EigVals, ElstaticPE, RWSE, HKdiagSE, CycleGE) of many graphs."""
from __future__ import annotations

import time

import click

DATASET_EMBEDDED = "embedded-molecules"


def _split_names(ctx, param, value):
    """``--pse A --pse B,C`` -> ``["A", "B", "C"]`` (validated), ``None`` when not given."""
    if not value:
        return None
    from ..pse.registry import resolve_pse_names

    try:
        return resolve_pse_names(list(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _load_smiles(path: str, unique: bool):
    """``(graphs, labels, description)`` of a SMILES file."""
    import torch

    from ..data.molecules import read_smiles_file, smiles_to_skeleton, unique_skeleton_graphs
    from ..utils.errors import GPSEError

    entries = read_smiles_file(path)
    if unique:
        graphs, stats = unique_skeleton_graphs(entries)
        desc = (f"{path}: {stats['kept']} unique skeletons from {stats['total']} SMILES "
                f"({stats['invalid']} invalid, {stats['too_small']} too small, {stats['duplicates']} "
                f"duplicates skipped)")
        labels = {}
    else:
        graphs, kept, bad = [], [], []
        for index, text in enumerate(entries):
            graph = smiles_to_skeleton(text)
            if graph is None:
                bad.append(index)
            else:
                graphs.append(graph)
                kept.append(index)
        desc = f"{path}: {len(graphs)} molecules"
        if bad:
            shown = ", ".join(str(i + 1) for i in bad[:5]) + (", ..." if len(bad) > 5 else "")
            desc += f", {len(bad)} invalid SMILES skipped (entries {shown})"
        labels = {"smiles_index": torch.tensor(kept, dtype=torch.int64)}
    if not graphs:
        raise GPSEError(f"{path}: no valid SMILES found")
    return graphs, labels, desc


def _load_dataset(name: str, root):
    from ..utils.errors import DatasetNotFoundError

    if name == DATASET_EMBEDDED:
        from ..data.molecules import load_embedded_molecules

        graphs = [g.clone() for g in load_embedded_molecules()]
        return graphs, {}, f"{DATASET_EMBEDDED} ({len(graphs)} unique skeletons of RDKit's NCI set)"
    try:
        from ..data.registry import load_dataset
    except ImportError:
        raise DatasetNotFoundError(f"unknown dataset {name!r}; available: {DATASET_EMBEDDED}") from None
    ds = load_dataset(name, root=root)
    return list(ds.graphs), {}, f"dataset {ds.name} ({len(ds.graphs)} graphs)"


def _check_device(device: str) -> None:
    import torch

    from ..utils.errors import GPSEError

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise click.BadParameter(f"{device!r} is not a torch device", param_hint="--device") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise GPSEError(f"--device {device}: CUDA is not available here (use --device cpu)")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise GPSEError(f"--device {device}: MPS is not available here (use --device cpu)")


@click.command("pse")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="DGL binary graph file (dgl.save_graphs); its node data and labels are kept.")
@click.option("--smiles", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Text file, one SMILES per line (extra columns ignored); molecules become bare "
                   "skeletons, invalid SMILES are skipped and counted.")
@click.option("--dataset", default=None,
              help=f"Dataset name: {DATASET_EMBEDDED} (offline, ~3,070 molecules), a registered dataset, "
                   "dgl:<Class>[:<arg>...] for a dgl.data dataset, or csv-dir:PATH for a dgl.data.CSVDataset "
                   "directory.")
@click.option("--root", type=click.Path(file_okay=False), default=None,
              help="Directory holding on-disk datasets (for --dataset).")
@click.option("--unique", is_flag=True,
              help="With --smiles: de-duplicate skeletons and drop graphs with <= 1 node or no bond, as "
                   "for pretraining data (default: one graph per valid SMILES, in file order).")
@click.option("--pse", "names", multiple=True, callback=_split_names, metavar="NAME[,NAME]",
              help="PSEs to compute (repeatable or comma-separated): ElstaticPE, LapPE, RWSE, HKdiagSE, "
                   "EigVals, CycleGE. Default: all six.")
@click.option("--no-normalize", is_flag=True,
              help="Store raw node-level PSEs. Default: standardise each node-level column per graph, "
                   "as the GPSE reference does for its pretraining targets. Graph-level PSEs are always raw.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Output DGL binary file: node-level PSEs in ndata[NAME] (float32), graph-level ones in "
                   "the labels dict under NAME, shape (graphs, dim). Without it nothing is written.")
@click.option("--dense-limit", type=click.IntRange(min=1), default=None,
              help="Graphs with more nodes use sparse solvers (LapPE, EigVals, RWSE); ElstaticPE and "
                   "HKdiagSE refuse them. Default 5000.")
@click.option("--max-cycle-paths", type=click.IntRange(min=1), default=None,
              help="Work bound of the CycleGE cycle counter (partial paths held at once).")
@click.option("--device", default="cpu", show_default=True,
              help="torch device for the dense linear algebra, e.g. cpu or cuda:0.")
@click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="Threads computing small same-size batches side by side (0: torch's thread count).")
@click.option("--progress/--no-progress", default=True, show_default=True, help="tqdm progress bar.")
def command(input_path, smiles, dataset, root, unique, names, no_normalize, out_path, dense_limit,
            max_cycle_paths, device, workers, progress):
    """Compute explicit positional and structural encodings and save them as a DGL binary file.

    Exactly one input: --input, --smiles or --dataset. Graphs are read as simple undirected graphs
    (edge directions ignored, self-loops and multi-edges dropped). Graphs of equal size are computed
    together in batches, so a few thousand molecules take about a second.

    \b
    Examples:
      gpse-dgl pse --dataset embedded-molecules --out pse.bin
      gpse-dgl pse --smiles mols.smi --pse LapPE,RWSE --no-normalize --out pse.bin
      gpse-dgl pse --input graphs.bin --pse RWSE --dense-limit 20000 --out graphs_rwse.bin

    \b
    Read the result with:
      graphs, labels = dgl.load_graphs("pse.bin")  # graphs[i].ndata["RWSE"], labels["CycleGE"][i]
    """
    import dgl

    from ..pse import DEFAULT_DENSE_LIMIT, PSE_REGISTRY, compute_pses
    from ..utils.errors import GPSEError

    chosen = [flag for flag, value in (("--input", input_path), ("--smiles", smiles), ("--dataset", dataset))
              if value is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --input, --smiles, --dataset"
                               + (f" (got {', '.join(chosen)})" if chosen else ""))
    if unique and smiles is None:
        raise click.UsageError("--unique only applies to --smiles")
    _check_device(device)

    if input_path is not None:
        try:
            graphs, labels = dgl.load_graphs(str(input_path))
        except Exception as exc:  # noqa: BLE001 - DGL raises bare DGLError/RuntimeError on bad files
            raise GPSEError(f"{input_path}: not a readable DGL binary graph file ({type(exc).__name__})") from None
        labels, desc = dict(labels), f"{input_path}: {len(graphs)} graphs"
    elif smiles is not None:
        graphs, labels, desc = _load_smiles(str(smiles), unique)
    else:
        graphs, labels, desc = _load_dataset(dataset, root)
    click.echo(desc)
    if not graphs:
        raise GPSEError("no graphs to compute PSEs for")

    names = names or list(PSE_REGISTRY)
    start = time.perf_counter()
    graphs, graph_level = compute_pses(
        graphs, names, normalize=not no_normalize, progress=progress,
        dense_limit=dense_limit or DEFAULT_DENSE_LIMIT, max_cycle_paths=max_cycle_paths, device=device,
        num_workers=workers)
    elapsed = time.perf_counter() - start
    num_nodes = sum(g.num_nodes() for g in graphs)
    rate = len(graphs) / elapsed if elapsed > 0 else float("inf")
    node_names = [n for n in names if PSE_REGISTRY[n].level == "node"]
    summary = (f"computed {', '.join(names)} for {len(graphs):,} graphs ({num_nodes:,} nodes) in "
               f"{elapsed:.2f} s ({rate:,.0f} graphs/s)")
    if node_names:
        summary += "; node-level " + ("raw" if no_normalize else "standardised per graph")
    click.echo(summary)
    if out_path is None:
        click.echo("nothing saved (no --out)")
        return
    labels.update(graph_level)
    dgl.save_graphs(str(out_path), graphs, labels)
    stored = [f"ndata[{n!r}]" for n in node_names] + [f"labels[{n!r}]" for n in graph_level]
    click.echo(f"wrote {out_path}: {', '.join(stored)}")
