#!/usr/bin/env python
"""MoleculeACE's 30 ChEMBL targets: GNN arms with each PE, ECFP + SVR, and GPSE as an SVR descriptor.

Methods (``--methods``, comma-separated; ``svm`` = the three SVR arms, ``gnn`` = the eight GNN arms):

* ``ecfp-svm``: ECFP (Morgan radius 2, 1,024 bits) into an RBF ``SVR`` whose ``C`` and ``gamma`` are chosen
  by MoleculeACE's 5-fold cross-validation on the published training split (``_svr.py``), the paper's best
  method; deterministic (one run, "seed 0").
* ``gpse-svm``: pooled GPSE encodings (the shipped default encoder, or ``--checkpoint``; ``--pooling``),
  standardised on train, into the same SVR and search.
* ``ecfp+gpse-svm``: ECFP and the pooled GPSE together (``--gpse-weight``: GPSE's share of the squared
  distances, ``_svr.combined_distances``).
* ``<gine|gps>-<none|RWSE|AllPSE|GPSE>``: ``recipes/downstream/moleculeace.yaml`` with ``model.name`` and
  ``model.pe.source`` set (validation: a seeded tenth of train; the test RMSE at the best validation epoch),
  ``--seeds`` seeds each. With ``--grid`` every arm is tuned as ``paper_tables.py --grid`` tunes the paper
  tables' arms (input dropout 0 / 0.5 x the source's own PE encoder / the alternative): each setting runs
  on the ten design targets with seed 0, and the one with the lowest mean validation RMSE there runs every
  target and seed; the choice and the scores behind it head the report.

Targets (``--targets``): ``design`` (the ten every setting is chosen on), ``report`` (the other twenty,
run once with the chosen settings), ``moleculeace`` (all 30) or target names. Every result carries the RMSE
over the test set and over its activity-cliff compounds (``cliff_mol == 1``).

Every finished run goes at once into the ledger (``--ledger``, default ``benchmarks/moleculeace.json``)
with its budget fingerprint: the settings and the content of the code that computes the arm (for the GPSE
descriptor: the checkpoint's content and its encodings of a few fixed molecules, :func:`encoder_fingerprint`;
for the GNN arms: the recipe and the package's source). A later call skips what the ledger holds for the same fingerprint, and an interrupted GNN
run continues from its ``last.pt`` under ``--out``.

Examples::

    python benchmarks/moleculeace.py --methods svm --targets design --pooling mean
    python benchmarks/moleculeace.py --methods svm --targets report          # the chosen settings
    python benchmarks/moleculeace.py --methods gnn --targets report --seeds 3 --worker 0/2 --ledger /tmp/a.json
    python benchmarks/moleculeace.py --methods gnn --targets report,design --grid --seeds 3   # tuned arms
    python benchmarks/moleculeace.py --methods gnn --grid --processes 2 --threads 1   # two local workers
    python benchmarks/moleculeace.py --merge /tmp/a.json --merge /tmp/b.json --report-only
    python benchmarks/moleculeace.py --quick                                 # a smoke test, minutes

Outputs: the ledger; ``<out>/moleculeace.md`` and ``<out>/moleculeace_summary.json`` (per set: mean RMSE and
cliff RMSE per arm, per-target paired differences with a sign test); the figure
``benchmarks/figures/moleculeace_<set>.png`` (per-target RMSE of each arm against ECFP + SVR, cliff RMSE
beside it).
"""
from __future__ import annotations

import argparse
import copy
import functools
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

from _ledger import Ledger, add_sweep_options, open_ledger, run_processes  # noqa: E402
from _stats import sign_test  # noqa: E402
from paper_tables import budget_key, host, mean_score, parse_worker, stats  # noqa: E402

