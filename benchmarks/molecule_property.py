#!/usr/bin/env python
"""An offline molecular property benchmark: TPSA regression on RDKit's bundled NCI molecules.

Data shipped with our dependencies, no download: the ~5,000 NCI SMILES bundled with RDKit
(``rdkit/Data/NCI/first_5K.smi``), deduplicated by canonical SMILES, featurised exactly as OGB does
(``ogb.utils.smiles2graph``: 9 categorical atom and 3 bond features), target = topological polar surface
area (``rdkit.Chem.rdMolDescriptors.CalcTPSA``, in Å²). Random 80 / 10 / 10 split (fixed seed).

Model: GINE with OGB atom / bond encoders and mean pooling, trained with an L1 loss and scored by MAE
at the best validation epoch, with the PE sources none / LapPE / RWSE / AllPSE / GPSE (PE settings of
the paper's MoleculeNet experiments, `hp_molnet_small_bench`: Linear encoder, BatchNorm, dropout
0.3 / 0.1). Mean ± std over ``--seeds`` seeds.

Size (chosen so the full sweep, 5 sources x 3 seeds, takes about 15 minutes on 2 CPU cores; one run
took 66 s on a 2-core machine shared with other jobs): GINE 4 layers x 64, PE dim 16, batch 128,
30 epochs, AdamW lr 0.002 with cosine schedule, targets standardised for training.

Note: TPSA is a sum of per-atom contributions that depend on the atom's element, charge, hydrogens and
aromaticity, most of which the atom features already carry; structural encodings are not expected to
matter much here. The task checks the pipeline end to end on real molecules with node and edge features.
The GPSE row should use our own pretrained encoder (``--checkpoint``; it was pretrained on the bare
skeletons of these same molecules, without any label).

Run::

    python benchmarks/molecule_property.py --checkpoint runs/quickstart/best.pt --out benchmarks/results/tpsa

Outputs: ``<out>/tpsa.md`` (table), ``<out>/tpsa.json`` (all runs), ``<out>/runs/`` (jobs; ``--resume``) and
``benchmarks/figures/tpsa.png`` (MAE per encoding with error bars; ``--figure``; ``--plot-only`` redraws it
from ``<out>/tpsa.json``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_downstream_sweep import (add_script_options, describe_setup, format_stats, plot_scores,  # noqa: E402
                                  publish, read_results, rows_and_checkpoint, run_sweep)

SOURCES = ("none", "LapPE", "RWSE", "AllPSE", "GPSE")
DATASET = "nci-tpsa"

#: The benchmark's recipe (every other key at the schema default); see the module docstring.
RECIPE = {
    "seed": 0,
    "data": {"name": DATASET, "evaluation": "split"},
    "model": {
        "name": "gine", "dim_hidden": 64, "num_layers": 4, "dropout": 0.0, "pooling": "mean", "layers_post_mp": 2,
        "pe": {"source": "none", "dim_pe": 16, "model": "linear", "batchnorm": True, "dropout_in": 0.3,
               "dropout_out": 0.1},
    },
    "general_pipeline": {
        "num_epochs": 30, "batch_size": 128, "eval_batch_size": 512, "standardize_targets": True,
        "optimizer": {"name": "adamw", "lr": 0.002, "weight_decay": 0.0},
        "lr_scheduler": {"name": "cosine_with_warmup", "warmup_epochs": 2},
        "loss": "l1", "num_seeds": 3, "save_checkpoints": True, "checkpoint_every": 5,
    },
}


def tpsa_dataset(split_seed: int = 0, limit: int | None = None):
    """RDKit's NCI molecules as OGB-featurised graphs with their TPSA (``(G, 1)`` float32, Å²).

    Parameters
    ----------
    split_seed : int
        Seed of the random 80 / 10 / 10 split.
    limit : int, optional
        Keep only the first ``limit`` unique molecules (quick checks).
    """
    import torch
    from rdkit import Chem, RDLogger
    from rdkit.Chem import rdMolDescriptors

    from gpse_dgl.data._io import ogb_smiles_graph
    from gpse_dgl.data.dataset import GraphDataset, random_split
    from gpse_dgl.data.molecules import embedded_smiles_path, read_smiles_file

    RDLogger.DisableLog("rdApp.*")  # the NCI file has a few unparsable entries; they are skipped
    graphs, targets, seen = [], [], set()
    for smiles in read_smiles_file(embedded_smiles_path()):
        mol = Chem.MolFromSmiles(smiles)
        if mol is None or mol.GetNumBonds() == 0:
            continue
        canonical = Chem.MolToSmiles(mol)
        if canonical in seen:
            continue
        graph = ogb_smiles_graph(canonical)
        if graph is None:
            continue
        seen.add(canonical)
        graphs.append(graph)
        targets.append(rdMolDescriptors.CalcTPSA(mol))
        if limit is not None and len(graphs) >= limit:
            break
    labels = torch.tensor(targets, dtype=torch.float32).reshape(-1, 1)
    return GraphDataset(
        graphs=graphs, labels=labels, splits=random_split(len(graphs), (0.8, 0.1, 0.1), seed=split_seed),
        name=DATASET, task="graph", task_type="regression", metric="mae", num_tasks=1,
        node_feat_key="feat", edge_feat_key="feat",
        info={"source": embedded_smiles_path(), "target": "TPSA (A^2, rdkit CalcTPSA)",
              "node_feat_kind": "ogb-atom", "edge_feat_kind": "ogb-bond"})


def register() -> None:
    """Make ``nci-tpsa`` a dataset name (so recipes naming it validate and ``gpse-dgl train`` can load it
    in this process)."""
    from gpse_dgl.data.registry import register_dataset

    register_dataset(DATASET, lambda root, **kw: tpsa_dataset(**kw),
                     "TPSA regression on RDKit's NCI molecules (OGB features), MAE, random 80/10/10", overwrite=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_script_options(parser, "tpsa")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per source (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: 30)")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N molecules (quick checks)")
    parser.add_argument("--sources", default=",".join(SOURCES), help="rows (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(read_results(args.out, "tpsa"), args.figure)
        return

    import copy

    from gpse_dgl.train.downstream.schema import validate_downstream_recipe
    from gpse_dgl.utils.errors import GPSEError

    register()
    sources, checkpoint, notes = rows_and_checkpoint(args.sources, args.checkpoint)
    raw = copy.deepcopy(RECIPE)
    raw["model"]["pe"]["checkpoint"] = checkpoint
    if args.epochs:
        raw["general_pipeline"]["num_epochs"] = args.epochs
    if args.device:
        raw["device"] = args.device
    try:
        recipe = validate_downstream_recipe(raw, "molecule_property.RECIPE")
        dataset = tpsa_dataset(limit=args.limit)
        print(f"{DATASET}: {len(dataset)} molecules; TPSA mean {float(dataset.labels.mean()):.1f}, "
              f"std {float(dataset.labels.std()):.1f} A^2; split {[len(v) for v in dataset.splits.values()]}")
        results = run_sweep([(DATASET, recipe)], sources, args.out, args.seeds, args.resume, not args.no_progress,
                            dataset=dataset)
    except GPSEError as exc:
        sys.exit(f"error: {exc}")
    table = tpsa_table(results[DATASET])
    general = recipe["general_pipeline"]
    notes.insert(0, f"TPSA (Å²) of {len(dataset)} RDKit NCI molecules, random 80/10/10 split; GINE "
                    f"{recipe['model']['num_layers']} x {recipe['model']['dim_hidden']}, "
                    f"{general['num_epochs']} epochs; "
                    f"test MAE at the best validation epoch, mean ± std over {args.seeds} seeds.")
    if checkpoint and "GPSE" in sources:
        notes.append(f"GPSE checkpoint: {checkpoint}")
    notes.append(describe_setup(results))
    publish(args.out, "tpsa", table, results, notes)
    plot(results, args.figure)


def plot(results: dict, path: Path) -> Path:
    """Validation and test MAE per encoding, mean ± std over the seeds."""
    by_source = results[DATASET]
    runs = next(iter(by_source.values()))["num_runs"]
    return plot_scores(by_source, path, f"TPSA of RDKit's NCI molecules, GINE: MAE per PE source "
                                        f"(mean ± std over {runs} seeds; lower is better)",
                       "MAE (Å²)", splits=("val", "test"))


def tpsa_table(by_source: dict) -> str:
    """| model | val MAE | test MAE | one row per PE source."""
    lines = ["| model | val MAE (Å²) ↓ | test MAE (Å²) ↓ |", "| --- | ---: | ---: |"]
    for source, summary in by_source.items():
        val, test = (format_stats(summary["summary"][s], False, 3) for s in ("val", "test"))
        lines.append(f"| GINE+{source} | {val} | {test} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
