"""The Triton kernels of the CUDA inference path (``gpse_dgl.kernels.gpu``) against the torch path.

On a machine with CUDA they run compiled on the GPU; elsewhere in Triton's interpreter on CPU tensors
(``tests/conftest.py`` sets ``TRITON_INTERPRET=1``); without Triton they are skipped. References are the
definition in float64 and the torch ops the kernels replace.
"""
from __future__ import annotations

import importlib.util

import pytest
import torch

import dgl
from gpse_dgl.kernels import gpu
from gpse_dgl.nn import ops
from gpse_dgl.nn.batch_norm import BatchNorm1d
from gpse_dgl.nn.gpse import GPSE

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")


@pytest.fixture(scope="module")
def device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    import triton  # the module is skipped without it

    if not triton.knobs.runtime.interpret:
        pytest.skip("no CUDA, and Triton was imported before TRITON_INTERPRET=1 was set")
    return "cpu"


def _reference(graph, key, query, value) -> torch.Tensor:
    """The definition, in float64 on the CPU."""
    src, dst = (t.long() for t in graph.edges())
    key, query, value = (t.detach().double().cpu() for t in (key, query, value))
    out = torch.zeros(graph.num_dst_nodes(), value.shape[1], dtype=torch.float64)
    return out.index_add_(0, dst, torch.sigmoid(key[dst] + query[src]) * value[src])


def _graph(num_src=60, num_dst=60, num_edges=400, hub_degree=37, seed=0):
    """Random edges, one destination with ``hub_degree`` extra in-edges (not a multiple of the kernel's tile),
    and destinations without in-edges."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=gen)
    dst = torch.randint(0, max(1, num_dst - 5), (num_edges,), generator=gen)  # the last 5 get no edge
    src = torch.cat([src, torch.randint(0, num_src, (hub_degree,), generator=gen)])
    dst = torch.cat([dst, torch.zeros(hub_degree, dtype=torch.int64)])
    if num_src == num_dst:
        return dgl.graph((src, dst), num_nodes=num_src)
    return dgl.create_block((src, dst), num_src_nodes=num_src, num_dst_nodes=num_dst)


def _projection(rows, dim, dtype, device, seed=1):
    """``(key, query, value, skip)`` as the column blocks of one product, as GPSE's layers read them."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 4 * dim, generator=gen).to(device=device, dtype=dtype).split(dim, dim=1)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-4), (torch.float16, 1e-4)])
@pytest.mark.parametrize("dim", [70, 300])
def test_gated_sum_matches_the_definition(device, dtype, tol, dim):
    g = _graph()
    key, query, value, _ = _projection(g.num_nodes(), dim, dtype, device)
    got = gpu.gated_sum(g, key, query, value)
    assert got.dtype == torch.float32 and got.shape == (g.num_nodes(), dim)
    torch.testing.assert_close(got.cpu().double(), _reference(g, key, query, value), atol=tol, rtol=tol)
    assert (got[-5:] == 0).all()  # destinations without in-edges


def test_gated_sum_adds_into_out_in_place(device):
    g = _graph()
    key, query, value, skip = _projection(g.num_nodes(), 64, torch.float32, device)
    expected = skip.cpu().double() + _reference(g, key, query, value)
    got = gpu.gated_sum(g, key, query, value, out=skip)
    assert got.data_ptr() == skip.data_ptr()  # a column block of the projection, written where it is
    torch.testing.assert_close(got.cpu().double(), expected, atol=1e-5, rtol=1e-5)
    columns = skip.t().contiguous().t()  # rows a column apart: summed aside, then added
    got = gpu.gated_sum(g, key, query, value, out=columns)
    assert got.data_ptr() == columns.data_ptr()
    torch.testing.assert_close(got.cpu().double(), expected + _reference(g, key, query, value), atol=1e-5, rtol=1e-5)


def test_gated_sum_on_a_block_and_on_empty_graphs(device):
    block = _graph(num_src=80, num_dst=30, num_edges=200)
    key = _projection(30, 48, torch.float32, device)[0]
    _, query, value, _ = _projection(80, 48, torch.float32, device, seed=2)
    got = gpu.gated_sum(block, key, query, value)
    torch.testing.assert_close(got.cpu().double(), _reference(block, key, query, value), atol=1e-5, rtol=1e-5)
    empty = dgl.graph(([], []), num_nodes=4)
    key, query, value, _ = _projection(4, 16, torch.float32, device)
    assert (gpu.gated_sum(empty, key, query, value) == 0).all()
    none = dgl.graph(([], []), num_nodes=0)
    key, query, value, _ = _projection(0, 16, torch.float32, device)
    assert gpu.gated_sum(none, key, query, value).shape == (0, 16)