SVM_METHODS = ("ecfp-svm", "gpse-svm", "ecfp+gpse-svm")
MODELS = ("gine", "gps")
PE_SOURCES = ("none", "RWSE", "AllPSE", "GPSE")
EXPLICIT = ("RWSE", "AllPSE")
GNN_METHODS = tuple(f"{m}-{s}" for m in MODELS for s in PE_SOURCES)
RECIPE = ROOT / "recipes" / "downstream" / "moleculeace.yaml"
#: Molecules whose GPSE encodings fingerprint the encoder as it runs (:func:`encoder_fingerprint`).
PROBE = ("CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "C1CCC2(CC1)OCCO2", "O=C(O)c1ccncc1", "CN1CCN(CC1)c1ccc(F)cc1",
         "c1ccc2c(c1)[nH]c1ccccc12", "CC(C)(C)OC(=O)N1CCC(CC1)C#N")
FIELDS = ("target", "method", "arm", "seed", "rmse", "cliff_rmse", "seconds", "host")
ABOUT = "benchmarks/moleculeace.py: one record per finished run"
#: Settings of the GPSE descriptor, chosen on the design targets (benchmarks/RESULTS.md, MoleculeACE).
DEFAULT_POOLING, DEFAULT_WEIGHT = "mean", 1.0
QUICK_TARGETS = ("CHEMBL2835_Ki", "CHEMBL2047_EC50")


# ----------------------------------------------------------------------------------------------
# plan


def expand_methods(text: str) -> list[str]:
    methods = []
    for item in text.split(","):
        group = {"svm": SVM_METHODS, "gnn": GNN_METHODS}.get(item, (item,))
        unknown = [m for m in group if m not in SVM_METHODS + GNN_METHODS]
        if unknown:
            sys.exit(f"error: unknown method {unknown[0]!r}; methods: svm, gnn, {', '.join(SVM_METHODS + GNN_METHODS)}")
        methods += [m for m in group if m not in methods]
    return methods


def expand_targets(text: str) -> list[str]:
    from gpse_dgl.data.moleculeace import DESIGN_TARGETS, REPORT_TARGETS, TARGETS

    sets = {"design": DESIGN_TARGETS, "report": REPORT_TARGETS, "moleculeace": TARGETS}
    targets = []
    for item in text.split(","):
        group = sets.get(item, (item,))
        unknown = [t for t in group if t not in TARGETS]
        if unknown:
            sys.exit(f"error: unknown target {unknown[0]!r}; targets: design, report, moleculeace, "
                     f"{', '.join(TARGETS)}")
        targets += [t for t in group if t not in targets]
    return targets


@functools.lru_cache(maxsize=None)
def code_version(*parts: str) -> str:
    """sha256 (16 hex) of the content of the source files under ``parts`` (files or folders, from the repo
    root): a change to the code that computes an arm makes its runs stale. Read once per process: the code
    that runs is the code imported at the start."""
    digest = hashlib.sha256()
    for part in parts:
        path = ROOT / part
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def encoder_fingerprint(checkpoint) -> str:
    """The GPSE encoder as it computes: sha256 (16 hex) of its file and of its encodings of :data:`PROBE`
    rounded to 4 decimals. A change to the encoder's code that changes its output changes this; a change
    that does not (a faster kernel) leaves the GPSE descriptor's runs valid."""
    import numpy as np

    from gpse_dgl.data._io import ogb_smiles_graph
    from gpse_dgl.encode import encode_dataset, load_gpse
    from gpse_dgl.train.downstream.features import checkpoint_identity

    key = str(checkpoint)
    if key not in _FINGERPRINTS:
        encodings = encode_dataset(load_gpse(checkpoint), [ogb_smiles_graph(s) for s in PROBE], progress=False)
        values = np.round(np.concatenate([e.numpy() for e in encodings]).astype(np.float64), 4) + 0.0
        digest = hashlib.sha256(checkpoint_identity(checkpoint)["sha256"].encode() + values.tobytes())
        _FINGERPRINTS[key] = digest.hexdigest()[:16]
    return _FINGERPRINTS[key]


_FINGERPRINTS: dict = {}


