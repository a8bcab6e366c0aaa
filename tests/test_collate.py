"""GraphCollator: batches equal to dgl.batch's, for the graphs training sees and the odd ones."""
from __future__ import annotations

import torch

from gpse_dgl import _env  # noqa: F401
import dgl

from gpse_dgl.data.collate import GraphCollator


def _graphs():
    gen = torch.Generator().manual_seed(0)
    graphs = []
    for n, m in [(5, 8), (1, 0), (0, 0), (3, 0), (7, 14), (2, 2)]:
        g = dgl.graph((torch.randint(0, max(n, 1), (m,), generator=gen), torch.randint(0, max(n, 1), (m,), generator=gen)),
                      num_nodes=n)
        g.ndata["feat"] = torch.randint(0, 9, (n, 1), generator=gen)
        g.ndata["pos"] = torch.randn(n, 3, generator=gen)
        g.edata["feat"] = torch.randint(0, 4, (m, 2), generator=gen)
        graphs.append(g)
    return graphs


def _assert_same(a, b):
    assert a.num_nodes() == b.num_nodes() and a.idtype == b.idtype
    assert all(torch.equal(x, y) for x, y in zip(a.edges(), b.edges()))
    assert torch.equal(a.batch_num_nodes(), b.batch_num_nodes())
    assert torch.equal(a.batch_num_edges(), b.batch_num_edges())
    assert a.batch_size == b.batch_size
    assert set(a.ndata) == set(b.ndata) and set(a.edata) == set(b.edata)
    assert all(torch.equal(a.ndata[k], b.ndata[k]) for k in a.ndata)
    assert all(torch.equal(a.edata[k], b.edata[k]) for k in a.edata)


def test_batches_equal_dgl_batch_in_any_order():
    graphs = _graphs()
    collator = GraphCollator(graphs)
    assert collator.simple
    for order in ([0, 1, 2, 3, 4, 5], [4, 2, 0], [2], [3, 3, 1], [5, 0, 2, 4]):
        _assert_same(collator.batch(order), dgl.batch([graphs[i] for i in order]))


def test_int32_graphs_keep_their_index_type():
    graphs = [g.int() for g in _graphs()]
    batch = GraphCollator(graphs).batch([0, 4, 1])
    assert batch.idtype == torch.int32
    _assert_same(batch, dgl.batch([graphs[i] for i in (0, 4, 1)]))


def test_graphs_with_different_feature_keys_go_through_dgl_batch():
    graphs = _graphs()
    del graphs[1].ndata["pos"]
    collator = GraphCollator(graphs)
    assert not collator.simple
    _assert_same(collator.batch([0, 2]), dgl.batch([graphs[0], graphs[2]]))  # dgl.batch itself
