"""The downstream model a recipe describes, and what the chosen model can do.

:func:`model_config` turns the recipe's ``model`` section and the prepared data into a plain dict
(stored in checkpoints); :func:`model_from_config` builds it from :mod:`gpse_dgl.nn.models`. A model
declares what it accepts: its constructor's keyword arguments (and those of the classes it passes
``**kwargs`` on to), minus its ``fixed_options``; ``supports_blocks`` says whether it trains on
neighbour-sampled blocks. Options a model does not accept are not passed to it, so a new model is one
file in ``nn/models/`` plus its ``@register_model`` line.
"""
from __future__ import annotations

import inspect

import torch

from ...nn.feature_encoders import ConstantEncoder
from ...nn.models import MODEL_REGISTRY, build_model
from ...nn.pe_encoder import build_pe_encoder
from ...utils.errors import RecipeError
from ...utils.text import first_line
from .data import Prepared
from .pe_sources import get_source
from .pe_sources.encoder import encoder_config


def build_downstream_model(recipe: dict, prepared: Prepared, train_index=None) -> tuple[torch.nn.Module, dict]:
    """Build the model a recipe describes for ``prepared`` data; return it and its plain config.

    ``train_index``: the training split (graphs, or nodes of a node-level dataset), whose encoding rows
    give the PE encoder's column statistics (None: every row).
    """
    config = model_config(recipe["model"], prepared, train_index)
    return model_from_config(config), config


def model_config(model_recipe: dict, prepared: Prepared, train_index=None) -> dict:
    """Plain-dict description of the model (stored in checkpoints; :func:`model_from_config` builds it)."""
    name = model_recipe["name"].lower()
    cls = MODEL_REGISTRY[name]
    pe = model_recipe["pe"]
    pe_encoder = encoder_config(pe, prepared.table, model_recipe["dim_hidden"], _train_rows(prepared, train_index))
    in_place = get_source(pe["source"]).replaces_node_features
    pe_only = pe_encoder is not None and (in_place or pe["dim_pe"] == model_recipe["dim_hidden"])
    if pe_only and prepared.node_feat is not None and not in_place:
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
    return {"name": name, "kwargs": kwargs, "pe_encoder": pe_encoder, "pe_only": pe_only}


def model_from_config(config: dict) -> torch.nn.Module:
    """Instantiate :func:`model_config` output.

    ``pe_only`` (``dim_pe == dim_hidden`` on a dataset without node features) makes the PE encoder the
    node encoder, as GraphGPS does with ``expand_x=False``; the model then takes the PE as ``node_feat``.
    """
    kwargs = dict(config["kwargs"])
    if config["pe_encoder"] is not None:
        encoder = build_pe_encoder(config["pe_encoder"])
        if config["pe_only"]:
            kwargs["node_encoder"] = encoder
        else:
            kwargs["pe_encoder"] = encoder
    try:
        return build_model(config["name"], **kwargs)
    except ValueError as exc:  # e.g. dim_pe >= dim_hidden, heads not dividing the width
        raise RecipeError(f"model: {first_line(exc)}") from None


def _train_rows(prepared: Prepared, train_index):
    if prepared.table is None or train_index is None:
        return None
    index = torch.as_tensor(train_index).long()
    if prepared.spec.level == "node":  # one graph: the training nodes' rows
        return prepared.table.graph(0)[index]
    return prepared.table.gather(index.tolist())


def _constructor_options(cls) -> set:
    """Keyword arguments a model class (or the model classes it passes **kwargs on to) accepts, less the
    options it fixes itself (its ``fixed_options``)."""
    names: set = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        names |= {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
    return names - set(getattr(cls, "fixed_options", {}))


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


def uses_edge_features(model) -> bool:
    return model.edge_encoder is not None and not isinstance(model.edge_encoder, ConstantEncoder)


def check_sampling(recipe, prepared: Prepared, model) -> None:
    if recipe["general_pipeline"]["sampling"] != "neighbor":
        return
    if prepared.spec.level != "node":
        raise RecipeError("general_pipeline.sampling: neighbour sampling is for node-level datasets")
    if not getattr(model, "supports_blocks", False) or uses_edge_features(model):
        raise RecipeError(f"general_pipeline.sampling: {recipe['model']['name']} cannot train on sampled "
                          f"blocks (it needs whole graphs or edge features); use sampling: full")