def svm_budget(method: str, settings: dict) -> str:
    import _svr

    key = {"method": method, "grid": _svr.GRID, "epsilon": _svr.EPSILON, "folds": [_svr.FOLDS, _svr.CV_SEED],
           "code": code_version("benchmarks/_svr.py", "gpse_dgl/data/moleculeace.py")}
    if method != "ecfp-svm":
        key.update(pooling=settings["pooling"], encoder=encoder_fingerprint(settings["checkpoint"]))
    if method == "ecfp+gpse-svm":
        key["weight"] = settings["weight"]
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def gnn_recipe(method: str, target: str, overrides, checkpoint):
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    model, source = method.split("-", 1)
    sets = [f"data.name=moleculeace:{target}", f"model.name={model}", f"model.pe.source={source}"]
    if source == "GPSE" and checkpoint:
        sets.append(f"model.pe.checkpoint={checkpoint}")
    return load_downstream_recipe(RECIPE, list(overrides) + sets)


def gnn_budget(recipe: dict) -> str:
    return budget_key(recipe) + code_version("gpse_dgl")[:8]


def arm_label(method: str, settings: dict) -> str:
    """The ledger's name of an arm: the GPSE descriptor's settings are part of it (the design runs keep
    every setting tried)."""
    if method == "gpse-svm":
        return f"{method}[{settings['pooling']}]"
    if method == "ecfp+gpse-svm":
        return f"{method}[{settings['pooling']},w={settings['weight']:g}]"
    return method


class Plan(list):
    """``[(key, budget, target, method, seed, recipe or None)]``, SVR runs first, then the GNN runs: tuning
    runs, then the rest seed-major. ``chosen``: each GNN arm's setting (``-`` for the recipe's own), for the
    arms whose choice is made; ``grid``: ``{arm: {setting: mean validation RMSE over the design targets}}``;
    ``waiting``: how many arms wait for tuning runs."""

    chosen: dict
    grid: dict
    waiting: int


def gnn_settings(method: str, grid: bool) -> list[tuple[str, list]]:
    """``[(setting, overrides)]`` of a GNN arm: with ``grid`` the grid every arm of ``paper_tables.py`` is tuned
    on (input dropout 0 / 0.5 x the source's own PE encoder / the alternative; one setting for ``none``),
    else the recipe's own, ``-``."""
    if not grid:
        return [("-", [])]
    from paper_tables import grid_settings

    return grid_settings(method.split("-", 1)[1])


def arm_key(method: str, setting: str) -> str:
    """A GNN arm's name in the ledger's keys: the method, with ``|setting`` where it has several."""
    return method if setting == "-" else f"{method}|{setting}"


def plan_runs(methods, targets, seeds: int, settings: dict, overrides, checkpoint, ledger: Ledger | None = None,
              grid: bool = False, design_targets=None) -> Plan:
    """The runs of ``methods`` on ``targets``. With ``grid``, a GNN arm with several settings first runs each
    of them on every design target with seed 0; once all are in ``ledger``, the setting with the lowest mean
    validation RMSE over the design targets runs every target and seed (its tuning runs count as the design
    targets' seed 0). Nothing about a report target takes part in the choice."""
    from gpse_dgl.data.moleculeace import DESIGN_TARGETS

    design = list(design_targets or DESIGN_TARGETS)
    plan = Plan((f"{t}/{arm_label(m, settings)}/seed0", svm_budget(m, settings), t, m, 0, None)
                for t in targets for m in methods if m in SVM_METHODS)
    plan.chosen, plan.grid, plan.waiting = {}, {}, 0
    tuning, final = [], []
    for method in (m for m in methods if m in GNN_METHODS):
        options = dict(gnn_settings(method, grid))
        overrides_of = {setting: list(overrides) + extra for setting, extra in options.items()}
        if len(options) > 1:
            tried = {setting: arm_runs(method, setting, overrides_of[setting], design, [0], checkpoint)
                     for setting in options}
            tuning += [item for items in tried.values() for item in items]
            scores = tuning_scores(tried, ledger)
            if scores is None:
                plan.waiting += 1
                continue
            plan.grid[method] = scores
            best = min(scores, key=scores.get)
        else:
            best = next(iter(options))
        plan.chosen[method] = best
        final += arm_runs(method, best, overrides_of[best], targets, range(seeds), checkpoint)
    seen = {item[0] for item in tuning}
    plan += tuning + sorted((item for item in final if item[0] not in seen), key=lambda item: item[4])
    return plan


