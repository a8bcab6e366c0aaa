"""Downstream training from a validated recipe (:mod:`gpse_dgl.train.downstream_schema`): ``gpse-dgl train``.

``train_downstream(recipe)`` loads the dataset by name, precomputes (or reads from the cache) the
encoding ``model.pe.source`` asks for (:mod:`gpse_dgl.train.features`), builds the model, and trains it
once per run:

* **Runs.** ``general_pipeline.num_seeds`` seeds ``seed, seed + 1, ...``. With cross-validation
  (``data.evaluation: cv``, the default for CSL and EXP) run ``r`` draws its own stratified
  ``cv_folds``-fold split (seed ``data.split_seed + r``) and trains one model per fold: fold ``i`` is
  the test set and fold ``i + 1`` the validation set (the benchmarking-gnns protocol).
* **Selection.** After every evaluation the model is scored on the validation and test sets with the
  dataset's metric (OGB's ``Evaluator`` for ``ogbg-*`` / ``ogbn-*``, else :mod:`gpse_dgl.train.metrics`);
  a run reports the train / validation / test scores of its best validation epoch (GraphGPS's
  protocol; a tie on the metric goes to the lower validation loss), the train score being that of
  the epoch's training pass. Runs are summarised as mean +- std (population std, as GraphGPS's
  aggregation) in ``results.json``.
* **Tasks.** Graph-level tasks train on mini-batches of graphs; node-level tasks (one graph) train and
  evaluate on the full graph, or with DGL neighbour sampling (``general_pipeline.sampling: neighbor``,
  for models without edge features; evaluation then uses one fixed sampled draw per split).
  Regression targets can be standardised for training (``general_pipeline.standardize_targets``);
  scores and validation / test losses are always in the targets' units (the logged training loss is
  the standardised one that is optimised).
* **Optimisation.** Adam / AdamW; cosine schedule with linear warm-up stepped per epoch (GraphGPS),
  reduce-on-plateau on the validation metric, or a constant rate.

Outputs under ``general_pipeline.save_path``::

    results.json          per-run scores, mean +- std, feature and model summaries, the recipe
    recipe.yaml           the validated recipe
    <run>/last.pt         checkpoint after the latest epoch (what --resume continues from)
    <run>/best.pt         checkpoint of the best validation epoch
    <run>/result.json     the run's scores once it has finished (a resumed job skips finished runs)
    <run>/tensorboard/    losses, scores and learning rate per epoch

``<run>`` is ``seed<S>`` or ``seed<S>-fold<F>``. Every random draw of a run (initial weights, batch
order, dropout, neighbour sampling) is seeded from ``(seed, epoch)``, so an interrupted run resumed
from ``last.pt`` ends bit-identical to an uninterrupted one (same device and thread count).

Example
-------
>>> from gpse_dgl.train.downstream_schema import load_downstream_recipe
>>> from gpse_dgl.train.downstream import train_downstream
>>> recipe = load_downstream_recipe("recipes/downstream/csl.yaml", ["model.pe.source=RWSE"])
>>> results = train_downstream(recipe)          # doctest: +SKIP
>>> results["summary"]["test"]["mean"]          # doctest: +SKIP
1.0
"""
from __future__ import annotations

import contextlib

import copy
import inspect
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .. import _env  # noqa: F401
from ..recipes import dump_recipe
from ..utils import distributed as dist_utils
from ..utils.errors import CheckpointError, RecipeError
from ..utils.io import atomic_write_text
from ..utils import checkpoint as ckpt
from ..utils.precision import to_accumulation
from . import distributed as data_parallel
from .features import default_cache_dir
from .metrics import HIGHER_IS_BETTER, score
from .mixed_precision import MixedPrecision
from .rundir import RunDirectory, check_resumed_recipe
from .runtime import (derive_seed, first_line, json_safe, progress_bar, resolve_device, torch_threads,
                      tqdm_write, write_json)

__all__ = ["train_downstream", "TaskSpec", "task_spec", "build_downstream_model", "model_from_config",
           "compute_loss", "RunPlan", "plan_runs", "summarize", "format_summary", "FORMAT"]

FORMAT = "gpse-dgl-downstream"
FORMAT_VERSION = 1
_SPLITS = ("train", "val", "test")


# ----------------------------------------------------------------------------------------------
# task description


@dataclass
class TaskSpec:
    """What a dataset asks the model to predict and how it is scored.

    Attributes
    ----------
    level : {"graph", "node"}
    task_type : {"binary", "multiclass", "regression"}
    metric : str
        ``"rocauc"``, ``"ap"``, ``"accuracy"``, ``"mae"`` or ``"rmse"``.
    dim_out : int
        Model outputs per graph / node.
    loss : str
        ``"bce"``, ``"cross_entropy"``, ``"l1"`` or ``"mse"``.
    ogb_name : str or None
        Dataset name for OGB's evaluator, when OGB defines one.
    """

    level: str
    task_type: str
    metric: str
    dim_out: int
    loss: str
    ogb_name: str | None = None
    _evaluator: object = field(default=None, repr=False, compare=False)

    @property
    def higher_is_better(self) -> bool:
        return HIGHER_IS_BETTER[self.metric]

    def score(self, y_true: torch.Tensor, y_pred: torch.Tensor) -> float:
        """The dataset's metric of raw model outputs (logits / values); NaN when it is undefined."""
        if len(y_true) == 0:
            return math.nan
        if self.ogb_name is not None:
            return self._ogb_score(y_true, y_pred)
        return score(self.metric, y_true, y_pred)

    def _ogb_score(self, y_true, y_pred) -> float:
        if self._evaluator is None:
            if self.level == "graph":
                from ogb.graphproppred import Evaluator
            else:
                from ogb.nodeproppred import Evaluator
            self._evaluator = Evaluator(self.ogb_name)
        if self.task_type == "multiclass":
            y_true, y_pred = y_true.reshape(-1, 1), y_pred.argmax(dim=-1, keepdim=True)
        try:
            result = self._evaluator.eval({"y_true": y_true.numpy(), "y_pred": y_pred.numpy()})
        except RuntimeError:  # OGB raises when no task has both classes (tiny evaluation sets)
            return math.nan
        return float(result[self._evaluator.eval_metric])


