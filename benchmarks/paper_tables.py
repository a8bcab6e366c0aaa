#!/usr/bin/env python
"""The paper's downstream tables on offline stand-ins: run or resume them, write JSON, tables and figures.

Tables (``--tables``; cells are PE sources x models, every arm with the same model, budget and seeds):

* ``zinc-gps``: table ``molbench``'s GPS rows on ``zinc-replica`` (``recipes/downstream/zinc-replica.yaml``:
  GPS with GINE, 10 x 64, the paper's `hp_mol_bench` at a CPU budget).
* ``zinc-pse``: table ``abl_zinc_pse`` on ``zinc-replica``: GCN, GatedGCN, GIN, GINE and a Transformer
  (``zinc-replica-gine.yaml`` with ``model.name`` switched; in the paper the GINE column is the GPS rows).
* ``solubility``: Huuskonen's measured aqueous solubility (``recipes/downstream/huuskonen-solubility.yaml``).

Rows: ``none``, ``rand``, ``LapPE``, ``RWSE``, ``LapPE+RWSE``, ``AllPSE``, ``GPSE`` (the shipped
default encoder, or ``--checkpoint``), plus ``GPSE:<name>`` for every ``--gpse-extra NAME=CHECKPOINT``
(e.g. the authors' ``molpcba`` weights when they are on disk; ``--extra-columns`` limits them to some
columns). Each arm is fed as the paper fed it: the recipes' ``model.pe.model: auto`` gives every source the
encoder of the GPSE authors' configuration
(``gpse_dgl/train/downstream/pe_sources``). With ``--grid`` every arm is tuned on the same grid (input
dropout {0, 0.5} x {its own PE encoder, the alternative}): each setting runs on the tuning seed(s)
(``--tune-seeds``, default 1: seed 0), the setting with the best validation score is chosen, and the
table reports it on ``--seeds`` fresh seeds (1-4), so that no reported score took part in a choice; arms
with nothing to tune (``none``, ``rand``) run the same reported seeds. The choice is given per arm.

A run's budget fingerprint holds the recipe, the GPSE encoder by content, a digest of the code that changes
results (``RESULT_CODE`` and the C++ kernels) and the device (``cpu`` or ``cuda:<GPU>``; ``--device`` to
report another's): runs of another code version or device never join a cell; such a cell is run anew.
``--report-only --code DIGEST`` writes the tables of an earlier code version from its runs (every ledger
record names its ``code``), e.g. once a speed-up has changed the digest but no table has been re-run yet;
the recipes and overrides must still be those the runs were made with (they are in the fingerprint too).

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
    python benchmarks/paper_tables.py --tables zinc-gps,zinc-pse,solubility --grid --seeds 4 --threads 1

One sweep shared by processes or machines (each takes every N-th pending run into its own ledger, then
the ledgers are joined)::

    python benchmarks/paper_tables.py --tables zinc-pse --worker 0/2 --ledger /tmp/a.json &
    python benchmarks/paper_tables.py --tables zinc-pse --worker 1/2 --ledger /tmp/b.json
    python benchmarks/paper_tables.py --tables zinc-pse --merge /tmp/a.json --merge /tmp/b.json --report-only

With ``--grid`` a worker runs its share of what can be named from its ledger: the tuning runs and the
reported seeds of arms with nothing to tune. The chosen settings' runs need every worker's tuning runs, so
join the ledgers (each worker's ``--ledger`` with the others' ``--merge``) and start the workers again.
On one machine ``--processes N`` does all of that: N workers per pass, joined into ``--ledger`` after each,
until a pass adds nothing (``python benchmarks/paper_tables.py --tables zinc-pse --grid --processes 2
--threads 1``).

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

from _ledger import Ledger, add_sweep_options, open_ledger, run_processes  # noqa: E402  (Ledger: other scripts import it from here)
from _stats import paired_t, sign_test  # noqa: E402

SOURCES = ("none", "rand", "LapPE", "RWSE", "LapPE+RWSE", "AllPSE", "GPSE")
EXPLICIT = ("LapPE", "RWSE", "LapPE+RWSE", "AllPSE")
RECIPES = ROOT / "recipes" / "downstream"

#: table -> (recipe, {column: model.name override or None}, metric label)
TABLES = {
    "zinc-gps": ("zinc-replica.yaml", {"gps": None}, "MAE"),
    "zinc-pse": ("zinc-replica-gine.yaml", {c: c for c in ("gcn", "gatedgcn", "gin", "gine", "transformer")}, "MAE"),
    "solubility": ("huuskonen-solubility.yaml", {"gine": None}, "RMSE"),
}
#: Recipe overrides of one column, for every row of it. The Transformer (attention only, no message passing)
#: collapsed to the composition-only plateau (MAE ~0.82, none's level) in 4 of its first 7 tuning runs when its
#: learning rate reached the peak after the recipes' one warm-up epoch (313 steps; GraphGPS warms up for 50
#: epochs); with 5 warm-up epochs the run that had collapsed learned (validation 0.804 -> 0.418; seed 1: 0.447).
COLUMN_OVERRIDES = {("zinc-pse", "transformer"): ["general_pipeline.lr_scheduler.warmup_epochs=5"]}
COLUMN_LABELS = {"gps": "GPS (GINE)", "gcn": "GCN", "gatedgcn": "GatedGCN", "gin": "GIN", "gine": "GINE",
                 "transformer": "Transformer"}
_P = {"random": "random (fixed per graph)"}
#: The grid every arm is tuned on (``--grid``), chosen on validation only: input dropout x PE encoder, the
#: source's own encoder (its authors', ``model.pe.model: auto``) against the alternative named here.
GRID_DROPOUT = (0.0, 0.5)
ALTERNATIVE = {"linear": "mlp", "mlp": "linear", "deepset": "mlp"}
#: Encoders with no input dropout (GraphGPS's LapPE DeepSet has none): their dropout axis is the one setting
#: 0, since a second setting would only repeat the same run.
NO_INPUT_DROPOUT = {"deepset"}
#: Sub-packages whose code changes a run's result: their digest joins the budget fingerprint.
RESULT_CODE = ("data", "encode", "kernels", "nn", "pse", "train", "utils")
#: The paper's ZINC-12k numbers (gpse-paper.tex, `abl_zinc_pse` and `molbench`); rows x columns, MAE.
PAPER = {
    "zinc-gps": {"gps": {"none": "0.1182 ± 0.0049", "rand": "0.8766 ± 0.0107", "LapPE": "0.1078 ± 0.0084",
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


def cell_recipes(table: str, columns, sources, overrides, checkpoint, extra_gpse: dict, grid: bool = False,
                 extra_columns=None):
    """``[(column, source label, validated recipe)]`` of one table; with ``grid`` one per setting of
    :func:`grid_settings`, labelled ``source|setting``. The ``extra_gpse`` rows go into the columns that
    ``extra_columns`` names (``column`` or ``table/column``; ``None``: every column)."""
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    recipe_file, models, _ = TABLES[table]
    arms = [(source, [f"model.pe.source={source}"] + ([f"model.pe.checkpoint={checkpoint}"]
                                                       if source == "GPSE" and checkpoint else []))
            for source in sources]
    extra_arms = [(f"GPSE:{name}", ["model.pe.source=GPSE", f"model.pe.checkpoint={path}"])
                  for name, path in extra_gpse.items()]
    cells = []
    for column in columns or models:
        if column not in models:
            raise SystemExit(f"error: table {table} has no column {column!r}; columns: {', '.join(models)}")
        # the column's own overrides first, so that a caller's --set still wins
        base = (([f"model.name={models[column]}"] if models[column] else []) + COLUMN_OVERRIDES.get((table, column), [])
                + list(overrides))
        with_extra = extra_columns is None or {column, f"{table}/{column}"} & set(extra_columns)
        for label, pe in arms + (extra_arms if with_extra else []):
            recipe = load_downstream_recipe(RECIPES / recipe_file, base + pe)
            if not grid:
                cells.append((column, label, recipe))
                continue
            for setting, extra in grid_settings(recipe["model"]["pe"]["source"]):
                cells.append((column, f"{label}|{setting}", load_downstream_recipe(RECIPES / recipe_file,
                                                                                  base + pe + extra)))
    return cells


def grid_settings(source: str) -> list[tuple[str, list]]:
    """``[(label, overrides)]``: the same grid for every arm, input dropout {0, 0.5} x {the source's own PE
    encoder, the alternative}; an encoder without input dropout (:data:`NO_INPUT_DROPOUT`) takes 0 only, and an
    arm without a PE encoder to tune (``none``, ``rand``) has one setting."""
    from gpse_dgl.train.downstream.pe_sources import get_source

    spec = get_source(source)
    own = spec.encoder.get("kind")
    if own is None or len(spec.kinds) < 2:
        return [("-", [])]
    kinds = [own] + [k for k in (ALTERNATIVE.get(own),) if k in spec.kinds]
    return [(f"{kind} in {dropout:g}", [f"model.pe.model={kind}", f"model.pe.dropout_in={dropout}"])
            for kind in kinds for dropout in ((0.0,) if kind in NO_INPUT_DROPOUT else GRID_DROPOUT)]


def select_settings(cells: dict, tune_seeds: int = 0, split: str = "val") -> tuple[dict, dict]:
    """Per column and arm, the setting with the best mean ``split`` score (lower is better in every table
    here) and the runs that report it: ``({column: {arm: reported runs}}, {column: {arm: setting}})``.

    With ``tune_seeds`` the choice reads only the runs of seeds below it and the reported runs are the chosen
    setting's other seeds (fresh seeds: the table's scores took no part in the choice); without, both are
    all of its runs. The test score never plays a part."""
    chosen_runs: dict = {}
    chosen: dict = {}
    for column, by_label in cells.items():
        arms: dict = {}
        for label, runs in by_label.items():
            arm, _, setting = label.partition("|")
            arms.setdefault(arm, {})[setting or None] = runs
        for arm, settings in arms.items():
            best = best_setting(settings, tune_seeds, split)
            reported = [r for r in settings[best] if r["seed"] >= tune_seeds] if tune_seeds else settings[best]
            if reported:
                chosen_runs.setdefault(column, {})[arm] = reported
            if best is not None:
                chosen.setdefault(column, {})[arm] = best
    return chosen_runs, chosen


def best_setting(settings: dict, tune_seeds: int = 0, split: str = "val"):
    """The key of ``settings`` (setting -> runs) with the lowest mean ``split`` score over the runs of seeds
    below ``tune_seeds`` (all runs without); a run without a finite score counts as the worst."""
    def score(runs):
        return mean_score([r.get(split) for r in runs if not tune_seeds or r["seed"] < tune_seeds])

    return min(settings, key=lambda k: score(settings[k]))


def mean_score(values) -> float:
    """Mean of validation scores where a missing (non-finite) one counts as the worst: ``inf``; ``inf`` for
    none at all."""
    values = [math.inf if v is None else v for v in values]
    return sum(values) / len(values) if values else math.inf


def chosen_lines(chosen: dict, tune_seeds: int = 0) -> list[str]:
    """The chosen setting per arm, one line per column."""
    how = "on validation"
    if tune_seeds:
        seeds = "seed 0" if tune_seeds == 1 else f"seeds 0-{tune_seeds - 1}"
        how = f"on the validation scores of {seeds}, reported on other seeds"
    return [f"Chosen {how} ({COLUMN_LABELS.get(column, column)}): "
            + "; ".join(f"{_P.get(arm, arm)} {setting}" for arm, setting in arms.items()) + "."
            for column, arms in chosen.items()]


def encoder_of(recipe: dict) -> str | None:
    """The GPSE encoder of a recipe by its file's content (sha256, 16 hex digits); ``None`` for other PEs."""
    from gpse_dgl.train.downstream.features import checkpoint_identity

    pe = recipe.get("model", {}).get("pe") or {}
    return checkpoint_identity(pe.get("checkpoint"))["sha256"][:16] if pe.get("source") == "GPSE" else None