def arm_runs(method: str, setting: str, overrides, targets, seeds, checkpoint) -> list:
    """Plan items of one GNN arm and setting on ``targets`` x ``seeds``, seed-major."""
    recipes = {t: gnn_recipe(method, t, overrides, checkpoint) for t in targets}
    return [(f"{t}/{arm_key(method, setting)}/seed{s}", gnn_budget(recipes[t]), t, method, s, recipes[t])
            for s in seeds for t in targets]


def tuning_scores(tried: dict, ledger: Ledger | None) -> dict | None:
    """``{setting: mean validation RMSE of its tuning runs}`` (a run without a finite score counts as the
    worst), or None while any tuning run is missing from ``ledger``."""
    if ledger is None or not all(ledger.has(item[0], item[1]) for items in tried.values() for item in items):
        return None
    return {setting: mean_score([ledger.get(item[0], item[1]).get("val") for item in items])
            for setting, items in tried.items()}


def pending(plan, ledger: Ledger, worker=(0, 1)):
    todo = [item for item in plan if not ledger.has(item[0], item[1])]
    return todo[worker[0]::worker[1]]


# ----------------------------------------------------------------------------------------------
# runs


class Descriptors:
    """Per target: the table, ECFP's squared distances and the pooled GPSE encodings (cached under ``out``)."""

    def __init__(self, out: Path, checkpoint):
        self.out, self.checkpoint, self.model = out, checkpoint, None
        self.target, self.cache = None, {}

    def of(self, target: str) -> dict:
        import numpy as np

        import _svr
        from gpse_dgl.data.moleculeace import moleculeace_file, read_moleculeace_csv

        if target != self.target:
            table = read_moleculeace_csv(moleculeace_file(target))
            table["train"], table["test_idx"] = np.flatnonzero(~table["test"]), np.flatnonzero(table["test"])
            distances = _svr.squared_distances(_svr.ecfp(table["smiles"]))
            self.target, self.cache = target, {"table": table, "ecfp": distances}
        return self.cache

    def gpse(self, target: str, pooling: str):
        """Squared distances of the standardised pooled GPSE encodings."""
        import _svr

        key = f"gpse:{pooling}"
        cache = self.of(target)
        if key not in cache:
            encodings = self._encodings(target)
            x = _svr.standardise(_svr.pool(encodings, pooling), cache["table"]["train"])
            cache[key] = _svr.squared_distances(x)
        return cache[key]

    def _encodings(self, target: str) -> list:
        import numpy as np

        from gpse_dgl.data.registry import load_dataset
        from gpse_dgl.encode import encode_dataset, load_gpse
        tag = encoder_fingerprint(self.checkpoint)
        path = self.out / "gpse-encodings" / tag / f"{target}.npz"
        if path.is_file():
            with np.load(path) as stored:
                return np.split(stored["nodes"], stored["offsets"][1:-1])
        if self.model is None:
            self.model = load_gpse(self.checkpoint)
        graphs = load_dataset(f"moleculeace:{target}").graphs
        encodings = [e.numpy() for e in encode_dataset(self.model, graphs, progress=False, seed=0)]
        offsets = np.cumsum([0] + [len(e) for e in encodings])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, nodes=np.concatenate(encodings), offsets=offsets)
        tmp.replace(path)
        return encodings


def run_svm(target: str, method: str, settings: dict, descriptors: Descriptors) -> dict:
    import numpy as np

    import _svr
    from gpse_dgl.data.moleculeace import cliff_rmse

    cache = descriptors.of(target)
    table = cache["table"]
    if method == "ecfp-svm":
        distances = cache["ecfp"]
    elif method == "gpse-svm":
        distances = descriptors.gpse(target, settings["pooling"])
    else:
        distances = _svr.combined_distances(cache["ecfp"], descriptors.gpse(target, settings["pooling"]),
                                            table["train"], settings["weight"])
    fit = _svr.tuned_svr(distances, table["y"], table["train"], table["test_idx"])
    y_test = table["y"][table["test_idx"]]
    return {"rmse": float(np.sqrt(np.mean((fit["pred"] - y_test) ** 2))),
            "cliff_rmse": cliff_rmse(y_test, fit["pred"], table["cliff"][table["test_idx"]]),
            "C": fit["C"], "gamma": fit["gamma"], "cv_rmse": fit["cv_rmse"]}


