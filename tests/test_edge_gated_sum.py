"""GatedGCN's fused aggregation (``ops.edge_gated_sum``, ``kernels/csrc/edge_gated_sum.cpp``): values and gradients
against float64 torch code, on the graphs that break kernels, against the unfused paths, and GatedGCN training
unchanged against the code it replaced."""
from __future__ import annotations

import pytest
import torch

from gpse_dgl import _env  # noqa: F401
import dgl

from gpse_dgl import kernels
from gpse_dgl.kernels import cpu
from gpse_dgl.kernels import edge_gated_sum as kernel
from gpse_dgl.nn import ops

from _molecule_batches import losses_against_old_forward
from test_relu_sum import _graphs, assert_same_on_any_thread_count

needs_kernel = pytest.mark.skipif(cpu.kernel() is None, reason=cpu.describe())
EPS = 1e-6


def _reference(graph, val, dst_gate, src_gate, edge_gate):
    """The aggregation and the logits in float64 with torch ops."""
    src, dst = (t.long() for t in graph.edges())
    logits = dst_gate.double()[dst] + src_gate.double()[src] + edge_gate.double()
    gate = torch.sigmoid(logits)
    zeros = torch.zeros(graph.num_nodes(), val.shape[1], dtype=torch.float64)
    numerator = zeros.index_add(0, dst, gate * val.double()[src])
    denominator = zeros.index_add(0, dst, gate)
    return numerator / (denominator + EPS), logits


def _operands(graph, d, dtype, gen):
    n, e = graph.num_nodes(), graph.num_edges()
    return [torch.randn(rows, d, generator=gen).to(dtype).requires_grad_() for rows in (n, n, n, e)]


@needs_kernel
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("case", list(_graphs()), ids=lambda c: c[0])
def test_values_and_gradients_match_float64(case, dtype, tol):
    _, graph = case
    gen = torch.Generator().manual_seed(1)
    d = 19  # not a multiple of a vector width
    operands = _operands(graph, d, dtype, gen)
    assert kernel.supports(graph, *operands)
    out, logits = ops.edge_gated_sum(graph, *operands, EPS)
    assert out.dtype == logits.dtype == torch.float32
    assert out.shape == (graph.num_nodes(), d) and logits.shape == (graph.num_edges(), d)
    w_out, w_logits = torch.randn(out.shape, generator=gen), torch.randn(logits.shape, generator=gen)
    wide = [t.detach().double().requires_grad_() for t in operands]
    ref_out, ref_logits = _reference(graph, *wide)
    if not ref_out.numel():
        return
    grads = torch.autograd.grad((out * w_out).sum() + (logits * w_logits).sum(), operands, allow_unused=True)
    ref_grads = torch.autograd.grad((ref_out * w_out.double()).sum() + (ref_logits * w_logits.double()).sum(), wide,
                                    allow_unused=True)
    assert all(g.dtype == dtype for g in grads)
    for got, want in ((out, ref_out), (logits, ref_logits), *zip(grads, ref_grads)):
        if want.numel():
            assert (got.double() - want).abs().max() <= tol * (1 + want.abs().max())


@needs_kernel
def test_gradients_through_one_output_only():
    gen = torch.Generator().manual_seed(2)
    graph = dgl.graph((torch.randint(0, 20, (90,), generator=gen), torch.randint(0, 20, (90,), generator=gen)),
                      num_nodes=20)
    operands = _operands(graph, 8, torch.float32, gen)
    wide = [t.detach().double().requires_grad_() for t in operands]
    for pick in (0, 1):  # the aggregation alone, the logits alone
        got = torch.autograd.grad(ops.edge_gated_sum(graph, *operands, EPS)[pick].sum(), operands)
        want = torch.autograd.grad(_reference(graph, *wide)[pick].sum(), wide, allow_unused=True)
        for a, b, like in zip(got, want, wide):
            torch.testing.assert_close(a.double(), torch.zeros_like(like) if b is None else b, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_rows_may_be_column_slices_of_one_projection():
    graph = dgl.graph((torch.randint(0, 20, (90,)), torch.randint(0, 20, (90,))), num_nodes=20)
    projected = torch.randn(20, 24, requires_grad=True)
    val, dst_gate, src_gate = projected.split(8, dim=1)
    edge_gate = torch.randn(90, 8, requires_grad=True)
    out, logits = ops.edge_gated_sum(graph, val, dst_gate, src_gate, edge_gate, EPS)
    grad = torch.autograd.grad(out.sum() + logits.sum(), projected)[0]
    plain = [t.detach().clone().requires_grad_() for t in (val, dst_gate, src_gate)]
    ref_out, ref_logits = ops.edge_gated_sum(graph, *plain, edge_gate, EPS)
    ref_grad = torch.cat(torch.autograd.grad(ref_out.sum() + ref_logits.sum(), plain), dim=1)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=0)


