import pytest
import torch

import dgl
from gpse_dgl.nn.gated_conv import ResGatedConv


def _graph(n=20, e=70, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return dgl.graph((torch.randint(0, n, (e,), generator=gen), torch.randint(0, n, (e,), generator=gen)),
                     num_nodes=n)


def _direct(conv, g, x):
    """The layer's math written out with dense per-edge tensors."""
    d = conv.out_feats
    w, b = conv.weight, conv.kqv_bias
    k = x @ w[:d].T + b[:d]
    q = x @ w[d:2 * d].T + b[d:2 * d]
    v = x @ w[2 * d:3 * d].T + b[2 * d:]
    s = x @ w[3 * d:].T
    src, dst = g.edges()
    out = s + torch.zeros_like(s).index_add(0, dst, torch.sigmoid(k[dst] + q[src]) * v[src])
    return out + conv.bias if conv.bias is not None else out


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("backend", ["dgl", "torch"])
def test_matches_direct_formula(bias, backend):
    torch.manual_seed(0)
    g = _graph()
    conv = ResGatedConv(7, 5, bias=bias, backend=backend)
    if bias:
        torch.nn.init.normal_(conv.bias)
    x = torch.randn(20, 7)
    expected = _direct(conv, g, x)
    torch.testing.assert_close(conv(g, x), expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(conv(g, x), expected, atol=1e-5, rtol=1e-5)
        ws = torch.full((20, 4 * 5), float("nan"))
        out = conv(g, x, workspace=ws)
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        assert out.untyped_storage().data_ptr() == ws.untyped_storage().data_ptr()  # written into the buffer
        torch.testing.assert_close(conv(g, x, workspace=ws), expected, atol=1e-5, rtol=1e-5)


def test_projections_by_node_role_equal_the_layer_maps():
    """source_projections / destination_projections (what layer-wise and sampled inference use) are the
    layer's four maps, also when written into a buffer, and a buffer of the wrong dtype is refused."""
    torch.manual_seed(0)
    conv = ResGatedConv(7, 5)
    x = torch.randn(9, 7)
    d, w, b = 5, conv.weight, conv.kqv_bias
    with torch.no_grad():
        maps = [x @ w[i * d:(i + 1) * d].T + (b[i * d:(i + 1) * d] if i < 3 else 0) for i in range(4)]
        for out in (None, torch.full((9, 10), float("nan"))):
            query, value = conv.source_projections(x, out=out)
            key, skip = conv.destination_projections(x, out=None if out is None else torch.empty(9, 10))
            for got, want in zip((key, query, value, skip), maps):
                torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
        with pytest.raises(ValueError, match="out must be torch.float32"):
            conv.source_projections(x, out=torch.empty(9, 10, dtype=torch.bfloat16))


def test_one_product_in_training_equals_four(gated_path):
    """With autograd, :meth:`projections` (one product of the full weight, what a training step runs) gives
    the maps, the layer output and the gradients of weight, biases and input of the four products of
    one split weight (the path of bipartite blocks, here the same rows as two tensors)."""
    torch.manual_seed(0)
    g = _graph()
    conv = ResGatedConv(7, 5)
    torch.nn.init.normal_(conv.bias)
    x = torch.randn(20, 7)
    d, w, b = 5, conv.weight, conv.kqv_bias
    maps = conv.projections(x.requires_grad_())
    assert all(m.requires_grad for m in maps)
    for i, got in enumerate(maps):
        want = x @ w[i * d:(i + 1) * d].T + (b[i * d:(i + 1) * d] if i < 3 else 0)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    results = []
    for split in (False, True):
        conv.zero_grad()
        h = x.detach().clone().requires_grad_()
        out = conv(g, (h, h.view_as(h)) if split else h)  # a view is not `h` itself: four products
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results.append((out, conv.weight.grad.clone(), conv.kqv_bias.grad.clone(), conv.bias.grad.clone(), h.grad))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_low_precision_weights_follow_changes_of_the_weight():
    """The bf16 copy of the weight that products without autograd reuse is renewed when the weight changes
    (an optimiser step or a loaded state dict changes it in place)."""
    torch.manual_seed(0)
    g = _graph()
    conv = ResGatedConv(7, 5)
    x = torch.randn(20, 7)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        first = conv(g, x).clone()
        conv.weight.mul_(2)
        second = conv(g, x).clone()
        conv.load_state_dict({k: v.clone() for k, v in ResGatedConv(7, 5).state_dict().items()})
        third = conv(g, x)
    with torch.no_grad():
        reference = conv(g, x)  # float32, no copy involved
    assert not torch.allclose(first, second)
    torch.testing.assert_close(third, reference, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kept_bias_follows_changes_and_replacements_of_the_parameter(dtype):
    """Products without autograd reuse ``[kqv_bias, 0]`` while ``kqv_bias`` is the same tensor, unchanged: an
    optimiser step, a loaded state dict, and parameters replaced (``assign=True``, which can reuse the freed
    memory of the old one) all show."""
    torch.manual_seed(0)
    g = _graph()
    conv = ResGatedConv(7, 256)
    x = torch.randn(20, 7)

    def no_grad_output():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            return conv(g, x).clone()

    def reference():
        return conv(g, x).detach()  # autograd's path: the bias concatenated afresh

    tol = {"atol": 0, "rtol": 0} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 5e-2}
    no_grad_output()
    with torch.no_grad():
        conv.kqv_bias.add_(1.0)  # as an optimiser step does: in place, the version counter moves
    torch.testing.assert_close(no_grad_output(), reference(), **tol)
    for seed in range(5):  # two replacements between forward passes: the second can take the first's memory
        for _ in range(2):
            torch.manual_seed(seed)
            conv.load_state_dict({"kqv_bias": torch.randn(3 * 256)}, strict=False, assign=True)
            seed += 100
        torch.testing.assert_close(no_grad_output(), reference(), **tol)


def test_backends_agree_values_and_gradients():
    torch.manual_seed(1)
    g = _graph(30, 120, seed=2)
    conv = ResGatedConv(8, 6, bias=True)
    torch.nn.init.normal_(conv.bias)
    x0 = torch.randn(30, 8)
    results = {}
    for backend in ("dgl", "torch"):
        conv.backend = backend
        conv.zero_grad()
        x = x0.clone().requires_grad_(True)
        out = conv(g, x)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results[backend] = (out.detach(), x.grad, conv.weight.grad.clone(), conv.kqv_bias.grad.clone(),
                            conv.bias.grad.clone())
    for a, b in zip(results["dgl"], results["torch"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_matches_pyg_res_gated_graph_conv():
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    torch.manual_seed(3)
    g = _graph(25, 90, seed=4)
    src, dst = g.edges()
    ref = pyg_nn.ResGatedGraphConv(6, 4, bias=True)
    torch.nn.init.normal_(ref.bias)
    conv = ResGatedConv(6, 4, bias=True)
    with torch.no_grad():
        conv.weight.copy_(torch.cat([ref.lin_key.weight, ref.lin_query.weight, ref.lin_value.weight,
                                     ref.lin_skip.weight]))
        conv.kqv_bias.copy_(torch.cat([ref.lin_key.bias, ref.lin_query.bias, ref.lin_value.bias]))
        conv.bias.copy_(ref.bias)
    x = torch.randn(25, 6)
    out_ref = ref(x, torch.stack([src, dst]))
    out = conv(g, x)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    out_ref.sum().backward()
    out.sum().backward()
    grad_ref = torch.cat([ref.lin_key.weight.grad, ref.lin_query.weight.grad, ref.lin_value.weight.grad,
                          ref.lin_skip.weight.grad])
    torch.testing.assert_close(conv.weight.grad, grad_ref, atol=1e-5, rtol=1e-5)


def test_block_input_equals_full_graph_rows():
    torch.manual_seed(5)
    g = _graph(12, 40, seed=6)
    x = torch.randn(12, 3)
    conv = ResGatedConv(3, 4)
    full = conv(g, x)
    # A block whose destination nodes are nodes 0..4 with all their in-edges.
    src, dst = g.edges()
    keep = dst < 5
    block = dgl.create_block((src[keep], dst[keep]), num_src_nodes=12, num_dst_nodes=5)
    for backend in ("dgl", "torch"):
        conv.backend = backend
        torch.testing.assert_close(conv(block, x), full[:5], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(conv(block, (x, x[:5])), full[:5], atol=1e-5, rtol=1e-5)
        with torch.no_grad():
            torch.testing.assert_close(conv(block, x), full[:5].detach(), atol=1e-5, rtol=1e-5)


def test_no_edges_gives_skip_only():
    g = dgl.graph(([], []), num_nodes=4)
    conv = ResGatedConv(3, 2, bias=False)
    x = torch.randn(4, 3)
    torch.testing.assert_close(conv(g, x), x @ conv.weight[6:].T)


def test_reset_parameters():
    conv = ResGatedConv(16, 8)
    assert conv.weight.shape == (32, 16) and conv.kqv_bias.shape == (24,) and conv.bias.shape == (8,)
    with torch.no_grad():
        conv.weight.fill_(3.0)
        conv.bias.fill_(1.0)
    conv.reset_parameters()
    assert conv.weight.abs().max() <= 0.25 and conv.weight.std() > 0.05
    assert torch.count_nonzero(conv.bias) == 0
    assert ResGatedConv(4, 4, bias=False).bias is None
    assert "backend=None" in repr(conv)