def run_gnn(recipe: dict, seed: int, folder: Path, threads) -> dict:
    from gpse_dgl.train.downstream import train_downstream

    job = copy.deepcopy(recipe)
    job["general_pipeline"]["save_path"] = str(folder)
    if threads:
        job["general_pipeline"]["num_threads"] = threads
    resume = (folder / "recipe.yaml").is_file()
    summary = train_downstream(job, resume=resume, overwrite=not resume, seeds=[recipe["seed"] + seed],
                               progress=False, log=lambda m: None)
    run = summary["runs"][0]
    return {"rmse": run["test"], "cliff_rmse": run.get("test_cliff"), "val": run["val"],
            "best_epoch": run["best_epoch"], "epochs": job["general_pipeline"]["num_epochs"],
            "parameters": summary["model"]["num_parameters"],
            "host": host(summary.get("environment", {}).get("device_name"))}


def run_all(make_plan, ledger: Ledger, out: Path, settings: dict, threads, worker=(0, 1), log=print) -> None:
    """Run what ``make_plan()`` names and the ledger lacks. One process goes on until nothing is left (a grid
    arm's choice is made once its tuning runs are in); a worker of several runs its share of what can be named
    at the start (two workers' shares agree only on the same ledger) and says what waits for the others."""
    descriptors = Descriptors(out, settings["checkpoint"])
    while todo := pending(make_plan(), ledger, worker):
        for item in todo:
            run_one(item, ledger, out, settings, descriptors, threads, log)
        if worker[1] > 1:
            break
    waiting = make_plan().waiting
    if waiting:
        log(f"{waiting} arm(s) wait for tuning runs not in {ledger.path}: join the workers' ledgers (--merge) and "
            f"run again")


def run_one(item, ledger: Ledger, out: Path, settings: dict, descriptors: Descriptors, threads, log=print) -> None:
    key, budget, target, method, seed, recipe = item
    started = time.perf_counter()
    if recipe is None:
        record = {**run_svm(target, method, settings, descriptors), "host": host()}
    else:
        record = run_gnn(recipe, seed, out / budget / key.replace("+", "_").replace("|", "_").replace(" ", "_"),
                         threads)
    record = {"budget": budget, "target": target, "method": method, "arm": key.split("/")[1], "seed": seed,
              **{k: _finite(v) if isinstance(v, float) else v for k, v in record.items()},
              "seconds": round(time.perf_counter() - started, 1), "date": time.strftime("%Y-%m-%d")}
    ledger.add(key, record)
    cliff = math.nan if record["cliff_rmse"] is None else record["cliff_rmse"]
    rmse = math.nan if record["rmse"] is None else record["rmse"]
    log(f"{key}: rmse {rmse:.4f} cliff {cliff:.4f} ({record['seconds']:.0f} s)")


def _finite(value):
    return None if value is None or not math.isfinite(value) else float(value)


def _json_safe(value):
    """NaN -> None and tuples -> lists, recursively (strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return _finite(value)
    return value


# ----------------------------------------------------------------------------------------------
# report


def collect(ledger: Ledger, plan) -> dict:
    """``{arm: {target: (mean rmse, mean cliff rmse, runs)}}`` of the plan's arms at their current budgets."""
    wanted = {(item[2], item[0].split("/")[1]): item[1] for item in plan}
    runs: dict = {}
    for key, record in ledger.runs.items():
        arm = key.split("/")[1]
        if wanted.get((record["target"], arm)) == record["budget"]:
            runs.setdefault(arm, {}).setdefault(record["target"], []).append(record)
    return {arm: {t: (stats([r["rmse"] for r in rs])[0], stats([r["cliff_rmse"] for r in rs])[0], len(rs))
                  for t, rs in by_target.items()} for arm, by_target in runs.items()}


