import pytest
import torch
import torch.nn.functional as F

import dgl
from gpse_dgl.nn.gpse import GPSE, GPSEForPretraining
from gpse_dgl.nn.heads import GPSEHeads
from gpse_dgl.nn.random_features import graph_seed, random_node_features, structure_keys
from gpse_dgl.nn.virtual_node import VirtualNodeInfo, add_virtual_nodes, no_virtual_nodes, pool

SMALL = dict(dim_in=6, dim_hidden=16, num_layers=3)


def _mol(n, seed):
    """A random tree plus a few ring closures, both edge directions."""
    gen = torch.Generator().manual_seed(seed)
    parents = [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]
    src, dst = list(range(1, n)), parents
    for _ in range(n // 6):
        a, b = torch.randint(0, n, (2,), generator=gen).tolist()
        if a != b:
            src.append(a)
            dst.append(b)
    s, d = torch.tensor(src + dst, dtype=torch.int64), torch.tensor(dst + src, dtype=torch.int64)
    return dgl.graph((s, d), num_nodes=n)


def _batch():
    graphs = [_mol(7, 0), dgl.graph(([], []), num_nodes=0), _mol(12, 1), dgl.graph(([], []), num_nodes=3),
              _mol(1, 2), _mol(9, 3)]
    return dgl.batch(graphs)


# ----------------------------------------------------------------------------- virtual nodes
def test_add_virtual_nodes_layout():
    bg = _batch()
    aug, info = add_virtual_nodes(bg)
    n, b = bg.num_nodes(), bg.batch_size
    assert (info.num_real, info.num_graphs, info.num_virtual, info.num_nodes) == (n, b, b, n + b)
    assert aug.num_nodes() == n + b
    assert aug.num_edges() == bg.num_edges() + 2 * n
    seg = torch.repeat_interleave(torch.arange(b), bg.batch_num_nodes())
    assert info.node_graph.tolist() == seg.tolist() + list(range(b))
    assert info.real_mask.tolist() == [True] * n + [False] * b
    src, dst = aug.edges()
    e0 = bg.num_edges()
    # original edges kept first, in order
    assert torch.equal(src[:e0], bg.edges()[0]) and torch.equal(dst[:e0], bg.edges()[1])
    # every real node: exactly one edge to and one edge from its own graph's virtual node
    to_vn = (dst >= n)
    assert torch.equal(torch.sort(src[to_vn]).values, torch.arange(n))
    assert torch.equal(dst[to_vn] - n, seg[src[to_vn]])
    from_vn = src >= n
    assert torch.equal(torch.sort(dst[from_vn]).values, torch.arange(n))
    assert torch.equal(src[from_vn] - n, seg[dst[from_vn]])
    # the virtual node of the empty graph (index 1) is isolated; no VN-VN edges
    assert aug.in_degrees(n + 1) == 0 and aug.out_degrees(n + 1) == 0
    assert not torch.any((src >= n) & (dst >= n))
    # in-degree of the VN of graph b is its node count
    assert aug.in_degrees(torch.arange(n, n + b)).tolist() == bg.batch_num_nodes().tolist()
    # cached: same objects the second time
    assert add_virtual_nodes(bg)[0] is aug
    h = torch.arange(n + b, dtype=torch.float32).unsqueeze(1)
    assert info.real(h).flatten().tolist() == list(range(n))
    assert info.virtual(h).flatten().tolist() == list(range(n, n + b))


def test_add_virtual_nodes_single_graph_and_no_edges():
    g = dgl.graph(([], []), num_nodes=3)
    aug, info = add_virtual_nodes(g)
    assert aug.num_nodes() == 4 and aug.num_edges() == 6
    assert info.node_graph.tolist() == [0, 0, 0, 0]
    g0, info0 = no_virtual_nodes(_batch())
    assert info0.num_virtual == 0 and info0.num_nodes == g0.num_nodes()


@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_pool_includes_virtual_node(op):
    bg = _batch()
    _, info = add_virtual_nodes(bg)
    h = torch.randn(info.num_nodes, 5)
    out = pool(h, info, op)
    assert out.shape == (bg.batch_size, 5)
    start = 0
    for i, n_i in enumerate(bg.batch_num_nodes().tolist()):
        rows = torch.cat([h[start:start + n_i], h[info.num_real + i:info.num_real + i + 1]])
        start += n_i
        expected = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0).values}[op]
        torch.testing.assert_close(out[i], expected)