#: The device the fingerprints name (``--device``): None = the one this process trains on.
DEVICE: list = [None]


def device_label(recipe_device: str = "auto") -> str:
    """``cpu`` or ``cuda:<GPU name>``: where a run of ``recipe_device`` trains in this process."""
    import torch

    if DEVICE[0]:
        return DEVICE[0]
    if recipe_device != "cpu" and torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name()}"
    return "cpu"


def result_code_digest() -> str:
    """SHA-256 (16 hex digits) of the code that changes a run's result: :data:`RESULT_CODE` and the C++
    kernel sources (``gpse_dgl.data.cache.code_digest``)."""
    from gpse_dgl.data.cache import code_digest, file_sha256

    digest = hashlib.sha256()
    package = ROOT / "gpse_dgl"
    for name in RESULT_CODE:
        if (package / name).is_dir():
            digest.update(f"{name}:{code_digest(name)}".encode())
    for path in sorted(package.rglob("csrc/*")):
        digest.update(f"{path.name}:{file_sha256(path)}".encode())
    return digest.hexdigest()[:16]


def budget_key(recipe: dict) -> str:
    """Fingerprint of what makes two runs comparable: the recipe less outputs and seeds, with a GPSE encoder
    named by its file's content (the default model changes between releases, and a path can be overwritten),
    the digest of the code that changes results and the device, so that runs of two encoders, two code
    versions or two devices never share a cell (a stale cell is re-run, not averaged in)."""
    from gpse_dgl.train.downstream.features import checkpoint_identity

    slim = copy.deepcopy(recipe)
    pe = slim.get("model", {}).get("pe") or {}
    if pe.get("source") == "GPSE":
        pe["checkpoint"] = checkpoint_identity(pe.get("checkpoint"))["sha256"]
    for key in ("save_path", "num_seeds", "save_checkpoints", "checkpoint_every", "num_threads"):
        slim["general_pipeline"].pop(key, None)
    slim["device"] = device_label(slim.pop("device", "auto"))
    slim["code"] = _code_digest_once()
    slim["data"].pop("root", None)
    slim["data"].pop("cache_dir", None)
    return hashlib.sha256(json.dumps(slim, sort_keys=True, default=str).encode()).hexdigest()[:16]


