"""Node rows of many graphs stored contiguously: the table every PE source computes.

Example
-------
>>> import torch
>>> from gpse_dgl.train.downstream.pe_sources.table import NodeTable
>>> table = NodeTable.from_list([torch.zeros(3, 2), torch.ones(2, 2)])
>>> len(table), table.dim, table.gather([1, 0]).shape
(2, 2, torch.Size([5, 2]))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = ["NodeTable"]


@dataclass
class NodeTable:
    """Node rows of many graphs stored contiguously: graph ``i`` owns ``values[offsets[i]:offsets[i+1]]``.

    Parameters
    ----------
    values : torch.Tensor
        ``(total_nodes, dim)``.
    offsets : torch.LongTensor
        ``(num_graphs + 1,)`` cumulative node counts, starting at 0.
    """

    values: torch.Tensor
    offsets: torch.Tensor

    @classmethod
    def from_list(cls, tensors: Sequence[torch.Tensor]) -> "NodeTable":
        """Stack per-graph ``(n_i, dim)`` tensors."""
        counts = torch.tensor([len(t) for t in tensors], dtype=torch.long)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
        return cls(torch.cat(list(tensors)) if len(tensors) else torch.zeros(0, 0), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def dim(self) -> int:
        return int(self.values.shape[1])

    def graph(self, index: int) -> torch.Tensor:
        """Rows of graph ``index`` (a view)."""
        return self.values[self.offsets[index]:self.offsets[index + 1]]

    def gather(self, indices: Sequence[int]) -> torch.Tensor:
        """Rows of the graphs ``indices`` concatenated in that order (as ``dgl.batch`` orders nodes)."""
        return torch.cat([self.graph(int(i)) for i in indices])
