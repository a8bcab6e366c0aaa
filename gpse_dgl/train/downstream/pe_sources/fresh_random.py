"""Source ``rand``: the paper's random features, fresh N(0, 1) noise on every forward pass in place of the
node features.

The GPSE authors' ``rand`` rows (``configs/mol_bench/zinc-*+rand.yaml``, node encoder
``TypeDictNode+NormalRE``: ``NormalRE`` overwrites the whole node embedding with a new draw in every
call, ``graphgym/encoder/random_encoder.py``). The table has no columns (only the node count is read);
the encoder :class:`gpse_dgl.nn.noise_encoder.NormalNoise` draws ``model.dim_hidden`` columns per node and
becomes the model's node encoder.

Example
-------
>>> import dgl
>>> from gpse_dgl.train.downstream.pe_sources.fresh_random import empty_table
>>> empty_table([dgl.graph(([0], [1]), num_nodes=3)]).values.shape
torch.Size([3, 0])
"""
from __future__ import annotations

from typing import Sequence

import torch

from .table import NodeTable
from .spec import PESource


def empty_table(graphs: Sequence) -> NodeTable:
    """A zero-column table with every graph's node count."""
    return NodeTable.from_list([torch.zeros(g.num_nodes(), 0) for g in graphs])


def describe():
    return PESource("rand", "fresh N(0, 1) noise on every forward pass, in place of the node features",
                    compute=lambda graphs, pe, device, progress: empty_table(graphs),
                    encoder={"kind": "noise"}, kinds=("noise",), cached=False, replaces_node_features=True)