#: The code digest the fingerprints name (``--code``): None = the digest of the code in this checkout.
CODE: list = [None]


def _code_digest_once(cache: dict = {}) -> str:  # noqa: B006  (one digest per process)
    if CODE[0]:
        return CODE[0]
    if "digest" not in cache:
        cache["digest"] = result_code_digest()
    return cache["digest"]


def run_key(table: str, column: str, source: str, seed: int) -> str:
    return f"{table}/{column}/{source}/seed{seed}"


def run_folder(out: Path, budget: str, key: str) -> Path:
    """Where the run ``key`` at ``budget`` trains under ``out`` (``+`` and ``:`` of source names replaced)."""
    return out / budget / key.replace("+", "_").replace(":", "_")


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


def sweep_runs(plan, seeds, ledger: Ledger, tune_seeds: int = 0) -> tuple[list, int]:
    """``(runs, waiting)``: every run the sweep needs that the ledger lets us name now, as ``(seed, table,
    column, label, recipe)``, and how many arms wait for their tuning runs.

    Without ``tune_seeds`` every item of ``plan`` runs every seed of ``seeds``. With it (``--grid``), an arm
    with several settings (labels ``source|setting``) runs each on the tuning seeds ``0 .. tune_seeds - 1``;
    once all of those are in the ledger, the setting with the best mean validation score runs the reported
    seeds ``tune_seeds .. tune_seeds + len(seeds) - 1``. An arm with one setting runs the reported seeds only,
    so every cell of a table is reported on the same seeds, none of them used for a choice. Tuning runs come
    first; each group is seed-major."""
    if not tune_seeds:
        return [(seed, *item) for seed in seeds for item in plan], 0
    arms: dict = {}
    for item in plan:
        arms.setdefault((item[0], item[1], item[2].partition("|")[0]), []).append(item)
    reported = range(tune_seeds, tune_seeds + len(seeds))
    tuning, final, waiting = [], [], 0
    for items in arms.values():
        if len(items) == 1:
            final += [(seed, *items[0]) for seed in reported]
            continue
        tuning += [(seed, *item) for seed in range(tune_seeds) for item in items]
        runs = {i: [r for r in (ledger.get(run_key(*item[:3], s), budget_key(item[3])) for s in range(tune_seeds))
                    if r is not None] for i, item in enumerate(items)}
        if any(len(r) < tune_seeds for r in runs.values()):
            waiting += 1
            continue
        best = items[best_setting(runs, tune_seeds)]
        final += [(seed, *best) for seed in reported]
    return sorted(tuning, key=lambda run: run[0]) + sorted(final, key=lambda run: run[0]), waiting


