"""PyG equivalents of gpse-dgl's downstream models, for ``benchmarks/downstream_speed.py``.

:func:`pyg_mirror` builds, from one of our models, the model a PyG user would write for it: the same
input encoders, pre-MP layers and prediction head (deep copies, so the same weights), and per layer PyG's
own convolution (``GINEConv``, ``GINConv``, ``GCNConv``) with ``torch.nn.BatchNorm1d``, or, where PyG has
no layer of its own, a ``MessagePassing`` layer written as GraphGPS writes it (GatedGCN) or GraphGPS's
``GPSLayer`` (PyG ``GINEConv`` local model, ``nn.MultiheadAttention`` over ``to_dense_batch``). The
convolutions' weights are copied from ours too, so both sides start from the same parameters and their
parameter counts are equal (the script checks).
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


def pyg_mirror(model: nn.Module) -> nn.Module:
    """The PyG model equivalent to our ``model`` (a ConvStack, GatedGCN or GPS of :mod:`gpse_dgl.nn.models`)."""
    return PygModel(model)


class PygModel(nn.Module):
    """Encoders -> PyG layers -> pooling -> head, on a ``torch_geometric.data.Batch``."""

    def __init__(self, ours: nn.Module):
        super().__init__()
        self.node_encoder = copy.deepcopy(ours.input_encoder.node_encoder)
        self.edge_encoder = copy.deepcopy(ours.edge_encoder)
        self.pre_mp = copy.deepcopy(ours.pre_mp)
        self.layers = nn.ModuleList(_layer(layer) for layer in ours.layers)
        self.pooling = ours.head.pooling
        self.head = copy.deepcopy(ours.head.mlp)

    def forward(self, data):
        from torch_geometric.nn import global_add_pool, global_max_pool, global_mean_pool

        h = self.pre_mp(self.node_encoder(data.x))
        e = self.edge_encoder(data.edge_attr) if self.edge_encoder is not None else None
        for layer in self.layers:
            h, e = layer(h, data.edge_index, e, data.batch)
        pool = {"sum": global_add_pool, "mean": global_mean_pool, "max": global_max_pool}[self.pooling]
        return self.head(pool(h, data.batch, size=data.num_graphs))


def _layer(ours: nn.Module) -> nn.Module:
    name = type(ours).__name__
    if name == "ConvBlock":
        return PygConvBlock(ours)
    if name == "GatedGCNLayer":
        return PygGatedGCN(ours)
    if name == "GPSLayer":
        return PygGPSLayer(ours)
    raise ValueError(f"no PyG equivalent of {name}")


def _batch_norm(ours: nn.Module) -> nn.Module:
    """``torch.nn.BatchNorm1d`` with our norm's parameters (or the identity)."""
    if isinstance(ours, nn.BatchNorm1d):
        norm = nn.BatchNorm1d(ours.num_features, eps=ours.eps, momentum=ours.momentum)
        norm.load_state_dict(ours.state_dict())
        return norm
    return nn.Identity()


def _conv(ours: nn.Module) -> nn.Module:
    from torch_geometric import nn as pyg

    name = type(ours).__name__
    if name == "GINEConv":
        return pyg.GINEConv(copy.deepcopy(ours.apply_func), eps=float(ours.eps), train_eps=False)
    if name == "GINConv":
        return pyg.GINConv(copy.deepcopy(ours.apply_func), eps=float(ours.eps), train_eps=False)
    if name == "GCNConv":
        conv = pyg.GCNConv(ours.in_feats, ours.out_feats)
        with torch.no_grad():
            conv.lin.weight.copy_(ours.linear.weight)
            conv.bias.copy_(ours.linear.bias)
        return conv
    raise ValueError(f"no PyG equivalent of {name}")


class PygConvBlock(nn.Module):
    """``conv -> BatchNorm -> dropout -> ReLU`` + residual, with PyG's convolution."""

    def __init__(self, ours: nn.Module):
        super().__init__()
        self.conv, self.norm = _conv(ours.conv), _batch_norm(ours.norm)
        self.dropout, self.residual, self.edges = ours.dropout, ours.residual, ours.uses_edge_features

    def forward(self, x, edge_index, edge_attr, batch):
        out = self.conv(x, edge_index, edge_attr) if self.edges else self.conv(x, edge_index)
        out = F.relu(F.dropout(self.norm(out), self.dropout, self.training))
        return (x + out if self.residual else out), edge_attr


