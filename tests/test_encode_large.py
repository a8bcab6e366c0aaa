"""Large-graph inference: exact layer-wise == full forward; sampled with full fan-outs == exact."""
from __future__ import annotations

import pytest
import torch

import dgl

from gpse_dgl import kernels
from gpse_dgl.encode import encode, encode_dataset, encode_large, encode_sampled
from gpse_dgl.encode.graphs import as_simple_undirected
from gpse_dgl.encode import large_graph
from gpse_dgl.encode.large_graph import _plan_chunks, expand_fanouts, layerwise_forward, virtual_node_edges
from gpse_dgl.nn.gpse import GPSE


def _model(dim: int = 32, layers: int = 6, virtual_node: bool = True, seed: int = 0) -> GPSE:
    torch.manual_seed(seed)
    model = GPSE(dim_hidden=dim, num_layers=layers, virtual_node=virtual_node)
    gen = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.2)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
    return model.eval()


def _graph(n: int, m: int, seed: int = 0) -> dgl.DGLGraph:
    torch.manual_seed(seed)
    src, dst = torch.randint(0, n, (m,)), torch.randint(0, n, (m,))
    return as_simple_undirected(dgl.graph((src, dst), num_nodes=n))


@pytest.fixture(scope="module")
def mid_graph():
    # ~3k nodes with a hub, so some chunks hold a single high-degree node
    g = _graph(3000, 9000, seed=1)
    hub_src = torch.zeros(400, dtype=torch.int64)
    hub_dst = torch.arange(1, 401)
    return as_simple_undirected(dgl.add_edges(g, hub_src, hub_dst))


def test_virtual_node_layout_matches_the_encoder():
    from gpse_dgl.nn.virtual_node import add_virtual_nodes

    g = dgl.batch([dgl.graph(([0, 1], [1, 0]), num_nodes=3), dgl.graph(([0], [1]))])
    src, dst, n = virtual_node_edges(g)
    aug, info = add_virtual_nodes(g)
    assert n == aug.num_nodes() == info.num_nodes
    assert torch.equal(src, aug.edges()[0]) and torch.equal(dst, aug.edges()[1])