def pending_runs(plan, seeds, ledger: Ledger, worker: tuple[int, int] = (0, 1), tune_seeds: int = 0):
    """The runs of :func:`sweep_runs` not yet in ``ledger``; with ``worker=(i, n)`` every n-th of them from the
    i-th, so that n processes (or machines) share one sweep without overlap."""
    runs, _ = sweep_runs(plan, seeds, ledger, tune_seeds)
    todo = [run for run in runs if not ledger.has(run_key(*run[1:4], run[0]), budget_key(run[4]))]
    index, count = worker
    return todo[index::count]


def run_all(plan, seeds, ledger: Ledger, out: Path, threads: int | None, log=print,
            worker: tuple[int, int] = (0, 1), tune_seeds: int = 0) -> None:
    """Train the runs of :func:`sweep_runs`. One process goes on until every arm's reported seeds are done
    (a choice made once its tuning runs are in); a worker of several runs its share of what can be named at
    the start (the shares of two workers agree only on the same ledger) and says what waits for the others."""
    while todo := pending_runs(plan, seeds, ledger, worker, tune_seeds):
        for run in todo:
            _train_one(run, ledger, out, threads, log)
        if worker[1] > 1:
            break
    waiting = sweep_runs(plan, seeds, ledger, tune_seeds)[1]
    if waiting:
        log(f"{waiting} arm(s) wait for tuning runs not in {ledger.path}: join the workers' ledgers (--merge) "
            f"and run again")