def arm_cells(cells: dict, plan: Plan) -> dict:
    """``cells`` with each GNN arm's chosen setting under the arm's own name and the other settings left out."""
    named = {arm: by_target for arm, by_target in cells.items() if "|" not in arm}
    for method, setting in plan.chosen.items():
        if arm_key(method, setting) in cells:
            named[method] = cells[arm_key(method, setting)]
    return named


def grid_markdown(plan: Plan) -> str:
    """The tuned arms' settings with their mean validation RMSE over the design targets (seed 0)."""
    lines = ["## settings chosen on the design targets", "",
             "| arm | setting (PE encoder, input dropout) | mean validation RMSE, design targets, seed 0 | |",
             "|---|---|---:|---|"]
    for method, scores in plan.grid.items():
        for setting, score in sorted(scores.items(), key=lambda item: item[1]):
            lines.append(f"| {method} | {setting} | {score:.4f} | {'chosen' if setting == plan.chosen[method] else ''} |")
    return "\n".join(lines)


def paired(cells: dict, arm: str, other: str, targets, column: int = 0) -> dict | None:
    """Per-target ``arm - other`` (RMSE, or cliff RMSE with ``column=1``) on the targets both have."""
    common = [t for t in targets if t in cells.get(arm, {}) and t in cells.get(other, {})]
    diffs = [cells[arm][t][column] - cells[other][t][column] for t in common]
    diffs = [d for d in diffs if d is not None and math.isfinite(d)]
    if not diffs:
        return None
    lower, upper, p = sign_test(diffs)
    return {"arm": arm, "other": other, "targets": len(diffs), "mean": sum(diffs) / len(diffs),
            "arm_better": lower, "other_better": upper, "sign_test_p": p}


def best_arm(cells: dict, arms, targets) -> str | None:
    """The arm of ``arms`` with the lowest mean RMSE over ``targets`` (only arms that have them all)."""
    full = [a for a in arms if a in cells and all(t in cells[a] for t in targets)]
    return min(full, key=lambda a: sum(cells[a][t][0] for t in targets)) if full else None


def comparisons(cells: dict, targets, settings: dict) -> list[dict]:
    svm = {m: arm_label(m, settings) for m in SVM_METHODS}
    out = [paired(cells, svm["ecfp+gpse-svm"], svm["ecfp-svm"], targets),
           paired(cells, svm["gpse-svm"], svm["ecfp-svm"], targets)]
    for model in MODELS:
        explicit = best_arm(cells, [f"{model}-{s}" for s in EXPLICIT], targets)
        if explicit:
            out.append(paired(cells, f"{model}-GPSE", explicit, targets))
        out.append(paired(cells, f"{model}-GPSE", f"{model}-none", targets))
    gnn = best_arm(cells, GNN_METHODS, targets)
    if gnn:
        out.append(paired(cells, gnn, svm["ecfp-svm"], targets))
    out = [c for c in out if c]
    for c in out:  # the same pair on the cliff compounds
        c["cliff"] = paired(cells, c["arm"], c["other"], targets, column=1)
    return out


def summarise(cells: dict, targets, settings: dict) -> dict:
    arms = {}
    for arm, by_target in cells.items():
        have = [t for t in targets if t in by_target]
        if have:
            arms[arm] = {"targets": len(have), "runs_per_target": min(by_target[t][2] for t in have),
                         "rmse": sum(by_target[t][0] for t in have) / len(have),
                         "cliff_rmse": stats([by_target[t][1] for t in have])[0]}
    return {"arms": arms, "comparisons": comparisons(cells, targets, settings)}


