"""Encoding API: checkpoint loading (ours, authors', shipped default), eval mode, determinism."""
from __future__ import annotations

import logging
import random

import pytest
import torch

import dgl

from gpse_dgl.encode import encode, encode_dataset, load_gpse
from gpse_dgl.encode import loading
from gpse_dgl.encode.graphs import as_simple_undirected, sample_seed, is_simple_undirected
from gpse_dgl.nn.gpse import GPSE, GPSEForPretraining
from gpse_dgl.nn.pyg_compat import to_authors_state_dict
from gpse_dgl.utils.errors import CheckpointError


def _randomise_batchnorm(model: torch.nn.Module, seed: int = 0) -> None:
    """Non-trivial running statistics, so tests notice if BatchNorm runs in training mode."""
    gen = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.2)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
            module.weight.data.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
            module.bias.data.copy_(torch.randn(module.num_features, generator=gen) * 0.1)


def _tiny(dim: int = 16, layers: int = 3, seed: int = 0) -> GPSEForPretraining:
    torch.manual_seed(seed)
    model = GPSEForPretraining.from_config({"encoder": {"dim_hidden": dim, "num_layers": layers},
                                            "heads": {"num_node_targets": 3, "graph_hidden": dim}})
    _randomise_batchnorm(model, seed)
    return model.eval()


def _graphs(count: int = 12, seed: int = 0) -> list:
    rng = random.Random(seed)
    graphs = []
    for _ in range(count):
        n = rng.randint(3, 15)
        g = dgl.rand_graph(n, 2 * n)
        graphs.append(as_simple_undirected(g))
    return graphs


@pytest.fixture(scope="module")
def ours_path(tmp_path_factory):
    model = _tiny()
    path = tmp_path_factory.mktemp("ckpt") / "best.pt"
    torch.save({"format": "gpse-dgl-pretrain", "format_version": 1, "model_state": model.state_dict(),
                "model_config": model.to_config(), "epoch": 3}, path)
    return path


@pytest.fixture(scope="module")
def authors_path(tmp_path_factory):
    model = _tiny()
    path = tmp_path_factory.mktemp("ckpt") / "gpse_model_tiny_1.0.pt"
    torch.save({"model_state": to_authors_state_dict(model.state_dict()), "optimizer_state": {"state": {}},
                "scheduler_state": {}}, path)
    return path


# ------------------------------------------------------------------------------------------- loading


def test_load_ours_and_authors_give_the_original_encoder(ours_path, authors_path):
    reference = _tiny().encoder
    g = dgl.batch(_graphs())
    x = torch.randn(g.num_nodes(), reference.dim_in)
    with torch.no_grad():
        expected = reference(g, x)
    for path, fmt in ((ours_path, "gpse-dgl"), (authors_path, "authors")):
        model = load_gpse(path)
        assert isinstance(model, GPSE) and not model.training
        assert model.checkpoint_info.format == fmt and not model.checkpoint_info.default
        torch.testing.assert_close(encode(model, g, x=x), expected, rtol=0, atol=1e-6)


def test_load_flat_config_and_bare_encoder_state(tmp_path):
    encoder = _tiny().encoder
    path = tmp_path / "flat.pt"
    flat = dict(encoder.to_config(), num_node_targets=51, backend=None)  # pretrain-style flat kwargs
    torch.save({"model_state": encoder.state_dict(), "model_config": flat}, path)
    model = load_gpse(path)
    assert (model.num_layers, model.dim_hidden) == (encoder.num_layers, encoder.dim_hidden)
    for key, value in encoder.state_dict().items():
        assert torch.equal(model.state_dict()[key], value)