def _train_one(run, ledger: Ledger, out: Path, threads: int | None, log=print) -> None:
    from gpse_dgl.train.downstream import train_downstream

    seed, table, column, source, recipe = run
    budget, key = budget_key(recipe), run_key(table, column, source, seed)
    job = copy.deepcopy(recipe)
    job["general_pipeline"]["save_path"] = str(run_folder(out, budget, key))
    if threads:
        job["general_pipeline"]["num_threads"] = threads
    resume = (Path(job["general_pipeline"]["save_path"]) / "recipe.yaml").is_file()
    started = time.perf_counter()
    summary = train_downstream(job, resume=resume, overwrite=not resume, seeds=[recipe["seed"] + seed],
                               progress=False, log=lambda m: None)
    result = summary["runs"][0]
    record = {"budget": budget, "table": table, "column": column, "source": source, "seed": seed,
              "metric": summary["metric"], "best_epoch": result["best_epoch"],
              "epochs": job["general_pipeline"]["num_epochs"],
              **{split: _finite(result[split]) for split in ("train", "val", "test")},
              "seconds": round(time.perf_counter() - started, 1),
              "host": host(summary.get("environment", {}).get("device_name")),
              "date": time.strftime("%Y-%m-%d"), "parameters": summary["model"]["num_parameters"],
              "device": device_label(recipe["device"]), "code": _code_digest_once(),
              **({"encoder": encoder_of(recipe)} if source.startswith("GPSE") else {})}
    ledger.add(key, record)
    log(f"{key}: val {_shown(record['val'])} test {_shown(record['test'])} ({record['seconds']:.0f} s)")


def _shown(value) -> str:
    return "not finite" if value is None else f"{value:.4f}"


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


def paired_gap(by_source: dict, split: str = "test", gpse: str = "GPSE") -> dict | None:
    """The GPSE row ``gpse`` minus the best explicit PSE (best by mean ``split`` score): see
    :func:`paired_difference`."""
    explicit = {s: stats([r[split] for r in by_source[s]])[0] for s in EXPLICIT if s in by_source}
    if gpse not in by_source or not explicit:
        return None
    return paired_difference(by_source, gpse, min(explicit, key=explicit.get), split)