@needs_kernel
@pytest.mark.parametrize("backend", ["torch", "dgl"])
def test_the_kernel_agrees_with_the_unfused_paths(monkeypatch, backend):
    gen = torch.Generator().manual_seed(6)
    graph = dgl.graph((torch.randint(0, 30, (200,), generator=gen), torch.randint(0, 30, (200,), generator=gen)),
                      num_nodes=30)
    operands = _operands(graph, 8, torch.float32, torch.Generator().manual_seed(3))

    def outputs_and_grads(backend):
        out, logits = ops.edge_gated_sum(graph, *operands, EPS, backend=backend)
        return (out, logits, *torch.autograd.grad((out * out).sum() + logits.sum(), operands))

    fused = outputs_and_grads("torch")
    monkeypatch.setattr(kernels, "run", lambda *args, **kwargs: None)  # no kernel: the torch / DGL ops
    plain = outputs_and_grads(backend)
    for a, b in zip(fused, plain):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_the_result_does_not_depend_on_the_number_of_threads():
    graph = dgl.graph((torch.randint(0, 500, (6000,)), torch.randint(0, 500, (6000,))), num_nodes=500)
    operands = _operands(graph, 64, torch.float32, torch.Generator().manual_seed(4))

    def compute():
        out, logits = ops.edge_gated_sum(graph, *operands, EPS)
        return (out, logits, *torch.autograd.grad((out * out).sum() + logits.sum(), operands))

    assert_same_on_any_thread_count(compute)


@needs_kernel
def test_no_per_edge_tensor_but_the_logits_is_kept_for_backward():
    graph = dgl.graph((torch.randint(0, 100, (1000,)), torch.randint(0, 100, (1000,))), num_nodes=100)
    operands = _operands(graph, 16, torch.float32, torch.Generator().manual_seed(5))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out, logits = ops.edge_gated_sum(graph, *operands, EPS)
    per_edge = [t for t in saved if t.dim() == 2 and t.shape[0] == graph.num_edges()]
    assert len(per_edge) == 1 and per_edge[0].data_ptr() == logits.data_ptr()


def _old_gatedgcn_forward(self, graph, feat, edge_feat):
    """``GatedGCNLayer.forward`` before the fused aggregation: the gathers, sigmoid and sums as separate ops."""
    from gpse_dgl.nn.batch_norm import batch_norm_act
    from gpse_dgl.nn.models.layer_utils import dst_features

    feat_dst = dst_features(graph, feat)
    gate_logits = ops.u_add_v(graph, self.E(feat), self.D(feat_dst), backend=self.backend) + self.C(edge_feat)
    gate = torch.sigmoid(gate_logits)
    numerator = ops.u_mul_e_sum(graph, self.B(feat), gate, backend=self.backend)
    denominator = ops.copy_e_sum(graph, gate, backend=self.backend)
    h = self.A(feat_dst) + numerator / (denominator + self.eps)
    h = batch_norm_act(self.bn_node, h, relu=True, post=feat_dst if self.residual else None, dropout=self.dropout)
    e = batch_norm_act(self.bn_edge, gate_logits, relu=True, post=edge_feat if self.residual else None,
                       dropout=self.dropout)
    return h, e


def test_gatedgcn_training_losses_equal_the_old_path(monkeypatch):
    from gpse_dgl.nn.models.gatedgcn_layer import GatedGCNLayer

    new, old = losses_against_old_forward(monkeypatch, "gatedgcn", GatedGCNLayer, _old_gatedgcn_forward,
                                          edge_encoder="bond")
    torch.testing.assert_close(torch.tensor(new), torch.tensor(old), rtol=1e-5, atol=0)
