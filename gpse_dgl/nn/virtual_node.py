"""Virtual nodes for batched graphs: one extra node per graph, joined in both directions to every node.

GPSE (like PyG's ``torch_geometric.transforms.VirtualNode``) gives every graph one extra node that
receives a message from and sends a message to each real node of its graph. The virtual node starts from
a zero input, is updated by every layer with the same weights as the real nodes, is dropped from the node
outputs and is included in the graph-level pooling.

Layout. For a batched graph with ``N`` real nodes in ``B`` graphs, the augmented graph has ``N + B``
nodes: rows ``0 .. N-1`` are the real nodes in their original order and row ``N + b`` is the virtual node
of graph ``b``. Dropping the virtual nodes is therefore a slice (``h[:N]``, a view) and their states are
``h[N:]`` in graph order. Edge order: the original edges, then ``real -> virtual`` for every real node,
then ``virtual -> real`` (the order ``VirtualNode`` uses). The augmented graph is a plain (unbatched)
``DGLGraph``; the per-graph segment of every row is in :attr:`VirtualNodeInfo.node_graph`.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl.nn.virtual_node import add_virtual_nodes
>>> g = dgl.batch([dgl.graph(([0, 1], [1, 0]), num_nodes=3), dgl.graph(([], []), num_nodes=0)])
>>> aug, info = add_virtual_nodes(g)
>>> aug.num_nodes(), aug.num_edges(), info.num_real, info.num_virtual
(5, 8, 3, 2)
>>> info.node_graph.tolist()
[0, 0, 0, 0, 1]
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import _env  # noqa: F401
import dgl

from ..utils.graph_cache import cached_on_graph
from . import ops

__all__ = ["VirtualNodeInfo", "add_virtual_nodes", "no_virtual_nodes", "pool"]


@dataclass(frozen=True, eq=False)
class VirtualNodeInfo:
    """Where the virtual nodes are in an augmented graph.

    Attributes
    ----------
    num_real : int
        ``N``, the number of real nodes (rows ``0 .. N-1``).
    num_graphs : int
        ``B``, the number of graphs of the batch.
    num_virtual : int
        ``B`` with virtual nodes (row ``N + b`` belongs to graph ``b``), ``0`` without.
    batch_num_nodes : torch.Tensor
        int64 ``(B,)`` real nodes per graph (CPU).
    node_graph : torch.Tensor
        int64 ``(N + num_virtual,)`` graph index of every row of the augmented graph (CPU).
    """

    num_real: int
    num_graphs: int
    num_virtual: int
    batch_num_nodes: torch.Tensor
    node_graph: torch.Tensor

    @property
    def num_nodes(self) -> int:
        """Rows of the augmented graph, ``N + num_virtual``."""
        return self.num_real + self.num_virtual

    @property
    def real_mask(self) -> torch.Tensor:
        """Boolean ``(N + num_virtual,)``, True for real nodes."""
        mask = torch.zeros(self.num_nodes, dtype=torch.bool)
        mask[: self.num_real] = True
        return mask

    def node_graph_on(self, device) -> torch.Tensor:
        """:attr:`node_graph` on ``device`` (cached)."""
        device = torch.device(device)
        if device.type == "cpu":
            return self.node_graph
        cache = self.__dict__.setdefault("_on_device", {})
        if str(device) not in cache:
            cache[str(device)] = self.node_graph.to(device)
        return cache[str(device)]

    def real(self, h: torch.Tensor) -> torch.Tensor:
        """The real-node rows of ``h`` (a view)."""
        return h[: self.num_real]

    def virtual(self, h: torch.Tensor) -> torch.Tensor:
        """The virtual-node rows of ``h`` in graph order, ``(num_virtual, ...)`` (a view)."""
        return h[self.num_real:]


def _graph_ids(batch_num_nodes: torch.Tensor) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(len(batch_num_nodes), dtype=torch.int64), batch_num_nodes)


def add_virtual_nodes(graph: dgl.DGLGraph) -> tuple[dgl.DGLGraph, VirtualNodeInfo]:
    """Add one virtual node per graph of a (batched) ``DGLGraph``.

    Parameters
    ----------
    graph : dgl.DGLGraph
        A homogeneous graph or a batch of them (``dgl.batch``). Graphs with no nodes or no edges are
        fine (the virtual node of an empty graph is isolated). Features are not copied.

    Returns
    -------
    aug_graph : dgl.DGLGraph
        ``N + B`` nodes on the CPU: the original edges, then ``i -> vn(i)`` and ``vn(i) -> i`` for every
        real node ``i``. The result is cached on ``graph`` (build it once, use it in every layer).
    info : VirtualNodeInfo
        Row layout (real rows first, virtual node of graph ``b`` at row ``N + b``).
    """
    return cached_on_graph(graph, "virtual_nodes", None, lambda: _build_virtual_nodes(graph))


def _build_virtual_nodes(graph: dgl.DGLGraph) -> tuple[dgl.DGLGraph, VirtualNodeInfo]:
    bnn = graph.batch_num_nodes().to("cpu", torch.int64)
    n, b = int(graph.num_nodes()), int(len(bnn))
    seg = _graph_ids(bnn)
    src, dst = graph.edges()
    src, dst = src.to("cpu", torch.int64), dst.to("cpu", torch.int64)
    real = torch.arange(n, dtype=torch.int64)
    vn = seg + n
    aug_src = torch.cat([src, real, vn])
    aug_dst = torch.cat([dst, vn, real])
    aug = dgl.graph((aug_src, aug_dst), num_nodes=n + b, idtype=torch.int64, device="cpu")
    info = VirtualNodeInfo(
        num_real=n,
        num_graphs=b,
        num_virtual=b,
        batch_num_nodes=bnn,
        node_graph=torch.cat([seg, torch.arange(b, dtype=torch.int64)]),
    )
    return aug, info


def no_virtual_nodes(graph: dgl.DGLGraph) -> tuple[dgl.DGLGraph, VirtualNodeInfo]:
    """The same ``(graph, info)`` pair as :func:`add_virtual_nodes` for a model without virtual nodes."""
    bnn = graph.batch_num_nodes().to("cpu", torch.int64)
    n = int(graph.num_nodes())
    info = VirtualNodeInfo(num_real=n, num_graphs=int(len(bnn)), num_virtual=0,
                           batch_num_nodes=bnn, node_graph=_graph_ids(bnn))
    return graph, info


def pool(h: torch.Tensor, info: VirtualNodeInfo, op: str = "sum") -> torch.Tensor:
    """Per-graph ``sum``/``mean``/``max`` over all rows of ``h`` (real nodes and virtual nodes).

    ``h`` has ``info.num_nodes`` rows. Graphs with no row at all pool to 0.
    """
    seg = info.node_graph_on(h.device)
    return ops.segment_reduce(h, seg, info.num_graphs, op)
