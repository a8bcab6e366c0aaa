"""gpse_dgl.train.optimizer: the optimiser of every training run (fused on the CPU), and the version counters
its fused step leaves unchanged in torch but the models' caches rely on."""
import copy

import dgl
import pytest
import torch

from gpse_dgl.nn.gpse import GPSE
from gpse_dgl.train.optimizer import build_optimizer

RECIPE = {"name": "adamw", "lr": 1e-2, "weight_decay": 1e-4}


@pytest.mark.parametrize("name, cls", [("adamw", torch.optim.AdamW), ("adam", torch.optim.Adam)])
def test_fused_on_the_cpu(name, cls):
    optimizer = build_optimizer(torch.nn.Linear(3, 2), {**RECIPE, "name": name})
    assert type(optimizer) is cls and optimizer.defaults["fused"] is True
    assert optimizer.defaults["lr"] == 1e-2 and optimizer.defaults["weight_decay"] == 1e-4


def test_same_steps_as_foreach():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    twin = copy.deepcopy(model)
    ours = build_optimizer(model, RECIPE)
    reference = torch.optim.AdamW(twin.parameters(), lr=1e-2, weight_decay=1e-4, foreach=True)
    x = torch.randn(32, 8)
    for _ in range(5):
        for net, optimizer in ((model, ours), (twin, reference)):
            optimizer.zero_grad()
            net(x).square().mean().backward()
            optimizer.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_step_is_seen_by_the_models_caches():
    """An eval forward after a training step uses the updated weights: ResGatedConv keeps its cast bias while
    the parameter's version counter is unchanged, and torch's fused step does not advance it."""
    torch.manual_seed(0)
    encoder = GPSE(dim_in=4, dim_hidden=8, num_layers=2)
    g, x = dgl.graph(([0, 1, 2], [1, 2, 0])), torch.randn(3, 4)
    optimizer = build_optimizer(encoder, RECIPE)
    encoder.eval()
    with torch.no_grad():
        encoder(g, x)  # fills the caches
    versions = [p._version for p in encoder.parameters()]
    encoder.train()
    encoder(g, x).sum().backward()
    optimizer.step()
    assert all(p._version > v for p, v in zip(encoder.parameters(), versions) if p.grad is not None)
    encoder.eval()
    fresh = copy.deepcopy(encoder)
    for conv in fresh.convs:  # without the caches
        conv.__dict__.pop("_weight_cast", None)
        conv.__dict__.pop("_bias_cast", None)
    with torch.no_grad():
        assert torch.equal(encoder(g, x), fresh(g, x))


def test_an_older_checkpoint_resumes_with_the_fused_update():
    """torch restores each group's flags as saved: a state written by a foreach optimiser (what runs saved before
    the fused update) must not turn the fused update, and its version counting, off."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    older = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4, foreach=True)
    model(torch.randn(5, 4)).sum().backward()
    older.step()
    optimizer = build_optimizer(model, RECIPE)
    optimizer.load_state_dict(older.state_dict())
    assert all(group["fused"] is True and not group["foreach"] for group in optimizer.param_groups)
    assert all(state["step"].dtype == torch.float32 and float(state["step"]) == 1.0
               for state in optimizer.state.values())
    versions = [p._version for p in model.parameters()]
    optimizer.step()
    assert all(p._version > v for p, v in zip(model.parameters(), versions))
    assert all(float(state["step"]) == 2.0 for state in optimizer.state.values())