def task_spec(dataset, loss: str = "auto", metric: str | None = None) -> TaskSpec:
    """The :class:`TaskSpec` of a :class:`~gpse_dgl.data.dataset.GraphDataset`.

    ``metric`` replaces the dataset's own metric (then OGB's evaluator is not used).
    """
    if dataset.task_type not in ("binary", "multiclass", "regression") or dataset.labels is None:
        raise RecipeError(f"data.name: {dataset.name} has no labels to train on (task type "
                          f"{dataset.task_type!r})")
    dim_out = dataset.num_classes if dataset.task_type == "multiclass" else dataset.num_tasks
    if loss == "auto":
        loss = {"binary": "bce", "multiclass": "cross_entropy"}.get(
            dataset.task_type, "mse" if dataset.metric == "rmse" else "l1")
    own = dataset.metric or {"binary": "rocauc", "multiclass": "accuracy"}.get(dataset.task_type, "mae")
    ogb_name = _ogb_name(dataset.name) if metric in (None, own) else None
    return TaskSpec(dataset.task, dataset.task_type, metric or own, int(dim_out), loss, ogb_name)


def _ogb_name(name: str) -> str | None:
    if not name.startswith(("ogbg-", "ogbn-")):
        return None
    import pandas as pd
    from ogb import graphproppred

    kind = "graphproppred" if name.startswith("ogbg-") else "nodeproppred"
    master = Path(graphproppred.__file__).parent.parent / kind / "master.csv"
    return name if name in pd.read_csv(master, index_col=0).columns else None


