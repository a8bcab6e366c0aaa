"""PE encoder (GPSE's GNNNodeEncoder processing) and its concatenation to the node embedding."""
import pytest
import torch
from torch import nn

import gpse_dgl  # noqa: F401
import dgl

from gpse_dgl.nn.feature_encoders import LinearEncoder
from gpse_dgl.nn.models import build_model
from gpse_dgl.nn.pe_encoder import NodeEncoderWithPE, PEEncoder


def linear_widths(module):
    return [(m.in_features, m.out_features) for m in module.modules() if isinstance(m, nn.Linear)]


def test_linear_encoder_shape_and_structure():
    enc = PEEncoder(512, 20, model="Linear")  # case-insensitive, as in GPSE configs
    assert linear_widths(enc) == [(512, 20)]
    assert isinstance(enc.norm, nn.Identity)
    assert enc(torch.randn(7, 512)).shape == (7, 20)


@pytest.mark.parametrize("n_layers, widths", [
    (1, [(16, 8)]),
    (2, [(16, 16), (16, 8)]),
    (3, [(16, 16), (16, 16), (16, 8)]),
])
def test_mlp_widths_and_final_relu(n_layers, widths):
    enc = PEEncoder(16, 8, model="mlp", n_layers=n_layers)
    assert linear_widths(enc) == widths  # in -> 2 dim_pe -> ... -> dim_pe
    assert isinstance(enc.net[-1], nn.ReLU)  # GPSE's MLP ends with ReLU
    assert (enc(torch.randn(50, 16)) >= 0).all()


def test_processing_order_is_dropout_batchnorm_network_dropout():
    enc = PEEncoder(6, 4, model="mlp", batchnorm=True, dropout_in=0.2, dropout_out=0.1)
    calls = []
    for name in ("dropout_in", "norm", "net", "dropout_out"):
        getattr(enc, name).register_forward_hook(lambda module, args, out, name=name: calls.append(name))
    enc(torch.randn(5, 6))
    assert calls == ["dropout_in", "norm", "net", "dropout_out"]


def test_batchnorm_normalises_the_raw_encoding():
    torch.manual_seed(0)
    enc = PEEncoder(3, 2, model="linear", batchnorm=True).train()
    pe = 5.0 + 3.0 * torch.randn(64, 3)
    normalised = (pe - pe.mean(0)) / torch.sqrt(pe.var(0, unbiased=False) + enc.norm.eps)
    torch.testing.assert_close(enc(pe), enc.net(normalised), atol=1e-5, rtol=1e-5)


def test_dropouts_act_in_training_only():
    pe = torch.randn(10, 4)
    enc = PEEncoder(4, 3, model="linear", dropout_in=1.0)
    enc.train()
    assert torch.allclose(enc(pe), enc.net.bias.expand(10, 3))  # every raw value dropped
    enc.eval()
    torch.testing.assert_close(enc(pe), enc.net(pe))
    enc = PEEncoder(4, 3, model="linear", dropout_out=1.0).train()
    assert torch.count_nonzero(enc(pe)) == 0


def test_argument_errors():
    with pytest.raises(ValueError, match="unknown PE encoder model"):
        PEEncoder(4, 2, model="transformer")
    with pytest.raises(ValueError, match="n_layers"):
        PEEncoder(4, 2, model="mlp", n_layers=0)
    with pytest.raises(ValueError, match=r"\(num_nodes, 4\)"):
        PEEncoder(4, 2)(torch.randn(3, 5))


def test_reset_parameters_reinitialises():
    enc = PEEncoder(4, 3, model="mlp", batchnorm=True)
    with torch.no_grad():
        for p in enc.parameters():
            p.fill_(7.0)
    enc.reset_parameters()
    assert not any(torch.all(p == 7.0) for p in enc.parameters())


def test_node_encoder_with_pe_concatenates_node_then_pe():
    node_encoder = LinearEncoder(5, 12)
    pe_encoder = PEEncoder(6, 4, model="linear").eval()
    enc = NodeEncoderWithPE(node_encoder, pe_encoder)
    x, pe = torch.randn(3, 5), torch.randn(3, 6)
    out = enc(x, pe)
    assert out.shape == (3, 16)
    torch.testing.assert_close(out[:, :12], node_encoder(x))
    torch.testing.assert_close(out[:, 12:], pe_encoder(pe))
    with pytest.raises(ValueError, match="pass pe="):
        enc(x)
    with pytest.raises(ValueError, match="without pe_encoder"):
        NodeEncoderWithPE(node_encoder)(x, pe)


def test_model_splits_hidden_width_between_features_and_pe():
    g = dgl.graph(([0, 1, 2], [1, 2, 0]))
    model = build_model("gin", dim_in=5, dim_out=1, dim_hidden=32, pe_encoder=PEEncoder(10, 8)).eval()
    assert model.input_encoder.node_encoder.out_features == 32 - 8
    x, pe = torch.randn(3, 5), torch.randn(3, 10)
    assert not torch.allclose(model(g, x, pe=pe), model(g, x, pe=pe + 1.0))  # the PE reaches the output


def test_batchnorm_takes_a_training_batch_of_one_row():
    """One row in training: running statistics, unchanged; more rows: exactly nn.BatchNorm1d."""
    from gpse_dgl.nn.batch_norm import BatchNorm1d

    torch.manual_seed(0)
    norm, reference = BatchNorm1d(3).train(), nn.BatchNorm1d(3).train()
    x = torch.randn(5, 3)
    torch.testing.assert_close(norm(x), reference(x), rtol=0, atol=0)
    stats = norm.running_mean.clone(), norm.running_var.clone(), int(norm.num_batches_tracked)
    row = torch.randn(1, 3, requires_grad=True)
    out = norm(row)
    expected = (row - stats[0]) / torch.sqrt(stats[1] + norm.eps)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    assert norm.weight.grad is not None and row.grad is not None
    assert torch.equal(norm.running_mean, stats[0]) and torch.equal(norm.running_var, stats[1])
    assert int(norm.num_batches_tracked) == stats[2]
    free = BatchNorm1d(3, track_running_stats=False).train()  # no running statistics: the bias, as the limit
    assert torch.equal(free(torch.randn(1, 3)), free.bias.detach().expand(1, 3))
    with torch.no_grad():
        assert PEEncoder(4, 2, batchnorm=True).train()(torch.randn(1, 4)).shape == (1, 2)
    from gpse_dgl.nn.sync_batchnorm import SyncBatchNorm1d  # one process: the same rule

    synced = SyncBatchNorm1d(3).train()
    torch.testing.assert_close(synced(row.detach()), (row.detach() - synced.running_mean) / torch.sqrt(
        synced.running_var + synced.eps))