def wheel_hyperparameters(target: str) -> dict | None:
    """``{"C", "gamma"}`` MoleculeACE chose for its ECFP SVM on ``target`` (the wheel's
    ``Data/configures/benchmark/<target>/SVM_ECFP.yml``), or None without the wheel."""
    import importlib.util

    import yaml

    spec = importlib.util.find_spec("MoleculeACE")  # located, not imported
    path = (Path(spec.origin).parent / "Data" / "configures" / "benchmark" / target / "SVM_ECFP.yml"
            if spec and spec.origin else None)
    if path is None or not path.is_file():
        return None
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {"C": config["C"], "gamma": config["gamma"]}


def hyperparameter_check(ledger: Ledger, plan, targets) -> dict:
    """Our cross-validated (C, gamma) of ``ecfp-svm`` against MoleculeACE's, per target."""
    budgets = {item[2]: item[1] for item in plan if item[3] == "ecfp-svm"}
    rows = {}
    for target in targets:
        record = ledger.get(f"{target}/ecfp-svm/seed0", budgets.get(target))
        theirs = wheel_hyperparameters(target)
        if record and theirs:
            rows[target] = {"ours": {"C": record["C"], "gamma": record["gamma"]}, "moleculeace": theirs}
    same = sum(row["ours"] == {k: float(v) for k, v in row["moleculeace"].items()} for row in rows.values())
    return {"targets": len(rows), "same": same, "per_target": rows}


