"""A downstream job (``gpse-dgl train``): its runs trained one after the other, and its summary.

``train_downstream(recipe)`` owns the job directory (lock, ``--overwrite``, ``--resume``), prepares
the data once, plans the runs (:mod:`.runs`), trains each (:mod:`.loop`) or reads it back when it
finished earlier, and writes ``results.json``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from ...data.cache import default_cache_dir
from ...recipes import dump_recipe
from ...utils import distributed as dist_utils
from ...utils.io import atomic_write_text
from ...utils.precision import Precision, decide_precision
from ..mixed_precision import MixedPrecision
from ..optimizer import build_optimizer
from ..rundir import RunDirectory
from ..runtime import derive_seed, run_environment, tqdm_write, write_json
from ..schedule import LRSchedule
from ..run_frame import open_run
from .checkpoints import check_job_directory, restore_run
from .data import Prepared, describe, prepare_data
from .evaluation import SPLITS, group_keys, result_line, summarize
from .loop import Trainer
from .models import build_downstream_model, check_sampling
from .runs import RunPlan, RunState, plan_runs, run_result, run_seeds


def train_downstream(recipe: dict, resume: bool = False, seeds: int | Sequence[int] | None = None,
                     progress: bool = True, overwrite: bool = False, dataset=None,
                     log: Callable[[str], None] | None = None,
                     on_epoch_end: Callable[[dict], None] | None = None, allow_recipe_change: bool = False) -> dict:
    """Train and evaluate a downstream model as ``recipe`` says; return the summary in ``results.json``.

    Parameters
    ----------
    recipe : dict
        A validated downstream recipe (:func:`~gpse_dgl.train.downstream.schema.load_downstream_recipe`).
    resume : bool
        Continue the job in ``save_path``: finished runs are read back, an interrupted run continues from
        its ``last.pt``, the others start.
    seeds : int or sequence of int, optional
        Number of seeds (``seed .. seed + n - 1``) or the seeds themselves; default
        ``general_pipeline.num_seeds``.
    progress : bool
        tqdm progress bars.
    overwrite : bool
        Replace a job already in ``save_path`` (kept until the new job's first epoch is saved; :mod:`.rundir`).
    dataset : GraphDataset, optional
        Use this dataset instead of loading ``data.name`` (e.g. one built in a script).
    log : callable, optional
        Receives one-line status messages (default: ``tqdm.write`` with progress, else nothing).
    on_epoch_end : callable, optional
        Called with each epoch's record after its checkpoints (when due) are written; raising
        ``StopIteration`` ends the run early (it is then evaluated as usual), any other exception aborts
        the job.
    allow_recipe_change : bool
        With ``resume``: continue runs whose checkpoint has a recipe that differs in what changes the result
        (recorded under ``recipe_changes`` in the summary).

    Returns
    -------
    dict
        ``dataset``, ``metric``, ``higher_is_better``, ``pe_source``, ``features``, ``model``,
        ``runs`` (one dict per run: ``seed``, ``fold``, ``best_epoch``, ``train``, ``val``, ``test``),
        ``summary`` (``{split: {"mean", "std", "values"}}``), ``paths``, ``wall_time_seconds``, ``recipe``.
    """
    started = time.perf_counter()
    say = log or (tqdm_write if progress else (lambda message: None))
    general = recipe["general_pipeline"]
    root = Path(general["save_path"])
    seed_list = run_seeds(recipe["seed"], general["num_seeds"] if seeds is None else seeds)
    with open_run(general, recipe["device"], root, JOB_OUTPUTS, resume=resume, overwrite=overwrite,
                  check_directory=check_job_directory, allow_recipe_change=allow_recipe_change,
                  cache_dir=recipe["data"]["cache_dir"] or default_cache_dir(), progress=progress, log=say) as run:
        ctx, device, rundir, progress, say = run.ctx, run.device, run.rundir, run.progress, run.log
        precision, gpse_precision = decide_precisions(recipe, device)
        prepared = prepare_data(recipe, dataset, device, progress, say, gpse_precision)
        say(f"data: {describe(prepared)}")
        if ctx.is_distributed and prepared.spec.level != "graph":
            raise dist_utils.DistributedError("torchrun: node-level training (one graph) is not sharded; "
                                              "run it as one process")
        plans = plan_runs(prepared.dataset, recipe, seed_list)
        if ctx.is_main:
            rundir.replace_previous()  # recipe valid, data ready: the old job may go aside now
            atomic_write_text(root / "recipe.yaml", dump_recipe(recipe))
        results, model_info = [], {}
        for index, plan in enumerate(plans):
            title = f"run {index + 1}/{len(plans)} {plan.name}"
            callback = rundir.commit_after(on_epoch_end) if ctx.is_main else on_epoch_end
            result, model_info = _run(recipe, prepared, plan, root / plan.name, device, precision, resume,
                                      progress, say, callback, title, rundir)
            results.append(result)
        summary = _job_summary(recipe, prepared, results, model_info, root, started)
        summary["environment"] = run_environment(ctx, device, precision, general["num_threads"])
        if not ctx.is_main:
            return {**summary, "rank": ctx.rank}
        rundir.commit()  # also when no epoch ran (every run finished earlier)
        summary["recipe_changes"] = rundir.recipe_changes
    write_json(root / "results.json", summary)
    return summary


# what a job writes into its directory (what --overwrite replaces): seed<S>[-fold<F>]/ per run
JOB_OUTPUTS = ("recipe.yaml", "results.json", "seed*")


def decide_precisions(recipe: dict, device) -> tuple[Precision, Precision]:
    """The training loop's precision (``general_pipeline.precision``) and the GPSE encoder pass's
    (``model.pe.gpse_precision``; null follows the loop's), each decided once here for ``device``: everything
    below reads these, the features cache key included."""
    general = recipe["general_pipeline"]
    training = decide_precision(general["precision"], device)
    encoder = decide_precision(recipe["model"]["pe"]["gpse_precision"] or general["precision"], device, warn=False)
    return training, encoder


def _run(recipe, prepared: Prepared, plan: RunPlan, run_dir: Path, device, precision: Precision, resume: bool,
         progress: bool, say, on_epoch_end, title: str, rundir: RunDirectory | None = None) -> tuple[dict, dict]:
    """Train one run (or read it back when it already finished); return its result and model info."""
    torch.manual_seed(derive_seed(plan.seed, "init"))
    model, config = build_downstream_model(recipe, prepared, plan.splits["train"])
    model = model.to(device)
    info = {"name": config["name"], "num_parameters": sum(p.numel() for p in model.parameters()), "config": config}
    finished = run_dir / "result.json"
    if resume and finished.is_file():
        say(f"{title}: finished earlier, reusing {finished}")
        return json.loads(finished.read_text(encoding="utf-8")), info
    check_sampling(recipe, prepared, model)
    general = recipe["general_pipeline"]
    optimizer = build_optimizer(model, general["optimizer"])
    # moved once per epoch: GraphGPS' per-epoch cosine with warm-up, reduce-on-plateau or a constant rate
    scheduler = LRSchedule.from_recipe(optimizer, general, higher_is_better=prepared.spec.higher_is_better)
    mixed = MixedPrecision(precision)
    state = RunState()
    last = run_dir / "last.pt"
    if resume and last.is_file():
        state = restore_run(last, recipe, plan, config, model, optimizer, scheduler, mixed, rundir)
        say(f"{title}: resuming after epoch {state.epoch}")
    trainer = Trainer(recipe, prepared, plan, model, config, optimizer, scheduler, device, run_dir, mixed)
    status = trainer.fit(state, progress, title, on_epoch_end)
    result = run_result(plan, state, status)
    if trainer.dist.is_main:
        write_json(finished, result)
    say(f"{title}: {result_line(result, prepared.spec)}")
    return result, info


def _job_summary(recipe, prepared: Prepared, results: list, model_info: dict, root: Path, started: float) -> dict:
    dataset = prepared.dataset
    return {
        "status": "complete" if all(r["status"] == "complete" for r in results) else "partial",
        "dataset": dataset.name, "task": dataset.task, "task_type": dataset.task_type,
        "metric": prepared.spec.metric, "higher_is_better": prepared.spec.higher_is_better,
        "pe_source": recipe["model"]["pe"]["source"], "features": prepared.feature_info,
        "model": {"name": model_info.get("name"), "num_parameters": model_info.get("num_parameters"),
                  "config": model_info.get("config")},
        "num_runs": len(results), "runs": results,
        "summary": {key: summarize([r.get(key) for r in results]) for key in SPLITS + group_keys(dataset)},
        "paths": {"job": str(root), "results": str(root / "results.json"), "recipe": str(root / "recipe.yaml")},
        "wall_time_seconds": round(time.perf_counter() - started, 2),
        "recipe": recipe,
    }