@pytest.mark.parametrize("payload, message", [
    ({"weights": torch.zeros(3)}, "not a GPSE checkpoint"),
    ([torch.zeros(3)], "not a checkpoint"),
    ({"model_state": {"something.weight": torch.zeros(2)}}, "not a GPSE checkpoint"),
])
def test_not_a_checkpoint(tmp_path, payload, message):
    path = tmp_path / "x.pt"
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match=message) as info:
        load_gpse(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_unreadable_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(CheckpointError, match="not a GPSE checkpoint"):
        load_gpse(text)
    with pytest.raises(CheckpointError, match="not found"):
        load_gpse(tmp_path / "missing.pt")


class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_pickled_code_is_refused(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    torch.save({"model_state": {"pre_linear.weight": torch.zeros(2, 2)}, "payload": _Evil()}, path)
    with pytest.raises(CheckpointError, match=r"refused: it holds Python objects that only an unsafe load could "
                                              r"restore \(global print\)"):
        load_gpse(path)
    assert "must never run" not in capsys.readouterr().out


def test_shape_mismatch_names_the_tensor(tmp_path, ours_path, authors_path):
    state = torch.load(ours_path, weights_only=True)
    state["model_state"]["encoder.convs.1.weight"] = torch.zeros(5, 5)
    bad = tmp_path / "bad.pt"
    torch.save(state, bad)
    with pytest.raises(CheckpointError, match=r"encoder\.convs\.1\.weight|convs\.1\.weight") as info:
        load_gpse(bad)
    assert "(5, 5)" in str(info.value) and "\n" not in str(info.value)

    state = torch.load(authors_path, weights_only=True)
    state["model_state"]["model.mp.layer2.layer.model.lin_query.weight"] = torch.zeros(16, 7)
    torch.save(state, bad)
    with pytest.raises(CheckpointError, match=r"mp\.layer2\.layer\.model\.lin_query\.weight"):
        load_gpse(bad)

    state = torch.load(ours_path, weights_only=True)
    del state["model_state"]["encoder.norms.0.running_var"]
    torch.save(state, bad)
    with pytest.raises(CheckpointError, match=r"norms\.0\.running_var"):
        load_gpse(bad)


def test_default_checkpoint(monkeypatch, tmp_path, ours_path, caplog):
    missing = tmp_path / "assets" / "gpse_quickstart.pt"
    monkeypatch.setattr(loading, "default_checkpoint_path", lambda: missing)
    with pytest.raises(CheckpointError, match="shipped default .* is missing"):
        load_gpse(None)
    monkeypatch.setattr(loading, "default_checkpoint_path", lambda: ours_path)
    with caplog.at_level(logging.INFO, logger="gpse_dgl.encode"):
        model = load_gpse(None)
    assert model.checkpoint_info.default
    assert any("shipped with gpse-dgl" in r.getMessage() and str(ours_path) in r.getMessage()
               for r in caplog.records)


def test_shipped_asset_loads_if_present():
    assert loading.default_checkpoint_path().is_file()
    model = load_gpse()
    assert model.checkpoint_info.default and not model.training


# ------------------------------------------------------------------------------------------- eval mode


def test_encode_uses_eval_mode_and_restores_the_flag():
    model = _tiny().encoder
    g = dgl.batch(_graphs())
    expected = encode(model, g, seed=1)
    model.train()
    got = encode(model, g, seed=1)
    assert model.training  # restored
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    with torch.no_grad():  # sanity: training mode (batch statistics, dropout) really differs
        assert not torch.allclose(model(g, seed=1), expected, atol=1e-3)


def test_encode_restores_each_module_flag_and_leaves_a_placed_model_where_it_is(monkeypatch):
    model = _tiny().encoder.eval()
    model.norms[0].train()  # a mixed state: restored module by module
    moves = []
    monkeypatch.setattr(type(model), "to", lambda self, *a, **k: moves.append(a) or self)
    encode(model, dgl.batch(_graphs()), seed=1, device="cpu")
    assert moves == []  # already on the device: not moved (nor its modules walked by .to) per batch
    assert model.norms[0].training and not model.training and not model.norms[1].training


# ------------------------------------------------------------------------------------------- determinism


def test_batch_size_and_order_do_not_change_encodings():
    model = _tiny().encoder
    graphs = _graphs(40)
    reference = encode_dataset(model, graphs, batch_size=40, seed=3, progress=False)
    order = list(range(len(graphs)))
    random.Random(0).shuffle(order)
    for batch_size in (1, 7):
        shuffled = encode_dataset(model, [graphs[i] for i in order], batch_size=batch_size, seed=3, progress=False)
        for position, index in enumerate(order):
            torch.testing.assert_close(shuffled[position], reference[index], rtol=0, atol=1e-6)
    batched = encode(model, dgl.batch(graphs), seed=3, batch_size=5)
    torch.testing.assert_close(batched, torch.cat(reference), rtol=0, atol=1e-6)


def test_seeds_samples_and_given_features():
    model = _tiny().encoder
    g = dgl.batch(_graphs(6))
    a, b = encode(model, g, seed=0), encode(model, g, seed=1)
    assert (a - b).abs().max() > 1e-3
    assert not torch.equal(encode(model, g, seed=None), encode(model, g, seed=None))
    mean = encode(model, g, seed=5, samples=3)
    manual = torch.stack([encode(model, g, seed=sample_seed(5, k)) for k in range(3)]).mean(0)
    torch.testing.assert_close(mean, manual, rtol=0, atol=1e-6)
    torch.testing.assert_close(encode(model, g, seed=5, samples=1), encode(model, g, seed=5), rtol=0, atol=0)
    x = torch.randn(g.num_nodes(), model.dim_in)
    torch.testing.assert_close(encode(model, g, x=x), encode(model, g, x=x.clone()), rtol=0, atol=0)
    assert (encode(model, g, x=x) - encode(model, g, x=x + 0.1)).abs().max() > 1e-4
    with pytest.raises(ValueError, match="shape"):
        encode(model, g, x=x[:-1])
    with pytest.raises(ValueError, match="samples"):
        encode(model, g, x=x, samples=2)


def test_directed_input_is_symmetrised_by_default():
    model = _tiny().encoder
    directed = dgl.graph(([0, 1, 2, 3, 3], [1, 2, 3, 0, 3]))  # a directed 4-cycle with a self-loop
    undirected = dgl.graph(([0, 1, 1, 2, 2, 3, 3, 0], [1, 0, 2, 1, 3, 2, 0, 3]))
    assert not is_simple_undirected(directed) and is_simple_undirected(undirected)
    torch.testing.assert_close(encode(model, directed), encode(model, undirected), rtol=0, atol=1e-6)
    assert (encode(model, directed, undirected=False) - encode(model, undirected)).abs().max() > 1e-4


def test_symmetrising_keeps_batch_layout_and_node_data():
    g1, g2 = dgl.graph(([0, 1], [1, 2]), num_nodes=4), dgl.graph(([0, 0], [1, 1]), num_nodes=2)
    batch = dgl.batch([g1, g2])
    batch.ndata["feat"] = torch.arange(6.0)
    out = as_simple_undirected(batch)
    assert out.batch_num_nodes().tolist() == [4, 2] and out.batch_num_edges().tolist() == [4, 2]
    assert torch.equal(out.ndata["feat"], batch.ndata["feat"])
    assert [m.num_edges() for m in dgl.unbatch(out)] == [4, 2]
    assert as_simple_undirected(out) is out


def test_encode_dataset_store_and_empty_graph():
    model = _tiny().encoder
    graphs = _graphs(3) + [dgl.graph(([], []), num_nodes=2)]
    out = encode_dataset(model, graphs, batch_size=2, store="gpse", progress=False)
    for g, enc in zip(graphs, out):
        assert g.ndata["gpse"] is enc and enc.shape == (g.num_nodes(), model.dim_hidden)
        assert torch.isfinite(enc).all()