def test_a_graph_sums_the_same_alone_and_in_a_batch(device):
    """A row's sum depends on its in-edges only (fixed tiles, no atomics): bit for bit inside a batch."""
    graphs = [_graph(num_src=n, num_dst=n, num_edges=5 * n, hub_degree=n // 2, seed=n) for n in (20, 33, 41)]
    batch = dgl.batch(graphs)
    key, query, value, _ = _projection(batch.num_nodes(), 40, torch.bfloat16, device)
    together = gpu.gated_sum(batch, key, query, value)
    start = 0
    for g in graphs:
        rows = slice(start, start + g.num_nodes())
        alone = gpu.gated_sum(g, key[rows], query[rows], value[rows])
        assert torch.equal(alone, together[rows])
        start += g.num_nodes()


def _norm(dim, affine=True, seed=3):
    gen = torch.Generator().manual_seed(seed)
    norm = BatchNorm1d(dim, affine=affine).eval()
    norm.running_mean.normal_(0, 0.3, generator=gen)
    norm.running_var.uniform_(0.5, 1.5, generator=gen)
    if affine:
        norm.weight.data.uniform_(0.5, 1.5, generator=gen)
        norm.bias.data.normal_(0, 0.2, generator=gen)
    return norm


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dim", [70, 512])
def test_residual_update_matches_torch(device, affine, dim):
    norm = _norm(dim, affine).to(device)
    gen = torch.Generator().manual_seed(4)
    state = torch.randn(50, dim, generator=gen).to(device)
    conv = torch.randn(50, 4 * dim, generator=gen).to(device)[:, dim:2 * dim]  # a column block, as in GPSE
    conv[13] = -1e3  # a row (of the rows 10:40 below) that ReLU zeroes entirely: its update is 0, not NaN
    h = state[10:40].clone()
    with torch.no_grad():
        y = torch.relu(norm(conv[10:40].double().float()))
        expected = h + torch.nn.functional.normalize(y, dim=1)
        got = gpu.residual_update_(h, conv[10:40], norm)
    assert got.data_ptr() == h.data_ptr()
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
    assert torch.equal(got[3], state[13])


def test_supports():
    cpu = torch.zeros(3, 4)
    assert not gpu.supports_gated_sum(None, cpu, cpu, cpu)  # CPU tensors take the CPU paths
    norm = _norm(4)
    assert not gpu.supports_residual_update(cpu, cpu, norm)
    if torch.cuda.is_available():
        cuda = cpu.cuda()
        assert gpu.supports_gated_sum(None, cuda, cuda, cuda)
        assert not gpu.supports_gated_sum(None, cuda, cuda.double(), cuda)
        assert gpu.supports_residual_update(cuda, cuda.bfloat16(), norm.cuda())
        assert not gpu.supports_residual_update(cuda, cuda, norm.cuda().train())


def test_launching_on_the_cpu_without_the_interpreter_is_a_clear_error(monkeypatch):
    import triton

    from gpse_dgl.kernels import triton_kernels

    monkeypatch.setattr(triton.knobs.runtime, "interpret", False)
    with pytest.raises(ValueError, match="take CUDA tensors, got cpu"):
        triton_kernels.gated_sum_(torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
                                  torch.zeros(0, dtype=torch.int64), torch.zeros(1, 4), torch.zeros(1, 4),
                                  torch.zeros(1, 4), torch.zeros(1, 4))


def test_describe_names_the_path(monkeypatch):
    monkeypatch.setattr(gpu, "_state", {})
    monkeypatch.delenv("GPSE_DGL_NATIVE", raising=False)
    assert gpu.describe().startswith("triton: gated sum, residual update (Triton ")
    monkeypatch.setattr(gpu, "_state", {})
    monkeypatch.setenv("GPSE_DGL_NATIVE", "0")
    assert not gpu.available()
    assert gpu.describe() == "torch: GPSE_DGL_NATIVE=0"


def test_hub_destinations_are_summed_in_pieces(device, monkeypatch):
    """Destinations above HUB_DEGREE in-edges take torch ops over pieces of their edges: same sums, and a
    graph's rows still do not depend on its batch."""
    monkeypatch.setattr(gpu, "HUB_DEGREE", 16)
    monkeypatch.setattr(gpu, "HUB_PIECE", 10)
    g = _graph(hub_degree=37)  # destination 0: 37 extra in-edges, four pieces
    key, query, value, skip = _projection(g.num_nodes(), 40, torch.bfloat16, device)
    got = gpu.gated_sum(g, key, query, value)
    torch.testing.assert_close(got.cpu().double(), _reference(g, key, query, value), atol=1e-4, rtol=1e-4)
    batch = dgl.batch([_graph(num_edges=50, hub_degree=3, seed=5), g])
    rows = slice(60, 120)
    key2, query2, value2, _ = _projection(batch.num_nodes(), 40, torch.bfloat16, device, seed=7)
    key2[rows], query2[rows], value2[rows] = key, query, value
    assert torch.equal(gpu.gated_sum(batch, key2, query2, value2)[rows], got)


def test_shapes_are_checked_before_a_launch(device):
    g = _graph()
    key, query, value, _ = _projection(g.num_nodes(), 32, torch.float32, device)
    with pytest.raises(ValueError, match="dst_gate must be"):
        gpu.gated_sum(g, key[:10], query, value)
    with pytest.raises(ValueError, match="dst_gate must be"):
        gpu.gated_sum(g, key[:, :16], query, value)
    with pytest.raises(ValueError, match="out must be"):
        gpu.gated_sum(g, key, query, value, out=torch.zeros(g.num_nodes(), 16, device=device))


def _dispatch_on(device, monkeypatch):
    """Let ``ops.gated_sum`` and ``GPSE.residual_update`` take the kernels on ``device`` (the CPU runs them in
    the interpreter); returns a list that counts the kernel runs."""
    runs = []
    run = gpu._run

    def counting(launch, *args):
        runs.append(launch.__name__)
        return run(launch, *args)

    monkeypatch.setattr(gpu, "_run", counting)
    if device == "cpu":
        monkeypatch.setattr(gpu, "_on_capable_gpu", lambda tensors: True)
    return runs


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_encoder_with_and_without_the_kernels(device, monkeypatch, precision):
    """GPSE in eval mode, through ops.gated_sum and GPSE.residual_update: the kernels against the torch ops
    they replace, same weights and input, one graph with a hub above HUB_DEGREE."""
    from gpse_dgl.utils.precision import autocast

    if precision == "bf16" and device == "cpu":
        pytest.skip("bf16 autocast on the CPU takes the bf16 row buckets, not the dispatch under test")
    runs = _dispatch_on(device, monkeypatch)
    monkeypatch.setattr(gpu, "HUB_DEGREE", 12)
    torch.manual_seed(0)
    model = GPSE(dim_hidden=32 if device == "cpu" else 128, num_layers=2 if device == "cpu" else 6).to(device).eval()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.normal_(0, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    batch = dgl.batch([_graph(num_src=n, num_dst=n, num_edges=3 * n, hub_degree=5, seed=n) for n in (9, 17, 30)])

    def encode():
        with torch.no_grad(), autocast(precision, device):
            return model(batch, seed=0)

    fused = encode()
    assert runs.count("gated_sum_") == model.num_layers and runs.count("residual_update_") == model.num_layers
    with gpu.disabled():
        plain = encode()
    assert len(runs) == 2 * model.num_layers  # the torch ops ran
    torch.testing.assert_close(fused, plain, atol=1e-5 if precision == "fp32" else 2e-3, rtol=0)


def test_a_kernel_that_cannot_run_hands_over_to_the_torch_ops(device, monkeypatch, capsys):
    from gpse_dgl.kernels import triton_kernels

    _dispatch_on(device, monkeypatch)
    monkeypatch.setattr(gpu, "_state", {"reason": None})

    def broken(*args):
        raise RuntimeError("no compiler for this GPU\nmore")

    monkeypatch.setattr(triton_kernels, "gated_sum_", broken)
    g = _graph()
    key, query, value, skip = _projection(g.num_nodes(), 24, torch.float32, device)
    before = skip.clone()
    expected = ops.gated_sum(g, key.double(), query.double(), value.double(), backend="dgl" if device == "cpu"
                             else None).float() + before
    got = ops.gated_sum(g, key, query, value, out=skip)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert not gpu.available()
    assert gpu.describe() == "torch: a Triton kernel failed (RuntimeError: no compiler for this GPU)"
    assert capsys.readouterr().err.count("the torch ops run instead") == 1