# ----------------------------------------------------------------------------- random features
def test_random_features_independent_of_batch():
    g1, g2, g3 = _mol(8, 10), _mol(5, 11), _mol(8, 12)
    a = random_node_features(dgl.batch([g1, g2, g3]), dim=7, seed=42)
    b = random_node_features(dgl.batch([g3, g1]), dim=7, seed=42)
    c = random_node_features(g2, dim=7, seed=42)
    assert torch.equal(a[:8], b[8:]) and torch.equal(a[13:], b[:8]) and torch.equal(a[8:13], c)
    assert not torch.equal(a[:8], a[13:])  # same size, different structure
    d = random_node_features(dgl.batch([g1, g1]), dim=7, seed=42)
    assert torch.equal(d[:8], d[8:])  # identical graphs, identical features (structure keys)
    e = random_node_features(dgl.batch([g1, g1]), dim=7, seed=42, graph_keys=[0, 1])
    assert not torch.equal(e[:8], e[8:])
    f = random_node_features(dgl.batch([g2, g1]), dim=7, seed=42, graph_keys=torch.tensor([5, 0]))
    assert torch.equal(f[5:], e[:8])
    assert not torch.equal(random_node_features(g1, 7, seed=43), a[:8])
    assert random_node_features(g1, 7, seed=42, device="cpu").dtype == torch.float32
    with pytest.raises(ValueError, match="graph_keys"):
        random_node_features(dgl.batch([g1, g2]), 7, seed=1, graph_keys=[1])


def test_random_features_unseeded_and_statistics():
    g = dgl.batch([_mol(30, i) for i in range(40)])
    x1 = random_node_features(g, 20)
    x2 = random_node_features(g, 20)
    assert not torch.equal(x1, x2)
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(random_node_features(g, 20, generator=gen_a), random_node_features(g, 20, generator=gen_b))
    x = random_node_features(g, 20, seed=0)
    assert abs(float(x.mean())) < 0.05 and abs(float(x.std()) - 1) < 0.05


def test_structure_keys_and_seed():
    g1 = _mol(9, 1)
    src, dst = g1.edges()
    perm = torch.randperm(g1.num_edges())
    g1_shuffled = dgl.graph((src[perm], dst[perm]), num_nodes=9)
    bigger = dgl.graph((src, dst), num_nodes=10)
    keys = structure_keys(dgl.batch([g1, g1_shuffled, bigger, dgl.graph(([], []), num_nodes=0)]))
    assert keys[0] == keys[1] != keys[2]
    assert all(0 <= k < 2 ** 64 for k in keys)
    assert graph_seed(1, keys[0]) != graph_seed(2, keys[0])
    assert 0 <= graph_seed(-5, -1) < 2 ** 63


# ----------------------------------------------------------------------------- encoder
@pytest.mark.parametrize("virtual_node", [True, False])
def test_encoder_shapes_and_unit_norm(virtual_node):
    torch.manual_seed(0)
    bg = _batch()
    enc = GPSE(**SMALL, virtual_node=virtual_node).eval()
    out = enc(bg, seed=0)
    assert out.shape == (bg.num_nodes(), 16)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(bg.num_nodes()))
    h, info = enc.forward_all(bg, seed=0)
    assert h.shape == (bg.num_nodes() + (bg.batch_size if virtual_node else 0), 16)
    torch.testing.assert_close(info.real(h), out)
    assert enc.graph_representation(bg, seed=0).shape == (bg.batch_size, 16)
    with pytest.raises(ValueError, match="x must have shape"):
        enc(bg, torch.randn(3, 6))


