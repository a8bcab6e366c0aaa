"""GIN's and GCN's fused neighbour sum (``ops.copy_u_sum`` with its self term, ``kernels/csrc/u_sum.cpp``) and
GraphSAGE's mean (``ops.copy_u_mean``, the same kernel): values and gradients against float64 torch code on the
graphs that break kernels, against the unfused paths, and GIN, GCN and GraphSAGE training unchanged against the code
they replaced."""
from __future__ import annotations

import pytest
import torch

from gpse_dgl import _env  # noqa: F401
import dgl

from gpse_dgl import kernels
from gpse_dgl.kernels import cpu
from gpse_dgl.kernels.csr import EdgeCSR
from gpse_dgl.kernels import u_sum as kernel
from gpse_dgl.nn import ops

from _molecule_batches import losses_against_old_forward
from test_relu_sum import _graphs, assert_same_on_any_thread_count, neighbour_sum_cases

needs_kernel = pytest.mark.skipif(cpu.kernel() is None, reason=cpu.describe())


def _reference(graph, x, self_weight=0.0):
    src, dst = (t.long() for t in graph.edges())
    summed = torch.zeros(graph.num_nodes(), x.shape[1], dtype=torch.float64).index_add(0, dst, x.double()[src])
    return summed + self_weight * x.double()


@neighbour_sum_cases
def test_values_and_gradients_match_float64(case, dtype, tol, self_weight):
    _, graph = case
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(graph.num_nodes(), 19, generator=gen).to(dtype).requires_grad_()  # 19: not a vector width
    assert kernel.supports(graph, x)
    out = ops.copy_u_sum(graph, x, backend="torch", self_weight=self_weight)
    assert out.dtype == torch.float32 and out.shape == x.shape
    x64 = x.detach().double().requires_grad_()
    ref = _reference(graph, x64, self_weight)
    if not ref.numel():
        return
    weight = torch.randn(out.shape, generator=gen)
    (grad,) = torch.autograd.grad((out * weight).sum(), x)
    (ref_grad,) = torch.autograd.grad((ref * weight.double()).sum(), x64)
    assert grad.dtype == dtype
    for got, want in ((out, ref), (grad, ref_grad)):
        assert (got.double() - want).abs().max() <= tol * (1 + want.abs().max())


@needs_kernel
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("case", list(_graphs()), ids=lambda c: c[0])
def test_the_mean_matches_float64(case, dtype, tol):
    _, graph = case
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(graph.num_nodes(), 19, generator=gen).to(dtype).requires_grad_()
    out = ops.copy_u_mean(graph, x, backend="torch")
    assert out.dtype == torch.float32 and out.shape == x.shape
    x64 = x.detach().double().requires_grad_()
    ref = _reference(graph, x64) / graph.in_degrees().clamp(min=1).double().unsqueeze(1)
    if not ref.numel():
        return
    weight = torch.randn(out.shape, generator=gen)
    (grad,) = torch.autograd.grad((out * weight).sum(), x)
    (ref_grad,) = torch.autograd.grad((ref * weight.double()).sum(), x64)
    for got, want in ((out, ref), (grad, ref_grad)):
        assert (got.double() - want).abs().max() <= tol * (1 + want.abs().max())


@needs_kernel
def test_a_block_sums_into_its_destinations():
    graph = dgl.graph((torch.randint(0, 40, (150,)), torch.randint(0, 40, (150,))), num_nodes=40)
    block = dgl.to_block(dgl.in_subgraph(graph, torch.arange(15)), torch.arange(15))  # sources first 15: dst
    x = torch.randn(block.num_src_nodes(), 8, requires_grad=True)
    out = ops.copy_u_sum(block, x, backend="torch", self_weight=2.0)
    src, dst = (t.long() for t in block.edges())
    ref = 2.0 * x[:15] + torch.zeros(15, 8).index_add(0, dst, x[src])
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), x)[0], torch.autograd.grad(ref.sum(), x)[0])
    mean = ops.copy_u_mean(block, x, backend="torch")
    ref = torch.zeros(15, 8).index_add(0, dst, x[src]) / block.in_degrees().clamp(min=1).float().unsqueeze(1)
    torch.testing.assert_close(mean, ref)
    torch.testing.assert_close(torch.autograd.grad(mean.sum(), x)[0], torch.autograd.grad(ref.sum(), x)[0])


