"""The pretraining model: its config from a recipe, its optimiser and its random input features.

A checkpoint stores the model as :func:`model_config_from_recipe` describes it (plain dicts in the
``GPSEForPretraining.to_config`` layout), so :func:`build_model` rebuilds it anywhere. GPSE's input is
random: :func:`training_features` draws fresh N(0, 1) features at every step from the run's generator,
:func:`evaluation_features` fixes them per graph so that evaluations are comparable across epochs.

Example
-------
>>> import torch
>>> config = {"encoder": {"dim_in": 4, "dim_hidden": 8, "num_layers": 2},
...           "heads": {"num_node_targets": 3, "num_graph_targets": 2, "graph_hidden": 8}}
>>> model = build_model(config)
>>> num_parameters(model) > 0, model.to_config()["encoder"]["dim_hidden"]
(True, 8)
"""
from __future__ import annotations

import torch

from ...nn.gpse import GPSEForPretraining
from ...nn.random_features import random_node_features
from ..optimizer import build_optimizer  # re-exported: pretraining's API names it
from .data import PretrainingData

__all__ = ["model_config_from_recipe", "build_model", "build_optimizer", "num_parameters",
           "training_features", "evaluation_features"]


def model_config_from_recipe(model_recipe: dict, data: PretrainingData) -> dict:
    """:meth:`GPSEForPretraining.to_config` layout (stored in checkpoints to rebuild the model)."""
    encoder = {"dim_in": model_recipe["dim_in"], "dim_hidden": model_recipe["dim_hidden"],
               "num_layers": model_recipe["num_layers"], "dropout": model_recipe["dropout"],
               "virtual_node": model_recipe["virtual_node"]}
    if not model_recipe["learn_input_norm"]:  # as GPSE.to_config: the key only when it is off
        encoder["learn_input_norm"] = False
    return {
        "encoder": encoder,
        "heads": {"dim_in": model_recipe["dim_hidden"], "num_node_targets": data.num_node_columns,
                  "num_graph_targets": data.num_graph_columns, "node_hidden": model_recipe["head_hidden"],
                  "graph_hidden": model_recipe["graph_head_hidden"], "dropout": model_recipe["dropout"],
                  "pooling": model_recipe["pooling"]},
    }


def build_model(model_config: dict, backend: str | None = None) -> torch.nn.Module:
    """``GPSEForPretraining`` from a :func:`model_config_from_recipe` config."""
    return GPSEForPretraining.from_config(model_config, backend=backend)


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def training_features(graph, dim: int, generator: torch.Generator, share=None) -> torch.Tensor:
    """Fresh N(0, 1) input features for a training batch, drawn from the run's ``generator``; under
    torchrun ``share`` (:class:`~gpse_dgl.train.data_parallel.BatchShare`) picks this rank's rows of the
    global batch's draw."""
    if share is not None and share.node_rows != (0, share.global_nodes):
        return share.features(dim, generator)
    return random_node_features(graph, dim=dim, generator=generator)


def evaluation_features(graph, dim: int, seed: int) -> torch.Tensor:
    """N(0, 1) input features fixed per graph by ``seed`` (independent of batching), so every
    evaluation of a model sees the same inputs and validation scores are comparable across epochs."""
    return random_node_features(graph, dim=dim, seed=seed)
