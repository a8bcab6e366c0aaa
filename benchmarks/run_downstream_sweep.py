#!/usr/bin/env python
"""Run downstream recipes with several PE sources and write the results in the paper's table layout.

Every recipe given (from ``recipes/downstream/``; ``_base.yaml`` and ``_molnet.yaml`` are bases, not
benchmarks) is one column (a dataset), every PE source one row
(``GPS+none``, ``GPS+LapPE``, ..., ``GPS+GPSE``), each cell the test score at the best validation epoch
as mean ± std over the seeds; the paper's number for the same cell (tables ``molbench``,
``graphbench``, ``molnet``, ``nodebench_full``, ``synthetic``) is printed next to ours.

Examples
--------
Table ``molbench`` (needs the datasets under /data and a GPSE checkpoint)::

    python benchmarks/run_downstream_sweep.py recipes/downstream/{zinc,pcqm4mv2-subset,ogbg-molhiv,ogbg-molpcba}.yaml \\
        --set data.root=/data --checkpoint runs/pretrain/best.pt --seeds 10 --out benchmarks/results/molbench

Table ``molnet``::

    python benchmarks/run_downstream_sweep.py recipes/downstream/molnet-*.yaml --sources none,LapPE,RWSE,AllPSE,GPSE \\
        --set data.root=/data --checkpoint best.pt --out benchmarks/results/molnet

Outputs under ``--out``: ``<name>.md`` (the table), ``<name>.json`` (every run summary) and ``runs/``
(one ``gpse-dgl train`` job per recipe and source; ``--resume`` continues them).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

DEFAULT_SOURCES = ("none", "LapPE", "RWSE", "LapPE+RWSE", "AllPSE", "GPSE")
MODEL_LABELS = {"gps": "GPS", "gin": "GIN", "gine": "GINE", "graphsage": "SAGE", "gcn": "GCN", "gatv2": "GAT(E)v2",
                "gatedgcn": "GatedGCN", "transformer": "Transformer"}
SOURCE_LABELS = {"random": "rand"}

# How the paper prints each dataset: (percent, decimals, column title).
DISPLAY = {
    "zinc": (False, 4, "ZINC MAE ↓"), "pcqm4mv2-subset": (False, 4, "PCQM4Mv2 MAE ↓"),
    "ogbg-molhiv": (False, 4, "MolHIV AUROC ↑"), "ogbg-molpcba": (False, 4, "MolPCBA AP ↑"),
    "peptides-struct": (False, 4, "Peptides-struct MAE ↓"), "peptides-func": (False, 4, "Peptides-func AP ↑"),
    "cifar10": (True, 2, "CIFAR10 ACC (%) ↑"), "mnist": (True, 2, "MNIST ACC (%) ↑"),
    "ogbn-arxiv": (True, 2, "arXiv ACC (%) ↑"), "ogbn-proteins": (True, 2, "Proteins AUROC (%) ↑"),
    "csl": (True, 1, "CSL ACC (%) ↑"), "exp": (True, 1, "EXP ACC (%) ↑"),
    **{f"molnet-{s}": (True, 1, f"{n} AUROC (%) ↑") for s, n in
       [("bbbp", "BBBP"), ("bace", "BACE"), ("tox21", "Tox21"), ("toxcast", "ToxCast"), ("sider", "SIDER"),
        ("clintox", "ClinTox"), ("muv", "MUV"), ("hiv", "HIV")]},
}


def _rows(*pairs):
    return dict(zip(pairs[0::2], pairs[1::2]))


# The paper's test numbers per recipe and PE source (gpse-paper.tex). "†": the paper's single
# GPS+(RWSE/LapPE) row (GraphGPS' choice per dataset) is shown for both sources.
PAPER = {
    "zinc": _rows("random", "0.8766 ± 0.0107", "none", "0.1182 ± 0.0049", "LapPE", "0.1078 ± 0.0084",
                  "RWSE", "0.0700 ± 0.0040", "LapPE+RWSE", "0.0822 ± 0.0040", "AllPSE", "0.0734 ± 0.0030",
                  "GPSE", "0.0648 ± 0.0030"),
    "pcqm4mv2-subset": _rows("random", "0.4768 ± 0.0171", "none", "0.1329 ± 0.0030", "LapPE", "0.1267 ± 0.0004",
                             "RWSE", "0.1230 ± 0.0008", "LapPE+RWSE", "0.1273 ± 0.0006", "AllPSE",
                             "0.1254 ± 0.0011", "GPSE", "0.1196 ± 0.0004"),
    "ogbg-molhiv": _rows("random", "0.6210 ± 0.0444", "none", "0.7798 ± 0.0077", "LapPE", "0.7736 ± 0.0097",
                         "RWSE", "0.7880 ± 0.0101", "LapPE+RWSE", "0.7719 ± 0.0129", "AllPSE", "0.7645 ± 0.0236",
                         "GPSE", "0.7815 ± 0.0133"),
    "ogbg-molpcba": _rows("random", "0.0753 ± 0.0045", "none", "0.2869 ± 0.0012", "LapPE", "0.2939 ± 0.0016",
                          "RWSE", "0.2907 ± 0.0028", "LapPE+RWSE", "0.2854 ± 0.0029", "AllPSE", "0.2826 ± 0.0001",
                          "GPSE", "0.2911 ± 0.0036"),
    "peptides-struct": _rows("none", "0.3817 ± 0.0207", "LapPE", "0.2500 ± 0.0005 †",
                             "RWSE", "0.2500 ± 0.0005 †",
                             "AllPSE", "0.2509 ± 0.0028", "GPSE", "0.2464 ± 0.0025"),
    "peptides-func": _rows("none", "0.6231 ± 0.0252", "LapPE", "0.6535 ± 0.0041 †", "RWSE", "0.6535 ± 0.0041 †",
                           "AllPSE", "0.6397 ± 0.0092", "GPSE", "0.6688 ± 0.0151"),
    "cifar10": _rows("none", "71.67 ± 0.01", "LapPE", "72.30 ± 0.36 †", "RWSE", "72.30 ± 0.36 †",
                     "AllPSE", "72.05 ± 0.35", "GPSE", "72.31 ± 0.25"),
    "mnist": _rows("none", "98.05 ± 0.00", "LapPE", "98.05 ± 0.13 †", "RWSE", "98.05 ± 0.13 †",
                   "AllPSE", "98.08 ± 0.12", "GPSE", "98.08 ± 0.13"),
    "ogbn-arxiv": _rows("none", "72.36 ± 0.43", "LapPE", "71.63 ± 0.16", "GPSE", "72.34 ± 0.19"),
    "ogbn-proteins": _rows("none", "83.47 ± 0.13", "LapPE", "83.25 ± 0.05", "GPSE", "83.51 ± 0.11"),
    "csl": _rows("none", "10.0 ± 0.0", "random", "12.7 ± 6.4", "GPSE", "42.9 ± 7.9", "LapPE", "92.5 ± 4.2",
                 "RWSE", "100.0 ± 0.0"),
    "exp": _rows("none", "48.7 ± 2.2", "random", "51.3 ± 2.9", "GPSE", "68.3 ± 7.5", "LapPE", "99.5 ± 0.8",
                 "RWSE", "99.7 ± 0.6"),
}
_MOLNET = {  # none, LapPE, RWSE, AllPSE, GPSE (table molnet, "augmented" rows)
    "bbbp": ("65.8 ± 4.5", "67.1 ± 1.6", "67.0 ± 1.4", "67.6 ± 1.2", "66.2 ± 0.9"),
    "bace": ("70.1 ± 5.4", "80.4 ± 1.5", "79.6 ± 2.8", "77.0 ± 4.4", "80.8 ± 3.1"),
    "tox21": ("74.0 ± 0.8", "76.6 ± 0.3", "76.3 ± 0.5", "75.9 ± 1.0", "77.4 ± 0.8"),
    "toxcast": ("63.4 ± 0.6", "65.9 ± 0.7", "65.6 ± 0.3", "63.9 ± 0.3", "66.3 ± 0.8"),
    "sider": ("57.3 ± 1.6", "59.3 ± 1.7", "58.5 ± 1.4", "63.0 ± 0.6", "61.1 ± 1.6"),
    "clintox": ("58.0 ± 4.4", "76.4 ± 2.3", "74.5 ± 4.4", "72.6 ± 4.3", "78.8 ± 3.8"),
    "muv": ("71.8 ± 2.5", "75.6 ± 0.8", "75.0 ± 1.0", "67.9 ± 0.7", "76.6 ± 1.2"),
    "hiv": ("75.3 ± 1.9", "75.6 ± 1.1", "78.1 ± 1.5", "75.4 ± 1.5", "77.2 ± 1.5"),
}
for _name, _values in _MOLNET.items():
    PAPER[f"molnet-{_name}"] = dict(zip(("none", "LapPE", "RWSE", "AllPSE", "GPSE"), _values))
#: Train accuracy of table `synthetic` (its layout has Train and Test columns).
PAPER_TRAIN = {
    "csl": _rows("none", "10.0 ± 0.0", "random", "11.6 ± 3.7", "GPSE", "98.2 ± 1.5", "LapPE", "100.0 ± 0.0",
                 "RWSE", "100.0 ± 0.0"),
    "exp": _rows("none", "49.8 ± 1.8", "random", "51.0 ± 2.0", "GPSE", "84.6 ± 6.8", "LapPE", "99.9 ± 0.2",
                 "RWSE", "99.7 ± 0.2"),
}


# ----------------------------------------------------------------------------------------------
# running


def run_sweep(jobs, sources, out: Path, seeds=None, resume: bool = False, progress: bool = True,
              dataset=None, log=print) -> dict:
    """Train every ``(name, recipe)`` of ``jobs`` with every PE source; return ``{name: {source: summary}}``.

    Parameters
    ----------
    jobs : list of (str, dict)
        Column name (recipe file stem) and validated recipe.
    sources : sequence of str
        ``model.pe.source`` values, one row each.
    out : Path
        Each job writes to ``out/runs/<name>/<source>``.
    seeds : int, optional
        Seeds per cell (default: the recipe's ``num_seeds``).
    resume : bool
        Continue jobs that already have runs on disk (finished runs are reused).
    dataset : GraphDataset, optional
        Passed to :func:`~gpse_dgl.train.downstream.train_downstream` (datasets built in a script).
    """
    import copy

    from gpse_dgl.train.downstream import train_downstream

    results: dict = {}
    for name, recipe in jobs:
        for source in sources:
            job = copy.deepcopy(recipe)
            job["model"]["pe"]["source"] = source
            job["general_pipeline"]["save_path"] = str(out / "runs" / name / source.replace("+", "_"))
            existing = (Path(job["general_pipeline"]["save_path"]) / "recipe.yaml").is_file()
            started = time.perf_counter()
            summary = train_downstream(job, resume=resume and existing, overwrite=not (resume and existing),
                                       seeds=seeds, progress=progress, dataset=dataset,
                                       log=None if progress else (lambda m: None))
            results.setdefault(name, {})[source] = summary
            log(f"{name} {source}: test {_cell(summary, name)} ({time.perf_counter() - started:.0f} s)")
    return results


def load_jobs(paths, overrides, checkpoint: str | None):
    """``[(stem, validated recipe)]`` for recipe files, with ``--set`` overrides and the GPSE checkpoint."""
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    extra = list(overrides) + ([f"model.pe.checkpoint={checkpoint}"] if checkpoint else [])
    return [(Path(p).stem, load_downstream_recipe(p, extra)) for p in paths]


# ----------------------------------------------------------------------------------------------
# tables


def format_stats(stats: dict, percent: bool, digits: int) -> str:
    """``mean ± std`` (``n/a`` when no run produced a score)."""
    if stats is None or stats.get("mean") is None:
        return "n/a"
    scale = 100.0 if percent else 1.0
    return f"{stats['mean'] * scale:.{digits}f} ± {stats['std'] * scale:.{digits}f}"


def _cell(summary: dict, name: str, split: str = "test") -> str:
    percent, digits, _ = DISPLAY.get(name, (summary["metric"] in ("accuracy", "rocauc", "ap"), 4, name))
    return format_stats(summary["summary"][split], percent, digits)


def row_label(summary: dict, source: str) -> str:
    model = MODEL_LABELS.get(summary["model"]["name"], summary["model"]["name"])
    return f"{model}+{SOURCE_LABELS.get(source, source)}"


def markdown_table(results: dict, splits=("test",), paper: bool = True) -> str:
    """The paper's layout: one row per PE source, per dataset ``splits`` columns (ours, then the paper's).

    Rows are named ``MODEL+source`` when every dataset uses the same model, else ``source`` with the model
    named in each column title.
    """
    names = list(results)
    sources = list(dict.fromkeys(s for name in names for s in results[name]))
    models = {name: next(iter(results[name].values()))["model"]["name"] for name in names}
    shared = len(set(models.values())) == 1
    header, rule = ["model" if shared else "PE"], ["---"]
    for name in names:
        title = DISPLAY.get(name, (None, None, name))[2]
        if not shared:
            title += f" ({MODEL_LABELS.get(models[name], models[name])})"
        for split in splits:
            label = f"{title}" + (f" {split}" if len(splits) > 1 else "")
            header += [label] + ([f"paper {split}" if len(splits) > 1 else "paper"] if paper else [])
            rule += ["---:"] * (2 if paper else 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    for source in sources:
        first = next(results[n][source] for n in names if source in results[n])
        cells = [row_label(first, source) if shared else SOURCE_LABELS.get(source, source)]
        for name in names:
            summary = results[name].get(source)
            for split in splits:
                cells.append(_cell(summary, name, split) if summary else "")
                if paper:
                    table = PAPER_TRAIN if split == "train" else PAPER
                    cells.append(table.get(name, {}).get(source, "--"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe_setup(results: dict) -> str:
    """One line per dataset: runs per cell, model size, feature cache and wall time."""
    lines = []
    for name, by_source in results.items():
        any_summary = next(iter(by_source.values()))
        seconds = sum(s["wall_time_seconds"] for s in by_source.values())
        lines.append(f"- {name}: {any_summary['num_runs']} run(s) per cell, model {any_summary['model']['name']} "
                     f"({any_summary['model']['num_parameters']:,} parameters with {any_summary['pe_source']}), "
                     f"{seconds / 60:.1f} min in total")
    return "\n".join(lines)


def add_script_options(parser, stem: str) -> None:
    """The options every single-table sweep script shares (``csl.py``, ``molecule_property.py``): the GPSE
    checkpoint, the rows, the device, where results and the figure go, resuming, progress, and redrawing."""
    from _figures import figure_path

    parser.add_argument("--checkpoint", default=None, help="GPSE checkpoint (default: the shipped model, if any)")
    parser.add_argument("--device", default=None, help="auto, cpu, cuda, ... (default: the recipe's auto)")
    parser.add_argument("--out", type=Path, default=Path(f"benchmarks/results/{stem}"), help="output folder")
    parser.add_argument("--resume", action="store_true", help="continue runs already in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--figure", type=Path, default=figure_path(f"{stem}.png"),
                        help="PNG path (default: %(default)s)")
    parser.add_argument("--plot-only", action="store_true", help=f"only redraw the figure from <out>/{stem}.json")


def gpse_checkpoint(requested: str | None) -> str | None:
    """The checkpoint for the GPSE row: ``requested``, else the shipped default if present, else None."""
    if requested:
        return requested
    from gpse_dgl.encode import default_checkpoint_path

    shipped = default_checkpoint_path()
    return str(shipped) if shipped.is_file() else None


def rows_and_checkpoint(sources: str, requested: str | None) -> tuple[list, str | None, list]:
    """``(rows, checkpoint, notes)``: the comma-separated ``sources`` less GPSE when no checkpoint is at hand
    (a note says so), and the GPSE row's checkpoint (:func:`gpse_checkpoint`)."""
    rows, checkpoint, notes = sources.split(","), gpse_checkpoint(requested), []
    if "GPSE" in rows and checkpoint is None:
        rows.remove("GPSE")
        notes.append("GPSE row skipped: no --checkpoint given and no shipped model in gpse_dgl/assets.")
    return rows, checkpoint, notes


