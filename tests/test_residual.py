"""gpse_dgl.nn.residual: the fused residual step h + normalize(relu(dropout(z))) against the torch ops it
replaces (values, gradients, dropout masks, in place), against float64, and its fallback and checks."""
import pytest
import torch
import torch.nn.functional as F

from gpse_dgl.kernels import cpu
from gpse_dgl.nn.dropout import dropout
from gpse_dgl.nn.gpse import GPSE
from gpse_dgl.nn.residual import EPS, normalized_residual, normalized_residual_


def torch_ops(h, z, p, training):
    """The step as the encoder wrote it before the fused kernel: dropout, ReLU, normalize, add."""
    y = F.normalize(F.relu(dropout(z, p, training)), p=2.0, dim=1)
    return y if h is None else h + y


def rows(n=300, d=64, seed=0):
    """h and z with rows the step treats apart: all negative (zero norm), tiny (norm below eps), huge."""
    gen = torch.Generator().manual_seed(seed)
    h, z = torch.randn(n, d, generator=gen), torch.randn(n, d, generator=gen)
    z[3] = -torch.rand(d, generator=gen)  # ReLU zeroes the row: y = 0, the result is h
    z[4] = 1e-14  # norm below eps: divided by eps
    z[5] *= 1e15  # squares near 1e30, within float32 (torch's norm, like ours, overflows past 1e19)
    return h, z