def paired_difference(by_source: dict, row: str, other: str, split: str = "test") -> dict | None:
    """``row`` minus ``other``, per seed present in both: ``{"other", "mean", "std", "pairs", "wins", "losses",
    "sign_p", "t_p"}`` (wins: seeds where ``row`` is lower; ``sign_p``: exact sign test; ``t_p``: paired
    t-test, both two-sided); ``None`` without a pair. A seed without a finite score in either row is left
    out."""
    if row not in by_source or other not in by_source:
        return None
    ours = {r["seed"]: r[split] for r in by_source[row] if r[split] is not None}
    diffs = [ours[r["seed"]] - r[split] for r in by_source[other] if r["seed"] in ours and r[split] is not None]
    if not diffs:
        return None
    mean, std = stats(diffs)
    wins, losses, sign_p = sign_test(diffs)
    return {"other": other, "mean": mean, "std": std, "pairs": len(diffs), "wins": wins, "losses": losses,
            "sign_p": sign_p, "t_p": paired_t(diffs)[1]}


def gap_text(gap: dict | None, digits: int = 4) -> str:
    """``-0.0087 ± 0.0033 vs AllPSE (4; 4-0, sign p 0.12, t p 0.02)``: mean ± std of the paired differences,
    the rival, pairs, GPSE's wins-losses and both tests' p."""
    if not gap:
        return ""
    return (f"{gap['mean']:+.{digits}f} ± {gap['std']:.{digits}f} vs {gap['other']} ({gap['pairs']}; "
            f"{gap['wins']}-{gap['losses']}, sign p {gap['sign_p']:.2g}, t p {gap['t_p']:.2g})")


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
    # paired rows: every GPSE encoder against the best explicit PSE, and another encoder against the shipped one
    extra = sorted(s for s in present if s.startswith("GPSE:"))
    pairs = [(g, "best explicit", lambda by, g=g: paired_gap(by, gpse=g)) for g in ["GPSE"] + extra]
    pairs += [(g, "GPSE", lambda by, g=g: paired_difference(by, g, "GPSE")) for g in extra]
    for row, other, gap in pairs:
        gaps = [f"| {row} − {other} (paired, test; seeds; {row} wins-losses, sign test, paired t)"]
        for column in columns:
            gaps.append(gap_text(gap(cells[column]), digits))
            if column in paper:
                gaps.append("")
        lines.append(" | ".join(gaps) + " |")
    return "\n".join(lines)


def early_best_line(runs, curve=lambda run: None) -> str:
    """How many ``runs`` reach their best validation epoch in the first fifth of the schedule (the mark of a
    run that diverges after a few epochs), with the runs named. ``curve(run)`` gives a run's ``(train, val)``
    scores by epoch where its folder is at hand (:func:`run_curve`); the line then shows whether the run
    diverged (validation and training error climbing after the best epoch) or stayed flat."""
    early = [r for r in runs if r["best_epoch"] <= r["epochs"] / 5]

    def named(r):
        text = f"{r['column']}/{r['source']}/seed{r['seed']} at {r['best_epoch']}/{r['epochs']}"
        scores = curve(r)
        if scores:
            (train, val), best, last = scores, r["best_epoch"], max(scores[1])
            text += (f": validation {val[best]:.3f} there, {val[last]:.3f} at epoch {last}; training "
                     f"{train[best]:.3f} there, {train[last]:.3f} at epoch {last}")
        return text

    listed = "; ".join(named(r) for r in sorted(early, key=lambda r: (r["column"], r["source"], r["seed"])))
    return (f"Best validation epoch in the first fifth of the schedule: {len(early)} of {len(runs)} runs"
            + (f" ({listed})." if early else "."))