def test_virtual_node_changes_encoding():
    torch.manual_seed(0)
    bg = _batch()
    enc = GPSE(**SMALL).eval()
    with_vn = enc(bg, seed=1)
    enc.virtual_node = False
    without = enc(bg, seed=1)
    assert (with_vn - without).abs().max() > 1e-3


def test_fast_inference_path_equals_autograd_path():
    torch.manual_seed(0)
    bg = _batch()
    enc = GPSE(**SMALL).eval()
    for m in enc.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.normal_(0, 0.3)
            m.running_var.uniform_(0.5, 2.0)
    x = random_node_features(bg, 6, seed=3)
    slow = enc(bg, x)
    assert slow.requires_grad
    with torch.no_grad():
        fast = enc(bg, x)
    torch.testing.assert_close(fast, slow.detach(), atol=1e-6, rtol=1e-5)


def test_backends_agree_values_and_gradients():
    torch.manual_seed(0)
    bg = _batch()
    model = GPSEForPretraining(GPSE(**SMALL, dropout=0.0), GPSEHeads(dim_in=16, num_node_targets=4,
                                                                    num_graph_targets=3, node_hidden=5,
                                                                    graph_hidden=8, dropout=0.0))
    x0 = random_node_features(bg, 6, seed=0)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    results = {}
    for backend in ("dgl", "torch"):
        model.load_state_dict(state)  # same BatchNorm running statistics for both runs
        model.encoder.backend = backend
        assert all(c.backend == backend for c in model.encoder.convs)
        model.zero_grad()
        x = x0.clone().requires_grad_(True)
        node_pred, graph_pred = model(bg, x)  # train mode: batch statistics
        (node_pred.square().sum() + graph_pred.sin().sum()).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.eval()
        with torch.no_grad():
            enc_eval = model.encoder(bg, x0)
        model.train()
        results[backend] = [node_pred.detach(), graph_pred.detach(), x.grad, enc_eval] + grads
    for a, b in zip(results["dgl"], results["torch"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_permutation_equivariance():
    torch.manual_seed(0)
    graphs = [_mol(10, 20), _mol(6, 21), _mol(13, 22)]
    bg = dgl.batch(graphs)
    x = torch.randn(bg.num_nodes(), 6)
    # permute nodes inside every graph
    perm_parts, start = [], 0
    for g in graphs:
        perm_parts.append(torch.randperm(g.num_nodes()) + start)
        start += g.num_nodes()
    perm = torch.cat(perm_parts)  # new node i is old node perm[i]
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(len(perm))
    src, dst = bg.edges()
    pg = dgl.graph((inv[src], inv[dst]), num_nodes=bg.num_nodes())
    pg.set_batch_num_nodes(bg.batch_num_nodes())
    pg.set_batch_num_edges(bg.batch_num_edges())
    enc = GPSE(**SMALL).eval()
    out = enc(bg, x)
    out_p = enc(pg, x[perm])
    torch.testing.assert_close(out_p, out[perm], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(enc.graph_representation(pg, x[perm]), enc.graph_representation(bg, x),
                               atol=1e-5, rtol=1e-5)
    # the default-seeded features are per graph, so they are NOT permuted: encodings differ
    assert (enc(pg, seed=0) - enc(bg, seed=0)[perm]).abs().max() > 1e-3


def test_encoding_independent_of_batch_with_seed():
    g1, g2 = _mol(9, 30), _mol(11, 31)
    enc = GPSE(**SMALL).eval()
    a = enc(dgl.batch([g1, g2]), seed=5)
    b = enc(dgl.batch([g2, dgl.graph(([], []), num_nodes=0), g1]), seed=5)
    torch.testing.assert_close(a[:9], b[11:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a[9:], b[:11], atol=1e-5, rtol=1e-5)


def test_eval_and_train_mode_dropout_and_batchnorm():
    torch.manual_seed(0)
    bg = _batch()
    enc = GPSE(**SMALL, dropout=0.5)
    x = torch.randn(bg.num_nodes(), 6)
    a, b = enc(bg, x), enc(bg, x)
    assert (a - b).abs().max() > 1e-4  # dropout active in train mode
    assert enc.pre_norm.num_batches_tracked == 2
    enc.eval()
    torch.testing.assert_close(enc(bg, x), enc(bg, x))


# ----------------------------------------------------------------------------- heads
def test_heads_equal_separate_mlps():
    torch.manual_seed(0)
    heads = GPSEHeads(dim_in=12, num_node_targets=5, num_graph_targets=3, node_hidden=4, graph_hidden=7).eval()
    bg = _batch()
    _, info = add_virtual_nodes(bg)
    h = torch.randn(info.num_nodes, 12)
    node_pred, graph_pred = heads(h, info)
    assert node_pred.shape == (bg.num_nodes(), 5) and graph_pred.shape == (bg.batch_size, 3)
    for k in range(5):
        z = F.normalize(F.relu(h[:info.num_real] @ heads.node_hidden_weight[k].T + heads.node_hidden_bias[k]), dim=1)
        torch.testing.assert_close(node_pred[:, k], z @ heads.node_out_weight[k] + heads.node_out_bias[k])
    pooled = pool(h, info, "sum")
    z = F.normalize(F.relu(heads.graph_hidden_layer(pooled)), dim=1)
    torch.testing.assert_close(graph_pred, heads.graph_out(z))
    # the virtual node matters for the graph head
    h2 = h.clone()
    h2[info.num_real:] += 1.0
    assert (heads(h2, info)[1] - graph_pred).abs().max() > 1e-4
    torch.testing.assert_close(heads(h2, info)[0], node_pred)
    with pytest.raises(ValueError, match="pooling"):
        GPSEHeads(pooling="median")


def test_pretraining_model_defaults_config_and_reset():
    model = GPSEForPretraining()
    assert sum(p.numel() for p in model.parameters()) == 22_141_182
    assert len(model.state_dict()) == (1 + 5) + 20 * (2 + 5) + 4 + 4  # BN buffers included
    cfg = model.to_config()
    assert cfg["encoder"] == {"dim_in": 20, "dim_hidden": 512, "num_layers": 20, "dropout": 0.2,
                              "virtual_node": True}
    assert cfg["heads"]["num_node_targets"] == 51 and cfg["heads"]["num_graph_targets"] == 11
    small = GPSEForPretraining.from_config({"encoder": dict(SMALL), "heads": {"num_node_targets": 3,
                                                                           "pooling": "mean"}},
                                           backend="torch")
    assert small.heads.dim_in == 16 and small.encoder.convs[0].backend == "torch"
    clone = GPSEForPretraining.from_config(small.to_config())
    clone.load_state_dict(small.state_dict())
    bg = _batch()
    small.eval(), clone.eval()
    for a, b in zip(small(bg, seed=0), clone(bg, seed=0)):
        torch.testing.assert_close(a, b)
    before = small.encoder.convs[0].weight.clone()
    small.reset_parameters()
    assert not torch.equal(before, small.encoder.convs[0].weight)
    with pytest.raises(ValueError, match="dim_in"):
        GPSEForPretraining(GPSE(**SMALL), GPSEHeads(dim_in=8))


@pytest.mark.parametrize("bad", [dict(dim_in=0), dict(dim_hidden=0), dict(num_layers=-1)])
def test_sizes_out_of_range_are_refused(bad):
    with pytest.raises(ValueError, match=f"GPSE {next(iter(bad))} must be at least"):
        GPSE(**bad)


def test_pretraining_step_reduces_loss():
    from gpse_dgl.nn.loss import gpse_loss

    torch.manual_seed(0)
    bg = dgl.batch([_mol(8, i) for i in range(6)])
    model = GPSEForPretraining.from_config({"encoder": dict(SMALL, dropout=0.0),
                                            "heads": {"num_node_targets": 2, "num_graph_targets": 1,
                                                      "node_hidden": 8, "graph_hidden": 8, "dropout": 0.0}})
    node_true = torch.stack([bg.in_degrees().float(), torch.ones(bg.num_nodes())], 1)
    graph_true = bg.batch_num_edges().float().unsqueeze(1) / 10
    x = random_node_features(bg, 6, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        node_pred, graph_pred = model(bg, x)
        loss, _ = gpse_loss(node_pred, node_true, graph_pred, graph_true, bg.batch_num_nodes())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.7 * losses[0]


def test_fixed_input_norm_keeps_scale_and_state_dict():
    """learn_input_norm=False: the input BatchNorm's affine stays at 1 / 0 through training, the
    state dict has the same keys (authors' format unchanged) and the config round-trips."""
    model = GPSEForPretraining.from_config({"encoder": dict(SMALL, learn_input_norm=False),
                                            "heads": {"num_node_targets": 2, "num_graph_targets": 1,
                                                      "node_hidden": 8, "graph_hidden": 8}})
    assert model.to_config()["encoder"]["learn_input_norm"] is False
    assert "learn_input_norm" not in GPSE(**SMALL).to_config()  # paper-style configs unchanged
    assert set(model.state_dict()) == set(GPSEForPretraining.from_config(
        {"encoder": dict(SMALL), "heads": {"num_node_targets": 2, "num_graph_targets": 1,
                                           "node_hidden": 8, "graph_hidden": 8}}).state_dict())
    bg = _batch()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        node_pred, graph_pred = model(bg, seed=0)
        loss = node_pred.square().mean() + graph_pred.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    norm = model.encoder.pre_norm
    assert torch.equal(norm.weight, torch.ones_like(norm.weight))
    assert torch.equal(norm.bias, torch.zeros_like(norm.bias))
    assert not torch.equal(model.encoder.pre_linear.weight.grad, torch.zeros_like(model.encoder.pre_linear.weight))
    clone = GPSEForPretraining.from_config(model.to_config())
    assert not clone.encoder.pre_norm.weight.requires_grad


def test_virtual_node_info_device_cache():
    info = VirtualNodeInfo(2, 1, 1, torch.tensor([2]), torch.tensor([0, 0, 0]))
    assert info.node_graph_on("cpu") is info.node_graph


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    torch.manual_seed(0)
    bg = _batch()
    model = GPSEForPretraining.from_config({"encoder": dict(SMALL), "heads": {"num_node_targets": 3}}).eval()
    x = random_node_features(bg, 6, seed=0)
    cpu = model(bg, x)
    model.cuda()
    gpu = model(bg, x.cuda())  # the graph stays on the CPU; the torch path runs on CUDA
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(a, b.cpu(), atol=1e-4, rtol=1e-4)
    assert model.encoder(bg, seed=0).device.type == "cuda"
    gpu[0].sum().backward()


@pytest.mark.parametrize("virtual_node", [True, False])
def test_one_node_graph_trains_and_encodes(virtual_node):
    """A single-atom molecule alone in a batch: one row for every BatchNorm without the virtual node."""
    torch.manual_seed(0)
    model = GPSEForPretraining(GPSE(**SMALL, virtual_node=virtual_node),
                               GPSEHeads(dim_in=SMALL["dim_hidden"], num_node_targets=3, num_graph_targets=2))
    g = dgl.graph(([], []), num_nodes=1)
    node_pred, graph_pred = model.train()(g, seed=0)
    assert node_pred.shape == (1, 3) and graph_pred.shape == (1, 2)
    (node_pred.square().sum() + graph_pred.square().sum()).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert torch.isfinite(model.encoder.eval()(g, seed=0)).all()