def test_chunk_plan_covers_every_edge_once(mid_graph):
    src, dst, n = virtual_node_edges(mid_graph)
    for budget in (97, 1000, 5000):
        chunks, (indptr, index) = _plan_chunks(src, dst, n, budget)
        assert chunks[0].start == 0 and chunks[-1].stop == n
        order = torch.sort(dst, stable=True).indices
        assert torch.equal(index, src[order]) and int(indptr[-1]) == src.numel()
        assert torch.equal(indptr.diff(), torch.bincount(dst, minlength=n))
        bare = _plan_chunks(src, dst, n, budget, blocks=False)[0]  # the packed path's plan: ranges only
        assert [(c.start, c.stop) for c in bare] == [(c.start, c.stop) for c in chunks]
        assert not any(c.blocks for c in bare)
        assert all(a.stop == b.start for a, b in zip(chunks, chunks[1:]))
        edges = sum(block.num_edges() for c in chunks for block in c.blocks)
        assert edges == src.numel()
        assert all(block.num_edges() <= budget for c in chunks for block in c.blocks)
        # the virtual node (last row, in-degree 3000) is split into pieces when it exceeds the budget
        vn_chunk = [c for c in chunks if c.start <= n - 1 < c.stop][0]
        assert len(vn_chunk.blocks) == max(1, -(-mid_graph.num_nodes() // budget))


@pytest.mark.parametrize("path", ["packed", "packed in groups", "blocks"])
@pytest.mark.parametrize("chunk_edges", [97, 4096, 1 << 20])
def test_layerwise_equals_full_forward(mid_graph, chunk_edges, path, monkeypatch):
    """Both paths of the layer-wise loop: packed sources summed by column blocks (the CPU kernel's; all rows in
    one group, or groups of at most 700 rows) and gated sums over chunks of DGL blocks (other devices, backends)."""

    if path != "blocks" and not kernels.packs_sources(torch.device("cpu"), torch.float32):
        pytest.skip("the compiled kernels are not available")
    if path != "packed":  # None: the row kernel's chunks
        rows = 700 if path == "packed in groups" else None
        monkeypatch.setattr(large_graph, "_packed_group_rows", lambda x, total, dim: rows)
    packs = []
    pack = kernels.pack_sources
    monkeypatch.setattr(kernels, "pack_sources", lambda *args, **kwargs: packs.append(1) or pack(*args, **kwargs))
    model = _model()
    x = torch.randn(mid_graph.num_nodes(), model.dim_in)
    with torch.no_grad():
        expected = model(mid_graph, x)
    got = encode_large(model, mid_graph, x=x, chunk_edges=chunk_edges)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    assert len(packs) == (0 if path == "blocks" else model.num_layers)  # the path asked for ran


def test_packed_groups_follow_the_memory_available(monkeypatch):
    """Packed sources with groups of up to 1 GiB of destination buffers where the encode's buffers fit in 80 % of
    the memory available, groups of 32,768 rows where only those fit, the row kernel's chunks where neither does;
    and the chunks off the CPU kernel's path."""
    from gpse_dgl.utils import memory

    x = torch.zeros(4, 4)
    if not kernels.packs_sources(x.device, x.dtype):
        pytest.skip("the compiled kernels are not available")
    rows, dim = 1_000_000, 512
    # h, [query | value] and the slab (d a multiple of 16 lanes: no padding), 4 bytes each
    fixed = rows * dim * 4 * 5
    large = max(large_graph.MAX_CHUNK_NODES, large_graph.PACKED_GROUP_BYTES // (dim * 8))
    for free, expected in [(None, large), (2 * fixed, large), (int((fixed + 40_000 * dim * 8) / 0.8), 32_768),
                           (fixed, None)]:
        monkeypatch.setattr(memory, "available_bytes", lambda: free)
        assert large_graph._packed_group_rows(x, rows, dim) == expected, free
    monkeypatch.setattr(memory, "available_bytes", lambda: None)
    assert large_graph._packed_group_rows(x.half(), rows, dim) is None  # fp16 rows: not the kernel's


def test_layerwise_leaves_packing_when_memory_is_short(mid_graph, monkeypatch):
    """With too little memory for packed sources the row kernel's chunks run, with the same encodings."""
    from gpse_dgl.utils import memory

    model = _model()
    x = torch.randn(mid_graph.num_nodes(), model.dim_in)
    expected = layerwise_forward(model, mid_graph, x)
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 20)
    monkeypatch.setattr(kernels, "pack_sources", lambda *args, **kwargs: pytest.fail("packed with no memory"))
    torch.testing.assert_close(layerwise_forward(model, mid_graph, x), expected, rtol=0, atol=1e-5)


def test_layerwise_batched_and_without_virtual_node():
    graphs = [_graph(n, 3 * n, seed=n) for n in (5, 40, 300)]
    batch = dgl.batch(graphs)
    for virtual_node in (True, False):
        model = _model(virtual_node=virtual_node)
        x = torch.randn(batch.num_nodes(), model.dim_in)
        with torch.no_grad():
            expected = model(batch, x)
        with torch.no_grad():
            got = layerwise_forward(model, batch, x, chunk_edges=50)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_layerwise_detects_a_wrong_weight(mid_graph):
    """The comparison above can fail: a perturbed BatchNorm statistic is noticed."""
    model = _model()
    x = torch.randn(mid_graph.num_nodes(), model.dim_in)
    with torch.no_grad():
        expected = model(mid_graph, x)
        model.norms[2].bias[0] += 0.5
        got = layerwise_forward(model, mid_graph, x)
    assert (got - expected).abs().max() > 1e-3


def test_encode_switches_to_layerwise_above_the_memory_budget(mid_graph):
    model = _model()
    plain = encode(model, mid_graph, seed=4)
    small_budget = encode(model, mid_graph, seed=4, max_forward_bytes=1)
    torch.testing.assert_close(small_budget, plain, rtol=0, atol=1e-5)
    out = encode_dataset(model, [mid_graph, _graph(20, 40)], seed=4, progress=False, max_forward_bytes=1 << 20)
    torch.testing.assert_close(out[0], plain, rtol=0, atol=1e-5)


def test_sampled_with_full_fanouts_is_exact():
    g = _graph(400, 1600, seed=2)
    model = _model(layers=4)
    x = torch.randn(g.num_nodes(), model.dim_in)
    with torch.no_grad():
        expected = model(g, x)
    max_in_degree = g.num_nodes()  # the virtual node's
    for fanouts in ((max_in_degree,), (-1,)):
        got = encode_sampled(model, g, x=x, fanouts=fanouts, batch_size=128)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_sampled_subset_of_nodes():
    g = _graph(300, 1200, seed=5)
    model = _model(layers=3)
    x = torch.randn(g.num_nodes(), model.dim_in)
    full = encode_sampled(model, g, x=x, fanouts=(-1,))
    nodes = torch.tensor([299, 0, 17, 150])
    torch.testing.assert_close(encode_sampled(model, g, x=x, fanouts=(-1,), nodes=nodes, batch_size=3),
                               full[nodes], rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="repeat"):
        encode_sampled(model, g, x=x, nodes=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="in \\[0, 300\\)"):
        encode_sampled(model, g, x=x, nodes=torch.tensor([300]))


def test_sampled_small_fanouts_approximate_and_reproducible():
    g = _graph(400, 1600, seed=2)
    model = _model(layers=4)
    exact = encode(model, g, seed=0)
    a = encode_sampled(model, g, fanouts=(3, 2), batch_size=100, seed=0)
    b = encode_sampled(model, g, fanouts=(3, 2), batch_size=100, seed=0)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert torch.isfinite(a).all() and (a - exact).abs().max() > 1e-3
    assert (a - encode_sampled(model, g, fanouts=(3, 2), batch_size=100, seed=1)).abs().max() > 1e-4


def test_expand_fanouts():
    assert expand_fanouts((30, 20, 10, 5), 20) == [30, 20, 10] + [5] * 17
    assert expand_fanouts([7], 3) == [7, 7, 7]
    assert expand_fanouts((30, 20, 10, 5), 2) == [30, 20]
    for bad in ((), (0,), (-2,)):
        with pytest.raises(ValueError):
            expand_fanouts(bad, 3)


def test_an_empty_graph_without_virtual_nodes_gives_no_rows():
    """No chunk at all (no node, no virtual node): an empty result, not an error."""
    encoder = GPSE(dim_in=4, dim_hidden=8, num_layers=2, virtual_node=False).eval()
    out = layerwise_forward(encoder, dgl.graph(([], []), num_nodes=0), torch.zeros(0, 4))
    assert out.shape == (0, 8)