def run_curve(out: Path, run: dict):
    """``(train, val)``: a finished run's ``{epoch: score}`` from the TensorBoard log in its folder under
    ``out`` (as ``_train_one`` lays it out); ``None`` where the folder, a scalar, or the best epoch or the
    last epoch of either is missing (the loop logs finite scores only)."""
    key = run_key(run["table"], run["column"], run["source"], run["seed"])
    # one run per folder; inside it the run's own folder is named after the recipe's seed plus this seed
    folders = sorted(run_folder(out, run["budget"], key).glob("seed*/tensorboard"))
    if len(folders) != 1 or not any(folders[0].glob("events.*")):
        return None
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = EventAccumulator(str(folders[0]))  # every events file: a resumed run wrote one per part
    log.Reload()
    tags = [f"{split}/{run['metric']}" for split in ("train", "val")]
    if not set(tags) <= set(log.Tags()["scalars"]):
        return None
    # by epoch, the last value written: a run interrupted mid-epoch repeats that epoch after resuming
    train = {e.step: e.value for e in log.Scalars(tags[0])}
    val = {e.step: e.value for e in log.Scalars(tags[1])}
    last = max(val)
    return (train, val) if {run["best_epoch"], last} <= set(train) & set(val) else None


def budget_line(plan, table: str, runs) -> str:
    """The recipe's budget and what ``runs`` (every run of ``table`` at it) cost, on which hosts."""
    recipe = next(r for t, _, _, r in plan if t == table)
    general, model = recipe["general_pipeline"], recipe["model"]
    hours = sum(r["seconds"] for r in runs) / 3600
    hosts = sorted({r["host"] for r in runs})
    return (f"Budget: {general['num_epochs']} epochs (warm-up {general['lr_scheduler']['warmup_epochs']}), batch "
            f"{general['batch_size']}, lr {general['optimizer']['lr']}, {model['num_layers']} layers x "
            f"{model['dim_hidden']}; test score at the best validation epoch, mean ± std over seeds (count in "
            f"brackets){_column_overrides(plan, table)}; {len(runs)} runs, {hours:.1f} h in all on "
            f"{'; '.join(hosts) or '-'}; code digest {_code_digest_once()}.")


def _column_overrides(plan, table: str) -> str:
    """``; Transformer: KEY=VALUE`` for every column of ``table`` in ``plan`` that :data:`COLUMN_OVERRIDES`
    changes."""
    planned = {column for t, column, _, _ in plan if t == table}
    return "".join(f"; {COLUMN_LABELS.get(column, column)}: {', '.join(keys)}"
                   for (name, column), keys in COLUMN_OVERRIDES.items() if name == table and column in planned)


def plot(table: str, cells: dict, path: Path) -> Path:
    """One panel of bars per column: ours (mean ± std) with the paper's ZINC-12k value as a tick."""
    from _figures import bars_with_errors

    # every row of any column, the paper's order first; a row a column lacks (an extra GPSE row run in some
    # columns only) is a gap in that column's bars
    present = [s for by_source in cells.values() for s in by_source]
    sources = [s for s in SOURCES if s in present] + list(dict.fromkeys(s for s in present if s not in SOURCES))
    labels = [_P.get(s, s) for s in sources]
    series = []
    for column, by_source in cells.items():
        means, stds = zip(*(stats([r["test"] for r in by_source.get(s, [])]) for s in sources))
        series.append((f"ours, {COLUMN_LABELS.get(column, column)}", list(means), list(stds)))
    reference = None
    if len(cells) == 1 and table in PAPER:
        column = next(iter(cells))
        paper = PAPER[table].get(column, {})
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


