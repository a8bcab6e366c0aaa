"""``gpse-dgl pse``: explicit PSEs (LapPE, EigVals, ElstaticPE, RWSE, HKdiagSE, CycleGE) of many graphs."""
from __future__ import annotations

import contextlib
import time
import warnings

import click

from ..utils.devices import resolve_device
from ..utils.errors import GPSEError
from ..utils.preflight import check_output_file
from ..utils.progress import is_quiet
from ..utils.text import plural
from . import output_options, require_one_input

DATASET_EMBEDDED = "embedded-molecules"


@contextlib.contextmanager
def zeroed_columns_noted(say):
    """Per-graph standardisation's :class:`~gpse_dgl.pse.standardize.ColumnZeroedWarning` (from any
    thread of the computation) summed into one line, instead of dropping columns silently."""
    from ..pse.standardize import ColumnZeroedWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ColumnZeroedWarning)
        yield
    zeroed = [w.message for w in caught if isinstance(w.message, ColumnZeroedWarning)]
    for w in caught:  # anything else as it would have been shown
        if not isinstance(w.message, ColumnZeroedWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if zeroed:
        say(f"note: normalisation set {sum(z.count for z in zeroed)} column(s) of some graph(s) to 0: their "
            f"variance (up to {max(z.largest for z in zeroed):.3g}) is below the tolerance (1e-5, times "
            f"10,000/n above 10,000 nodes); --no-normalize keeps them")


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
        desc = f"{path}: {plural(len(graphs), 'molecule')}"
        if bad:  # 0-based entry numbers, as in labels["smiles_index"]
            shown = ", ".join(str(i) for i in bad[:5]) + (", ..." if len(bad) > 5 else "")
            desc += (f", {plural(len(bad), 'invalid SMILES', 'invalid SMILES')} skipped "
                     f"({'entry' if len(bad) == 1 else 'entries'} {shown}, numbered from 0 as smiles_index)")
        labels = {"smiles_index": torch.tensor(kept, dtype=torch.int64)}
    if not graphs:
        raise GPSEError(f"{path}: no valid SMILES found")
    return graphs, labels, desc


def _load_dataset(name: str, root):
    from ..data.registry import load_dataset  # the embedded molecules are a registered dataset too

    ds = load_dataset(name, root=root)
    graphs = [g.clone() for g in ds.graphs]  # the PSEs are written into them: the dataset's own stay as loaded
    return graphs, {}, f"dataset {ds.name} ({plural(len(graphs), 'graph')})"


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
@click.option("--sparse-limit", type=click.IntRange(min=1), default=None,
              help="Largest graph (nodes) the sparse solvers take; larger ones are refused before any work. "
                   "Default 1,000,000 (~1.5 kB of memory per node).")
@click.option("--max-cycle-paths", type=click.IntRange(min=1), default=None,
              help="Work bound of the CycleGE cycle counter (partial paths held at once).")
@click.option("--device", default="cpu", show_default=True,
              help="torch device for the dense linear algebra, e.g. cpu or cuda:0.")
@click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="Threads computing small same-size batches side by side (0: torch's thread count).")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Progress report (a bar on a terminal, else a line per 10 %).")
@output_options
def command(input_path, smiles, dataset, root, unique, names, no_normalize, out_path, dense_limit,
            sparse_limit, max_cycle_paths, device, workers, progress):
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
    from ..pse import DEFAULT_DENSE_LIMIT, PSE_REGISTRY, compute_pses
    from ..pse.compute import DEFAULT_SPARSE_LIMIT
    from ..pse.cycles import CycleLimitError
    from .graph_io import check_input_graphs, read_graph_file, write_graph_file

    require_one_input(input=input_path, smiles=smiles, dataset=dataset)
    if unique and smiles is None:
        raise click.UsageError("--unique only applies to --smiles")
    resolve_device(device)
    if out_path is not None:
        check_output_file(out_path, "--out")
    say = (lambda message: None) if is_quiet() else click.echo

    if input_path is not None:
        graphs, labels = read_graph_file(input_path)
        desc = f"{input_path}: {plural(len(graphs), 'graph')}"
    elif smiles is not None:
        graphs, labels, desc = _load_smiles(str(smiles), unique)
    else:
        graphs, labels, desc = _load_dataset(dataset, root)
    say(desc)
    check_input_graphs(graphs, str(input_path or smiles or dataset))

    names = names or list(PSE_REGISTRY)
    start = time.perf_counter()
    try:
        with zeroed_columns_noted(say):
            graphs, graph_level = compute_pses(
                graphs, names, normalize=not no_normalize, progress=progress and not is_quiet(),
                dense_limit=dense_limit or DEFAULT_DENSE_LIMIT, max_cycle_paths=max_cycle_paths, device=device,
                num_workers=workers, sparse_limit=sparse_limit or DEFAULT_SPARSE_LIMIT)
    except CycleLimitError as exc:
        raise exc.naming("--max-cycle-paths") from None
    elapsed = time.perf_counter() - start
    num_nodes = sum(g.num_nodes() for g in graphs)
    rate = len(graphs) / elapsed if elapsed > 0 else float("inf")
    node_names = [n for n in names if PSE_REGISTRY[n].level == "node"]
    summary = (f"computed {', '.join(names)} for {plural(len(graphs), 'graph')} ({plural(num_nodes, 'node')}) "
               f"in {elapsed:.2f} s ({rate:,.0f} graphs/s)")
    if node_names:
        summary += "; node-level " + ("raw" if no_normalize else "standardised per graph")
    say(summary)
    if out_path is None:
        say("nothing saved (no --out)")
        return
    labels.update(graph_level)
    write_graph_file(out_path, graphs, labels)
    stored = [f"ndata[{n!r}]" for n in node_names] + [f"labels[{n!r}]" for n in graph_level]
    click.echo(f"wrote {out_path}: {', '.join(stored)}")