@pytest.mark.parametrize("p, training", [(0.0, True), (0.2, False), (0.2, True), (0.7, True)])
@pytest.mark.parametrize("residual", [True, False])
def test_fused_matches_torch_ops(compiled, p, training, residual):
    """Values and both gradients, the same dropout mask for the same seed (it is gpse_dgl.nn.dropout's)."""
    h, z = rows()
    h = h.requires_grad_() if residual else None
    z = z.requires_grad_()
    torch.manual_seed(7)
    ours = normalized_residual(h, z, p, training)
    torch.manual_seed(7)
    ref = torch_ops(h, z, p, training)
    assert ours.grad_fn is not None and "NormalizedResidual" in type(ours.grad_fn).__name__
    assert torch.equal(ours == (0.0 if h is None else h), ref == (0.0 if h is None else h))
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
    grad = torch.randn(ours.shape, generator=torch.Generator().manual_seed(1))
    inputs = (z,) if h is None else (h, z)
    for got, want in zip(torch.autograd.grad(ours, inputs, grad), torch.autograd.grad(ref, inputs, grad)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_against_float64(compiled):
    """Against the definition in float64 (no dropout): values and the gradient of z, including the rows
    whose norm is zero or clamped to eps."""
    h, z = rows()
    z64 = z.double().requires_grad_()
    y = F.relu(z64)
    ref = h.double() + y / y.norm(dim=1, keepdim=True).clamp_min(EPS)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    (want,) = torch.autograd.grad(ref, z64, grad)
    z32 = z.clone().requires_grad_()
    ours = normalized_residual(h, z32)
    (got,) = torch.autograd.grad(ours, z32, grad.float())
    torch.testing.assert_close(ours.double(), ref.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    assert torch.equal(ours[3], h[3])
    assert torch.all(got[3] == 0)


@pytest.mark.parametrize("training", [False, True])
def test_in_place(compiled, training):
    """normalized_residual_ writes into h where it is (a row slice of a larger state) from a column slice
    of a wider z, as layer-wise inference calls it, and returns h."""
    h, z = rows()
    state, wide = torch.randn(400, 64), torch.cat([torch.randn_like(z), z], dim=1)
    state[10:310] = h
    untouched = torch.cat([state[:10], state[310:]])
    torch.manual_seed(3)
    want = torch_ops(h, z, 0.2, training)
    torch.manual_seed(3)
    target = state[10:310]
    got = normalized_residual_(target, wide[:, 64:], 0.2, training)
    assert got is target and got.data_ptr() == state[10].data_ptr()
    torch.testing.assert_close(state[10:310], want, rtol=1e-6, atol=1e-6)
    assert torch.equal(torch.cat([state[:10], state[310:]]), untouched)


def test_threads_do_not_change_the_result(compiled):
    """Each row is one task's: the same bits with one thread and with two."""
    h, z = rows(2000, 512)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        one = normalized_residual(h, z, 0.2, True)
        torch.set_num_threads(2)
        torch.manual_seed(0)
        two = normalized_residual(h, z, 0.2, True)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


def test_fallback_is_the_torch_ops(no_kernel):
    h, z = rows()
    h.requires_grad_()
    out = normalized_residual(h, z, 0.2, False)
    assert "NormalizedResidual" not in type(out.grad_fn).__name__
    torch.testing.assert_close(out, torch_ops(h, z, 0.2, False))
    state = h.detach().clone()
    assert normalized_residual_(state, z.clone()) is state
    torch.testing.assert_close(state, torch_ops(h, z, 0.0, False).detach())


def test_other_dtypes_take_the_torch_ops(compiled):
    h, z = (t.double() for t in rows())
    out = normalized_residual(h, z)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch_ops(h, z, 0.0, False))


def test_bad_probability():
    h, z = rows()
    with pytest.raises(ValueError, match="between 0 and 1"):
        normalized_residual(h, z, 1.5, True)


def test_kernel_checks_its_arguments(compiled):
    """Absent operands are None (the input stage has no ``h``; eval keeps no ``y`` or ``norm``)."""
    kernel = cpu.kernel()
    z = torch.randn(4, 8)
    with pytest.raises(RuntimeError, match=r"^out must be float32 \(4, 8\) rows"):
        kernel.residual_forward(z, None, 0, 0.0, EPS, None, None, torch.empty(4, 8, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="h must be float32"):
        kernel.residual_forward(z, torch.randn(3, 8), 0, 0.0, EPS, None, None, torch.empty(4, 8))
    with pytest.raises(RuntimeError, match=r"p must be in \[0, 1\)"):
        kernel.residual_forward(z, None, 0, 1.0, EPS, None, None, torch.empty(4, 8))
    with pytest.raises(RuntimeError, match="norm one float32 per row"):
        kernel.residual_forward(z, None, 0, 0.0, EPS, torch.empty(4, 8), torch.empty(3), torch.empty(4, 8))
    with pytest.raises(RuntimeError, match="y and norm are given together"):
        kernel.residual_forward(z, None, 0, 0.0, EPS, torch.empty(4, 8), None, torch.empty(4, 8))
    out = torch.empty(4, 8)
    kernel.residual_forward(z, None, 0, 0.0, EPS, None, None, out)
    torch.testing.assert_close(out, torch.nn.functional.normalize(torch.relu(z), dim=1))


def test_encoder_training_runs_the_fused_step(compiled):
    """A training forward of the encoder records the fused step for the input stage and every layer."""
    import dgl

    encoder = GPSE(dim_in=4, dim_hidden=16, num_layers=3).train()
    g = dgl.graph(([0, 1, 2, 3], [1, 2, 3, 0]))
    out = encoder(g, torch.randn(4, 4))
    seen, stack = set(), [out.grad_fn]
    count = 0
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        count += "NormalizedResidual" in type(fn).__name__
        stack.extend(next_fn for next_fn, _ in fn.next_functions)
    assert count == 1 + encoder.num_layers


def test_a_nan_row_stays_nan(compiled):
    """A NaN in a row of z makes that row NaN, forward and backward, as through the torch ops (the kernel is
    built with -ffast-math, so it finds NaN by its bits), and leaves the other rows alone."""
    h, z = rows(8, 16)
    z[2, 5] = float("nan")
    z = z.requires_grad_()
    ours = normalized_residual(h, z)
    ref = torch_ops(h, z, 0.0, False)
    assert torch.isnan(ours[2]).all() and torch.isnan(ref[2]).all()
    keep = torch.arange(8) != 2
    torch.testing.assert_close(ours[keep], ref[keep], rtol=1e-6, atol=1e-6)
    (grad,) = torch.autograd.grad(ours, z, torch.ones_like(ours))
    assert torch.isnan(grad[2]).all() and not torch.isnan(grad[keep]).any()
    state = h.clone()
    normalized_residual_(state, z.detach().clone())
    assert torch.isnan(state[2]).all() and torch.equal(state[keep], ours[keep].detach())


def test_gradient_of_h_alone(compiled):
    h, z = rows()
    h.requires_grad_()
    out = normalized_residual(h, z)
    grad = torch.randn(out.shape)
    (got,) = torch.autograd.grad(out, h, grad)
    assert torch.equal(got, grad)


def test_overlapping_rows_take_the_torch_ops(compiled):
    """An expanded tensor's rows share memory: the kernel would refuse it, so the torch ops run."""
    z = torch.randn(1, 8).expand(5, 8)
    out = normalized_residual(torch.zeros(5, 8), z)
    torch.testing.assert_close(out, torch_ops(torch.zeros(5, 8), z, 0.0, False))


def test_in_place_counts_as_an_in_place_op(compiled):
    """Autograd sees the write (a tensor saved for backward and then overwritten raises, as after addcdiv_)."""
    x = torch.randn(4, 8, requires_grad=True)
    h = x.exp()  # exp saves its output for backward
    before = h._version
    normalized_residual_(h.detach(), torch.randn(4, 8))
    assert h._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        h.sum().backward()


def test_no_double_backward(compiled):
    h, z = rows(8, 8)
    z.requires_grad_()
    (grad,) = torch.autograd.grad(normalized_residual(h, z).square().sum(), z, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|differentiable"):
        grad.sum().backward()
