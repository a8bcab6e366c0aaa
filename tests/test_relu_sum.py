"""GINE's fused aggregation (``ops.relu_sum``, ``kernels/csrc/relu_sum.cpp``): values and gradients against the torch
path, on the graphs that break kernels, and GINE training unchanged against the code it replaced."""
from __future__ import annotations

import pytest
import torch

from gpse_dgl import _env  # noqa: F401
import dgl

from gpse_dgl import kernels
from gpse_dgl.kernels import cpu
from gpse_dgl.kernels.csr import EdgeCSR
from gpse_dgl.kernels import relu_sum as kernel
from gpse_dgl.nn import ops
from gpse_dgl.utils.precision import to_accumulation

from _molecule_batches import losses_against_old_forward

needs_kernel = pytest.mark.skipif(cpu.kernel() is None, reason=cpu.describe())


def _graphs():
    g = torch.Generator().manual_seed(0)
    hub_src = torch.arange(1, 3001)
    yield "isolated nodes, self loops, multi-edges", dgl.graph(
        (torch.tensor([0, 1, 2, 2, 3, 3, 3, 0, 5, 5]), torch.tensor([1, 2, 0, 0, 3, 1, 1, 1, 1, 5])), num_nodes=8)
    yield "hub", dgl.graph((torch.cat([hub_src, torch.tensor([0])]), torch.cat([torch.zeros(3000).long(),
                                                                                  torch.tensor([7])])))
    yield "random", dgl.graph((torch.randint(0, 50, (400,), generator=g), torch.randint(0, 50, (400,), generator=g)),
                              num_nodes=53)
    yield "no edges", dgl.graph(([], []), num_nodes=4)
    yield "empty", dgl.graph(([], []), num_nodes=0)


def _reference(graph, x, e, self_weight=0.0):
    """The sum (and the self term) in float64 with torch ops."""
    src, dst = graph.edges()
    messages = torch.relu(x.double()[src.long()] + e.double())
    summed = torch.zeros(graph.num_nodes(), x.shape[1], dtype=torch.float64).index_add_(0, dst.long(), messages)
    return summed + self_weight * x.double()


def neighbour_sum_cases(test):
    """``test(case, dtype, tol, self_weight)`` on every graph of :func:`_graphs`, float32 and bfloat16 rows (each
    with its tolerance against float64) and a self term of 0 and 1.25, where the kernels are built."""
    marks = (needs_kernel, pytest.mark.parametrize("self_weight", [0.0, 1.25]),
             pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)]),
             pytest.mark.parametrize("case", list(_graphs()), ids=lambda c: c[0]))
    for mark in reversed(marks):
        test = mark(test)
    return test


@neighbour_sum_cases
def test_values_and_gradients_match_float64(case, dtype, tol, self_weight):
    _, graph = case
    gen = torch.Generator().manual_seed(1)
    d = 19  # not a multiple of a vector width
    x = torch.randn(graph.num_nodes(), d, generator=gen).to(dtype).requires_grad_()
    e = torch.randn(graph.num_edges(), d, generator=gen).to(dtype).requires_grad_()
    assert kernel.supports(graph, x, e)
    out = ops.relu_sum(graph, x, e, self_weight=self_weight)
    assert out.dtype == torch.float32 and out.shape == (graph.num_nodes(), d)
    weight = torch.randn(out.shape, generator=gen)
    grad_x, grad_e = torch.autograd.grad((out * weight).sum(), (x, e)) if out.numel() else (x, e)
    x64, e64 = x.detach().double().requires_grad_(), e.detach().double().requires_grad_()
    ref = _reference(graph, x64, e64, self_weight)
    if not ref.numel():
        return
    ref_x, ref_e = torch.autograd.grad((ref * weight.double()).sum(), (x64, e64))
    assert grad_x.dtype == dtype and grad_e.dtype == dtype
    for got, want in ((out, ref), (grad_x, ref_x), (grad_e, ref_e)):
        if want.numel():
            assert (got.double() - want).abs().max() <= tol * (1 + want.abs().max())


@needs_kernel
@pytest.mark.parametrize("backend", ["torch", "dgl"])
def test_the_kernel_agrees_with_the_unfused_paths(monkeypatch, backend):
    graph = dgl.graph((torch.randint(0, 30, (200,)), torch.randint(0, 30, (200,))), num_nodes=30)
    x, e = torch.randn(30, 8, requires_grad=True), torch.randn(200, 8, requires_grad=True)
    fused = ops.relu_sum(graph, x, e, self_weight=0.5)
    fused_grads = torch.autograd.grad(fused.sum(), (x, e))
    monkeypatch.setattr(kernels, "run", lambda *args, **kwargs: None)  # no kernel: the torch / DGL ops
    plain = ops.relu_sum(graph, x, e, backend=backend, self_weight=0.5)
    plain_grads = torch.autograd.grad(plain.sum(), (x, e))
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    for a, b in zip(fused_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def assert_same_on_any_thread_count(compute):
    """``compute()`` (a tuple of tensors) bit-equal with 1, 2 and 3 threads."""
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            results.append(compute())
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


@needs_kernel
def test_the_result_does_not_depend_on_the_number_of_threads():
    graph = dgl.graph((torch.randint(0, 500, (6000,)), torch.randint(0, 500, (6000,))), num_nodes=500)
    x, e = torch.randn(500, 64, requires_grad=True), torch.randn(6000, 64, requires_grad=True)

    def compute():
        out = ops.relu_sum(graph, x, e)
        return (out, *torch.autograd.grad((out * out).sum(), (x, e)))

    assert_same_on_any_thread_count(compute)


@needs_kernel
def test_no_per_edge_message_is_kept_for_backward():
    graph = dgl.graph((torch.randint(0, 100, (1000,)), torch.randint(0, 100, (1000,))), num_nodes=100)
    x, e = torch.randn(100, 16, requires_grad=True), torch.randn(1000, 16, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        ops.relu_sum(graph, x, e, self_weight=1.0)
    csr = EdgeCSR.of(graph)
    kept = [x, e, csr.dst_indptr, csr.dst_src, csr.dst_eid, csr.src_indptr, csr.src_dst, csr.src_eid]
    # the inputs themselves and the graph's cached CSR, nothing new per edge
    assert len(saved) == len(kept) and all(any(t is k for k in kept) for t in saved)


def _old_gine_forward(self, graph, feat, edge_feat):
    """``GINEConv.forward`` before the fused aggregation: indexing gather, DGL's ``copy_e_sum``."""
    src, _ = ops.edge_index(graph, feat.device)
    messages = torch.relu(to_accumulation(feat)[src].to(feat.dtype) + edge_feat)
    with torch.autocast("cpu", enabled=False):
        summed = dgl.ops.copy_e_sum(graph, to_accumulation(messages))
    h = (1 + self.eps) * feat + summed
    return self.apply_func(h)


def test_gine_training_losses_equal_the_old_path(monkeypatch):
    from gpse_dgl.nn.models.gine_layer import GINEConv

    new, old = losses_against_old_forward(monkeypatch, "gine", GINEConv, _old_gine_forward, steps=5, edge_encoder="bond",
                                          optimizer=lambda params: torch.optim.AdamW(params, lr=1e-2))
    torch.testing.assert_close(torch.tensor(new), torch.tensor(old), rtol=1e-5, atol=0)