def compute_loss(kind: str, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Training loss of raw outputs; NaN targets (missing labels) are left out."""
    if kind == "cross_entropy":
        return F.cross_entropy(pred, target.reshape(-1).long())
    target = target.reshape(pred.shape).to(pred.dtype)
    labelled = ~torch.isnan(target)
    if not labelled.any():
        return pred.sum() * 0.0  # keeps the graph connected so backward() works
    pred, target = pred[labelled], target[labelled]
    if kind == "bce":
        return F.binary_cross_entropy_with_logits(pred, target)
    if kind == "l1":
        return F.l1_loss(pred, target)
    if kind == "mse":
        return F.mse_loss(pred, target)
    raise ValueError(f"unknown loss {kind!r}")


# ----------------------------------------------------------------------------------------------
# data preparation


@dataclass
class Prepared:
    """A dataset ready for training: graphs as the model sees them, labels, encodings, task."""

    dataset: object
    graphs: list
    labels: torch.Tensor
    spec: TaskSpec
    table: object                 # features.NodeTable or None
    node_feat: str | None         # ndata key of the node input, or None
    edge_feat: str | None         # edata key of the edge input, or None
    node_kind: str | None         # "ogb-atom", "categorical", "float" or None
    edge_kind: str | None
    feature_info: dict


def prepare_data(recipe: dict, dataset=None, device=None, progress: bool = False, log=None) -> Prepared:
    """Load the dataset, apply the recipe's graph preprocessing and attach the encoding."""
    from ..data.registry import load_dataset
    from ..data.user_data import recipe_data_options
    from .features import load_features

    data = recipe["data"]
    if dataset is None:
        dataset = load_dataset(data["name"], root=data["root"], **recipe_data_options(data))
    spec = task_spec(dataset, recipe["general_pipeline"]["loss"], data["metric"])
    graphs = list(dataset.graphs)
    node_feat, node_kind = dataset.node_feat_key, dataset.info.get("node_feat_kind")
    edge_feat, edge_kind = dataset.edge_feat_key, dataset.info.get("edge_feat_kind")
    if data["to_undirected"]:
        graphs = [_undirected(g) for g in graphs]
        edge_feat = edge_kind = None  # merged edges have no single feature value
    if data["node_feat_from_edges"]:
        graphs = [_edge_mean_features(g, dataset.edge_feat_key or "feat") for g in graphs]
        node_feat, node_kind = "feat_from_edges", "float"
    pe_recipe = dict(recipe["model"]["pe"], precision=recipe["general_pipeline"]["precision"])
    table, info = load_features(graphs, dataset.name, pe_recipe, cache_dir=data["cache_dir"],
                                device=device, progress=progress, log_fn=log)
    return Prepared(dataset, graphs, dataset.labels, spec, table, node_feat, edge_feat, node_kind, edge_kind,
                    info)


def _undirected(g):
    """Simple symmetric version of ``g`` with its node data (edge data dropped: merged edges have no
    single value)."""
    import dgl

    src, dst = g.edges()
    plain = dgl.to_bidirected(dgl.remove_self_loop(dgl.graph((src, dst), num_nodes=g.num_nodes())))
    for key, value in g.ndata.items():
        plain.ndata[key] = value
    return plain


def _edge_mean_features(g, key: str):
    """``ndata["feat_from_edges"]``: mean of each node's incoming edge features (zeros if none)."""
    import dgl.function as fn

    if key not in g.edata:
        raise RecipeError(f"data.node_feat_from_edges: the graphs have no edge features edata[{key!r}]")
    g = g.clone()
    with g.local_scope():
        g.edata["_e"] = g.edata[key].float()
        g.update_all(fn.copy_e("_e", "_m"), fn.mean("_m", "_h"))
        mean = g.ndata["_h"]
    g.ndata["feat_from_edges"] = mean
    return g


# ----------------------------------------------------------------------------------------------
# model


def build_downstream_model(recipe: dict, prepared: Prepared) -> tuple[torch.nn.Module, dict]:
    """Build the model a recipe describes for ``prepared`` data; return it and its plain config."""
    config = model_config(recipe["model"], prepared)
    return model_from_config(config), config


def model_config(model_recipe: dict, prepared: Prepared) -> dict:
    """Plain-dict description of the model (stored in checkpoints; :func:`model_from_config` builds it)."""
    from ..nn.models import MODEL_REGISTRY

    name = model_recipe["name"].lower()
    cls = MODEL_REGISTRY[name]
    pe = model_recipe["pe"]
    pe_dim = prepared.table.dim if prepared.table is not None else 0
    pe_only = pe_dim > 0 and pe["dim_pe"] == model_recipe["dim_hidden"]
    if pe_only and prepared.node_feat is not None:
        raise RecipeError(f"model.pe.dim_pe: equal to model.dim_hidden ({pe['dim_pe']}) leaves no room for "
                          f"{prepared.dataset.name}'s node features; make it smaller")
    node_encoder, dim_in = _node_encoder(model_recipe["node_encoder"], prepared)
    edge_encoder, dim_edge = _edge_encoder(model_recipe["edge_encoder"], prepared)
    kwargs = {
        "dim_in": dim_in, "dim_out": prepared.spec.dim_out, "dim_hidden": model_recipe["dim_hidden"],
        "num_layers": model_recipe["num_layers"], "dim_edge": dim_edge, "dropout": model_recipe["dropout"],
        "pooling": model_recipe["pooling"], "task_level": prepared.spec.level, "node_encoder": node_encoder,
        "edge_encoder": edge_encoder, "layers_pre_mp": model_recipe["layers_pre_mp"],
        "backend": None if model_recipe["backend"] == "auto" else model_recipe["backend"],
    }
    for key in ("layers_post_mp", "head_halving"):
        if model_recipe[key] is not None:
            kwargs[key] = model_recipe[key]
    options = {"local_mpnn": model_recipe["local_mpnn"], "global_attention": model_recipe["global_attention"],
               "num_heads": model_recipe["num_heads"], "attn_dropout": model_recipe["attn_dropout"],
               "batchnorm": model_recipe["batchnorm"], "residual": model_recipe["residual"]}
    accepted = _constructor_options(cls)
    kwargs.update({k: (None if v == "none" else v) for k, v in options.items() if k in accepted})
    pe_encoder = None
    if pe_dim:
        pe_encoder = {"dim_in": pe_dim, "dim_pe": pe["dim_pe"], "model": pe["model"], "batchnorm": pe["batchnorm"],
                      "dropout_in": pe["dropout_in"], "dropout_out": pe["dropout_out"], "n_layers": pe["layers"]}
    return {"name": name, "kwargs": kwargs, "pe_encoder": pe_encoder, "pe_only": pe_only}


def model_from_config(config: dict) -> torch.nn.Module:
    """Instantiate :func:`model_config` output.

    ``pe_only`` (``dim_pe == dim_hidden`` on a dataset without node features) makes the PE encoder the
    node encoder, as GraphGPS does with ``expand_x=False``; the model then takes the PE as ``node_feat``.
    """
    from ..nn.models import build_model
    from ..nn.pe_encoder import PEEncoder

    kwargs = dict(config["kwargs"])
    if config["pe_encoder"] is not None:
        encoder = PEEncoder(**config["pe_encoder"])
        if config["pe_only"]:
            kwargs["node_encoder"] = encoder
        else:
            kwargs["pe_encoder"] = encoder
    try:
        return build_model(config["name"], **kwargs)
    except ValueError as exc:  # e.g. dim_pe >= dim_hidden, heads not dividing the width
        raise RecipeError(f"model: {first_line(exc)}") from None


def _constructor_options(cls) -> set:
    """Keyword arguments a model class (or the model classes it passes **kwargs on to) accepts."""
    names: set = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        names |= {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
    if getattr(cls, "__name__", "") == "Transformer":  # it fixes these two and refuses them
        names -= {"local_mpnn", "global_attention"}
    return names


def _node_encoder(choice: str, prepared: Prepared) -> tuple[str, int | None]:
    kind, key = prepared.node_kind, prepared.node_feat
    if choice == "auto":
        choice = {"ogb-atom": "atom", "categorical": "type", "float": "linear"}.get(kind, "constant")
        if key is None:
            choice = "constant"
    if choice in ("atom", "constant"):
        return choice, None
    if key is None:
        raise RecipeError(f"model.node_encoder: {choice!r} needs node features, {prepared.dataset.name} has none")
    if choice == "type":
        return choice, _num_types(prepared, "num_node_types", [g.ndata[key] for g in prepared.graphs])
    return choice, int(prepared.graphs[0].ndata[key].reshape(prepared.graphs[0].num_nodes(), -1).shape[1])


def _edge_encoder(choice: str, prepared: Prepared) -> tuple[str | None, int | None]:
    kind, key = prepared.edge_kind, prepared.edge_feat
    if choice == "auto":
        if key is None:
            return None, None
        choice = {"ogb-bond": "bond", "categorical": "type", "float": "linear"}.get(kind, "linear")
    if choice in ("bond", "constant"):
        return choice, None
    if key is None:
        raise RecipeError(f"model.edge_encoder: {choice!r} needs edge features, {prepared.dataset.name} has none")
    if choice == "type":
        return choice, _num_types(prepared, "num_edge_types", [g.edata[key] for g in prepared.graphs])
    first = next((g for g in prepared.graphs if g.num_edges()), prepared.graphs[0])
    return choice, int(first.edata[key].reshape(first.num_edges(), -1).shape[1])


def _num_types(prepared: Prepared, info_key: str, values: list) -> int:
    known = prepared.dataset.info.get(info_key)
    if known:
        return int(known)
    return int(max(int(v.max()) for v in values if v.numel()) + 1)  # types seen in the data


def _uses_edge_features(model) -> bool:
    from ..nn.feature_encoders import ConstantEncoder

    return model.edge_encoder is not None and not isinstance(model.edge_encoder, ConstantEncoder)


# ----------------------------------------------------------------------------------------------
# runs


@dataclass(frozen=True)
class RunPlan:
    """One training run: its seed, CV repeat/fold (None without CV) and index splits."""

    seed: int
    repeat: int
    fold: int | None
    splits: dict

    @property
    def name(self) -> str:
        return f"seed{self.seed}" if self.fold is None else f"seed{self.seed}-fold{self.fold}"


def plan_runs(dataset, recipe: dict, seeds: Sequence[int]) -> list[RunPlan]:
    """The runs of a job: one per seed, times the folds with cross-validation."""
    data = recipe["data"]
    use_cv = data["evaluation"] == "cv" or (data["evaluation"] == "auto" and bool(dataset.folds))
    if not use_cv:
        missing = [s for s in _SPLITS if s not in dataset.splits]
        if missing:
            raise RecipeError(f"data.evaluation: {dataset.name} has no {missing[0]!r} split; use "
                              f"data.evaluation: cv")
        splits = {s: dataset.splits[s] for s in _SPLITS}
        return [RunPlan(seed, repeat, None, splits) for repeat, seed in enumerate(seeds)]
    if dataset.task != "graph" or dataset.task_type != "multiclass":
        raise RecipeError("data.evaluation: stratified cross-validation needs a graph classification dataset")
    from ..data.synthetic import stratified_kfold

    plans = []
    folds_per_repeat = min(data["cv_folds"], data["max_folds"] or data["cv_folds"])
    for repeat, seed in enumerate(seeds):
        folds = stratified_kfold(dataset.labels, k=data["cv_folds"], seed=data["split_seed"] + repeat)
        plans += [RunPlan(seed, repeat, f, folds[f]) for f in range(folds_per_repeat)]
    return plans


@dataclass
class RunState:
    """Progress of one run (what its checkpoint carries besides tensors)."""

    epoch: int = 0
    best_epoch: int = -1
    best: dict = field(default_factory=dict)   # {"train": .., "val": .., "test": .., "val_loss": ..}
    history: list = field(default_factory=list)


def train_downstream(recipe: dict, resume: bool = False, seeds: int | Sequence[int] | None = None,
                     progress: bool = True, overwrite: bool = False, dataset=None,
                     log: Callable[[str], None] | None = None,
                     on_epoch_end: Callable[[dict], None] | None = None, allow_recipe_change: bool = False) -> dict:
    """Train and evaluate a downstream model as ``recipe`` says; return the summary in ``results.json``.

    Parameters
    ----------
    recipe : dict
        A validated downstream recipe (:func:`~gpse_dgl.train.downstream_schema.load_downstream_recipe`).
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
    seed_list = _seed_list(recipe["seed"], general["num_seeds"] if seeds is None else seeds)
    rundir = RunDirectory(root, JOB_OUTPUTS, overwrite and not resume,
                          recipe["data"]["cache_dir"] or default_cache_dir(), allow_recipe_change)
    with torch_threads(general["num_threads"]), \
            dist_utils.process_group(general["distributed"], resolve_device(recipe["device"])) as ctx:
        if not ctx.is_main:
            progress, say = False, (lambda message: None)
        # rank 0 alone owns (locks, checks, replaces) the job directory; the others start once it has
        with rundir if ctx.is_main else contextlib.nullcontext():
            if ctx.is_main:
                _check_job_directory(root, resume, overwrite)
            dist_utils.barrier()
            device = dist_utils.local_device(resolve_device(recipe["device"]), ctx)
            prepared = prepare_data(recipe, dataset, device, progress, say)
            say(f"data: {_describe(prepared)}")
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
                result, model_info = _run(recipe, prepared, plan, root / plan.name, device, resume, progress, say,
                                          callback, title, rundir)
                results.append(result)
            summary = _job_summary(recipe, prepared, results, model_info, root, started)
            if not ctx.is_main:
                return {**summary, "rank": ctx.rank}
            rundir.commit()  # also when no epoch ran (every run finished earlier)
            summary["recipe_changes"] = rundir.recipe_changes
    write_json(root / "results.json", summary)
    return summary


# what a job writes into its directory (what --overwrite replaces): seed<S>[-fold<F>]/ per run
JOB_OUTPUTS = ("recipe.yaml", "results.json", "seed*")


def _seed_list(first: int, seeds) -> list[int]:
    if isinstance(seeds, int):
        if seeds < 1:
            raise RecipeError(f"--seeds: expected at least 1, got {seeds}")
        return [first + r for r in range(seeds)]
    return [int(s) for s in seeds]


def _describe(prepared: Prepared) -> str:
    ds, info = prepared.dataset, prepared.feature_info
    cache = f", cache {info['cache']}" if info.get("cache") else ""
    return (f"{ds.name}: {len(prepared.graphs)} graph(s), {ds.task}-level {ds.task_type}, metric "
            f"{prepared.spec.metric}; PE {info['source']} ({info['dim']} columns{cache}, {info['seconds']:.1f} s)")


def _run(recipe, prepared: Prepared, plan: RunPlan, run_dir: Path, device, resume: bool, progress: bool, say,
         on_epoch_end, title: str, rundir: RunDirectory | None = None) -> tuple[dict, dict]:
    """Train one run (or read it back when it already finished); return its result and model info."""
    torch.manual_seed(derive_seed(plan.seed, "init"))
    model, config = build_downstream_model(recipe, prepared)
    model = model.to(device)
    info = {"name": config["name"], "num_parameters": sum(p.numel() for p in model.parameters()), "config": config}
    finished = run_dir / "result.json"
    if resume and finished.is_file():
        say(f"{title}: finished earlier, reusing {finished}")
        return json.loads(finished.read_text(encoding="utf-8")), info
    _check_sampling(recipe, prepared, model)
    general = recipe["general_pipeline"]
    optimizer = _optimizer(model, general["optimizer"])
    scheduler = _scheduler(optimizer, general, prepared.spec)
    state = RunState()
    last = run_dir / "last.pt"
    if resume and last.is_file():
        state = _restore(last, recipe, plan, config, model, optimizer, scheduler, rundir)
        say(f"{title}: resuming after epoch {state.epoch}")
    trainer = _Trainer(recipe, prepared, plan, model, config, optimizer, scheduler, device, run_dir)
    status = trainer.fit(state, progress, title, on_epoch_end)
    result = _run_result(plan, state, status)
    if trainer.dist.is_main:
        write_json(finished, result)
    say(f"{title}: {_result_line(result, prepared.spec)}")
    return result, info


def _check_sampling(recipe, prepared: Prepared, model) -> None:
    if recipe["general_pipeline"]["sampling"] != "neighbor":
        return
    if prepared.spec.level != "node":
        raise RecipeError("general_pipeline.sampling: neighbour sampling is for node-level datasets")
    if not getattr(model, "supports_blocks", False) or _uses_edge_features(model):
        raise RecipeError(f"general_pipeline.sampling: {recipe['model']['name']} cannot train on sampled "
                          f"blocks (it needs whole graphs or edge features); use sampling: full")


def _run_result(plan: RunPlan, state: RunState, status: str) -> dict:
    best = state.best or {}
    return {"run": plan.name, "seed": plan.seed, "repeat": plan.repeat, "fold": plan.fold, "status": status,
            "epochs": state.epoch, "best_epoch": state.best_epoch,
            **{split: best.get(split) for split in _SPLITS}}


# ----------------------------------------------------------------------------------------------
# the training loop of one run


class _Trainer:
    """Epoch loop, evaluation, checkpoints and logs of one run."""

    def __init__(self, recipe, prepared: Prepared, plan: RunPlan, model, config, optimizer, scheduler,
                 device, run_dir: Path):
        self.recipe, self.prepared, self.plan, self.model = recipe, prepared, plan, model
        self.config, self.optimizer, self.scheduler = config, optimizer, scheduler
        self.device, self.run_dir = device, run_dir
        self.general = recipe["general_pipeline"]
        self.spec = prepared.spec
        self.edges = _uses_edge_features(model)
        self.pe_only = config["pe_only"]
        self.eval_batches = None
        self.pending_best = None  # payload of a best epoch not written yet (see _save)
        self.shift, self.scale = self._target_scaling()
        self.dist = dist_utils.current()
        # what training steps call: the DDP wrapper under torchrun (train/distributed.py), else model
        self.trained = data_parallel.data_parallel(model, self.dist, device, self.general["sync_batchnorm"])
        self.mixed = MixedPrecision(self.general["precision"], device)

    def _target_scaling(self) -> tuple[torch.Tensor | float, torch.Tensor | float]:
        """Mean and std of the training targets (per column) when standardising, else ``(0, 1)``."""
        if not (self.general["standardize_targets"] and self.spec.task_type == "regression"):
            return 0.0, 1.0
        y = self.prepared.labels[self.plan.splits["train"]].double()
        y = y.reshape(len(y), -1)
        labelled = ~torch.isnan(y)
        count = labelled.sum(0).clamp(min=1)
        mean = torch.where(labelled, y, 0.0).sum(0) / count
        var = torch.where(labelled, (y - mean) ** 2, 0.0).sum(0) / count
        return mean.float(), var.sqrt().clamp(min=1e-6).float()

    # -- the loop ------------------------------------------------------------------------------

    def fit(self, state: RunState, progress: bool, title: str, on_epoch_end) -> str:
        from torch.utils.tensorboard import SummaryWriter

        num_epochs, started = self.general["num_epochs"], time.perf_counter()
        limit = self.general["time_limit_minutes"]
        status = "complete"
        writer = (SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=state.epoch + 1)
                  if self.dist.is_main else data_parallel.NoWriter())
        bar = progress_bar(range(state.epoch, num_epochs), progress, desc=title, unit="epoch", leave=False,
                        total=num_epochs, initial=state.epoch)
        try:
            for epoch in bar:
                record = self._epoch(epoch, state)
                self._log(writer, record)
                out_of_time = limit is not None and time.perf_counter() - started > limit * 60
                out_of_time = dist_utils.broadcast_object(out_of_time)  # rank 0's clock decides for all
                self._save(state, record, final=epoch + 1 == num_epochs or out_of_time)
                if hasattr(bar, "set_postfix"):
                    bar.set_postfix_str(_postfix(record, self.spec), refresh=False)
                if out_of_time and epoch + 1 < num_epochs:
                    status = f"time limit of {limit:g} min reached after epoch {epoch + 1}"
                    break
                if on_epoch_end is not None:
                    try:
                        on_epoch_end(record)
                    except StopIteration:
                        self._save(state, record, final=True)
                        status = f"stopped by on_epoch_end after epoch {epoch + 1}"
                        break
        finally:
            writer.close()
            if hasattr(bar, "close"):
                bar.close()
        return status

    def _epoch(self, epoch: int, state: RunState) -> dict:
        started = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]
        train = self._train_epoch(epoch)
        record = {"epoch": epoch + 1, "lr": lr, "train": train}
        final = epoch + 1 == self.general["num_epochs"]
        if (epoch + 1) % self.general["eval_every"] == 0 or final:
            record.update(self._evaluate())
            record["is_best"] = self._note_best(state, record)
        self._step_scheduler(record)
        record["seconds"] = round(time.perf_counter() - started, 3)
        state.epoch = epoch + 1
        state.history.append(record)
        return record

    def _step_scheduler(self, record: dict) -> None:
        name = self.general["lr_scheduler"]["name"]
        if name == "cosine_with_warmup":
            self.scheduler.step()
        elif name == "reduce_on_plateau" and "val" in record and math.isfinite(record["val"]["metric"]):
            self.scheduler.step(record["val"]["metric"])

    def _note_best(self, state: RunState, record: dict) -> bool:
        value, loss = record["val"]["metric"], record["val"]["loss"]
        best = state.best.get("val")
        # A tie on the metric (common with accuracy on small sets) goes to the lower validation loss, so
        # the selected epoch is the most confident of the equally accurate ones, not merely the first.
        tie = value == best and math.isfinite(loss) and loss < state.best.get("val_loss", math.inf)
        if _better(value, best, self.spec.higher_is_better) or tie or (
                state.best_epoch < 0 and not math.isfinite(value)):
            # NaN validation scores (tiny sets) never beat a real one; the first epoch is kept as a
            # fallback so every run reports something.
            state.best_epoch = record["epoch"]
            state.best = {"train": record["train"]["metric"], "val": value, "test": record["test"]["metric"],
                          "val_loss": record["val"]["loss"]}
            return True
        return False

    # -- training ------------------------------------------------------------------------------

    def _train_epoch(self, epoch: int) -> dict:
        seed = self.plan.seed
        # dropout draws from the global generator; under torchrun each rank draws its own masks
        rank_key = (self.dist.rank,) if self.dist.is_distributed else ()
        torch.manual_seed(derive_seed(seed, "dropout", epoch, *rank_key))
        self.model.train()
        if self.spec.level == "graph":
            outputs = self._train_graph_batches(torch.Generator().manual_seed(derive_seed(seed, "order", epoch)))
        elif self.general["sampling"] == "neighbor":
            outputs = self._train_sampled(epoch)
        else:
            outputs = self._train_full_graph()
        return self._scores(*outputs)

    def _step(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = compute_loss(self.spec.loss, pred, self._standardize(target).to(pred.device))
        self.optimizer.zero_grad(set_to_none=True)
        self.mixed.backward_and_step(data_parallel.ddp_loss(loss, self.dist), self.optimizer,
                                     self.model.parameters(), self.general["clip_grad_norm"])
        return loss.detach()

    def _train_graph_batches(self, generator: torch.Generator):
        train = self.plan.splits["train"]
        order = train[torch.randperm(len(train), generator=generator)]
        preds, targets, losses = [], [], []
        for members in data_parallel.global_batches(order, self.general["batch_size"], self.dist):
            # this rank's share of the global batch; loss and scores over all shares (train/distributed.py)
            start, stop = dist_utils.shard_range(len(members), self.dist.rank, self.dist.world_size)
            batch = next(_graph_batches(self.prepared, members[start:stop], len(members)))
            pred = self._forward(*batch[:-1])
            pred, target = data_parallel.gather_batch(pred, batch[-1].to(pred.device))
            target = target.cpu()
            losses.append((self._step(pred, target), len(target)))
            preds.append(self._unscale(pred.detach().cpu()))
            targets.append(target)
        return preds, targets, losses

    def _train_full_graph(self):
        g, target = self.prepared.graphs[0], self.prepared.labels
        idx = self.plan.splits["train"]
        pred = self._forward(g, self._pe_rows(None))[idx.to(self.device)]
        loss = self._step(pred, target[idx])
        return [self._unscale(pred.detach().cpu())], [target[idx]], [(loss, len(idx))]

    def _train_sampled(self, epoch: int):
        dropout_seed = derive_seed(self.plan.seed, "dropout", epoch)
        preds, targets, losses = [], [], []
        for pred, target in self._sampled_outputs(self.plan.splits["train"], self.general["batch_size"],
                                                  ("sampling", epoch), shuffle=True, dropout_seed=dropout_seed):
            losses.append((self._step(pred, target), len(target)))
            preds.append(self._unscale(pred.detach().cpu()))
            targets.append(target)
        return preds, targets, losses

    def _sampled_outputs(self, nodes: torch.Tensor, batch_size: int, key: tuple, shuffle: bool,
                         dropout_seed: int | None = None):
        """``(raw outputs, targets)`` per mini-batch of ``nodes`` on DGL neighbour-sampled blocks."""
        import dgl

        g = self.prepared.graphs[0]
        dgl.seed(derive_seed(self.plan.seed, *key) % (2**31 - 1))  # DGL takes a 32-bit seed
        torch.manual_seed(derive_seed(self.plan.seed, *key, "order"))
        sampler = dgl.dataloading.NeighborSampler([int(f) for f in self.general["fanouts"]])
        loader = dgl.dataloading.DataLoader(g, nodes, sampler, shuffle=shuffle, batch_size=batch_size,
                                            drop_last=False)
        table = self._pe_rows(None)
        with warnings.catch_warnings():  # DGL advises CPU affinity every epoch; irrelevant in process
            warnings.filterwarnings("ignore", message="Dataloader CPU affinity")
            batches = iter(loader)  # draws the node order from the generator seeded above
            if dropout_seed is not None:
                torch.manual_seed(dropout_seed)  # dropout draws from the global generator
            for input_nodes, output_nodes, blocks in batches:
                nf = None if self.prepared.node_feat is None else g.ndata[self.prepared.node_feat][input_nodes]
                pe = None if table is None else table[input_nodes]
                yield (self._call(blocks, _to(nf, self.device), None, _to(pe, self.device)),
                       self.prepared.labels[output_nodes])

    def _predict_sampled(self, split: str):
        """Evaluation on sampled neighbourhoods (fixed draw per split): a full-graph pass over a graph such
        as ogbn-proteins (39.6M edges) does not fit in memory."""
        size = self.general["eval_batch_size"] or 4 * self.general["batch_size"]
        preds, targets, losses = [], [], []
        for pred, target in self._sampled_outputs(self.plan.splits[split], size, ("evaluation", split), shuffle=False):
            pred = self._unscale(pred.cpu())
            preds.append(pred)
            targets.append(target)
            losses.append((compute_loss(self.spec.loss, pred, target), len(target)))
        return preds, targets, losses

    # -- evaluation ----------------------------------------------------------------------------

    @torch.no_grad()
    def _evaluate(self) -> dict:
        self.model.eval()
        try:
            if self.spec.level == "node" and self.general["sampling"] == "neighbor":
                return {split: self._scores(*self._predict_sampled(split)) for split in ("val", "test")}
            if self.spec.level == "node":
                pred = self._unscale(self._forward(self.prepared.graphs[0], self._pe_rows(None)).cpu())
                return {split: self._split_scores(pred[self.plan.splits[split]],
                                                  self.prepared.labels[self.plan.splits[split]])
                        for split in ("val", "test")}
            return {split: self._scores(*self._predict(split)) for split in ("val", "test")}
        finally:
            self.model.train()

    def _predict(self, split: str):
        if self.eval_batches is None:
            size = self.general["eval_batch_size"] or 4 * self.general["batch_size"]
            self.eval_batches = {s: list(_graph_batches(self.prepared, self.plan.splits[s], size))
                                 for s in ("val", "test")}
        preds, targets, losses = [], [], []
        for batch in self.eval_batches[split]:
            pred = self._unscale(self._forward(*batch[:-1]).cpu())
            preds.append(pred)
            targets.append(batch[-1])
            losses.append((compute_loss(self.spec.loss, pred, batch[-1]), len(batch[-1])))
        return preds, targets, losses

    def _split_scores(self, pred, target) -> dict:
        return self._scores([pred], [target], [(compute_loss(self.spec.loss, pred, target), len(target))])

    def _scores(self, preds, targets, losses) -> dict:
        count = sum(n for _, n in losses)
        loss = sum(float(value) * n for value, n in losses) / max(count, 1)
        if not preds:
            return {"loss": math.nan, "metric": math.nan}
        return {"loss": loss, "metric": self.spec.score(torch.cat(targets), torch.cat(preds).float())}

    # -- forward helpers -----------------------------------------------------------------------

    def _standardize(self, target: torch.Tensor) -> torch.Tensor:
        if isinstance(self.scale, float):
            return target
        return (target.reshape(len(target), -1) - self.shift) / self.scale

    def _unscale(self, pred: torch.Tensor) -> torch.Tensor:
        """Model outputs in the targets' units (losses and scores are reported in those units)."""
        return pred if isinstance(self.scale, float) else pred * self.scale + self.shift

    def _forward(self, graph, pe):
        """Model outputs for a (batched) graph whose node inputs are in its ndata."""
        nf = None if self.prepared.node_feat is None else graph.ndata[self.prepared.node_feat]
        ef = graph.edata[self.prepared.edge_feat] if self.edges else None
        # graphs stay on the CPU (DGL wheels are CPU-only); nn.ops runs message passing where the
        # tensors are
        return self._call(graph, _to(nf, self.device), _to(ef, self.device), _to(pe, self.device))

    def _call(self, graph, nf, ef, pe):
        if pe is not None:
            pe = pe.float()
        model = self.trained if self.model.training else self.model
        with self.mixed.autocast():
            out = model(graph, pe, ef) if self.pe_only else model(graph, nf, ef, pe)
        return to_accumulation(out)  # losses and scores in float32

    def _pe_rows(self, indices):
        table = self.prepared.table
        if table is None:
            return None
        return table.graph(0) if indices is None else table.gather(indices)

    # -- checkpoints and logs ------------------------------------------------------------------

    def _save(self, state: RunState, record: dict, final: bool = False) -> None:
        """Checkpoints every ``checkpoint_every`` epochs; the best epoch's is kept in memory until then
        (writing two files per epoch costs more than training a small model for one)."""
        if not self.general["save_checkpoints"] or not self.dist.is_main:
            return
        if record.get("is_best"):
            self.pending_best = copy.deepcopy(
                _payload(self.model, self.optimizer, self.scheduler, self.recipe, self.plan, self.config, state))
        if not (final or state.epoch % self.general["checkpoint_every"] == 0):
            return
        if self.pending_best is not None:
            ckpt.save_checkpoint(self.run_dir / "best.pt", self.pending_best)
            self.pending_best = None
        ckpt.save_checkpoint(self.run_dir / "last.pt",
                             _payload(self.model, self.optimizer, self.scheduler, self.recipe, self.plan,
                                      self.config, state))

    def _log(self, writer, record: dict) -> None:
        step = record["epoch"]
        writer.add_scalar("lr", record["lr"], step)
        for split in _SPLITS:
            if split in record:
                for name in ("loss", "metric"):
                    value = record[split][name]
                    if value is not None and math.isfinite(value):
                        writer.add_scalar(f"{split}/{name if name == 'loss' else self.spec.metric}", value, step)


def _graph_batches(prepared: Prepared, indices: torch.Tensor, batch_size: int):
    """``(batched graph, PE rows or None, targets)`` for consecutive groups of ``indices``."""
    import dgl

    indices = indices.tolist()
    for start in range(0, len(indices), batch_size):
        idx = indices[start:start + batch_size]
        graph = dgl.batch([prepared.graphs[i] for i in idx])
        pe = prepared.table.gather(idx) if prepared.table is not None else None
        yield graph, pe, prepared.labels[idx]


def _to(tensor, device):
    return None if tensor is None else tensor.to(device)


def _better(value, best, higher: bool) -> bool:
    if value is None or not math.isfinite(value):
        return False
    if best is None or not math.isfinite(best):
        return True
    return value > best if higher else value < best


# ----------------------------------------------------------------------------------------------
# optimiser, scheduler


def _optimizer(model, recipe: dict) -> torch.optim.Optimizer:
    cls = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[recipe["name"]]
    return cls(model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"])


def _scheduler(optimizer, general: dict, spec: TaskSpec):
    schedule = general["lr_scheduler"]
    if schedule["name"] == "reduce_on_plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="max" if spec.higher_is_better else "min", factor=schedule["factor"],
            patience=schedule["patience"], min_lr=schedule["min_lr"])
    if schedule["name"] == "none":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0)
    from .pretrain import build_scheduler

    # the pretraining schedule is the authors' (GraphGPS') cosine with linear warm-up, per epoch
    shaped = {"num_epochs": general["num_epochs"],
              "lr_scheduler": {"name": "cosine_with_warmup", "warmup_epochs": schedule["warmup_epochs"],
                               "interval": "epoch"}}
    return build_scheduler(optimizer, shaped, steps_per_epoch=1)


# ----------------------------------------------------------------------------------------------
# checkpoints


def _payload(model, optimizer, scheduler, recipe, plan: RunPlan, config, state: RunState) -> dict:
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "model_state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "model_config": json_safe(config),
        "optimizer_state": optimizer.state_dict(),
        "scheduler_state": json_safe(scheduler.state_dict()),
        "rng_state": ckpt.capture_rng_state(),
        "recipe": recipe,
        "run": {"seed": plan.seed, "repeat": plan.repeat, "fold": plan.fold},
        "epoch": state.epoch, "best_epoch": state.best_epoch,
        "best": json_safe(state.best), "history": json_safe(state.history),
    }


