"""The recipe schema of ``gpse-dgl pretrain``: keys, defaults (the paper's setup) and their checks.

A pretraining recipe has the sections ``data`` (graph source, split, targets, added training graphs,
cache), ``model`` (the GPSE encoder and heads; ``init_from`` for a warm start) and ``general_pipeline``
(optimiser, schedule, loss, time limit, precision, outputs), plus ``seed`` and ``device``. Every key is
declared once in :data:`PRETRAIN_SCHEMA` with its type, its default (the paper's setup, ogbg-molpcba
aside, since that needs data on disk) and a one-line description (``describe_schema(PRETRAIN_SCHEMA)``
lists them); the machinery is :mod:`gpse_dgl.recipes`, reading files :mod:`gpse_dgl.recipes.files`.
A recipe may start from another one with ``base: FILE``.

Relative paths inside a recipe (``data.smiles_file``, ``data.root``, ``data.cache_dir``,
``general_pipeline.save_path``) are taken relative to the current working directory, as in dglgo.

Example
-------
>>> from gpse_dgl.train.pretraining.schema import load_pretrain_recipe
>>> recipe = load_pretrain_recipe("recipes/quickstart.yaml", overrides=["general_pipeline.num_epochs=2"])
>>> recipe["general_pipeline"]["num_epochs"]
2
"""
from __future__ import annotations

import math
import os
from typing import Any, Iterable, Mapping

from ...data.families import EVALUATION_SETS
from ...data.registry import available_datasets
from ...nn.loss import REGRESSION_TERMS
from ...pse.registry import GRAPH_TARGETS, NODE_TARGETS, PSE_REGISTRY
from ...recipes import Field, key_origin, load_recipe, validate_recipe
from ...utils.devices import check_device_name
from ...utils.errors import RecipeError
from ...utils.precision import PRECISION_CHOICES
from ...utils.text import did_you_mean
from ..mixed_precision import PRECISION_HELP

__all__ = ["PRETRAIN_SCHEMA", "BUILTIN_SOURCES", "load_pretrain_recipe", "validate_pretrain_recipe",
           "default_pretrain_recipe", "check_pretrain_recipe"]

#: ``data.source`` values that are not dataset names of the data registry.
BUILTIN_SOURCES = ("embedded-molecules", "smiles")


def _whole_range(lowest: int):
    """Check of an inclusive ``[smallest, largest]`` range of whole numbers, none below ``lowest``."""
    def check(values: list) -> str | None:
        if any(v != int(v) for v in values) or not lowest <= values[0] <= values[1]:
            return f"need two whole numbers {lowest} <= smallest <= largest, got {values}"
        return None
    return check


def _positive_split(values: list) -> str | None:
    if any(v < 0 for v in values) or values[0] <= 0 or values[1] <= 0:
        return f"train and validation fractions must be > 0 and none negative, got {values}"
    if not math.isclose(sum(values), 1.0, abs_tol=1e-6):
        return f"fractions must sum to 1, got {values} (sum {sum(values):g})"
    return None


