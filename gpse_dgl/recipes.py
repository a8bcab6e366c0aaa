"""YAML recipes for ``gpse-dgl pretrain``: a declarative schema, defaults, validation and overrides.

A recipe has the shape of a dglgo recipe: top-level ``data``, ``model`` and ``general_pipeline``
sections plus the optional scalars ``seed`` and ``device``. Every key is declared once in
:data:`PRETRAIN_SCHEMA` with its type, its default (the paper's setup: ogbg-molpcba aside, since that
needs data on disk) and a one-line description. A recipe that leaves a key out gets the default.

Everything is checked before any work starts, and every problem is reported as one line that names
the file and the dotted key path, e.g.::

    recipes/x.yaml: general_pipeline.optimizer.lr: expected a number, got 'fast'

``--set key.path=value`` overrides are parsed as YAML scalars and validated in exactly the same way.

A recipe may start from another one: ``base: _base.yaml`` (a path relative to the recipe's own
file; the base may have a base in turn) gives every key the base does not leave out, and the recipe's
own keys win, section by section (:func:`merge_recipes`). An error names the file the key was written
in; a missing base or a cycle of bases is a one-line error naming the file that names it.

Relative paths inside a recipe (``data.smiles_file``, ``data.root``, ``data.cache_dir``,
``general_pipeline.save_path``) are taken relative to the current working directory, as in dglgo.

Example
-------
>>> from gpse_dgl.recipes import load_recipe
>>> recipe = load_recipe("recipes/quickstart.yaml", overrides=["general_pipeline.num_epochs=2"])
>>> recipe["general_pipeline"]["num_epochs"]
2
"""
from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import yaml

from .recipe_files import (BASE_KEY, FromBase, Override, StrictSafeLoader, apply_overrides, check_keys,
                           merge_recipes, read_recipe_file, show_value)
from .utils.devices import check_device_name
from .utils.errors import RecipeError
from .utils.text import did_you_mean

__all__ = ["Field", "PRETRAIN_SCHEMA", "PRECISION_CHOICES", "PRECISION_HELP", "REGRESSION_CHOICES", "load_recipe",
           "validate_recipe", "default_recipe", "key_origin", "get", "dump_recipe", "describe_schema",
           # reading files (gpse_dgl.recipe_files), re-exported for one import place
           "BASE_KEY", "StrictSafeLoader", "read_recipe_file", "merge_recipes", "apply_overrides"]

# The default targets, named here without importing the pse sub-package (which imports dgl). The
# authoritative lists are pse.registry's, which _known_pse_names() reads when a recipe is validated.
_DEFAULT_NODE_TARGETS = ("ElstaticPE", "LapPE", "RWSE", "HKdiagSE")
_DEFAULT_GRAPH_TARGETS = ("EigVals", "CycleGE")
BUILTIN_SOURCES = ("embedded-molecules", "smiles")
# = nn.loss.REGRESSION_TERMS (not imported here: it would load torch; a test keeps them equal)
REGRESSION_CHOICES = ("l1", "mse", "l1+mse")


@dataclass(frozen=True)
class Field:
    """One recipe key: its type, default and the constraints checked on load.

    ``kind`` is one of ``"int"``, ``"number"``, ``"bool"``, ``"str"``, ``"choice"``, ``"str_list"``,
    ``"number_list"``. ``check`` is an extra callable returning an error text or ``None``.
    """

    kind: str
    default: Any
    help: str
    nullable: bool = False
    choices: tuple = ()
    minimum: float | None = None
    exclusive_minimum: bool = False
    maximum: float | None = None
    length: int | None = None
    check: Callable[[Any], str | None] | None = field(default=None, compare=False)


def _positive_split(values: list) -> str | None:
    if any(v < 0 for v in values) or values[0] <= 0 or values[1] <= 0:
        return f"train and validation fractions must be > 0 and none negative, got {values}"
    if not math.isclose(sum(values), 1.0, abs_tol=1e-6):
        return f"fractions must sum to 1, got {values} (sum {sum(values):g})"
    return None


# = gpse_dgl.utils.precision.PRECISION_CHOICES (not imported: recipes are read without torch)
PRECISION_CHOICES = ("fp32", "bf16", "fp16", "auto")
PRECISION_HELP = ("fp32, or mixed bf16 (native on CPUs with avx512_bf16/AMX and on recent GPUs) / fp16 "
                  "(CUDA only): dense products in that precision, sums, norms, losses, optimiser state "
                  "and checkpoints in fp32; auto = bf16 where the device runs it natively, else fp32")

_device_string = check_device_name


