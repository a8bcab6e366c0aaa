"""The downstream layers' fused normalisation step (``nn.batch_norm.batch_norm_act``,
``kernels/csrc/batch_norm_act.cpp``): values, gradients and running statistics against torch's BatchNorm, ReLU and
adds; whole GINE and GPS training unchanged against the torch ops."""
from __future__ import annotations

import copy

import pytest
import torch

from gpse_dgl import kernels
from gpse_dgl.kernels import cpu
from gpse_dgl.nn.batch_norm import BatchNorm1d, batch_norm_act
from gpse_dgl.nn.models import build_model

from _molecule_batches import molecule_batches, train_losses

needs_kernel = pytest.mark.skipif(cpu.kernel() is None, reason=cpu.describe())


def _torch_steps(norm, x, pre, relu, post):
    out = norm(x if pre is None else x + pre)
    out = torch.relu(out) if relu else out
    return out if post is None else post + out


def _ran_the_kernel(monkeypatch):
    calls = []
    run = kernels.run
    monkeypatch.setattr(kernels, "run", lambda op, *a, **k: calls.append(op) or run(op, *a, **k))
    return calls


@needs_kernel
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("relu, with_pre, with_post", [(True, False, True), (False, True, False), (True, True, True),
                                                       (False, False, False)])
@pytest.mark.parametrize("affine", [True, False])
def test_values_gradients_and_statistics_match_torch(monkeypatch, training, relu, with_pre, with_post, affine):
    gen = torch.Generator().manual_seed(0)
    n, d = 203, 19  # rows over several blocks, a width that is not a vector's
    fused_norm = BatchNorm1d(d, affine=affine)
    with torch.no_grad():
        fused_norm.running_mean.normal_(generator=gen)
        fused_norm.running_var.uniform_(0.5, 2.0, generator=gen)
        if affine:
            fused_norm.weight.normal_(generator=gen)
            fused_norm.bias.normal_(generator=gen)
    torch_norm = copy.deepcopy(fused_norm)
    fused_norm.train(training), torch_norm.train(training)
    x = torch.randn(n, d, generator=gen)
    pre = torch.randn(n, d, generator=gen) if with_pre else None
    post = torch.randn(n, d, generator=gen) if with_post else None
    weight = torch.randn(n, d, generator=gen)

    def run(norm, steps):
        inputs = [t.clone().requires_grad_() for t in (x, pre, post) if t is not None]
        it = iter(inputs)
        args = [next(it) if t is not None else None for t in (x, pre, post)]
        out = steps(norm, args[0], args[1], relu, args[2])
        params = [p for p in norm.parameters()]
        grads = torch.autograd.grad((out * weight).sum(), inputs + params)
        return out, grads

    calls = _ran_the_kernel(monkeypatch)
    fused, fused_grads = run(fused_norm, lambda norm, x, pre, relu, post: batch_norm_act(norm, x, pre, relu, post))
    assert calls == ["batch_norm_act"]
    plain, plain_grads = run(torch_norm, _torch_steps)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    for a, b in zip(fused_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(fused_norm, name), getattr(torch_norm, name), rtol=1e-6, atol=1e-6)


@needs_kernel
def test_a_training_batch_of_one_row_uses_the_running_statistics_and_keeps_them():
    norm = BatchNorm1d(5).train()
    with torch.no_grad():
        norm.running_mean.fill_(0.5)
    before = copy.deepcopy(norm.state_dict())
    x = torch.randn(1, 5, requires_grad=True)
    y = batch_norm_act(norm, x, relu=True)
    expected = torch.nn.functional.batch_norm(x, before["running_mean"], before["running_var"], norm.weight,
                                              norm.bias, training=False)
    torch.testing.assert_close(y, torch.relu(expected))
    for key, value in norm.state_dict().items():
        assert torch.equal(value, before[key])
    y.sum().backward()
    assert norm.weight.grad is not None and x.grad is not None


@needs_kernel
def test_momentum_none_is_a_cumulative_average():
    fused, plain = BatchNorm1d(3, momentum=None), BatchNorm1d(3, momentum=None)
    for step in range(3):
        x = torch.randn(10, 3, generator=torch.Generator().manual_seed(step))
        batch_norm_act(fused, x)
        plain(x)
    torch.testing.assert_close(fused.running_mean, plain.running_mean)
    torch.testing.assert_close(fused.running_var, plain.running_var)


@needs_kernel
def test_the_result_does_not_depend_on_the_number_of_threads():
    x = torch.randn(1000, 64, requires_grad=True)
    post = torch.randn(1000, 64)
    threads, results = torch.get_num_threads(), []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            norm = BatchNorm1d(64)
            y = batch_norm_act(norm, x, relu=True, post=post)
            results.append((y, *torch.autograd.grad((y * y).sum(), (x, norm.weight)), norm.running_var))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