def _restore(path: Path, recipe, plan: RunPlan, config, model, optimizer, scheduler,
             rundir: RunDirectory | None = None) -> RunState:
    payload = ckpt.load_checkpoint(path, required=("format", "model_state", "model_config", "epoch"))
    if payload["format"] != FORMAT:
        raise CheckpointError(f"{path}: not a gpse-dgl downstream checkpoint (format {payload['format']!r})")
    allowed = rundir is not None and rundir.allow_recipe_change
    changes = check_resumed_recipe(path, payload.get("recipe", {}), recipe, allowed)
    if rundir is not None:
        rundir.recipe_changes += [f"{plan.name}: {change}" for change in changes]
    if payload.get("run") != {"seed": plan.seed, "repeat": plan.repeat, "fold": plan.fold}:
        raise CheckpointError(f"{path}: belongs to run {payload.get('run')}, not {plan.name}")
    try:
        model.load_state_dict(payload["model_state"])
        optimizer.load_state_dict(payload["optimizer_state"])
        scheduler.load_state_dict(payload["scheduler_state"])
        ckpt.restore_rng_state(payload["rng_state"])
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot resume from it ({first_line(exc)})") from None
    best = {k: (math.nan if v is None else v) for k, v in dict(payload["best"]).items()}
    history = [_restore_nan(r) for r in payload["history"]]
    return RunState(int(payload["epoch"]), int(payload["best_epoch"]), best, history)