# The schema. Nested dicts are sections; Field leaves are keys. Defaults = the paper (Table
# training_params, configs/pretrain/gpse_molpcba.yaml of the authors' code) unless noted.
PRETRAIN_SCHEMA: dict[str, Any] = {
    "seed": Field("int", 0, "seed of the run: initial weights, batch order, input features, dropout"),
    "device": Field("str", "auto", "auto (cuda when available), cpu, cuda, cuda:N or mps",
                    check=check_device_name),
    "data": {
        "source": Field("str", "embedded-molecules",
                        "embedded-molecules, smiles (needs smiles_file) or a dataset name such as "
                        "ogbg-molpcba read from disk under root"),
        "smiles_file": Field("str", None, "SMILES file (one per line, first column) when source is "
                             "smiles", nullable=True),
        "root": Field("str", None, "directory holding on-disk datasets (OGB layout); null = the "
                      "data registry's default", nullable=True),
        "max_graphs": Field("int", None, "keep at most this many unique graphs (a seeded random "
                            "subset); null = all", nullable=True, minimum=3),
        "split": Field("number_list", [0.9, 0.05, 0.05], "train / validation / test fractions",
                       length=3, check=_positive_split),
        "split_seed": Field("int", 0, "seed of the split and of the max_graphs subset (fixed "
                            "across runs, as in the paper)"),
        "node_targets": Field("str_list", list(NODE_TARGETS),
                              "node-level PSEs to predict, in this order"),
        "graph_targets": Field("str_list", list(GRAPH_TARGETS),
                               "graph-level PSEs to predict, in this order"),
        "skeleton_edits": Field("number", 0.0, "ring-edited copies of training graphs to add, per "
                                "training graph (0 = none, as in the paper); they never enter "
                                "validation or test and never repeat a source graph",
                                minimum=0.0, maximum=10.0),
        "regular_graphs": Field("number", 0.0, "random connected regular graphs (degrees from "
                                "added_graph_degrees, sizes from added_graph_nodes) to add to the training "
                                "split, per training graph (0 = none, as in the paper): graphs where only the "
                                "random input tells nodes apart",
                                minimum=0.0, maximum=10.0),
        "cayley_graphs": Field("number", 0.0, "random connected Cayley graphs of non-cyclic groups (abelian "
                               "and dihedral; degrees from added_graph_degrees) to add to the training split, "
                               "per training graph "
                               "(0 = none): vertex-transitive graphs full of short cycles, told apart only "
                               "by the random input", minimum=0.0, maximum=10.0),
        "added_graph_nodes": Field("number_list", [8, 64], "smallest and largest number of nodes of the "
                                   "added regular and Cayley graphs (inclusive)", length=2,
                                   check=_whole_range(4)),
        "added_graph_degrees": Field("number_list", [3, 5], "smallest and largest degree of the added regular "
                                     "and Cayley graphs (inclusive; each drawn uniformly)", length=2,
                                     check=_whole_range(2)),
        "exclude_graphs": Field("str_list", [], "evaluation sets whose graphs pretraining leaves out of every "
                                "split and never adds (e.g. [wl-pairs, csl]; names: "
                                "gpse_dgl.data.families.EVALUATION_SETS); [] = none, as in the paper"),
        "cache_dir": Field("str", None, "where computed targets are cached (DGL binary); null = "
                           "$GPSE_DGL_CACHE or ~/.cache/gpse-dgl", nullable=True),
        "target_device": Field("str", None, "where the targets' dense linear algebra runs (cpu, "
                               "cuda, cuda:N); null = cpu", nullable=True, check=check_device_name),
        "graph_target_scaling": Field("choice", "none", "none = raw graph-level targets (paper); "
                                      "standardize = z-scores with the training split's mean and std "
                                      "(R^2 is unchanged by it)", choices=("none", "standardize")),
    },
    "model": {
        "dim_in": Field("int", 20, "size of the random input features per node", minimum=1),
        "dim_hidden": Field("int", 512, "width of the encoder (size of the GPSE encoding)", minimum=1),
        "num_layers": Field("int", 20, "number of ResGatedGCN message-passing layers", minimum=1),
        "dropout": Field("number", 0.2, "dropout after every layer", minimum=0.0, maximum=1.0),
        "virtual_node": Field("bool", True, "add a virtual node joined to every node"),
        "learn_input_norm": Field("bool", True, "learn the scale and shift of the input BatchNorm "
                                  "(paper); false fixes them at 1 and 0 so that training cannot turn "
                                  "the random input features down"),
        "head_hidden": Field("int", 32, "hidden width of each per-column node head", minimum=1),
        "graph_head_hidden": Field("int", 512, "hidden width of the graph head", minimum=1),
        "pooling": Field("choice", "sum", "graph readout before the graph head",
                         choices=("sum", "mean", "max")),
        "backend": Field("choice", "auto", "message passing: dgl kernels, plain torch, or auto",
                         choices=("auto", "dgl", "torch")),
        "init_from": Field("str", None, "start from the weights of this gpse-dgl pretraining checkpoint "
                           "(a path, or a model name from `gpse-dgl models`) instead of a random "
                           "initialisation; the optimiser and the schedule start afresh. The model "
                           "keys above must match the checkpoint's", nullable=True),
    },
    "general_pipeline": {
        "num_epochs": Field("int", 120, "training epochs", minimum=1),
        "batch_size": Field("int", 1024, "graphs per training step", minimum=1),
        "eval_batch_size": Field("int", None, "graphs per evaluation step; null = batch_size",
                                 nullable=True, minimum=1),
        "optimizer": {
            "name": Field("choice", "adamw", "optimiser", choices=("adamw", "adam")),
            "lr": Field("number", 5e-3, "peak learning rate", minimum=0.0, exclusive_minimum=True),
            "weight_decay": Field("number", 1e-4, "decoupled weight decay (AdamW)", minimum=0.0),
        },
        "lr_scheduler": {
            "name": Field("choice", "cosine_with_warmup", "learning-rate schedule",
                          choices=("cosine_with_warmup", "constant")),
            "warmup_epochs": Field("number", 5, "linear warm-up length in epochs", minimum=0.0),
            "interval": Field("choice", "epoch", "update the rate once per epoch (paper) or after "
                              "every step", choices=("epoch", "step")),
        },
        "loss": {
            "regression": Field("choice", "l1", "element-wise term added to the per-graph cosine "
                                "term: l1 (paper), mse (what R^2 scores) or l1+mse",
                                choices=REGRESSION_TERMS),
            "graph_weight": Field("number", 1.0, "weight of each graph-level entry and cosine pair "
                                  "relative to a node-level one (1 = paper)", minimum=0.0),
        },
        "clip_grad_norm": Field("number", 1.0, "clip the gradient norm to this value; null = no "
                                "clipping", nullable=True, minimum=0.0, exclusive_minimum=True),
        "save_path": Field("str", "runs/gpse_pretrain", "output directory: checkpoints, metrics "
                           "JSON, TensorBoard logs"),
        "eval_every": Field("int", 1, "validate every this many epochs (and after the last)",
                            minimum=1),
        "log_every": Field("int", 50, "log the training loss to TensorBoard every this many steps",
                           minimum=1),
        "num_threads": Field("int", None, "torch CPU threads; null = torch's default",
                             nullable=True, minimum=1),
        "time_limit_minutes": Field("number", None, "end the run inside this wall-clock budget (counted "
                                    "from the start: data, final evaluation and report included): no epoch "
                                    "starts that would overrun it, and one that would is cut mid-way (its "
                                    "steps discarded, the best checkpoint kept); null = no limit",
                                    nullable=True, minimum=0.0, exclusive_minimum=True),
        "fit_to_time_limit": Field("bool", False, "after the warm-up, shorten num_epochs to what fits "
                                   "in time_limit_minutes at the speed measured so far, so the "
                                   "schedule decays fully on a slower machine, and again when the "
                                   "machine slows down later (the numbers chosen are logged and stored "
                                   "in metrics.json)"),
        "distributed": Field("choice", "auto", "under torchrun: process-group backend; auto = nccl on "
                             "CUDA, gloo on CPU", choices=("auto", "gloo", "nccl")),
        "sync_batchnorm": Field("bool", False, "under torchrun: BatchNorm statistics over the global "
                                "batch instead of each process's share"),
        "precision": Field("choice", "fp32", PRECISION_HELP, choices=PRECISION_CHOICES),
    },
}


