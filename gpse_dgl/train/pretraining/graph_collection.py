"""Many small graphs as flat tensors, batched by a few vectorised gathers and one ``dgl.graph`` call.

:class:`GraphCollection` holds the pretraining graphs and their targets: local edge ids, offsets, node and
graph targets. Building a training batch from it is several times faster than ``dgl.batch`` over a list
of small graphs (which merges per-graph frames one by one).

Example
-------
>>> import torch
>>> from gpse_dgl.train.pretraining.graph_collection import GraphCollection
>>> coll = GraphCollection(num_nodes=torch.tensor([2, 3]), num_edges=torch.tensor([1, 2]),
...                        src=torch.tensor([0, 0, 1]), dst=torch.tensor([1, 1, 2]),
...                        node_targets=torch.zeros(5, 4), graph_targets=torch.zeros(2, 1))
>>> graph, node_targets, graph_targets = coll.batch(torch.tensor([1, 0]))
>>> graph.batch_num_nodes().tolist(), graph.edges()[0].tolist(), node_targets.shape
([3, 2], [0, 1, 3], torch.Size([5, 4]))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch

from ... import _env  # noqa: F401
import dgl


@dataclass
class GraphCollection:
    """Many small graphs as flat tensors: local edge ids, offsets, node and graph targets.

    ``src``/``dst`` hold each graph's edges with node ids local to that graph, graphs one after the
    other; ``edge_offsets[i]:edge_offsets[i+1]`` are graph ``i``'s edges and
    ``node_offsets[i]:node_offsets[i+1]`` its rows of ``node_targets``.
    """

    num_nodes: torch.Tensor
    num_edges: torch.Tensor
    src: torch.Tensor
    dst: torch.Tensor
    node_targets: torch.Tensor
    graph_targets: torch.Tensor
    node_offsets: torch.Tensor = field(init=False)
    edge_offsets: torch.Tensor = field(init=False)

    def __post_init__(self):
        self.node_offsets = _offsets(self.num_nodes)
        self.edge_offsets = _offsets(self.num_edges)

    def __len__(self) -> int:
        return len(self.num_nodes)

    @classmethod
    def from_batched_graph(cls, graph: dgl.DGLGraph, num_nodes: torch.Tensor, num_edges: torch.Tensor,
                           node_targets: torch.Tensor, graph_targets: torch.Tensor) -> "GraphCollection":
        """Split a batched graph (global node ids) into local-id edge lists."""
        src, dst = (t.to(torch.int64) for t in graph.edges())
        node_base = torch.repeat_interleave(_offsets(num_nodes)[:-1], num_edges)
        return cls(num_nodes.long(), num_edges.long(), src - node_base, dst - node_base,
                   node_targets.float(), graph_targets.float())

    def subset(self, indices: torch.Tensor) -> "GraphCollection":
        """The graphs at ``indices`` (in that order) as a new collection."""
        indices = torch.as_tensor(indices, dtype=torch.int64)
        node_rows = _ranges(self.node_offsets[indices], self.num_nodes[indices])
        edge_rows = _ranges(self.edge_offsets[indices], self.num_edges[indices])
        return GraphCollection(self.num_nodes[indices], self.num_edges[indices], self.src[edge_rows],
                               self.dst[edge_rows], self.node_targets[node_rows],
                               self.graph_targets[indices])

    def batch(self, indices: torch.Tensor) -> tuple[dgl.DGLGraph, torch.Tensor, torch.Tensor]:
        """``(batched graph, node targets (N, C), graph targets (B, C'))`` of the graphs at ``indices``.

        The graph is a proper DGL batch (``batch_num_nodes``/``batch_num_edges`` set), so
        ``dgl.unbatch`` and readouts work on it.
        """
        indices = torch.as_tensor(indices, dtype=torch.int64)
        num_nodes, num_edges = self.num_nodes[indices], self.num_edges[indices]
        edge_rows = _ranges(self.edge_offsets[indices], num_edges)
        node_rows = _ranges(self.node_offsets[indices], num_nodes)
        shift = torch.repeat_interleave(_offsets(num_nodes)[:-1], num_edges)
        graph = dgl.graph((self.src[edge_rows] + shift, self.dst[edge_rows] + shift),
                          num_nodes=int(num_nodes.sum()), idtype=torch.int64)
        graph.set_batch_num_nodes(num_nodes)
        graph.set_batch_num_edges(num_edges)
        return graph, self.node_targets[node_rows], self.graph_targets[indices]

    def batches(self, batch_size: int, generator: torch.Generator | None = None,
                shuffle: bool = False) -> Iterator[tuple[dgl.DGLGraph, torch.Tensor, torch.Tensor]]:
        """Consecutive batches; ``shuffle`` draws the order from ``generator``."""
        order = (torch.randperm(len(self), generator=generator) if shuffle
                 else torch.arange(len(self)))
        for start in range(0, len(self), batch_size):
            yield self.batch(order[start:start + batch_size])

    def num_batches(self, batch_size: int) -> int:
        return -(-len(self) // batch_size)

    @classmethod
    def concatenate(cls, parts: Sequence["GraphCollection"]) -> "GraphCollection":
        """The graphs of ``parts``, one part after the other."""
        return cls(*(torch.cat([getattr(p, name) for p in parts])
                     for name in ("num_nodes", "num_edges", "src", "dst", "node_targets", "graph_targets")))


def _offsets(counts: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts.long(), 0)])


def _ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Concatenation of ``arange(s, s + l)`` for every (start, length) pair, vectorised."""
    lengths = lengths.long()
    total = int(lengths.sum())
    block_start = torch.repeat_interleave(starts.long() - _offsets(lengths)[:-1], lengths)
    return torch.arange(total, dtype=torch.int64) + block_start