def _gated_gcn_class():
    from torch_geometric.nn import MessagePassing
    from torch_geometric.utils import scatter

    class PygGatedGCNLayer(MessagePassing):
        """GraphGPS's ``GatedGCNLayer`` (``layer/gatedgcn_layer.py``) with our layer's weights."""

        def __init__(self, ours: nn.Module):
            super().__init__(aggr="add")
            for key in "ABCDE":
                setattr(self, key, copy.deepcopy(getattr(ours, key)))
            self.bn_node, self.bn_edge = _batch_norm(ours.bn_node), _batch_norm(ours.bn_edge)
            self.dropout, self.residual, self.eps = ours.dropout, ours.residual, ours.eps

        def forward(self, x, edge_index, edge_attr, batch):
            Ax, Bx, Dx, Ex, Ce = self.A(x), self.B(x), self.D(x), self.E(x), self.C(edge_attr)
            h, e = self.propagate(edge_index, Bx=Bx, Dx=Dx, Ex=Ex, Ce=Ce, e=edge_attr, Ax=Ax)
            h = F.dropout(F.relu(self.bn_node(h)), self.dropout, self.training)
            e = F.dropout(F.relu(self.bn_edge(e)), self.dropout, self.training)
            return (x + h, edge_attr + e) if self.residual else (h, e)

        def message(self, Dx_i, Ex_j, Ce):
            self.e = Dx_i + Ex_j + Ce
            return torch.sigmoid(self.e)

        def aggregate(self, sigma_ij, index, Bx_j, Bx):
            num = scatter(sigma_ij * Bx_j, index, 0, dim_size=Bx.size(0), reduce="sum")
            den = scatter(sigma_ij, index, 0, dim_size=Bx.size(0), reduce="sum")
            return num / (den + self.eps)

        def update(self, aggr_out, Ax):
            e, self.e = self.e, None
            return Ax + aggr_out, e

    return PygGatedGCNLayer


def PygGatedGCN(ours: nn.Module) -> nn.Module:  # noqa: N802 - a class built on demand (PyG imported late)
    return _gated_gcn_class()(ours)


class PygGPSLayer(nn.Module):
    """GraphGPS's ``GPSLayer`` with a PyG ``GINEConv`` local model and dense-batch multi-head attention."""

    def __init__(self, ours: nn.Module):
        super().__init__()
        if ours.local_mpnn_type not in (None, "gine"):
            raise ValueError("the PyG GPS mirror has a GINE local model or none")
        self.local = _conv(ours.local_model) if ours.local_model is not None else None
        self.norm_local = _batch_norm(ours.norm_local) if self.local is not None else None
        self.attn = copy.deepcopy(ours.self_attn.attention) if ours.self_attn is not None else None
        self.norm_attn = _batch_norm(ours.norm_attn) if self.attn is not None else None
        self.ff1, self.ff2 = copy.deepcopy(ours.ff_linear1), copy.deepcopy(ours.ff_linear2)
        self.norm_ff, self.dropout = _batch_norm(ours.norm_ff), ours.dropout

    def forward(self, x, edge_index, edge_attr, batch):
        from torch_geometric.utils import to_dense_batch

        branches = []
        if self.local is not None:
            h = x + F.dropout(self.local(x, edge_index, edge_attr), self.dropout, self.training)
            branches.append(self.norm_local(h))
        if self.attn is not None:
            dense, mask = to_dense_batch(x, batch)
            h = self.attn(dense, dense, dense, key_padding_mask=~mask, need_weights=False)[0][mask]
            branches.append(self.norm_attn(x + F.dropout(h, self.dropout, self.training)))
        h = sum(branches)
        ff = F.dropout(F.relu(self.ff1(h)), self.dropout, self.training)
        return self.norm_ff(h + F.dropout(self.ff2(ff), self.dropout, self.training)), edge_attr


def pyg_batches(graphs: list, labels: torch.Tensor, node_key: str, edge_key: str | None, batch_size: int,
                order: list[int]) -> list:
    """``torch_geometric.data.Batch`` es of ``graphs`` (DGL) in ``order``, ``batch_size`` graphs each."""
    from torch_geometric.data import Batch

    data = to_pyg_data(graphs, labels, node_key, edge_key)
    return [Batch.from_data_list([data[i] for i in order[start:start + batch_size]])
            for start in range(0, len(order), batch_size)]


def to_pyg_data(graphs: list, labels: torch.Tensor, node_key: str, edge_key: str | None) -> list:
    """One ``torch_geometric.data.Data`` per DGL graph: ``x``, ``edge_index``, ``edge_attr``, ``y``."""
    from torch_geometric.data import Data

    out = []
    for i, g in enumerate(graphs):
        src, dst = g.edges()
        out.append(Data(x=g.ndata[node_key], edge_index=torch.stack([src, dst]).long(),
                        edge_attr=g.edata[edge_key] if edge_key else None, y=labels[i:i + 1].float().reshape(1, -1)))
    return out
