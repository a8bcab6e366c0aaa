"""The recipe schema of ``gpse-dgl train`` (downstream benchmarks), built on :mod:`gpse_dgl.recipes`.

A downstream recipe has the pretraining recipe's shape (``seed``, ``device``, ``data``, ``model``,
``general_pipeline``); every key is declared once in :data:`DOWNSTREAM_SCHEMA` with its type, default
and a one-line description (``describe_schema(DOWNSTREAM_SCHEMA)`` lists them). The positional /
structural encoding fed to the model is chosen by the single key ``model.pe.source``:

The sources and the PE encoder each gets by default are listed in :mod:`.pe_sources` (``none``,
``rand``, ``random``, ``LapPE``, ``LapPE-abs``, ``RWSE``, ``LapPE+RWSE``, ``AllPSE``, ``GPSE``); a source
registered there is a valid value here.

Example
-------
>>> from gpse_dgl.train.downstream.schema import load_downstream_recipe
>>> recipe = load_downstream_recipe("recipes/downstream/csl.yaml", ["model.pe.source=RWSE"])
>>> recipe["model"]["pe"]["source"]
'RWSE'
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from ...data.registry import UnknownDatasetError, available_datasets, dataset_description
from ...nn.models import MODEL_REGISTRY
from ...recipes import Field, key_origin, load_recipe, validate_recipe
from ...utils.devices import check_device_name
from ...utils.errors import RecipeError
from ...utils.precision import PRECISION_CHOICES
from ...utils.text import did_you_mean
from ..mixed_precision import PRECISION_HELP
from .pe_sources import PE_SOURCE_REGISTRY, source_names

__all__ = ["DOWNSTREAM_SCHEMA", "PE_SOURCES", "load_downstream_recipe", "validate_downstream_recipe",
           "default_downstream_recipe", "check_downstream_recipe"]

#: Values of ``model.pe.source`` when this module was imported (:mod:`.pe_sources` may register more).
PE_SOURCES = source_names()


def _known_source(value: str) -> str | None:
    if value in PE_SOURCE_REGISTRY:
        return None
    return (f"unknown PE source {value!r}{did_you_mean(value, PE_SOURCE_REGISTRY)}; choose one of "
            f"{', '.join(PE_SOURCE_REGISTRY)}")
_NODE_ENCODERS = ("auto", "atom", "type", "linear", "constant")
_EDGE_ENCODERS = ("auto", "bond", "type", "linear", "constant")


def _positive_ints(values: list) -> str | None:
    if not values or any(v != int(v) or (v < 1 and v != -1) for v in values):
        return f"expected positive integers (or -1 for all neighbours), got {values}"
    return None


_USER_TASKS = ("auto", "regression", "classification")


def _split_string(value: str) -> str | None:
    if value in ("random", "scaffold") or (value.startswith("column:") and value[len("column:"):].strip()):
        return None
    return f"expected random, scaffold or column:<name>, got {value!r}"


DOWNSTREAM_SCHEMA: dict[str, Any] = {
    "seed": Field("int", 0, "seed of the first run (weights, batch order, dropout); run r uses seed + r"),
    "device": Field("str", "auto", "auto (cuda when available), cpu, cuda, cuda:N or mps", check=check_device_name),
    "data": {
        "name": Field("str", "csl", "dataset name (see `gpse-dgl info`), read from disk under root or built"),
        "root": Field("str", None, "directory holding on-disk datasets; null = $GPSE_DGL_DATA or "
                      "~/.cache/gpse-dgl/datasets", nullable=True),
        "evaluation": Field("choice", "auto", "split: the dataset's train/val/test split; cv: stratified "
                            "k-fold cross-validation; auto: cv when the dataset defines folds (CSL, EXP)",
                            choices=("auto", "split", "cv")),
        "cv_folds": Field("int", 5, "folds of the cross-validation (one is validation, one is test)", minimum=3),
        "max_folds": Field("int", None, "run only the first this many folds of each repeat; null = all",
                           nullable=True, minimum=1),
        "split_seed": Field("int", 0, "seed of the CV folds of the first run (run r uses split_seed + r) and "
                            "of data.split: random", minimum=0),
        "to_undirected": Field("bool", False, "add reverse edges and drop duplicates before training "
                               "(the usual ogbn-arxiv preprocessing)"),
        "node_feat_from_edges": Field("bool", False, "use the mean of each node's incoming edge features "
                                      "as its node features (the usual ogbn-proteins input)"),
        "metric": Field("choice", None, "score runs with this metric instead of the dataset's own (e.g. "
                        "rocauc for MUV, as the paper's MoleculeNet table); null = the dataset's",
                        nullable=True, choices=("rocauc", "ap", "accuracy", "mae", "rmse")),
        "cache_dir": Field("str", None, "where precomputed encodings are cached; null = $GPSE_DGL_CACHE or "
                           "~/.cache/gpse-dgl", nullable=True),
        # Your own data (data.name csv, dgl-bin or dgl-csv; see gpse_dgl/data/user_data.py).
        "path": Field("str", None, "data.name csv: the CSV / TSV / SD / SMILES file; dgl-bin: the "
                      "dgl.save_graphs file; dgl-csv: the dgl.data.CSVDataset directory", nullable=True),
        "smiles_column": Field("str", None, "csv: the column holding the SMILES; null = the one named smiles, "
                               "else the first", nullable=True),
        "target_columns": Field("str_list", [], "csv / dgl-csv: target columns; dgl-bin: labels-dict keys; "
                                "[] = every numeric column (csv), label (dgl-csv), the only key (dgl-bin)"),
        "task": Field("choice", "auto", "csv / dgl-bin / dgl-csv: regression, classification, or auto "
                      "(classification when every target is an integer)", choices=_USER_TASKS),
        "split": Field("str", "random", "csv / dgl-bin / dgl-csv: random (80/10/10, data.split_seed), "
                       "scaffold (Bemis-Murcko, csv) or column:<name> (train / val / test per row)",
                       check=_split_string),
    },
    "model": {
        "name": Field("str", "gps", "gps, transformer, gin, gine, graphsage, gcn, gatv2 or gatedgcn"),
        "dim_hidden": Field("int", 64, "width of every layer (node embedding + dim_pe)", minimum=1),
        "num_layers": Field("int", 3, "message-passing / GPS layers", minimum=1),
        "dropout": Field("number", 0.0, "dropout inside the layers", minimum=0.0, maximum=1.0),
        "pooling": Field("choice", "mean", "graph readout", choices=("mean", "sum", "max")),
        "layers_pre_mp": Field("int", 0, "Linear + ReLU layers before message passing", minimum=0),
        "layers_post_mp": Field("int", None, "linear layers of the head; null = the model's default",
                                nullable=True, minimum=1),
        "head_halving": Field("bool", None, "halve the head's width every layer (GraphGPS san_graph); null "
                              "= the model's default", nullable=True),
        "batchnorm": Field("bool", True, "BatchNorm inside the layers"),
        "residual": Field("bool", True, "residual connections (message-passing models)"),
        "local_mpnn": Field("choice", "gatedgcn", "GPS only: local message passing of each layer",
                            choices=("gatedgcn", "gine", "none")),
        "global_attention": Field("choice", "transformer", "GPS only: global attention of each layer",
                                  choices=("transformer", "none")),
        "num_heads": Field("int", 4, "attention heads (gps, transformer, gatv2)", minimum=1),
        "attn_dropout": Field("number", 0.0, "dropout on attention weights", minimum=0.0, maximum=1.0),
        "node_encoder": Field("choice", "auto", "node feature encoder; auto picks from the dataset (OGB atoms "
                              "-> atom, integer types -> type, floats -> linear, none -> constant)",
                              choices=_NODE_ENCODERS),
        "edge_encoder": Field("choice", "auto", "edge feature encoder for models that use edge features; "
                              "auto picks from the dataset", choices=_EDGE_ENCODERS),
        "backend": Field("choice", "auto", "message passing: dgl kernels, plain torch, or auto",
                         choices=("auto", "dgl", "torch")),
        "pe": {
            "source": Field("str", "none", "positional/structural encoding: " + ", ".join(PE_SOURCES),
                            check=_known_source),
            "dim_pe": Field("int", 16, "width of the encoded PE concatenated to the node embedding; equal "
                            "to dim_hidden only for datasets without node features", minimum=1),
            "model": Field("choice", "auto", "PE encoder network; auto = the source's own (the authors' "
                           "configuration: Linear for explicit PSEs, DeepSet for LapPE, MLP for GPSE)",
                           choices=("auto", "linear", "mlp", "deepset")),
            "layers": Field("int", 2, "linear layers of the mlp PE encoder", minimum=1),
            "batchnorm": Field("bool", True, "BatchNorm on the raw encoding"),
            "dropout_in": Field("number", None, "dropout on the raw encoding; null = the source's own (0.5 for "
                                "GPSE, 0 otherwise)", nullable=True, minimum=0.0, maximum=1.0),
            "standardize": Field("bool", True, "Linear / MLP encoders: standardise each raw column with the "
                                 "training split's mean and std (std floored) before the encoder"),
            "max_freqs": Field("int", 8, "source LapPE: eigenvectors (and eigenvalues) per node", minimum=1),
            "dropout_out": Field("number", 0.0, "dropout on the encoded PE", minimum=0.0, maximum=1.0),
            "random_dim": Field("int", 20, "source random: features per node", minimum=1),
            "random_seed": Field("int", 0, "source random: seed of the per-graph features", minimum=0),
            "checkpoint": Field("str", None, "source GPSE: a registered model name (gpse-dgl models) or a "
                                "checkpoint file (gpse-dgl best.pt or the authors' gpse_model_*.pt); null = the "
                                "model shipped with gpse-dgl", nullable=True),
            "gpse_seed": Field("int", 0, "source GPSE: seed of the encoder's random input features", minimum=0),
            "gpse_samples": Field("int", 1, "source GPSE: average the encodings of this many feature draws",
                                  minimum=1),
            "gpse_batch_size": Field("int", 256, "source GPSE: graphs per encoding pass", minimum=1),
            "gpse_sampled": Field("bool", False, "source GPSE: neighbour-sampled encoding (very large graphs, "
                                  "e.g. ogbn-proteins)"),
            "gpse_fanouts": Field("number_list", [30, 20, 10, 5], "source GPSE with gpse_sampled: neighbours "
                                  "per hop, the last repeated for the remaining layers", check=_positive_ints),
            "gpse_precision": Field("choice", None, "source GPSE: precision of the encoder pass; null = "
                                    "general_pipeline.precision (fp32 keeps encodings whose differences are "
                                    "finer than bf16's rounding, e.g. CSL's)", choices=PRECISION_CHOICES,
                                    nullable=True),
            "storage": Field("choice", "float32", "dtype of the cached encodings (float16 halves memory)",
                             choices=("float32", "float16")),
        },
    },
    "general_pipeline": {
        "num_epochs": Field("int", 100, "training epochs", minimum=1),
        "batch_size": Field("int", 32, "graphs per step (graph tasks) or seed nodes per step (node tasks "
                            "with neighbour sampling)", minimum=1),
        "eval_batch_size": Field("int", None, "graphs per evaluation step; null = 4 x batch_size",
                                 nullable=True, minimum=1),
        "optimizer": {
            "name": Field("choice", "adamw", "optimiser", choices=("adamw", "adam")),
            "lr": Field("number", 1e-3, "(peak) learning rate", minimum=0.0, exclusive_minimum=True),
            "weight_decay": Field("number", 0.0, "weight decay (decoupled for adamw)", minimum=0.0),
        },
        "lr_scheduler": {
            "name": Field("choice", "cosine_with_warmup", "cosine_with_warmup (per epoch, GraphGPS), "
                          "reduce_on_plateau (on the validation metric) or none",
                          choices=("cosine_with_warmup", "reduce_on_plateau", "none")),
            "warmup_epochs": Field("number", 5, "cosine_with_warmup: linear warm-up epochs", minimum=0.0),
            "factor": Field("number", 0.5, "reduce_on_plateau: multiply the rate by this", minimum=0.0,
                            exclusive_minimum=True, maximum=1.0),
            "patience": Field("int", 10, "reduce_on_plateau: epochs without improvement before reducing",
                              minimum=0),
            "min_lr": Field("number", 1e-5, "reduce_on_plateau: lower bound of the rate", minimum=0.0),
        },
        "clip_grad_norm": Field("number", None, "clip the gradient norm to this; null = no clipping",
                                nullable=True, minimum=0.0, exclusive_minimum=True),
        "loss": Field("choice", "auto", "auto: cross_entropy (multiclass), bce (binary), l1 (regression "
                      "scored by MAE), mse (regression scored by RMSE)",
                      choices=("auto", "l1", "mse", "bce", "cross_entropy")),
        "standardize_targets": Field("bool", False, "regression: train on targets standardised with the "
                                     "training split's mean and std (predictions are mapped back before "
                                     "scoring)"),
        "num_seeds": Field("int", 1, "independent runs (seeds seed .. seed + num_seeds - 1); with "
                           "cross-validation each run also draws its own folds", minimum=1),
        "sampling": Field("choice", "full", "node tasks: full-graph training, or DGL neighbour sampling",
                          choices=("full", "neighbor")),
        "fanouts": Field("number_list", [15, 10, 5], "neighbour sampling: neighbours per layer (one per "
                         "layer, first = input layer)", check=_positive_ints),
        "save_path": Field("str", "runs/downstream", "output directory: results.json, per-run checkpoints "
                           "and TensorBoard logs"),
        "save_checkpoints": Field("bool", True, "write last.pt (for --resume) and best.pt of every run"),
        "checkpoint_every": Field("int", 1, "write the checkpoints every this many epochs (and after the last); "
                                  "an interrupted run repeats at most this many epochs", minimum=1),
        "eval_every": Field("int", 1, "evaluate every this many epochs (and after the last)", minimum=1),
        "num_threads": Field("int", None, "torch CPU threads; null = torch's default", nullable=True,
                             minimum=1),
        "time_limit_minutes": Field("number", None, "stop a run after the epoch that passes this many "
                                    "minutes; null = no limit", nullable=True, minimum=0.0,
                                    exclusive_minimum=True),
        "distributed": Field("choice", "auto", "under torchrun: process-group backend; auto = nccl on "
                             "CUDA, gloo on CPU", choices=("auto", "gloo", "nccl")),
        "sync_batchnorm": Field("bool", False, "under torchrun: BatchNorm statistics over the global "
                                "batch instead of each process's share"),
        "precision": Field("choice", "fp32", PRECISION_HELP + " (also for the GPSE encodings computed for "
                           "pe.source: gpse)", choices=PRECISION_CHOICES),
    },
}


def load_downstream_recipe(path: str | os.PathLike, overrides: Iterable[str] = ()) -> dict:
    """Read, override (``key.path=value``) and validate a downstream recipe; defaults filled in.

    Raises
    ------
    RecipeError
        One line naming the file and the key, e.g. ``x.yaml: model.pe.source: expected one of ...``.
    """
    return load_recipe(path, overrides, schema=DOWNSTREAM_SCHEMA, cross_check=check_downstream_recipe)


def validate_downstream_recipe(raw: Mapping[str, Any], source: str = "<recipe>") -> dict:
    """Check ``raw`` against :data:`DOWNSTREAM_SCHEMA`; return a plain dict with every default filled in."""
    return validate_recipe(raw, source, schema=DOWNSTREAM_SCHEMA, cross_check=check_downstream_recipe)


def default_downstream_recipe() -> dict:
    """The downstream recipe with every key at its default."""
    return validate_downstream_recipe({}, "<defaults>")


def check_downstream_recipe(recipe: dict, raw: Mapping[str, Any], source: str) -> None:
    """Constraints between keys, and names only the data and model registries know."""
    data, model = recipe["data"], recipe["model"]
    if not _dataset_known(data["name"]):
        known = tuple(available_datasets())
        raise RecipeError(f"{source}: {key_origin(raw, 'data.name')}: unknown dataset {data['name']!r}"
                          f"{did_you_mean(data['name'], known)}; choose from {', '.join(known)}")
    if data["name"].strip().lower() in ("csv", "dgl-bin", "dgl-csv") and not data["path"]:
        raise RecipeError(f"{source}: data.path: data.name {data['name']} reads the file or directory given "
                          "by data.path, which is not set")
    models = tuple(sorted(MODEL_REGISTRY))
    if model["name"].lower() not in models:
        raise RecipeError(f"{source}: {key_origin(raw, 'model.name')}: unknown model {model['name']!r}"
                          f"{did_you_mean(model['name'], models)}; choose from {', '.join(models)}")
    if model["pe"]["source"] != "none" and model["pe"]["dim_pe"] > model["dim_hidden"]:
        raise RecipeError(f"{source}: {key_origin(raw, 'model.pe.dim_pe')}: {model['pe']['dim_pe']} is larger "
                          f"than model.dim_hidden ({model['dim_hidden']})")
    general = recipe["general_pipeline"]
    if general["sampling"] == "neighbor" and len(general["fanouts"]) != model["num_layers"]:
        raise RecipeError(f"{source}: {key_origin(raw, 'general_pipeline.fanouts')}: neighbour sampling needs "
                          f"one fan-out per layer ({model['num_layers']}), got {len(general['fanouts'])}")


def _dataset_known(name: str) -> bool:
    """Whether the data registry resolves ``name`` (aliases such as ``molhiv`` included)."""
    try:
        dataset_description(name)
    except UnknownDatasetError:
        return False
    return True
