#!/usr/bin/env python
"""The paper's downstream tables on offline stand-ins: run or resume them, write JSON, tables and figures.

Tables (``--tables``; cells are PE sources x models, every arm with the same model, budget and seeds):

* ``zinc-gps``: table ``molbench``'s GPS rows on ``zinc-replica`` (``recipes/downstream/zinc-replica.yaml``:
  GPS with GINE, 10 x 64, the paper's `hp_mol_bench` at a CPU budget).
* ``zinc-pse``: table ``abl_zinc_pse`` on ``zinc-replica``: GCN, GatedGCN, GIN, GINE and a Transformer
  (``zinc-replica-gine.yaml`` with ``model.name`` switched; in the paper the GINE column is the GPS rows).
* ``solubility``: Huuskonen's measured aqueous solubility (``recipes/downstream/huuskonen-solubility.yaml``).

Rows: ``none``, ``random``, ``LapPE``, ``RWSE``, ``LapPE+RWSE``, ``AllPSE``, ``GPSE`` (the shipped
default encoder, or ``--checkpoint``), plus ``GPSE:<name>`` for every ``--gpse-extra NAME=CHECKPOINT``
(e.g. the authors' ``molpcba`` weights when they are on disk).

Runs go seed-major: seed 0 of every cell first, then seed 1, ... so that an interrupted sweep leaves a
complete table with fewer seeds rather than some cells complete and others empty. Each finished run is
written at once to the ledger (``--ledger``, default ``benchmarks/paper_tables.json``, kept in git) with
its budget fingerprint; a later call (any machine) skips what the ledger holds for the same budget and
continues an interrupted run from its ``last.pt`` under ``--out``. A ledger that cannot be used (empty,
truncated, ``{}``), a ``--merge`` file that does not exist and ``--report-only`` without a ledger stop the
script with one line (``benchmarks/_ledger.py``); a row with runs in the ledger at another budget only (e.g.
another GPSE encoder) gets a line saying so under its table.

Examples::

    python benchmarks/paper_tables.py --tables zinc-gps,solubility          # run or resume
    python benchmarks/paper_tables.py --tables zinc-gps --report-only       # tables and figures so far
    python benchmarks/paper_tables.py --tables zinc-pse --columns gine,gin --epochs 30 --seeds 4

One sweep shared by processes or machines (each takes every N-th pending run into its own ledger, then
the ledgers are joined)::

    python benchmarks/paper_tables.py --tables zinc-pse --worker 0/2 --ledger /tmp/a.json &
    python benchmarks/paper_tables.py --tables zinc-pse --worker 1/2 --ledger /tmp/b.json
    python benchmarks/paper_tables.py --tables zinc-pse --merge /tmp/a.json --merge /tmp/b.json --report-only

Outputs: the ledger; ``<out>/paper_tables.md`` (tables with the paper's numbers beside ours, the paired
per-seed difference GPSE - best explicit PSE, the budget); figures ``benchmarks/figures/paper_<table>.png``.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from _ledger import Ledger, open_ledger  # noqa: E402  (Ledger: other scripts import it from here)

SOURCES = ("none", "random", "LapPE", "RWSE", "LapPE+RWSE", "AllPSE", "GPSE")
EXPLICIT = ("LapPE", "RWSE", "LapPE+RWSE", "AllPSE")
RECIPES = ROOT / "recipes" / "downstream"

#: table -> (recipe, {column: model.name override or None}, metric label)
TABLES = {
    "zinc-gps": ("zinc-replica.yaml", {"gps": None}, "MAE"),
    "zinc-pse": ("zinc-replica-gine.yaml", {c: c for c in ("gcn", "gatedgcn", "gin", "gine", "transformer")}, "MAE"),
    "solubility": ("huuskonen-solubility.yaml", {"gine": None}, "RMSE"),
}
COLUMN_LABELS = {"gps": "GPS (GINE)", "gcn": "GCN", "gatedgcn": "GatedGCN", "gin": "GIN", "gine": "GINE",
                 "transformer": "Transformer"}
_P = dict(zip(SOURCES, ("none", "rand", "LapPE", "RWSE", "LapPE+RWSE", "AllPSE", "GPSE")))
#: The paper's ZINC-12k numbers (gpse-paper.tex, `abl_zinc_pse` and `molbench`); rows x columns, MAE.
PAPER = {
    "zinc-gps": {"gps": {"none": "0.1182 ± 0.0049", "random": "0.8766 ± 0.0107", "LapPE": "0.1078 ± 0.0084",
                         "RWSE": "0.0700 ± 0.0040", "LapPE+RWSE": "0.0822 ± 0.0040", "AllPSE": "0.0734 ± 0.0030",
                         "GPSE": "0.0648 ± 0.0030"}},
    "zinc-pse": {
        column: dict(zip(SOURCES, values)) for column, values in {
            "gcn": ("0.288 ± 0.004", "1.277 ± 0.340", "0.209 ± 0.008", "0.181 ± 0.003", "0.184 ± 0.008",
                    "0.150 ± 0.007", "0.129 ± 0.003"),
            "gatedgcn": ("0.236 ± 0.008", "1.228 ± 0.012", "0.194 ± 0.006", "0.167 ± 0.002", "0.163 ± 0.009",
                         "0.143 ± 0.007", "0.113 ± 0.003"),
            "gin": ("0.285 ± 0.004", "1.239 ± 0.011", "0.214 ± 0.004", "0.175 ± 0.003", "0.174 ± 0.003",
                    "0.153 ± 0.006", "0.124 ± 0.002"),
            "gine": ("0.118 ± 0.005", "0.877 ± 0.011", "0.108 ± 0.008", "0.070 ± 0.004", "0.082 ± 0.004",
                     "0.073 ± 0.003", "0.065 ± 0.003"),
            "transformer": ("0.686 ± 0.017", "1.451 ± 0.002", "0.501 ± 0.145", "0.219 ± 0.007", "0.205 ± 0.007",
                            "0.190 ± 0.008", "0.189 ± 0.016"),
        }.items()},
}


# ----------------------------------------------------------------------------------------------
# jobs


def cell_recipes(table: str, columns, sources, overrides, checkpoint, extra_gpse: dict):
    """``[(column, source label, validated recipe)]`` of one table."""
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    recipe_file, models, _ = TABLES[table]
    cells = []
    for column in columns or models:
        if column not in models:
            raise SystemExit(f"error: table {table} has no column {column!r}; columns: {', '.join(models)}")
        base = list(overrides) + ([f"model.name={models[column]}"] if models[column] else [])
        for source in sources:
            pe = [f"model.pe.source={source}"]
            if source == "GPSE" and checkpoint:
                pe.append(f"model.pe.checkpoint={checkpoint}")
            cells.append((column, source, load_downstream_recipe(RECIPES / recipe_file, base + pe)))
        for name, path in extra_gpse.items():
            pe = ["model.pe.source=GPSE", f"model.pe.checkpoint={path}"]
            cells.append((column, f"GPSE:{name}", load_downstream_recipe(RECIPES / recipe_file, base + pe)))
    return cells


def encoder_of(recipe: dict) -> str | None:
    """The GPSE encoder of a recipe by its file's content (sha256, 16 hex digits); ``None`` for other PEs."""
    from gpse_dgl.train.downstream.features import checkpoint_identity

    pe = recipe.get("model", {}).get("pe") or {}
    return checkpoint_identity(pe.get("checkpoint"))["sha256"][:16] if pe.get("source") == "GPSE" else None