# The schema. Nested dicts are sections; Field leaves are keys. Defaults = the paper (Table
# training_params, configs/pretrain/gpse_molpcba.yaml of the authors' code) unless noted.
PRETRAIN_SCHEMA: dict[str, Any] = {
    "seed": Field("int", 0, "seed of the run: initial weights, batch order, input features, dropout"),
    "device": Field("str", "auto", "auto (cuda when available), cpu, cuda, cuda:N or mps",
                    check=_device_string),
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
        "node_targets": Field("str_list", list(_DEFAULT_NODE_TARGETS),
                              "node-level PSEs to predict, in this order"),
        "graph_targets": Field("str_list", list(_DEFAULT_GRAPH_TARGETS),
                               "graph-level PSEs to predict, in this order"),
        "skeleton_edits": Field("number", 0.0, "ring-edited copies of training graphs to add, per "
                                "training graph (0 = none, as in the paper); they never enter "
                                "validation or test and never repeat a source graph",
                                minimum=0.0, maximum=10.0),
        "regular_graphs": Field("number", 0.0, "random connected regular graphs (degree 3 to 5, 8 to 64 "
                                "nodes) to add to the training split, per training graph (0 = none, as in "
                                "the paper): graphs where only the random input tells nodes apart",
                                minimum=0.0, maximum=10.0),
        "exclude_graphs": Field("str_list", [], "evaluation sets whose graphs pretraining leaves out of every "
                                "split and never adds (e.g. [wl-pairs, csl]; names: "
                                "gpse_dgl.data.families.EVALUATION_SETS); [] = none, as in the paper"),
        "cache_dir": Field("str", None, "where computed targets are cached (DGL binary); null = "
                           "$GPSE_DGL_CACHE or ~/.cache/gpse-dgl", nullable=True),
        "target_device": Field("str", None, "where the targets' dense linear algebra runs (cpu, "
                               "cuda, cuda:N); null = cpu", nullable=True, check=_device_string),
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
                                choices=REGRESSION_CHOICES),
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
        "time_limit_minutes": Field("number", None, "stop after the epoch that would overrun this "
                                    "wall-clock budget (counted from the start, data included); "
                                    "null = no limit", nullable=True, minimum=0.0,
                                    exclusive_minimum=True),
        "fit_to_time_limit": Field("bool", False, "after the warm-up, shorten num_epochs to what fits "
                                   "in time_limit_minutes at the speed measured so far, so the "
                                   "schedule decays fully on a slower machine (the number chosen is "
                                   "logged and stored in metrics.json)"),
        "distributed": Field("choice", "auto", "under torchrun: process-group backend; auto = nccl on "
                             "CUDA, gloo on CPU", choices=("auto", "gloo", "nccl")),
        "sync_batchnorm": Field("bool", False, "under torchrun: BatchNorm statistics over the global "
                                "batch instead of each process's share"),
        "precision": Field("choice", "fp32", PRECISION_HELP, choices=PRECISION_CHOICES),
    },
}


# ----------------------------------------------------------------------------------------------
# loading


def load_recipe(path: str | os.PathLike, overrides: Iterable[str] = (),
                schema: Mapping[str, Any] = PRETRAIN_SCHEMA) -> dict:
    """Read, override (``key.path=value`` strings) and validate a recipe; return it with defaults filled.

    Raises :class:`RecipeError` (one line naming the file and the key) on any problem.
    """
    source = str(path)
    raw = read_recipe_file(source, schema)
    apply_overrides(raw, overrides, source, schema)
    return validate_recipe(raw, source, schema)


# ----------------------------------------------------------------------------------------------
# validation


def validate_recipe(raw: Mapping[str, Any], source: str = "<recipe>",
                    schema: Mapping[str, Any] = PRETRAIN_SCHEMA,
                    cross_check: Callable[[dict, Mapping[str, Any], str], None] | None = None) -> dict:
    """Check ``raw`` against ``schema``; return a new plain dict with every default filled in.

    ``cross_check(recipe, raw, source)`` then checks constraints between keys (raising
    :class:`RecipeError`); by default the pretraining constraints when ``schema`` is
    :data:`PRETRAIN_SCHEMA`, none otherwise.
    """
    recipe = _validate_section(raw, schema, source, prefix="")
    if cross_check is None and schema is PRETRAIN_SCHEMA:
        cross_check = _check_cross_field
    if cross_check is not None:
        cross_check(recipe, raw, source)
    return recipe


def key_origin(raw: Mapping[str, Any], dotted_key: str) -> str:
    """How to name ``dotted_key`` in an error: ``--set KEY`` if its value came from an override."""
    node: Any = raw
    for part in dotted_key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return f"--set {node.key}" if isinstance(node, Override) else dotted_key