def _check_job_directory(root: Path, resume: bool, overwrite: bool) -> None:
    existing = root.is_dir() and (any(root.glob("*/last.pt")) or any(root.glob("*/result.json"))
                                  or (root / "results.json").is_file())
    if resume and not existing:
        raise CheckpointError(f"{root}: nothing to resume (no run found); run without --resume to start")
    if existing and not resume and not overwrite:
        raise CheckpointError(f"{root} already holds a run; pass --resume to continue it, --overwrite to "
                              f"replace it, or choose another --out")


# ----------------------------------------------------------------------------------------------
# summaries


def summarize(values: Sequence[float | None]) -> dict:
    """``{"mean", "std", "values"}`` of the finite values (population std; None when there are none)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not finite:
        return {"mean": None, "std": None, "values": list(values)}
    return {"mean": float(np.mean(finite)), "std": float(np.std(finite)), "values": list(values)}


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
        "summary": {split: summarize([r[split] for r in results]) for split in _SPLITS},
        "paths": {"job": str(root), "results": str(root / "results.json"), "recipe": str(root / "recipe.yaml")},
        "wall_time_seconds": round(time.perf_counter() - started, 2),
        "recipe": recipe,
    }


def format_summary(summary: dict, percent: bool | None = None) -> str:
    """Markdown table: one row per split, ``mean ± std`` of the metric over the runs."""
    metric = summary["metric"]
    percent = metric in ("accuracy", "rocauc", "ap") if percent is None else percent
    lines = [f"| split | {metric}{' (%)' if percent else ''} |", "|---|---|"]
    for split in _SPLITS:
        lines.append(f"| {split} | {format_mean_std(summary['summary'][split], percent)} |")
    return "\n".join(lines)


def format_mean_std(stats: dict, percent: bool = False, digits: int | None = None) -> str:
    """``mean ± std`` text of a :func:`summarize` dict (``n/a`` without values)."""
    if stats["mean"] is None:
        return "n/a"
    scale = 100.0 if percent else 1.0
    digits = (1 if percent else 4) if digits is None else digits
    return f"{stats['mean'] * scale:.{digits}f} ± {stats['std'] * scale:.{digits}f}"


def _result_line(result: dict, spec: TaskSpec) -> str:
    def show(value):
        return "n/a" if value is None or not math.isfinite(value) else f"{value:.4f}"

    return (f"best epoch {result['best_epoch']}/{result['epochs']}: {spec.metric} train {show(result['train'])}, "
            f"val {show(result['val'])}, test {show(result['test'])}"
            + ("" if result["status"] == "complete" else f" ({result['status']})"))


def _postfix(record: dict, spec: TaskSpec) -> str:
    text = f"loss {record['train']['loss']:.4f}"
    if "val" in record:
        text += f" val {record['val']['metric']:.4f} test {record['test']['metric']:.4f}"
    return text


# ----------------------------------------------------------------------------------------------
# small utilities


def _restore_nan(record):
    if isinstance(record, dict):
        return {k: (math.nan if v is None and k in ("loss", "metric") else _restore_nan(v)) for k, v in record.items()}
    return record