def check_extra_columns(text: str | None, tables, have_extra: bool):
    """``--extra-columns`` as a list (``None``: every column), each entry a column of one of ``tables`` named
    as ``column`` or ``table/column``; one-line exits for unknown names and for the option without
    ``--gpse-extra``."""
    if not text:
        return None
    if not have_extra:
        sys.exit("error: --extra-columns names the columns of the --gpse-extra rows; give --gpse-extra too")
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = {c for t in tables for c in TABLES[t][1]} | {f"{t}/{c}" for t in tables for c in TABLES[t][1]}
    unknown = [name for name in names if name not in known]
    if unknown:
        sys.exit(f"error: --extra-columns: no column {', '.join(unknown)} in {', '.join(tables)}; "
                 f"columns: {', '.join(sorted(known))}")
    return names


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
    parser.add_argument("--extra-columns", default=None, metavar="COLUMNS",
                        help="the columns the --gpse-extra rows run in, comma-separated, each 'column' or "
                             "'table/column' (default: every column)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's)")
    add_sweep_options(parser, HERE / "paper_tables.json", ROOT / "runs" / "paper-tables", HERE / "figures",
                      "run folders (checkpoints for resuming)", "only write the tables and figures so far")
    parser.add_argument("--grid", action="store_true",
                        help="tune every arm on the same grid (input dropout 0 / 0.5 x its own PE encoder / the "
                             "alternative) on --tune-seeds seeds, choose on validation, report the chosen "
                             "setting on --seeds fresh seeds; the chosen setting is reported per arm")
    parser.add_argument("--tune-seeds", type=int, default=1,
                        help="with --grid: seeds per setting for the choice (default: %(default)s)")
    parser.add_argument("--device", default=None, metavar="LABEL",
                        help="the device the fingerprints name, e.g. 'cuda:NVIDIA H200' to report runs made on "
                             "it from another machine (default: where this process trains)")
    parser.add_argument("--code", default=None, metavar="DIGEST",
                        help="with --report-only: the code digest the fingerprints name, to report the tables of "
                             "an earlier code version (its digest is in every ledger record's 'code') "
                             "(default: this checkout's)")
    args = parser.parse_args(argv)

    from gpse_dgl.utils.errors import GPSEError

    tables = args.tables.split(",")
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        sys.exit(f"error: unknown table(s) {', '.join(unknown)}; tables: {', '.join(TABLES)}")
    overrides = list(args.overrides) + ([f"general_pipeline.num_epochs={args.epochs}"] if args.epochs else [])
    extra = dict(item.split("=", 1) for item in args.gpse_extra)
    extra_columns = check_extra_columns(args.extra_columns, tables, bool(extra))
    columns = args.columns.split(",") if args.columns else None
    worker = parse_worker(args.worker)
    if args.grid and args.tune_seeds < 1:
        sys.exit("error: --tune-seeds must be at least 1")
    tune_seeds = args.tune_seeds if args.grid else 0
    if args.code and not args.report_only:
        sys.exit("error: --code only reports (with --report-only): runs are made by the code in this checkout")
    DEVICE[0], CODE[0] = args.device, args.code
    try:
        plan = [(table, column, source, recipe) for table in tables
                for column, source, recipe in cell_recipes(
                    table, [c for c in columns if c in TABLES[table][1]] if columns else None,
                    args.sources.split(","), overrides, args.checkpoint, extra, args.grid, extra_columns)]
        ledger = open_ledger(args.ledger, args.merge, FIELDS, ABOUT, args.report_only)
        if args.code and args.code not in {r.get("code") for r in ledger.runs.values()}:
            known = sorted({r["code"] for r in ledger.runs.values() if r.get("code")})
            sys.exit(f"error: --code {args.code}: no run of {ledger.path} has it; its runs have "
                     f"{', '.join(known) or 'no code digest'}")
        if args.processes > 1 and not args.report_only:
            run_processes(Path(__file__), sys.argv[1:] if argv is None else argv, args.processes, ledger)
        elif not args.report_only:
            run_all(plan, range(args.seeds), ledger, args.out, args.threads, worker=worker, tune_seeds=tune_seeds)
    except GPSEError as exc:
        sys.exit(f"error: {exc}")
    if args.skip_report:
        return
    report = []
    for table in tables:
        budgets = {(c, s): budget_key(r) for t, c, s, r in plan if t == table}
        collected = collect(ledger, table, budgets)
        cells, chosen = select_settings(collected, tune_seeds)
        everything = [r for by_label in collected.values() for runs in by_label.values() for r in runs]
        notes = empty_rows(plan, table, ledger, budgets)
        if not cells:
            why = f"{len(everything)} tuning run(s), no reported seed yet" if everything else "no run at this budget"
            report += [f"{table}: {why} in {ledger.path}", *notes, ""]
            continue
        report += [f"## {table}", "", markdown(table, cells), "", budget_line(plan, table, everything), "",
                   early_best_line(everything, lambda run: run_curve(args.out, run)), "",
                   *chosen_lines(chosen, tune_seeds), *([""] if chosen else []),
                   *notes, *([""] if notes else [])]
        plot(table, cells, args.figures / f"paper_{table}.png")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "paper_tables.md").write_text("\n".join(report), encoding="utf-8")
    print("\n".join(report))


if __name__ == "__main__":
    main()