def _train(name, batches, steps=5, **options):
    torch.manual_seed(0)
    model = build_model(name, dim_in=None, node_encoder="atom", edge_encoder="bond", dim_out=1, dim_hidden=32,
                        num_layers=3, **options)
    # SGD, not Adam: the bias of a Linear before a BatchNorm has a gradient of rounding noise (zero in exact
    # arithmetic), which Adam's normalised first steps turn into lr-sized moves of either sign, so two correct
    # runs would part ways; SGD keeps noise at the size of noise.
    losses = train_losses(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), batches, steps)
    return model, losses


def _without_the_kernel(monkeypatch):
    run = kernels.run
    monkeypatch.setattr(kernels, "run", lambda op, *a, **k: None if op == "batch_norm_act" else run(op, *a, **k))


@pytest.mark.parametrize("name, options", [("gine", {}), ("gatedgcn", {}), ("gcn", {}),
                                           ("gps", {"local_mpnn": "gine", "global_attention": None}),
                                           ("gps", {"local_mpnn": "gatedgcn", "global_attention": "transformer"})])
def test_training_losses_and_evaluation_equal_the_torch_ops(monkeypatch, name, options):
    batches = molecule_batches()
    model, fused = _train(name, batches, **options)
    g = batches[0]
    model.eval()
    with torch.no_grad():
        fused_eval = model(g, g.ndata["x"], g.edata["e"])
    _without_the_kernel(monkeypatch)
    _, plain = _train(name, batches, **options)
    torch.testing.assert_close(torch.tensor(fused), torch.tensor(plain), rtol=1e-5, atol=0)
    with torch.no_grad():
        plain_eval = model(g, g.ndata["x"], g.edata["e"])
    torch.testing.assert_close(fused_eval, plain_eval, rtol=1e-5, atol=1e-6)


@needs_kernel
@pytest.mark.parametrize("training", [True, False])
def test_bf16_rows_are_normalised_in_float32_by_the_kernel(monkeypatch, training):
    """A bf16 Linear's output under autocast: the kernel normalises its float32 copy (not four bf16 torch ops), and
    the gradient returns to the bf16 rows as the float32 path's, rounded."""
    gen = torch.Generator().manual_seed(1)
    n, d = 150, 24
    fused_norm = BatchNorm1d(d)
    with torch.no_grad():
        fused_norm.weight.normal_(generator=gen)
        fused_norm.bias.normal_(generator=gen)
    torch_norm = copy.deepcopy(fused_norm)
    fused_norm.train(training), torch_norm.train(training)
    x16 = torch.randn(n, d, generator=gen).bfloat16().requires_grad_()
    x32 = x16.detach().float().requires_grad_()
    post, weight = torch.randn(n, d, generator=gen), torch.randn(n, d, generator=gen)
    calls = _ran_the_kernel(monkeypatch)
    fused = batch_norm_act(fused_norm, x16, relu=True, post=post)
    assert calls == ["batch_norm_act"] and fused.dtype == torch.float32
    plain = _torch_steps(torch_norm, x32, None, True, post)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    (grad16,) = torch.autograd.grad((fused * weight).sum(), x16)
    (grad32,) = torch.autograd.grad((plain * weight).sum(), x32)
    assert grad16.dtype == torch.bfloat16
    torch.testing.assert_close(grad16, grad32.bfloat16(), rtol=1e-2, atol=1e-2)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(fused_norm, name), getattr(torch_norm, name), rtol=1e-6, atol=1e-6)


class _UnderAutocast(torch.nn.Module):
    """The model's forward under the project's bf16 CPU autocast (row buckets included), its output float32."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        from gpse_dgl.utils.precision import autocast

        with autocast("bf16", "cpu"):
            return self.model(*args).float()


@needs_kernel
@pytest.mark.parametrize("name, options", [("gine", {}),
                                           ("gps", {"local_mpnn": "gine", "global_attention": None})])
def test_bf16_training_losses_follow_float32(name, options):
    batches = molecule_batches()
    _, plain = _train(name, batches, **options)
    torch.manual_seed(0)
    model = build_model(name, dim_in=None, node_encoder="atom", edge_encoder="bond", dim_out=1, dim_hidden=32,
                        num_layers=3, **options)
    low = train_losses(_UnderAutocast(model), torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), batches)
    torch.testing.assert_close(torch.tensor(low), torch.tensor(plain), rtol=0.03, atol=0)


def test_a_batch_norm_subclass_runs_its_own_forward(monkeypatch):
    """SyncBatchNorm1d's statistics span the ranks: the kernel, which sees one rank's rows, must not stand in."""
    from gpse_dgl.nn.sync_batchnorm import SyncBatchNorm1d

    calls = _ran_the_kernel(monkeypatch)
    seen = []
    monkeypatch.setattr(SyncBatchNorm1d, "forward", lambda self, x: seen.append(x.shape) or BatchNorm1d.forward(self, x))
    norm = SyncBatchNorm1d(4).train()
    x, residual = torch.randn(6, 4), torch.randn(6, 4)
    y = batch_norm_act(norm, x, relu=True, post=residual)
    assert seen == [(6, 4)] and "batch_norm_act" not in calls
    torch.testing.assert_close(y, torch.relu(torch.nn.functional.batch_norm(x, None, None, norm.weight, norm.bias,
                                                                             training=True)) + residual)