def budget_key(recipe: dict) -> str:
    """Fingerprint of what makes two runs comparable: the recipe less outputs, seeds and the device, with a
    GPSE encoder named by its file's content (the default model changes between releases, and a path can be
    overwritten), so that runs of two encoders never share a cell."""
    from gpse_dgl.train.downstream.features import checkpoint_identity

    slim = copy.deepcopy(recipe)
    pe = slim.get("model", {}).get("pe") or {}
    if pe.get("source") == "GPSE":
        pe["checkpoint"] = checkpoint_identity(pe.get("checkpoint"))["sha256"]
    for key in ("save_path", "num_seeds", "save_checkpoints", "checkpoint_every", "num_threads"):
        slim["general_pipeline"].pop(key, None)
    slim.pop("device", None)
    slim["data"].pop("root", None)
    slim["data"].pop("cache_dir", None)
    return hashlib.sha256(json.dumps(slim, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_key(table: str, column: str, source: str, seed: int) -> str:
    return f"{table}/{column}/{source}/seed{seed}"


def host(gpu: str | None = None) -> str:
    """CPU model and flags that decide bf16 speed (and the GPU a run used), for the ledger."""
    from gpse_dgl.train.runtime import cpu_model

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    flags = [f for f in ("amx_bf16", "avx512_bf16") if f in text]
    cpu = f"{cpu_model()} ({', '.join(flags) or 'AVX2 only'})"
    return f"{gpu} with {cpu}" if gpu else cpu


#: What the report reads from every record (checked when a ledger is loaded).
FIELDS = ("table", "column", "source", "seed", "test", "seconds", "host")
ABOUT = "benchmarks/paper_tables.py: one record per finished run"


def pending_runs(plan, seeds, ledger: Ledger, worker: tuple[int, int] = (0, 1)):
    """``(seed, table, column, source, recipe)`` not yet in ``ledger``, seed-major; with ``worker=(i, n)``
    every n-th of them from the i-th, so that n processes (or machines) share one sweep without overlap."""
    todo = [(seed, *item) for seed in seeds for item in plan
            if not ledger.has(run_key(*item[:3], seed), budget_key(item[3]))]
    index, count = worker
    return todo[index::count]


def run_all(plan, seeds, ledger: Ledger, out: Path, threads: int | None, log=print,
            worker: tuple[int, int] = (0, 1)) -> None:
    """Train every ``(table, column, source, recipe)`` of ``plan`` for every seed, seed-major."""
    from gpse_dgl.train.downstream import train_downstream

    for seed, table, column, source, recipe in pending_runs(plan, seeds, ledger, worker):
        budget, key = budget_key(recipe), run_key(table, column, source, seed)
        job = copy.deepcopy(recipe)
        job["general_pipeline"]["save_path"] = str(out / budget / key.replace("+", "_").replace(":", "_"))
        if threads:
            job["general_pipeline"]["num_threads"] = threads
        resume = (Path(job["general_pipeline"]["save_path"]) / "recipe.yaml").is_file()
        started = time.perf_counter()
        summary = train_downstream(job, resume=resume, overwrite=not resume, seeds=[recipe["seed"] + seed],
                                   progress=False, log=lambda m: None)
        run = summary["runs"][0]
        record = {"budget": budget, "table": table, "column": column, "source": source, "seed": seed,
                  "metric": summary["metric"], "best_epoch": run["best_epoch"],
                  "epochs": job["general_pipeline"]["num_epochs"],
                  **{split: _finite(run[split]) for split in ("train", "val", "test")},
                  "seconds": round(time.perf_counter() - started, 1),
                  "host": host(summary.get("environment", {}).get("device_name")),
                  "date": time.strftime("%Y-%m-%d"), "parameters": summary["model"]["num_parameters"],
                  **({"encoder": encoder_of(recipe)} if source.startswith("GPSE") else {})}
        ledger.add(key, record)
        log(f"{key}: val {record['val']:.4f} test {record['test']:.4f} ({record['seconds']:.0f} s)")


def _finite(value):
    return None if value is None or not math.isfinite(value) else float(value)


# ----------------------------------------------------------------------------------------------
# tables


def collect(ledger: Ledger, table: str, budgets: dict) -> dict:
    """``{column: {source: [record per seed]}}`` of the runs of ``table`` at the current budgets."""
    cells: dict = {}
    for record in ledger.runs.values():
        if record["table"] != table or budgets.get((record["column"], record["source"])) != record["budget"]:
            continue
        cells.setdefault(record["column"], {}).setdefault(record["source"], []).append(record)
    for column in cells.values():
        for runs in column.values():
            runs.sort(key=lambda r: r["seed"])
    return cells


def empty_rows(plan, table: str, ledger: Ledger, budgets: dict) -> list[str]:
    """One line per cell of ``table`` that the ledger holds runs of, none at this call's budget, saying why
    the row is empty: another GPSE encoder (by the records' ``encoder``, or because the cell's other rows
    are at this budget, so that only the encoder differs) or another budget (recipe, epochs, ``--set``)."""
    current = {(c, s): r for t, c, s, r in plan if t == table}
    matched = {(r["column"], r["source"]) for r in ledger.runs.values()
               if r["table"] == table and budgets.get((r["column"], r["source"])) == r["budget"]}
    elsewhere: dict = {}
    for record in ledger.runs.values():
        cell = (record["column"], record["source"])
        if record["table"] == table and cell in current and cell not in matched:
            elsewhere.setdefault(cell, []).append(record)
    lines = []
    for (column, source), records in sorted(elsewhere.items()):
        theirs = sorted({r["encoder"] for r in records if r.get("encoder")})
        ours = encoder_of(current[column, source])
        if ours and theirs and ours not in theirs:
            why = f"with another GPSE encoder ({', '.join(theirs)}; this call's is {ours})"
        elif ours and any(c == column for c, _ in matched):
            why = "with another GPSE encoder (the column's other rows are at this budget)"
        else:
            why = "at another budget (recipe, epochs, --set or encoder differ)"
        lines.append(f"{table}/{column}/{source}: empty: the ledger's {len(records)} run(s) of it were made {why}")
    return lines


def stats(values) -> tuple[float, float]:
    """Mean and population std (GraphGPS's aggregation)."""
    values = [v for v in values if v is not None]
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def paired_gap(by_source: dict, split: str = "test") -> tuple[str, float, float, int] | None:
    """GPSE minus the best explicit PSE (best by mean ``split`` score), per seed present in both: the
    explicit PSE's name, mean and std of the differences, and the number of pairs."""
    explicit = {s: stats([r[split] for r in by_source[s]])[0] for s in EXPLICIT if s in by_source}
    if "GPSE" not in by_source or not explicit:
        return None
    best = min(explicit, key=explicit.get)
    ours = {r["seed"]: r[split] for r in by_source["GPSE"]}
    diffs = [ours[r["seed"]] - r[split] for r in by_source[best] if r["seed"] in ours]
    if not diffs:
        return None
    mean, std = stats(diffs)
    return best, mean, std, len(diffs)


def markdown(table: str, cells: dict, digits: int = 4) -> str:
    """Rows = PE sources, per column ours (mean ± std, seeds) and the paper's ZINC-12k number."""
    paper = PAPER.get(table, {})
    columns = [c for c in TABLES[table][1] if c in cells] + sorted(set(cells) - set(TABLES[table][1]))
    header = ["PE"]
    for column in columns:
        header.append(f"{COLUMN_LABELS.get(column, column)} ({TABLES[table][2]})")
        if column in paper:
            header.append("paper, ZINC-12k")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" + "---:|" * (len(header) - 1)]
    present = {s for c in columns for s in cells[c]}
    sources = [s for s in SOURCES if s in present] + sorted(present - set(SOURCES))
    for source in sources:
        row = [_P.get(source, source)]
        for column in columns:
            runs = cells[column].get(source, [])
            mean, std = stats([r["test"] for r in runs])
            row.append(f"{mean:.{digits}f} ± {std:.{digits}f} ({len(runs)})" if runs else "")
            if column in paper:
                row.append(paper[column].get(source, "--"))
        lines.append("| " + " | ".join(row) + " |")
    gaps = ["| GPSE − best explicit (paired, test)"]
    for column in columns:
        gap = paired_gap(cells[column])
        gaps.append(f"{gap[1]:+.{digits}f} ± {gap[2]:.{digits}f} vs {gap[0]} ({gap[3]})" if gap else "")
        if column in paper:
            gaps.append("")
    lines.append(" | ".join(gaps) + " |")
    return "\n".join(lines)


def budget_line(plan, table: str, ledger: Ledger, budgets: dict) -> str:
    recipe = next(r for t, _, _, r in plan if t == table)
    general, model = recipe["general_pipeline"], recipe["model"]
    runs = [r for r in ledger.runs.values() if r["table"] == table
            and budgets.get((r["column"], r["source"])) == r["budget"]]
    hours = sum(r["seconds"] for r in runs) / 3600
    hosts = sorted({r["host"] for r in runs})
    return (f"Budget: {general['num_epochs']} epochs (warm-up {general['lr_scheduler']['warmup_epochs']}), batch "
            f"{general['batch_size']}, lr {general['optimizer']['lr']}, {model['num_layers']} layers x "
            f"{model['dim_hidden']}; test score at the best validation epoch, mean ± std over seeds (count in "
            f"brackets); {len(runs)} runs, {hours:.1f} h in all on {'; '.join(hosts) or '-'}.")


def plot(table: str, cells: dict, path: Path) -> Path:
    """One panel of bars per column: ours (mean ± std) with the paper's ZINC-12k value as a tick."""
    from _figures import bars_with_errors

    series, labels = [], None
    for column, by_source in cells.items():
        sources = [s for s in SOURCES if s in by_source] + [s for s in by_source if s not in SOURCES]
        labels = labels or [_P.get(s, s) for s in sources]
        means, stds = zip(*(stats([r["test"] for r in by_source[s]]) for s in sources))
        series.append((f"ours, {COLUMN_LABELS.get(column, column)}", list(means), list(stds)))
    reference = None
    if len(cells) == 1 and table in PAPER:
        column = next(iter(cells))
        paper = PAPER[table].get(column, {})
        sources = [s for s in SOURCES if s in cells[column]] + [s for s in cells[column] if s not in SOURCES]
        reference = ("paper (ZINC-12k)", [float(paper[s].split("±")[0]) if s in paper else math.nan
                                          for s in sources])
    title = {"zinc-gps": "ZINC replica, GPS: test MAE per PE", "zinc-pse": "ZINC replica: test MAE per PE and model",
             "solubility": "Huuskonen solubility, GINE: test RMSE per PE"}[table]
    return bars_with_errors(labels, series, path, title + " (lower is better)", TABLES[table][2], reference,
                            value_format="{:.3g}")


# ----------------------------------------------------------------------------------------------


def parse_worker(text: str) -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``0 <= I < N``."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        sys.exit(f"error: --worker expects I/N with 0 <= I < N, got {text!r}")
    return index, count


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", default="zinc-gps,solubility", help=f"comma-separated: {', '.join(TABLES)}")
    parser.add_argument("--columns", default=None, help="only these columns (models) of the tables")
    parser.add_argument("--sources", default=",".join(SOURCES), help="rows (default: %(default)s)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds per cell (default: %(default)s, the paper's)")
    parser.add_argument("--epochs", type=int, default=None, help="override the recipes' epochs")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="recipe override for every run (repeatable; changes the budget fingerprint)")
    parser.add_argument("--checkpoint", default=None, help="GPSE encoder of the GPSE row (default: shipped)")
    parser.add_argument("--gpse-extra", action="append", default=[], metavar="NAME=CHECKPOINT",
                        help="another GPSE row, e.g. molpcba=gpse_model_molpcba_1.0.pt (repeatable)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's)")
    parser.add_argument("--ledger", type=Path, default=HERE / "paper_tables.json", help="finished runs (JSON)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "paper-tables",
                        help="run folders (checkpoints for resuming; default: %(default)s)")
    parser.add_argument("--figures", type=Path, default=HERE / "figures", help="folder of the PNGs")
    parser.add_argument("--report-only", action="store_true", help="only write the tables and figures so far")
    parser.add_argument("--worker", default="0/1", metavar="I/N",
                        help="run every N-th pending run from the I-th (0-based), so that N processes or "
                             "machines share the sweep; each writes its own --ledger, joined with --merge")
    parser.add_argument("--merge", action="append", default=[], type=Path, metavar="LEDGER",
                        help="first take the finished runs of another ledger into --ledger (repeatable)")
    args = parser.parse_args(argv)

    from gpse_dgl.utils.errors import GPSEError

    tables = args.tables.split(",")
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        sys.exit(f"error: unknown table(s) {', '.join(unknown)}; tables: {', '.join(TABLES)}")
    overrides = list(args.overrides) + ([f"general_pipeline.num_epochs={args.epochs}"] if args.epochs else [])
    extra = dict(item.split("=", 1) for item in args.gpse_extra)
    columns = args.columns.split(",") if args.columns else None
    worker = parse_worker(args.worker)
    try:
        plan = [(table, column, source, recipe) for table in tables
                for column, source, recipe in cell_recipes(
                    table, [c for c in columns if c in TABLES[table][1]] if columns else None,
                    args.sources.split(","), overrides, args.checkpoint, extra)]
        ledger = open_ledger(args.ledger, args.merge, FIELDS, ABOUT, args.report_only)
        if not args.report_only:
            run_all(plan, range(args.seeds), ledger, args.out, args.threads, worker=worker)
    except GPSEError as exc:
        sys.exit(f"error: {exc}")
    report = []
    for table in tables:
        budgets = {(c, s): budget_key(r) for t, c, s, r in plan if t == table}
        cells = collect(ledger, table, budgets)
        notes = empty_rows(plan, table, ledger, budgets)
        if not cells:
            report += [f"{table}: no run at this budget in {ledger.path}", *notes, ""]
            continue
        report += [f"## {table}", "", markdown(table, cells), "", budget_line(plan, table, ledger, budgets), "",
                   *notes, *([""] if notes else [])]
        plot(table, cells, args.figures / f"paper_{table}.png")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "paper_tables.md").write_text("\n".join(report), encoding="utf-8")
    print("\n".join(report))


if __name__ == "__main__":
    main()