def read_results(out: Path, stem: str) -> dict:
    """The results a script wrote with :func:`write_outputs` (for ``--plot-only``)."""
    return json.loads((out / f"{stem}.json").read_text(encoding="utf-8"))


def publish(out: Path, stem: str, table: str, results: dict, notes: list) -> None:
    """Write ``<stem>.md`` and ``<stem>.json`` under ``out`` and print the table, the notes and the paths."""
    write_outputs(out, stem, table, results, "\n".join(notes))
    print(table)
    print("\n" + "\n".join(notes))
    print(f"\nwritten: {out / f'{stem}.md'}, {out / f'{stem}.json'}")


def write_outputs(out: Path, stem: str, table: str, results: dict, notes: str = "") -> None:
    """``<stem>.md`` (table + notes) and ``<stem>.json`` (all summaries) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(table + ("\n\n" + notes if notes else "") + "\n", encoding="utf-8")
    slim = {name: {source: _slim(summary) for source, summary in by.items()} for name, by in results.items()}
    (out / f"{stem}.json").write_text(json.dumps(slim, indent=1, allow_nan=False), encoding="utf-8")


def _slim(summary: dict) -> dict:
    keep = ("dataset", "metric", "pe_source", "num_runs", "summary", "runs", "features", "wall_time_seconds", "status")
    slim = {k: summary[k] for k in keep}
    slim["model"] = {k: summary["model"][k] for k in ("name", "num_parameters")}
    return json.loads(json.dumps(slim, default=lambda v: None if isinstance(v, float) and not math.isfinite(v) else v))


def plot_scores(by_source: dict, path: Path, title: str, ylabel: str, splits=("test",), percent: bool = False,
                paper: dict | None = None) -> Path:
    """Bars of mean ± std per PE source and split (``benchmarks/_figures.bars_with_errors``); ``paper``
    (``{source: "mean ± std"}``) is drawn as a dashed tick over each source."""
    from _figures import bars_with_errors

    scale = 100.0 if percent else 1.0
    sources = list(by_source)

    def stat(source, split, key):
        value = by_source[source]["summary"][split].get(key)
        return math.nan if value is None else value * scale

    series = [(f"ours, {split}", [stat(s, split, "mean") for s in sources], [stat(s, split, "std") for s in sources])
              for split in splits]
    reference = None
    if paper:
        reference = ("paper, test", [float(paper[s].split("±")[0]) if s in paper else math.nan for s in sources])
    return bars_with_errors([SOURCE_LABELS.get(s, s) for s in sources], series, path, title, ylabel, reference,
                            value_format="{:.1f}" if percent else "{:.3g}")


# ----------------------------------------------------------------------------------------------


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipes", nargs="+", help="downstream recipes (one column each)")
    parser.add_argument("--sources", default=",".join(DEFAULT_SOURCES),
                        help="comma-separated model.pe.source values, one row each (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per cell (default: the recipe's num_seeds)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="recipe override applied to every job (repeatable)")
    parser.add_argument("--checkpoint", default=None, help="GPSE checkpoint for the GPSE row (default: shipped)")
    parser.add_argument("--splits", default="test", help="columns per dataset, e.g. train,test (default: test)")
    parser.add_argument("--name", default="sweep", help="file stem of the outputs (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="output folder")
    parser.add_argument("--resume", action="store_true", help="continue jobs already in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)

    from gpse_dgl.utils.errors import GPSEError

    try:
        jobs = load_jobs(args.recipes, args.overrides, args.checkpoint)
        results = run_sweep(jobs, args.sources.split(","), args.out, args.seeds, args.resume, not args.no_progress)
    except GPSEError as exc:
        sys.exit(f"error: {exc}")
    table = markdown_table(results, tuple(args.splits.split(",")))
    notes = "Test score at the best validation epoch, mean ± std over runs.\n" + describe_setup(results)
    write_outputs(args.out, args.name, table, results, notes)
    print(table)
    print(f"\nwritten: {args.out / (args.name + '.md')}, {args.out / (args.name + '.json')}")


if __name__ == "__main__":
    main()
