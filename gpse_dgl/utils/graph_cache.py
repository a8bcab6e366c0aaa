"""What a layer derives from a graph's structure, built once per graph object and shared by every layer.

A model step runs many layers on one (batched) graph, and each wants the same derived tensors: the edge index on
its device, the kernels' CSRs, a padded layout for attention, segment ids for readouts. :func:`cached_on_graph`
builds each once per graph object and keeps it on the object, under ``_gpse_<name>`` in its ``__dict__``: not in
``ndata`` or ``edata``, so batching, ``dgl.save_graphs`` and copies never see it, and it goes with the graph.
A training batch is a new graph object every step, so nothing outlives its batch.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl.utils.graph_cache import cached_on_graph
>>> g = dgl.graph(([0, 1], [1, 2]))
>>> built = []
>>> def degrees():
...     built.append(1)
...     return g.in_degrees()
>>> cached_on_graph(g, "in_degrees", "cpu", degrees).tolist(), cached_on_graph(g, "in_degrees", "cpu", degrees).tolist()
([0, 1, 1], [0, 1, 1])
>>> len(built)
1
"""
from __future__ import annotations

from typing import Callable, Hashable, TypeVar

__all__ = ["cached_on_graph"]

T = TypeVar("T")


def cached_on_graph(graph, name: str, key: Hashable, build: Callable[[], T]) -> T:
    """``build()`` for ``graph`` under ``name`` and ``key`` (a device, a chunk size, ...): built on the first call,
    the same object on every later one."""
    cache = graph.__dict__.setdefault(f"_gpse_{name}", {})
    if key not in cache:
        cache[key] = build()
    return cache[key]
