"""Parity with PyG's ``torch_geometric.nn.GPSE`` and the authors' checkpoint layout.

A randomly initialised PyG model saved as ``{"model_state": {"model." + k: v}}`` is what the published
checkpoints look like (docs/PSE.md, "Official checkpoints"); it must load into our model and give the
same encodings and head outputs as PyG on the same inputs. PyG adds the virtual node with
``torch_geometric.transforms.VirtualNode`` (appended as the last node of every graph, zero input), as in
``precompute_GPSE``; we build the PyG batch the same way.
"""
import pytest
import torch

import dgl

pyg_nn = pytest.importorskip("torch_geometric.nn")
from torch_geometric.data import Batch, Data  # noqa: E402
import torch_geometric.transforms as T  # noqa: E402

from gpse_dgl.nn import pyg_compat  # noqa: E402
from gpse_dgl.nn.gpse import GPSE, GPSEForPretraining  # noqa: E402
from gpse_dgl.utils.errors import CheckpointError  # noqa: E402

SMALL = dict(dim_in=20, dim_inner=32, layers_mp=4, num_node_targets=5, num_graph_targets=3,
             multi_head_dim_inner=8)


def _mol_edges(n, gen):
    parents = [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]
    src, dst = list(range(1, n)), parents
    for _ in range(max(1, n // 8)):
        a, b = torch.randint(0, n, (2,), generator=gen).tolist()
        if a != b:
            src.append(a)
            dst.append(b)
    return torch.tensor(src + dst, dtype=torch.long), torch.tensor(dst + src, dtype=torch.long)


def _graphs(num, seed, lo=5, hi=40, extras=True):
    gen = torch.Generator().manual_seed(seed)
    out = []
    if extras:  # a single node and an edgeless graph
        out += [(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 1),
                (torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 4)]
    for _ in range(num):
        n = int(torch.randint(lo, hi + 1, (1,), generator=gen))
        s, d = _mol_edges(n, gen)
        out.append((s, d, n))
    return out


def _randomise_batchnorm(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(1 + 0.2 * torch.randn(m.num_features, generator=gen))
                m.bias.copy_(0.2 * torch.randn(m.num_features, generator=gen))
                m.num_batches_tracked.fill_(7)


def _authors_file(pyg_model):
    return {"model_state": {"model." + k: v.clone() for k, v in pyg_model.state_dict().items()},
            "optimizer_state": {}, "scheduler_state": {}}


def _pyg_forward(pyg_model, graphs, x):
    """PyG encoder output (rows: graph nodes then its virtual node) and head predictions."""
    datas = [T.VirtualNode()(Data(edge_index=torch.stack([s, d]), num_nodes=n)) for s, d, n in graphs]
    batch = Batch.from_data_list(datas)
    real_rows = torch.cat([torch.arange(int(batch.ptr[i]), int(batch.ptr[i + 1]) - 1) for i in range(len(graphs))])
    vn_rows = batch.ptr[1:] - 1
    batch.x = torch.zeros(batch.num_nodes, x.shape[1])
    batch.x[real_rows] = x
    with torch.no_grad():
        b = pyg_model.mp(pyg_model.pre_mp(batch.clone()))
        enc = b.x.clone()
        head = pyg_model.post_mp
        b.y = torch.zeros(b.num_nodes, head.node_target_dim)
        b.y_graph = torch.zeros(len(graphs), head.graph_target_dim)
        pred, _ = head(b)
    n = len(real_rows)
    return enc[real_rows], enc[vn_rows], pred[:n, :head.node_target_dim], pred[n:, head.node_target_dim:]


def _check_parity(pyg_model, graphs, backends=("dgl", "torch"), tol=1e-4, seed=0):
    ours = pyg_compat.load_authors_model(_authors_file(pyg_model))
    assert isinstance(ours, GPSEForPretraining) and not ours.training
    g = dgl.batch([dgl.graph((s, d), num_nodes=n) for s, d, n in graphs])
    x = torch.randn(g.num_nodes(), ours.encoder.dim_in, generator=torch.Generator().manual_seed(seed))
    ref_enc, ref_vn, ref_node, ref_graph = _pyg_forward(pyg_model, graphs, x)
    diffs = {}
    for backend in backends:
        ours.encoder.backend = backend
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                h, info = ours.encoder.forward_all(g, x)
                node_pred, graph_pred = ours.heads(h, info)
            diffs[(backend, grad)] = [float((a - b).detach().abs().max()) for a, b in (
                (info.real(h), ref_enc), (info.virtual(h), ref_vn), (node_pred, ref_node),
                (graph_pred, ref_graph))]
            assert max(diffs[(backend, grad)]) <= tol, (backend, grad, diffs[(backend, grad)])
    return ours, g, x, ref_enc, diffs


@pytest.mark.parametrize("seed", [0, 1])
def test_small_model_parity(seed):
    torch.manual_seed(seed)
    pyg_model = pyg_nn.GPSE(**SMALL)
    _randomise_batchnorm(pyg_model, seed)
    pyg_model.eval()
    ours, g, x, ref_enc, _ = _check_parity(pyg_model, _graphs(30, seed), tol=1e-5, seed=seed)
    # negative control: a small change of one layer's value weights is visible
    with torch.no_grad():
        ours.encoder.convs[1].weight[64:96] += 0.05 * torch.randn(32, 32)
        assert float((ours.encoder(g, x) - ref_enc).abs().max()) > 1e-3


def test_small_model_parity_train_mode_batch_statistics():
    """With dropout off, train-mode BatchNorm (batch statistics over all rows incl. virtual nodes)."""
    torch.manual_seed(2)
    pyg_model = pyg_nn.GPSE(**SMALL, dropout=0.0)
    graphs = _graphs(12, 2)
    ours = pyg_compat.load_authors_model(_authors_file(pyg_model))
    ours.encoder.dropout.p = 0.0
    ours.heads.dropout.p = 0.0
    pyg_model.train()
    ours.train()
    g = dgl.batch([dgl.graph((s, d), num_nodes=n) for s, d, n in graphs])
    x = torch.randn(g.num_nodes(), 20)
    ref_enc, ref_vn, ref_node, ref_graph = _pyg_forward(pyg_model, graphs, x)
    h, info = ours.encoder.forward_all(g, x)
    node_pred, graph_pred = ours.heads(h, info)
    for a, b in ((info.real(h), ref_enc), (info.virtual(h), ref_vn), (node_pred, ref_node), (graph_pred, ref_graph)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # running statistics were updated identically
    ref_bn = pyg_model.mp.layer2.post_layer[0]
    torch.testing.assert_close(ours.encoder.norms[2].running_var, ref_bn.running_var)


def test_full_default_size_parity():
    """torch_geometric.nn.GPSE() with default arguments (22,141,182 parameters) on molecule-size graphs."""
    torch.manual_seed(0)
    pyg_model = pyg_nn.GPSE()
    _randomise_batchnorm(pyg_model)
    pyg_model.eval()
    assert len(pyg_model.state_dict()) == 454
    _, _, _, _, diffs = _check_parity(pyg_model, _graphs(8, 5, lo=10, hi=40), backends=("dgl",), tol=1e-4)
    assert max(diffs[("dgl", False)]) <= 1e-4


@pytest.mark.slow
def test_full_default_size_parity_a_hundred_molecules():
    torch.manual_seed(1)
    pyg_model = pyg_nn.GPSE()
    _randomise_batchnorm(pyg_model, 1)
    pyg_model.eval()
    _check_parity(pyg_model, _graphs(100, 6, lo=5, hi=50), tol=1e-4)  # 300 took 1.5 minutes of CI's budget


# ----------------------------------------------------------------------------- checkpoint conversion
def test_state_dict_round_trip_and_pyg_load():
    torch.manual_seed(0)
    pyg_model = pyg_nn.GPSE(**SMALL)
    _randomise_batchnorm(pyg_model)
    authors = _authors_file(pyg_model)
    ours_sd = pyg_compat.load_authors_state_dict(authors)
    config = pyg_compat.authors_config(authors)
    assert config["encoder"] == {"dim_in": 20, "dim_hidden": 32, "num_layers": 4}
    assert config["heads"]["num_node_targets"] == 5 and config["heads"]["node_hidden"] == 8
    model = GPSEForPretraining.from_config(config)
    model.load_state_dict(ours_sd)
    assert int(model.encoder.norms[0].num_batches_tracked) == 7
    back = pyg_compat.to_authors_state_dict(model.state_dict())
    assert list(back) == list(authors["model_state"])
    for k, v in authors["model_state"].items():
        assert torch.equal(back[k], v), k
    fresh = pyg_nn.GPSE(**SMALL)
    fresh.load_state_dict(pyg_compat.to_authors_state_dict(model.state_dict(), prefix=""))
    # bare PyG state dict (no prefix) and the inner model_state are accepted too
    for variant in (pyg_model.state_dict(), authors["model_state"]):
        got = pyg_compat.load_authors_state_dict(variant, model=model)
        assert all(torch.equal(got[k], ours_sd[k]) for k in ours_sd)


def test_default_checkpoint_layout():
    torch.manual_seed(0)
    authors = _authors_file(pyg_nn.GPSE())
    assert len(authors["model_state"]) == 454
    sd = pyg_compat.load_authors_state_dict(authors, model=GPSEForPretraining())
    assert sum(v.numel() for k, v in sd.items() if "running" not in k and "num_batches" not in k) == 22_141_182


def test_encoder_only_state():
    """PyG's from_pretrained replaces the head with an identity: encoder keys only."""
    torch.manual_seed(0)
    pyg_model = pyg_nn.GPSE(**SMALL)
    state = {k: v for k, v in pyg_model.state_dict().items() if not k.startswith("post_mp.")}
    model = pyg_compat.load_authors_model({"model_state": {"model." + k: v for k, v in state.items()}})
    assert isinstance(model, GPSE) and model.num_layers == 4
    sd = pyg_compat.load_authors_state_dict(state, model=GPSE(dim_hidden=32, num_layers=4))
    assert "convs.0.weight" in sd
    assert set(pyg_compat.to_authors_state_dict(model.state_dict(), prefix="")) == set(state)


def _one_line(err):
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_checkpoint_errors_name_the_tensor():
    torch.manual_seed(0)
    authors = _authors_file(pyg_nn.GPSE(**SMALL))
    ms = authors["model_state"]

    missing = {"model_state": {k: v for k, v in ms.items() if k != "model.mp.layer2.layer.model.lin_value.bias"}}
    with pytest.raises(CheckpointError) as err:
        pyg_compat.load_authors_state_dict(missing)
    assert "mp.layer2.layer.model.lin_value.bias" in _one_line(err) and "missing" in str(err.value)

    extra = {"model_state": dict(ms, **{"model.mp.layer1.layer.model.lin_extra.weight": torch.zeros(2)})}
    with pytest.raises(CheckpointError) as err:
        pyg_compat.load_authors_state_dict(extra)
    assert "lin_extra.weight" in _one_line(err) and "unexpected" in str(err.value)

    bad = dict(ms)
    bad["model.mp.layer3.layer.model.lin_skip.weight"] = torch.zeros(32, 31)
    with pytest.raises(CheckpointError) as err:
        pyg_compat.load_authors_state_dict({"model_state": bad})
    assert "mp.layer3.layer.model.lin_skip.weight" in _one_line(err) and "(32, 31)" in str(err.value)

    bad_head = dict(ms)
    bad_head["model.post_mp.node_post_mps.3.model.1.model.weight"] = torch.zeros(2, 8)
    with pytest.raises(CheckpointError) as err:
        pyg_compat.load_authors_state_dict({"model_state": bad_head})
    assert "node_post_mps.3.model.1.model.weight" in _one_line(err)

    no_prefix = {"model_state": dict(ms, **{"stray": torch.zeros(1)})}
    with pytest.raises(CheckpointError) as err:
        pyg_compat.load_authors_state_dict(no_prefix)
    assert "stray" in _one_line(err)

    # fits the file, but not the model it is checked against (the model has 20 layers, the file 4)
    with pytest.raises(CheckpointError) as err:
        pyg_compat.load_authors_state_dict(authors, model=GPSEForPretraining.from_config(
            {"encoder": {"dim_hidden": 32}, "heads": {"num_node_targets": 5, "num_graph_targets": 3,
                                                       "node_hidden": 8, "graph_hidden": 32}}))
    assert "mp.layer4" in _one_line(err)

    with pytest.raises(CheckpointError) as err:
        pyg_compat.load_authors_state_dict({"model_state": {"model.x": "not a tensor"}})
    _one_line(err)
    with pytest.raises(CheckpointError) as err:
        pyg_compat.to_authors_state_dict({"encoder.pre_linear.weight": torch.zeros(2, 2)})
    assert "pre_norm" in _one_line(err)