def default_recipe(schema: Mapping[str, Any] = PRETRAIN_SCHEMA) -> dict:
    """The recipe with every key at its default."""
    return validate_recipe({}, "<defaults>", schema)


def _validate_section(raw: Any, schema: Mapping[str, Any], source: str, prefix: str) -> dict:
    if isinstance(raw, FromBase):
        source, raw = raw.path, raw.value
    if raw is None:
        raw = {}
    check_keys(raw, schema, source, prefix)
    result = {}
    for key, spec in schema.items():
        value = raw.get(key)
        if isinstance(spec, Mapping):
            result[key] = _validate_section(value, spec, source, f"{prefix}{key}.")
        else:
            result[key] = _validate_value(value, key in raw, spec, source, f"{prefix}{key}")
    return result


def _validate_value(value: Any, present: bool, spec: Field, source: str, key: str) -> Any:
    if isinstance(value, FromBase):
        source, value = value.path, value.value
    where = key
    if isinstance(value, Override):
        where, value = f"--set {value.key}", value.value
    if not present:
        return copy.deepcopy(spec.default)
    if value is None:
        if spec.nullable:
            return None
        raise RecipeError(f"{source}: {where}: expected {_expected(spec)}, got null")
    try:
        value = _convert(value, spec)
        _check_seed(value, key)
        return value
    except _Invalid as exc:
        raise RecipeError(f"{source}: {where}: {exc}") from None


SEED_LIMIT = 2 ** 63  # seeds are 63-bit (derive_seed, numpy's SeedSequence words): larger ones would wrap


def _check_seed(value: Any, key: str) -> None:
    if key.rsplit(".", 1)[-1].endswith("seed") and isinstance(value, int) and not 0 <= value < SEED_LIMIT:
        raise _Invalid(f"expected a seed in [0, 2**63), got {value}")


class _Invalid(Exception):
    pass


def _convert(value: Any, spec: Field) -> Any:
    if spec.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"expected an integer, got {show_value(value)}")
        _check_range(value, spec)
    elif spec.kind == "number":
        value = _as_number(value)
        _check_range(value, spec)
    elif spec.kind == "bool":
        if not isinstance(value, bool):
            raise _Invalid(f"expected true or false, got {show_value(value)}")
    elif spec.kind in ("str", "choice"):
        if not isinstance(value, str) or not value:
            raise _Invalid(f"expected {_expected(spec)}, got {show_value(value)}")
        if spec.kind == "choice" and value not in spec.choices:
            raise _Invalid(f"expected one of {', '.join(spec.choices)}, got {value!r}"
                           f"{did_you_mean(value, spec.choices)}")
    elif spec.kind == "str_list":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _Invalid(f"expected a list of names, got {show_value(value)}")
    elif spec.kind == "number_list":
        if not isinstance(value, list):
            raise _Invalid(f"expected a list of numbers, got {show_value(value)}")
        value = [_as_number(v) for v in value]
        if spec.length is not None and len(value) != spec.length:
            raise _Invalid(f"expected {spec.length} numbers, got {len(value)}")
    else:  # pragma: no cover - schema bug
        raise AssertionError(f"unknown field kind {spec.kind!r}")
    if spec.check is not None and (problem := spec.check(value)):
        raise _Invalid(problem)
    return value


def _as_number(value: Any) -> float | int:
    # PyYAML follows YAML 1.1, where "5e-3" (no dot) is a string, not a float: accept such text.
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise _Invalid(f"expected a number, got {value!r}") from None
        if not math.isfinite(number):
            raise _Invalid(f"expected a finite number, got {value!r}")
        return number
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(f"expected a number, got {show_value(value)}")
    if not math.isfinite(value):
        raise _Invalid(f"expected a finite number, got {value!r}")
    return value


def _check_range(value: float, spec: Field) -> None:
    if spec.minimum is not None:
        if value < spec.minimum or (spec.exclusive_minimum and value == spec.minimum):
            relation = ">" if spec.exclusive_minimum else ">="
            raise _Invalid(f"expected a value {relation} {spec.minimum:g}, got {value!r}")
    if spec.maximum is not None and value > spec.maximum:
        raise _Invalid(f"expected a value <= {spec.maximum:g}, got {value!r}")


