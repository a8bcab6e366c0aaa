"""A downstream dataset made ready for training: the recipe's graph preprocessing and the encoding.

:func:`prepare_data` loads ``data.name`` (or takes a dataset built in a script), applies
``data.to_undirected`` / ``data.node_feat_from_edges`` and attaches the encoding ``model.pe.source``
asks for (:mod:`.features`, cached on disk); :func:`graph_batches` batches graphs with their encoding
rows and targets.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ... import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl
import dgl.function as fn

from ...data.collate import GraphCollator
from ...data.registry import load_dataset
from ...data.tables import columns_note, records_note
from ...data.user_data import recipe_data_options
from ...utils.errors import RecipeError
from ...utils.graph import as_simple_undirected
from ...utils.precision import Precision
from .features import load_features
from .evaluation import TaskSpec, task_spec


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

    @functools.cached_property
    def collator(self) -> GraphCollator:
        """Batches of :attr:`graphs` by index (``dgl.batch``'s result at a fraction of its cost)."""
        return GraphCollator(self.graphs)


def prepare_data(recipe: dict, dataset=None, device=None, progress: bool = False, log=None,
                 gpse_precision: Precision | None = None) -> Prepared:
    """Load the dataset, apply the recipe's graph preprocessing and attach the encoding; a GPSE encoding runs in
    ``gpse_precision`` (decided by the job, :func:`~gpse_dgl.train.downstream.job.decide_precisions`; None:
    fp32)."""
    data = recipe["data"]
    if dataset is None:
        dataset = load_dataset(data["name"], root=data["root"], **recipe_data_options(data))
    spec = task_spec(dataset, recipe["general_pipeline"]["loss"], data["metric"])
    graphs = list(dataset.graphs)
    node_feat, node_kind = dataset.node_feat_key, dataset.info.get("node_feat_kind")
    edge_feat, edge_kind = dataset.edge_feat_key, dataset.info.get("edge_feat_kind")
    if data["to_undirected"]:
        graphs = [as_simple_undirected(g) for g in graphs]  # node data kept
        edge_feat = edge_kind = None  # merged edges have no single feature value
    if data["node_feat_from_edges"]:
        graphs = [_edge_mean_features(g, dataset.edge_feat_key or "feat") for g in graphs]
        node_feat, node_kind = "feat_from_edges", "float"
    # the encoder pass may run in its own precision (fine tasks such as CSL need fp32 encodings under a bf16
    # model), decided with the loop's by the job
    pe_recipe = dict(recipe["model"]["pe"], gpse_precision=gpse_precision)
    table, info = load_features(graphs, dataset.name, pe_recipe, cache_dir=data["cache_dir"],
                                device=device, progress=progress, log_fn=log)
    return Prepared(dataset, graphs, dataset.labels, spec, table, node_feat, edge_feat, node_kind, edge_kind,
                    info)


def _edge_mean_features(g, key: str):
    """``ndata["feat_from_edges"]``: mean of each node's incoming edge features (zeros if none)."""
    if key not in g.edata:
        raise RecipeError(f"data.node_feat_from_edges: the graphs have no edge features edata[{key!r}]")
    g = g.clone()
    with g.local_scope():
        g.edata["_e"] = g.edata[key].float()
        g.update_all(fn.copy_e("_e", "_m"), fn.mean("_m", "_h"))
        mean = g.ndata["_h"]
    g.ndata["feat_from_edges"] = mean
    return g


def describe(prepared: Prepared) -> str:
    ds, info = prepared.dataset, prepared.feature_info
    cache = f", cache {info['cache']}" if info.get("cache") else ""
    invalid, text = ds.info.get("invalid_records"), ds.info.get("text_columns")
    skipped = f" ({len(invalid)} invalid SMILES skipped: {records_note(invalid)})" if invalid else ""
    dropped = f"; not numbers, not targets: {columns_note(text)}" if text else ""
    return (f"{ds.name}: {len(prepared.graphs)} graph(s){skipped}, {ds.task}-level {ds.task_type}, metric "
            f"{prepared.spec.metric}{dropped}; PE {info['source']} ({info['dim']} columns{cache}, "
            f"{info['seconds']:.1f} s)")


def graph_batches(prepared: Prepared, indices: torch.Tensor, batch_size: int):
    """``(batched graph, PE rows or None, targets)`` for consecutive groups of ``indices``."""
    indices = indices.tolist()
    for start in range(0, len(indices), batch_size):
        idx = indices[start:start + batch_size]
        graph = prepared.collator.batch(idx)
        pe = prepared.table.gather(idx) if prepared.table is not None else None
        yield graph, pe, prepared.labels[idx]