def load_pretrain_recipe(path: str | os.PathLike, overrides: Iterable[str] = ()) -> dict:
    """Read, override (``key.path=value`` strings) and validate a pretraining recipe; defaults filled in.

    Raises :class:`~gpse_dgl.utils.errors.RecipeError` (one line naming the file and the key) on any problem.
    """
    return load_recipe(path, overrides, schema=PRETRAIN_SCHEMA, cross_check=check_pretrain_recipe)


def validate_pretrain_recipe(raw: Mapping[str, Any], source: str = "<recipe>") -> dict:
    """Check ``raw`` against :data:`PRETRAIN_SCHEMA`; return a plain dict with every default filled in."""
    return validate_recipe(raw, source, schema=PRETRAIN_SCHEMA, cross_check=check_pretrain_recipe)


def default_pretrain_recipe() -> dict:
    """The pretraining recipe with every key at its default."""
    return validate_pretrain_recipe({}, "<defaults>")


def check_pretrain_recipe(recipe: dict, raw: Mapping[str, Any], source: str) -> None:
    """Constraints between keys, and names only the pse/data registries know."""
    data = recipe["data"]
    if data["source"] == "smiles" and not data["smiles_file"]:
        raise RecipeError(f"{source}: data.smiles_file: required when data.source is 'smiles'")
    if data["source"] not in BUILTIN_SOURCES:
        known = tuple(available_datasets())
        if data["source"] not in known:
            choices = BUILTIN_SOURCES + tuple(known)
            raise RecipeError(f"{source}: {key_origin(raw, 'data.source')}: unknown source {data['source']!r}"
                              f"{did_you_mean(data['source'], choices)}; choose {', '.join(choices)}")
    if data["exclude_graphs"]:
        known_sets = tuple(EVALUATION_SETS)
        bad = [n for n in data["exclude_graphs"] if n not in known_sets]
        if bad:
            raise RecipeError(f"{source}: {key_origin(raw, 'data.exclude_graphs')}: unknown evaluation set "
                              f"{bad[0]!r}{did_you_mean(bad[0], known_sets)}; choose from {', '.join(known_sets)}")
    node_names, graph_names = _known_pse_names()
    for key, allowed in (("node_targets", node_names), ("graph_targets", graph_names)):
        names = data[key]
        bad = [n for n in names if n not in allowed]
        if bad:
            raise RecipeError(f"{source}: {key_origin(raw, f'data.{key}')}: unknown PSE {bad[0]!r}"
                              f"{did_you_mean(bad[0], allowed)}; choose from {', '.join(allowed)}")
        if len(set(names)) != len(names):
            raise RecipeError(f"{source}: {key_origin(raw, f'data.{key}')}: names repeat: {names}")
    if not data["node_targets"] and not data["graph_targets"]:
        raise RecipeError(f"{source}: data.node_targets: node_targets and graph_targets are both "
                          f"empty; nothing to pretrain on")
    general = recipe["general_pipeline"]
    if general.get("fit_to_time_limit") and general.get("time_limit_minutes") is None:
        raise RecipeError(f"{source}: {key_origin(raw, 'general_pipeline.fit_to_time_limit')}: needs "
                          f"general_pipeline.time_limit_minutes (the budget to fit the schedule to)")
    if general.get("fit_to_time_limit") and general["lr_scheduler"]["warmup_epochs"] < 1:
        # the schedule is fitted after the warm-up's first whole epoch, whose rates must not depend on
        # the schedule's length
        raise RecipeError(f"{source}: {key_origin(raw, 'general_pipeline.fit_to_time_limit')}: needs "
                          f"general_pipeline.lr_scheduler.warmup_epochs >= 1 (the epochs it is measured in)")


def _known_pse_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Registered node-level and graph-level PSE names (what ``node_targets`` / ``graph_targets`` may list)."""
    names = {level: tuple(name for name, spec in PSE_REGISTRY.items() if spec.level == level)
             for level in ("node", "graph")}
    return names["node"], names["graph"]