def _check_cross_field(recipe: dict, raw: Mapping[str, Any], source: str) -> None:
    """Constraints between keys, and names only the pse/data registries know."""
    data = recipe["data"]
    if data["source"] == "smiles" and not data["smiles_file"]:
        raise RecipeError(f"{source}: data.smiles_file: required when data.source is 'smiles'")
    if data["source"] not in BUILTIN_SOURCES:
        known = _known_datasets()
        if data["source"] not in known:
            choices = BUILTIN_SOURCES + tuple(known)
            raise RecipeError(f"{source}: {_where(raw, 'data', 'source')}: unknown source {data['source']!r}"
                              f"{did_you_mean(data['source'], choices)}; choose {', '.join(choices)}")
    if data["exclude_graphs"]:
        known_sets = _known_evaluation_sets()
        bad = [n for n in data["exclude_graphs"] if n not in known_sets]
        if bad:
            raise RecipeError(f"{source}: {_where(raw, 'data', 'exclude_graphs')}: unknown evaluation set "
                              f"{bad[0]!r}{did_you_mean(bad[0], known_sets)}; choose from {', '.join(known_sets)}")
    node_names, graph_names = _known_pse_names()
    for key, allowed in (("node_targets", node_names), ("graph_targets", graph_names)):
        names = data[key]
        bad = [n for n in names if n not in allowed]
        if bad:
            raise RecipeError(f"{source}: {_where(raw, 'data', key)}: unknown PSE {bad[0]!r}"
                              f"{did_you_mean(bad[0], allowed)}; choose from {', '.join(allowed)}")
        if len(set(names)) != len(names):
            raise RecipeError(f"{source}: {_where(raw, 'data', key)}: names repeat: {names}")
    if not data["node_targets"] and not data["graph_targets"]:
        raise RecipeError(f"{source}: data.node_targets: node_targets and graph_targets are both "
                          f"empty; nothing to pretrain on")
    general = recipe["general_pipeline"]
    if general.get("fit_to_time_limit") and general.get("time_limit_minutes") is None:
        raise RecipeError(f"{source}: {_where(raw, 'general_pipeline', 'fit_to_time_limit')}: needs "
                          f"general_pipeline.time_limit_minutes (the budget to fit the schedule to)")
    if general.get("fit_to_time_limit") and general["lr_scheduler"]["warmup_epochs"] < 1:
        # the schedule is fitted after the warm-up's first whole epoch, whose rates must not depend on
        # the schedule's length
        raise RecipeError(f"{source}: {_where(raw, 'general_pipeline', 'fit_to_time_limit')}: needs "
                          f"general_pipeline.lr_scheduler.warmup_epochs >= 1 (the epochs it is measured in)")


def _where(raw: Mapping[str, Any], section: str, key: str) -> str:
    return key_origin(raw, f"{section}.{key}")


def _known_pse_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    # imported here: this module is read without torch / dgl, which gpse_dgl.pse loads
    from .pse.registry import GRAPH_TARGETS, NODE_TARGETS, PSE_REGISTRY

    node = tuple(n for n, s in PSE_REGISTRY.items() if getattr(s, "level", "node") == "node")
    graph = tuple(n for n, s in PSE_REGISTRY.items() if getattr(s, "level", "") == "graph")
    return node or tuple(NODE_TARGETS), graph or tuple(GRAPH_TARGETS)


def _known_evaluation_sets() -> tuple[str, ...]:
    # imported here: this module is read without torch / dgl, which gpse_dgl.data loads
    from .data.families import EVALUATION_SETS

    return tuple(EVALUATION_SETS)


def _known_datasets() -> tuple[str, ...]:
    """Dataset names the data registry can load."""
    # imported here: this module is read without torch, which gpse_dgl.data loads
    from .data.registry import available_datasets

    return tuple(available_datasets())


# ----------------------------------------------------------------------------------------------
# helpers: messages, dumping


def _expected(spec: Field) -> str:
    return {
        "int": "an integer", "number": "a number", "bool": "true or false",
        "str": "a non-empty string", "choice": f"one of {', '.join(spec.choices)}",
        "str_list": "a list of names", "number_list": "a list of numbers",
    }[spec.kind]


def get(recipe: Mapping[str, Any], dotted_key: str) -> Any:
    """``get(recipe, "general_pipeline.optimizer.lr")``."""
    node: Any = recipe
    for part in dotted_key.split("."):
        node = node[part]
    return node


def dump_recipe(recipe: Mapping[str, Any]) -> str:
    """The recipe as YAML text (sections in schema order)."""
    return yaml.safe_dump(dict(recipe), sort_keys=False, default_flow_style=None)


def describe_schema(schema: Mapping[str, Any] = PRETRAIN_SCHEMA, prefix: str = "") -> list[str]:
    """One line per key: ``path (default): help`` (used by docs and ``--help``)."""
    lines = []
    for key, spec in schema.items():
        if isinstance(spec, Mapping):
            lines += describe_schema(spec, f"{prefix}{key}.")
        else:
            lines.append(f"{prefix}{key} (default {spec.default!r}): {spec.help}")
    return lines