def markdown(name: str, summary: dict, count: int) -> str:
    lines = [f"## {name} targets ({count})", "", "| arm | targets | runs each | mean RMSE | mean cliff RMSE |",
             "|---|---:|---:|---:|---:|"]
    for arm, s in sorted(summary["arms"].items(), key=lambda item: item[1]["rmse"]):
        lines.append(f"| {arm} | {s['targets']} | {s['runs_per_target']} | {s['rmse']:.4f} | {s['cliff_rmse']:.4f} |")
    lines += ["", "| paired, per target | targets | mean diff. RMSE | better / worse | sign test p | "
              "mean diff. cliff RMSE | better / worse | p |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in summary["comparisons"]:
        cl = c["cliff"] or {"mean": math.nan, "arm_better": 0, "other_better": 0, "sign_test_p": math.nan}
        lines.append(f"| {c['arm']} − {c['other']} | {c['targets']} | {c['mean']:+.4f} | {c['arm_better']} / "
                     f"{c['other_better']} | {c['sign_test_p']:.3g} | {cl['mean']:+.4f} | {cl['arm_better']} / "
                     f"{cl['other_better']} | {cl['sign_test_p']:.3g} |")
    check = summary.get("hyperparameters") or {}
    if check.get("targets"):
        lines += ["", f"ecfp-svm's cross-validated (C, gamma) equals MoleculeACE's own choice (the wheel's "
                      f"SVM_ECFP.yml) on {check['same']} of {check['targets']} targets."]
    return "\n".join(lines)


def plot(cells: dict, targets, settings: dict, path: Path, title: str) -> Path | None:
    """Two panels: per-target test RMSE (left) and cliff RMSE (right) of each arm against ECFP + SVR's."""
    from _figures import WIDTH, _pyplot, save

    anchor = cells.get("ecfp-svm", {})
    arms = [a for a in cells if a != "ecfp-svm" and any(t in anchor for t in cells[a])]
    if not arms:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 4.0))
    for column, (ax, label) in enumerate(zip(axes, ("test RMSE", "cliff-compound RMSE"))):
        values = []
        for i, arm in enumerate(sorted(arms)):
            pairs = [(anchor[t][column], cells[arm][t][column]) for t in targets if t in anchor and t in cells[arm]]
            pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
            if pairs:
                x, y = zip(*pairs)
                ax.scatter(x, y, s=14, label=arm, color=f"C{i}", marker="os^vD<>ph*"[i % 10])
                values += list(x) + list(y)
        low, high = min(values), max(values)
        ax.plot([low, high], [low, high], color="black", linewidth=0.8, linestyle="--")
        ax.set_xlabel(f"ECFP + SVR, {label}")
        ax.set_ylabel(f"arm, {label}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, frameon=False)
    fig.suptitle(f"{title}: per target, below the diagonal = better than ECFP + SVR", fontsize=10)
    return save(fig, path)


# ----------------------------------------------------------------------------------------------


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="svm",
                        help="comma-separated: svm, gnn or single arms (default: %(default)s)")
    parser.add_argument("--targets", default="design,report", help="design, report, moleculeace or target names")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per GNN arm and target (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs (GNN arms)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="recipe override for every GNN run (repeatable; changes the budget fingerprint)")
    parser.add_argument("--checkpoint", default=None, help="GPSE encoder (default: the shipped one)")
    parser.add_argument("--pooling", default=DEFAULT_POOLING, choices=("mean", "sum", "mean+max"),
                        help="GPSE per molecule for the SVR (default: %(default)s, chosen on the design targets)")
    parser.add_argument("--gpse-weight", type=float, default=DEFAULT_WEIGHT,
                        help="ecfp+gpse-svm: GPSE's mean squared distance over ECFP's (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per GNN run (default: torch's)")
    add_sweep_options(parser, HERE / "moleculeace.json", ROOT / "runs" / "moleculeace", HERE / "figures",
                      "GNN run folders, GPSE encodings, the report", "only write the report from the ledger")
    parser.add_argument("--grid", action="store_true",
                        help="GNN arms: try every setting of paper_tables.py's grid on the design targets (seed 0), "
                             "run the one with the best mean validation RMSE everywhere")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: two small design targets, every method, one seed, one epoch")
    args = parser.parse_args(argv)

    from gpse_dgl.data.moleculeace import DESIGN_TARGETS, REPORT_TARGETS
    from gpse_dgl.utils.errors import GPSEError

    if args.quick:
        args.methods, args.targets, args.seeds, args.epochs = "svm,gine-none,gine-GPSE", ",".join(QUICK_TARGETS), 1, 1
    methods, targets = expand_methods(args.methods), expand_targets(args.targets)
    overrides = list(args.overrides) + ([f"general_pipeline.num_epochs={args.epochs}"] if args.epochs else [])
    settings = {"pooling": args.pooling, "weight": args.gpse_weight, "checkpoint": args.checkpoint}
    worker = parse_worker(args.worker)
    try:
        ledger = open_ledger(args.ledger, args.merge, FIELDS, ABOUT, args.report_only)

        def make_plan():
            return plan_runs(methods, targets, args.seeds, settings, overrides, args.checkpoint, ledger, args.grid)

        if args.processes > 1 and not args.report_only:
            run_processes(Path(__file__), sys.argv[1:] if argv is None else argv, args.processes, ledger)
        elif not args.report_only:
            run_all(make_plan, ledger, args.out, settings, args.threads, worker)
        if args.skip_report:
            return
        plan = make_plan()
    except GPSEError as exc:
        sys.exit(f"error: {exc}")
    cells = arm_cells(collect(ledger, plan), plan)
    report = [grid_markdown(plan), ""] if plan.grid else []
    summary = {"settings": {k: v for k, v in settings.items()}, "chosen": plan.chosen, "grid": plan.grid,
               "sets": {}}
    for name, members in (("design", DESIGN_TARGETS), ("report", REPORT_TARGETS)):
        chosen = [t for t in members if t in targets]
        if not chosen or not any(t in by for by in cells.values() for t in chosen):
            continue
        summary["sets"][name] = {"targets": chosen, **summarise(cells, chosen, settings)}
        summary["sets"][name]["per_target"] = {arm: {t: cells[arm][t][:2] for t in chosen if t in cells[arm]}
                                               for arm in cells}
        summary["sets"][name]["hyperparameters"] = hyperparameter_check(ledger, plan, chosen)
        report += [markdown(name, summary["sets"][name], len(chosen)), ""]
        plot(cells, chosen, settings, args.figures / f"moleculeace_{name}.png",
             f"MoleculeACE, {name} targets")
    from gpse_dgl.utils.io import atomic_write_text

    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "moleculeace.md", "\n".join(report))
    atomic_write_text(args.out / "moleculeace_summary.json", json.dumps(_json_safe(summary), indent=1) + "\n")
    print("\n".join(report))


if __name__ == "__main__":
    main()