@needs_kernel
@pytest.mark.parametrize("op", ["copy_u_sum", "copy_u_mean"])
@pytest.mark.parametrize("backend", ["torch", "dgl"])
def test_the_kernel_agrees_with_the_unfused_paths(monkeypatch, backend, op):
    gen = torch.Generator().manual_seed(6)
    graph = dgl.graph((torch.randint(0, 30, (200,), generator=gen), torch.randint(0, 30, (200,), generator=gen)),
                      num_nodes=30)
    x = torch.randn(30, 8, generator=gen, requires_grad=True)
    options = {"self_weight": 0.5} if op == "copy_u_sum" else {}

    def output_and_grad(backend):
        out = getattr(ops, op)(graph, x, backend=backend, **options)
        return out, torch.autograd.grad((out * out).sum(), x)[0]

    fused = output_and_grad("torch")
    monkeypatch.setattr(kernels, "run", lambda *args, **kwargs: None)  # no kernel: the torch / DGL ops
    for a, b in zip(fused, output_and_grad(backend)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("kernel_runs", [True, False])
@pytest.mark.parametrize("op", ["copy_u_sum", "copy_u_mean"])
@pytest.mark.parametrize("large", [False, True])
def test_auto_takes_the_kernel_up_to_its_limit_and_the_size_rule_beyond(monkeypatch, op, kernel_runs, large):
    """``"auto"`` sends the sum and the mean to the kernel above ``SMALL_GRAPH_EDGES`` too, up to
    ``KERNEL_GRAPH_EDGES``; beyond it, or where no kernel runs, DGL sums a large graph."""
    monkeypatch.delenv("GPSE_DGL_BACKEND", raising=False)
    edges = (kernels.KERNEL_GRAPH_EDGES if large else kernels.SMALL_GRAPH_EDGES) + 1
    nodes = edges // 8
    graph = dgl.graph((torch.randint(0, nodes, (edges,)), torch.randint(0, nodes, (edges,))), num_nodes=nodes)
    x = torch.randn(nodes, 8, requires_grad=True)
    ran, by_dgl = [], []
    real_run, real_dgl_op = kernels.run, getattr(dgl.ops, op)
    monkeypatch.setattr(kernels, "run", lambda *args, **kwargs: (ran.append(1) or real_run(*args, **kwargs))
                        if kernel_runs else None)
    monkeypatch.setattr(dgl.ops, op, lambda *args: by_dgl.append(1) or real_dgl_op(*args))
    out = getattr(ops, op)(graph, x)
    takes_kernel = kernel_runs and not large
    assert (bool(ran), bool(by_dgl)) == (takes_kernel, not takes_kernel)
    reference = _reference(graph, x.detach())
    if op == "copy_u_mean":
        reference = reference / graph.in_degrees().clamp(min=1).double().unsqueeze(1)
    torch.testing.assert_close(out, reference.float(), rtol=1e-5, atol=1e-4)


@needs_kernel
def test_the_result_does_not_depend_on_the_number_of_threads():
    graph = dgl.graph((torch.randint(0, 500, (6000,)), torch.randint(0, 500, (6000,))), num_nodes=500)
    x = torch.randn(500, 64, requires_grad=True)

    def compute():
        out = ops.copy_u_sum(graph, x, backend="torch", self_weight=1.0)
        mean = ops.copy_u_mean(graph, x, backend="torch")
        return out, mean, torch.autograd.grad((out * out).sum() + (mean * mean).sum(), x)[0]

    assert_same_on_any_thread_count(compute)


@needs_kernel
def test_nothing_per_edge_is_kept_for_backward():
    graph = dgl.graph((torch.randint(0, 100, (1000,)), torch.randint(0, 100, (1000,))), num_nodes=100)
    x = torch.randn(100, 16, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        ops.copy_u_sum(graph, x, backend="torch", self_weight=1.0)
    csr = EdgeCSR.of(graph)
    assert len(saved) == 2 and saved[0] is csr.src_indptr and saved[1] is csr.src_dst


def _old_gin_forward(self, graph, feat):
    """``GINConv.forward`` before the fused sum: gather and ``index_add_``, the self term added after."""
    src, dst = ops.edge_index(graph, feat.device)
    neighbours = torch.zeros(graph.num_dst_nodes(), feat.shape[1]).index_add_(0, dst, feat.float().index_select(0, src))
    h = (1 + self.eps) * feat + neighbours
    return self.apply_func(h)


def test_gin_training_losses_equal_the_old_path(monkeypatch):
    from gpse_dgl.nn.models.gin_layer import GINConv

    new, old = losses_against_old_forward(monkeypatch, "gin", GINConv, _old_gin_forward)
    torch.testing.assert_close(torch.tensor(new), torch.tensor(old), rtol=1e-5, atol=0)


def test_gcn_training_losses_equal_the_torch_path(monkeypatch):
    from gpse_dgl.nn.models.gcn_layer import GCNConv

    def torch_path(self, graph, feat):  # today's forward with no kernel: gathers and index_add_
        monkeypatch.setattr(kernels, "run", lambda *args, **kwargs: None)
        return fused_forward(self, graph, feat)

    fused_forward = GCNConv.forward
    new, old = losses_against_old_forward(monkeypatch, "gcn", GCNConv, torch_path)
    torch.testing.assert_close(torch.tensor(new), torch.tensor(old), rtol=1e-5, atol=0)


def test_sage_training_losses_equal_the_torch_path(monkeypatch):
    from gpse_dgl.nn.models.sage_layer import SAGEConv

    def torch_path(self, graph, feat):  # today's forward with no kernel: gathers, index_add_ and a division
        monkeypatch.setattr(kernels, "run", lambda *args, **kwargs: None)
        return fused_forward(self, graph, feat)

    fused_forward = SAGEConv.forward
    new, old = losses_against_old_forward(monkeypatch, "graphsage", SAGEConv, torch_path)
    torch.testing.assert_close(torch.tensor(new), torch.tensor(old), rtol=1e-5, atol=0)


@needs_kernel
def test_the_shared_csr_matches_a_sort_of_the_edges():
    gen = torch.Generator().manual_seed(7)
    graph = dgl.graph((torch.randint(0, 30, (400,), generator=gen), torch.randint(0, 25, (400,), generator=gen)),
                      num_nodes=30)
    csr = EdgeCSR.of(graph)
    assert EdgeCSR.of(graph) is csr  # built once per graph object
    src, dst = (t.long() for t in graph.edges())
    for key, other, indptr, others, eids in ((dst, src, csr.dst_indptr, csr.dst_src, csr.dst_eid),
                                             (src, dst, csr.src_indptr, csr.src_dst, csr.src_eid)):
        order = torch.argsort(key, stable=True)
        assert torch.equal(eids, order) and torch.equal(others, other[order])
        assert torch.equal(indptr[1:], torch.cumsum(torch.bincount(key, minlength=30), 0)) and indptr[0] == 0
    with pytest.raises(RuntimeError, match="destination node 5 is not below 5"):
        cpu.kernel().edge_csr(torch.tensor([0, 1]), torch.tensor([1, 5]), 6, 5)
