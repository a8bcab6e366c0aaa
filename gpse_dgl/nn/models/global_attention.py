"""Full self-attention among the nodes of each graph of a batch (the global model of GPS / Transformer)."""
from __future__ import annotations

import torch
from torch import nn

from ... import _private
from .. import ops


def dense_batch_index(graph, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(graph_id, slot, n_max)`` of every node: ``dense[graph_id, slot]`` is its row in the padded
    ``(batch_size, n_max, d)`` layout. Cached on the graph per device (nodes of a batched DGLGraph are
    stored graph after graph, so ``slot`` is the node id minus its graph's first node id).
    """
    cache = graph.__dict__.setdefault("_gpse_dense_index", {})
    key = str(device)
    if key not in cache:
        graph_id = ops.segment_ids(graph, device)
        counts = graph.batch_num_nodes().to(device=device, dtype=torch.int64)
        first_node = torch.cumsum(counts, 0) - counts
        slot = torch.arange(graph_id.numel(), device=device) - first_node[graph_id]
        n_max = int(counts.max()) if counts.numel() else 0
        cache[key] = (graph_id, slot, n_max)
    return cache[key]


class GlobalSelfAttention(nn.Module):
    r"""Multi-head self-attention of every node over all nodes of its own graph.

    .. math:: h_i' = \mathrm{MHA}(h_i,\ \{h_j : j \in G(i)\})

    The batched graph's node features are scattered into a padded ``(batch_size, n_max, d)`` tensor
    with a key-padding mask and fed to ``torch.nn.MultiheadAttention(batch_first=True)`` in one call
    (no Python loop over graphs), then gathered back to ``(N, d)``. A graph's result does not depend
    on the other graphs of the batch. Message-flow blocks are not supported (attention needs whole graphs).

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
        graph_id, slot, n_max = dense_batch_index(graph, feat.device)
        if n_max == 0:
            return feat
        batch_size, d = graph.batch_size, feat.shape[-1]
        # rows by flat slot, with index_copy / index_select: backwards a gather and an index_add_ (indexing's
        # backward, an index_put_ with accumulation, sorts the index every step)
        flat = graph_id * n_max + slot
        dense = feat.new_zeros(batch_size * n_max, d).index_copy(0, flat, feat).view(batch_size, n_max, d)
        padding = torch.ones(batch_size, n_max, dtype=torch.bool, device=feat.device)
        padding[graph_id, slot] = False
        # A graph without nodes would mask every key and make softmax NaN; its (unused) first slot
        # is unmasked instead so the padded rows stay finite.
        padding[:, 0] = False
        out = self.attention(dense, dense, dense, key_padding_mask=padding, need_weights=False)[0]
        return out.reshape(batch_size * n_max, d).index_select(0, flat)
