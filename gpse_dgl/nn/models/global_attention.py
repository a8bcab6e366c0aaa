"""Full self-attention among the nodes of each graph of a batch (the global model of GPS / Transformer)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ... import _private
from ...utils.graph_cache import cached_on_graph
from .. import ops
from ..dropout import dropout


def dense_batch_index(graph, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(graph_id, slot, n_max)`` of every node: ``dense[graph_id, slot]`` is its row in the padded
    ``(batch_size, n_max, d)`` layout. Cached on the graph per device (nodes of a batched DGLGraph are
    stored graph after graph, so ``slot`` is the node id minus its graph's first node id).
    """
    def build():
        graph_id = ops.segment_ids(graph, device)
        counts = graph.batch_num_nodes().to(device=device, dtype=torch.int64)
        first_node = torch.cumsum(counts, 0) - counts
        slot = torch.arange(graph_id.numel(), device=device) - first_node[graph_id]
        return graph_id, slot, int(counts.max()) if counts.numel() else 0

    return cached_on_graph(graph, "dense_index", str(device), build)


class GlobalSelfAttention(nn.Module):
    r"""Multi-head self-attention of every node over all nodes of its own graph.

    .. math:: h_i' = \mathrm{MHA}(h_i,\ \{h_j : j \in G(i)\})

    The parameters are those of ``torch.nn.MultiheadAttention`` (``self.attention``: the same state dict,
    initialisation and values), but the projections run on the ``N`` node rows and only the attention
    itself on a padded layout: the query, key and value rows are scattered into ``(batch_size, n_max)``
    slots, one ``scaled_dot_product_attention`` call takes every graph with a mask on the padding keys
    (no Python loop over graphs), and its output rows are gathered back for the output projection.
    ``nn.MultiheadAttention`` on the padded tensor would project every padding row too (15-30 % of the
    rows of the batches of molecules measured), and copy its input to sequence-first order and back
    (``benchmarks/downstream_speed.py``). A graph's result does not depend on the other graphs of the
    batch. Message-flow blocks are not supported (attention needs whole graphs).

    Parameters
    ----------
    embed_dim : int
        Node feature width (input = output).
    num_heads : int
        Number of heads; must divide ``embed_dim``.
    dropout : float
        Dropout on the attention weights.
    bias : bool
        Biases of the projections.

    Example
    -------
    >>> import dgl, torch
    >>> from gpse_dgl.nn.models.global_attention import GlobalSelfAttention
    >>> g = dgl.batch([dgl.graph(([0], [1])), dgl.graph(([0, 1], [1, 2]))])
    >>> GlobalSelfAttention(8, num_heads=2)(g, torch.randn(5, 8)).shape
    torch.Size([5, 8])
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.attention = nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout, bias=bias,
                                               batch_first=True)

    def reset_parameters(self):
        # torch's own re-initialisation leaves out_proj.weight alone (it is set at construction).
        self.attention.out_proj.reset_parameters()
        _private.reset_multihead_attention(self.attention)

    def forward(self, graph, feat: torch.Tensor) -> torch.Tensor:
        """``(batched graph, (N, d)) -> (N, d)``."""
        if getattr(graph, "is_block", False):
            raise ValueError("global self-attention needs whole graphs, not message-flow blocks")
        flat, keep, n_max = _padded_layout(graph, feat.device)
        if n_max == 0:
            return feat
        attention = self.attention
        batch_size, d, heads = graph.batch_size, feat.shape[-1], attention.num_heads
        qkv = F.linear(feat, attention.in_proj_weight, attention.in_proj_bias)
        # rows by flat slot, with index_copy / index_select: backwards a gather and an index_add_ (indexing's
        # backward, an index_put_ with accumulation, sorts the index every step)
        dense = qkv.new_zeros(batch_size * n_max, 3 * d).index_copy(0, flat, qkv)
        query, key, value = dense.view(batch_size, n_max, 3, heads, d // heads).permute(2, 0, 3, 1, 4).unbind(0)
        p = attention.dropout if attention.training else 0.0  # the module that holds the rate decides, as before
        if p > 0.0 and feat.device.type == "cpu":
            out = _attention_with_dropout(query, key, value, keep, p)
        else:
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=keep, dropout_p=p)
        out = out.transpose(1, 2).reshape(batch_size * n_max, d).index_select(0, flat)
        return F.linear(out, attention.out_proj.weight, attention.out_proj.bias)


def _padded_layout(graph, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(flat, keep, n_max)``: every node's row in the padded ``(batch_size * n_max)`` layout, and the
    ``(batch_size, 1, 1, n_max)`` key mask, True where a slot holds a node. Cached on the graph per device
    beside :func:`dense_batch_index`, so the layers of one model step share them."""
    def build():
        graph_id, slot, n_max = dense_batch_index(graph, device)
        keep = torch.zeros(graph.batch_size, n_max, dtype=torch.bool, device=device)
        keep[graph_id, slot] = True
        # A graph without nodes would mask every key and make softmax NaN; its (unused) first slot is a key
        # instead so the padded rows stay finite.
        keep[:, :1] = True
        return graph_id * n_max + slot, keep.view(graph.batch_size, 1, 1, n_max), n_max

    return cached_on_graph(graph, "padded_layout", str(device), build)


def _attention_with_dropout(query, key, value, keep: torch.Tensor, p: float) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d_head), masked) -> dropout -> @ v``: what ``scaled_dot_product_attention``
    computes with ``dropout_p`` on the CPU (its math path), with the weights' mask drawn by
    :func:`~gpse_dgl.nn.dropout.dropout` instead of torch's one-thread Bernoulli draw (a seventh of a
    training step of the ZINC replica's GPS, ``benchmarks/downstream_speed.py``). The softmax is taken
    in float32 at least, as the precision contract has reductions, and its weights are rounded to the
    values' dtype for the product."""
    scores = torch.matmul(query, key.transpose(-2, -1)) * query.shape[-1] ** -0.5
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1,
                            dtype=torch.promote_types(scores.dtype, torch.float32))
    return torch.matmul(dropout(weights.to(value.dtype), p), value)
