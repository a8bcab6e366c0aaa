"""The "dgl" and "torch" message-passing backends agree (values and gradients) for every op; the torch
backend's gated sum on both of its CPU paths (the fused kernel and torch ops: the ``gated_path`` fixture)."""
import pytest
import torch

import dgl
from gpse_dgl import kernels
from gpse_dgl.nn import ops

pytestmark = pytest.mark.usefixtures("gated_path")

TOL = dict(atol=1e-5, rtol=1e-5)


def _graphs():
    torch.manual_seed(0)
    n = 13
    src = torch.randint(0, n, (60,))
    dst = torch.randint(0, n, (60,))
    multi = dgl.graph((src, dst), num_nodes=n + 3)  # multi-edges, self-loops, 3 isolated nodes
    empty = dgl.graph(([], []), num_nodes=4)  # no edges
    block = dgl.create_block((torch.tensor([0, 1, 5, 2, 5, 4]), torch.tensor([0, 0, 1, 2, 2, 2])),
                             num_src_nodes=6, num_dst_nodes=3)
    return {"multi": multi, "empty": empty, "block": block}


GRAPHS = _graphs()


def _inputs(g, shape=(4,), seed=1):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randn((g.num_src_nodes(),) + shape, generator=gen)
    dst = torch.randn((g.num_dst_nodes(),) + shape, generator=gen)
    edge = torch.randn((g.num_edges(),) + shape, generator=gen)
    return src, dst, edge


def _run(fn, g, tensors, backend):
    leaves = [t.clone().requires_grad_(True) for t in tensors]
    out = fn(g, *leaves, backend=backend)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    (out * weight).sum().backward()
    grads = [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]
    return out.detach(), grads


CASES = {
    "u_add_v": (ops.u_add_v, lambda s, d, e: (s, d)),
    "u_dot_v": (ops.u_dot_v, lambda s, d, e: (s, d)),
    "copy_u": (ops.copy_u, lambda s, d, e: (s,)),
    "copy_v": (ops.copy_v, lambda s, d, e: (d,)),
    "copy_u_sum": (ops.copy_u_sum, lambda s, d, e: (s,)),
    "copy_u_mean": (ops.copy_u_mean, lambda s, d, e: (s,)),
    "copy_e_sum": (ops.copy_e_sum, lambda s, d, e: (e,)),
    "u_mul_e_sum": (ops.u_mul_e_sum, lambda s, d, e: (s, e)),
    "u_mul_e_sum_bcast": (ops.u_mul_e_sum, lambda s, d, e: (s, e[:, :1])),
    "edge_softmax": (lambda g, e, backend: ops.edge_softmax(g, e, backend=backend), lambda s, d, e: (e,)),
    "gated_sum": (lambda g, d, s, v, backend: ops.gated_sum(g, d, s, v, backend=backend),
                  lambda s, d, e: (d, s, s * 0.5 + 1)),
}


@pytest.mark.parametrize("gname", sorted(GRAPHS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_backends_agree(case, gname):
    g = GRAPHS[gname]
    if case == "copy_v" and g.is_block:
        pytest.skip("copy_v on a block indexes destination features")
    fn, pick = CASES[case]
    tensors = pick(*_inputs(g))
    out_dgl, grads_dgl = _run(fn, g, tensors, "dgl")
    out_torch, grads_torch = _run(fn, g, tensors, "torch")
    assert out_dgl.shape == out_torch.shape
    torch.testing.assert_close(out_dgl, out_torch, **TOL)
    for a, b in zip(grads_dgl, grads_torch):
        torch.testing.assert_close(a, b, **TOL)


def test_reference_values():
    """Spot values on a tiny graph, so a bug shared by both backends is caught too."""
    g = dgl.graph(([0, 1, 2, 2], [1, 2, 0, 1]), num_nodes=3)
    x = torch.tensor([[1.0], [2.0], [4.0]])
    for backend in ("dgl", "torch"):
        assert ops.copy_u_sum(g, x, backend=backend).flatten().tolist() == [4.0, 5.0, 2.0]
        assert ops.copy_u_mean(g, x, backend=backend).flatten().tolist() == [4.0, 2.5, 2.0]
        assert ops.u_add_v(g, x, 10 * x, backend=backend).flatten().tolist() == [21.0, 42.0, 14.0, 24.0]
        e = torch.tensor([[1.0], [1.0], [1.0], [3.0]])
        soft = ops.edge_softmax(g, e.log(), backend=backend).flatten()
        torch.testing.assert_close(soft, torch.tensor([0.25, 1.0, 1.0, 0.75]))
    assert ops.in_degrees(g, "cpu").tolist() == [1, 2, 1]
    assert ops.copy_u(g, x).flatten().tolist() == [1.0, 2.0, 4.0, 4.0]
    assert ops.copy_v(g, x).flatten().tolist() == [2.0, 4.0, 1.0, 2.0]


@pytest.mark.parametrize("backend", ["dgl", "torch"])
@pytest.mark.parametrize("chunk_edges", [None, 0, 1, 5, 1000])
def test_gated_sum_matches_definition(backend, chunk_edges):
    g = GRAPHS["multi"]
    k, q, _ = _inputs(g, (6,), seed=3)
    v = torch.randn_like(q)
    src, dst = g.edges()
    expected = torch.zeros_like(k).index_add_(0, dst, torch.sigmoid(k[dst] + q[src]) * v[src])
    with torch.no_grad():  # the chunked path
        out = ops.gated_sum(g, k, q, v, backend=backend, chunk_edges=chunk_edges)
    torch.testing.assert_close(out, expected, **TOL)
    out_grad = ops.gated_sum(g, k.requires_grad_(), q, v, backend=backend, chunk_edges=chunk_edges)
    torch.testing.assert_close(out_grad.detach(), expected, **TOL)


def test_gated_sum_block_chunked():
    g = GRAPHS["block"]
    s, d, _ = _inputs(g, (3,))
    v = torch.randn_like(s)
    src, dst = g.edges()
    expected = torch.zeros_like(d).index_add_(0, dst, torch.sigmoid(d[dst] + s[src]) * v[src])
    for backend in ("dgl", "torch"):
        with torch.no_grad():
            torch.testing.assert_close(ops.gated_sum(g, d, s, v, backend=backend, chunk_edges=2), expected, **TOL)


@pytest.mark.parametrize("op", ["sum", "mean", "max"])
def test_readout_and_segment_reduce(op):
    graphs = [dgl.graph(([0], [1]), num_nodes=2), dgl.graph(([], []), num_nodes=0), dgl.graph(([], []), num_nodes=3)]
    bg = dgl.batch(graphs)
    x = torch.tensor([[1.0, -1.0], [3.0, float("inf")], [-2.0, 0.0], [-4.0, 1.0], [-6.0, 2.0]])
    out = ops.readout(bg, x, op)
    expected = {
        "sum": [[4.0, float("inf")], [0.0, 0.0], [-12.0, 3.0]],
        "mean": [[2.0, float("inf")], [0.0, 0.0], [-4.0, 1.0]],
        "max": [[3.0, float("inf")], [0.0, 0.0], [-2.0, 2.0]],
    }[op]
    assert out.tolist() == expected
    perm = torch.tensor([4, 0, 3, 1, 2])
    seg = ops.segment_ids(bg, "cpu")
    torch.testing.assert_close(ops.segment_reduce(x[perm], seg[perm], 3, op), out)


def test_resolve_backend(monkeypatch):
    assert ops.resolve_backend("torch", torch.device("cpu")) == "torch"
    assert ops.resolve_backend(None, torch.device("cpu")) in ("dgl", "torch")
    # auto on the CPU: torch's ops for a small graph (a training batch of molecules), DGL's above the limit
    monkeypatch.delenv("GPSE_DGL_BACKEND", raising=False)
    limit = kernels.SMALL_GRAPH_EDGES
    assert ops.resolve_backend(None, torch.device("cpu"), num_edges=limit) == "torch"
    assert ops.resolve_backend(None, torch.device("cpu"), num_edges=limit + 1) == "dgl"
    assert ops.resolve_backend("dgl", torch.device("cpu"), num_edges=10) == "dgl"
    assert ops.resolve_backend(None, torch.device("cpu"), "relu_sum", num_edges=limit + 1) == "torch"
    assert ops.resolve_backend(None, torch.device("cpu"), "copy_u_sum", num_edges=limit + 1) == "torch"
    beyond = kernels.KERNEL_GRAPH_EDGES + 1
    assert ops.resolve_backend(None, torch.device("cpu"), "copy_u_mean", num_edges=beyond) == "dgl"
    assert ops.resolve_backend("dgl", torch.device("cpu"), "copy_u_sum") == "dgl"
    monkeypatch.setenv("GPSE_DGL_BACKEND", "torch")
    assert ops.resolve_backend(None, torch.device("cpu")) == "torch"
    with pytest.raises(ValueError, match="unknown message-passing backend"):
        ops.resolve_backend("cuda-magic", torch.device("cpu"))
    with pytest.raises(ValueError, match="unknown readout"):
        ops.readout(dgl.graph(([0], [0])), torch.ones(1, 1), "median")


@pytest.mark.parametrize("chunk_edges", [1, 7, 0])
def test_gated_sum_custom_backward(chunk_edges):
    g = GRAPHS["multi"]
    gen = torch.Generator().manual_seed(11)
    k, q, v = (torch.randn(g.num_nodes(), 3, generator=gen, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    assert torch.autograd.gradcheck(
        lambda a, b, c: ops.gated_sum(g, a, b, c, backend="torch", chunk_edges=chunk_edges), (k, q, v))
    # float32 gradients equal the DGL kernels' autograd
    k32, q32, v32 = (t.detach().float().requires_grad_() for t in (k, q, v))
    w = torch.randn(g.num_nodes(), 3, generator=gen)
    (ops.gated_sum(g, k32, q32, v32, backend="torch", chunk_edges=chunk_edges) * w).sum().backward()
    grads = [t.grad.clone() for t in (k32, q32, v32)]
    for t in (k32, q32, v32):
        t.grad = None
    (ops.gated_sum(g, k32, q32, v32, backend="dgl") * w).sum().backward()
    for a, t in zip(grads, (k32, q32, v32)):
        torch.testing.assert_close(a, t.grad, **TOL)


def test_gated_sum_out_accumulates():
    g = GRAPHS["multi"]
    k, q, v = _inputs(g, (5,), seed=4)[0], _inputs(g, (5,), seed=5)[0], _inputs(g, (5,), seed=6)[0]
    base = torch.randn_like(k)
    expected = base + ops.gated_sum(g, k, q, v, backend="dgl")
    for backend in ("dgl", "torch"):
        with torch.no_grad():
            acc = base.clone()
            res = ops.gated_sum(g, k, q, v, backend=backend, out=acc)
            assert res is acc
            torch.testing.assert_close(acc, expected, **TOL)
        b = base.clone().requires_grad_()
        res = ops.gated_sum(g, k, q, v, backend=backend, out=b)
        assert res is not b and res.requires_grad
        torch.testing.assert_close(res.detach(), expected, **TOL)


def test_gated_sum_default_backend_is_torch(monkeypatch, gated_path):
    """``auto`` picks the torch backend for gated_sum (no (E, d) tensor kept for backward): the fused
    kernel on the CPU where it was built, else torch ops."""
    g = GRAPHS["multi"]
    k, q, _ = _inputs(g, (4,), seed=8)
    k, q, v = k.requires_grad_(), q.requires_grad_(), (q * 2).detach().requires_grad_()
    fused = "_NativeGatedSumBackward" if gated_path == "fused kernel" else "_GatedSumBackward"
    assert type(ops.gated_sum(g, k, q, v).grad_fn).__name__ == fused
    monkeypatch.setenv("GPSE_DGL_BACKEND", "dgl")
    assert type(ops.gated_sum(g, k, q, v).grad_fn).__name__ != fused


@pytest.mark.parametrize("op", ["copy_u", "copy_v", "u_add_v", "copy_u_sum", "copy_u_mean", "u_mul_e_sum"])
def test_low_precision_gradients_of_a_hub_add_up_in_float32(op):
    # one node read by 1,024 edges: its gradient is a sum of 1,024 ones, which bf16 cannot reach by
    # adding one term at a time (it stops at 256 or 512); both backends must return ~1,024
    n = 1025
    hub_out = dgl.graph((torch.zeros(1024, dtype=torch.int64), torch.arange(1, n)), num_nodes=n)
    graph = dgl.reverse(hub_out) if op == "copy_v" else hub_out  # copy_v reads destinations
    for backend in ("dgl", "torch"):
        feat = torch.ones(n, 2, requires_grad=True)
        edge = torch.ones(graph.num_edges(), 2)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = feat.to(torch.bfloat16)
            if op == "u_add_v":
                out = ops.u_add_v(graph, low, low, backend=backend)
            elif op == "u_mul_e_sum":
                out = ops.u_mul_e_sum(graph, low, edge.to(torch.bfloat16), backend=backend)
            else:
                out = getattr(ops, op)(graph, low, backend=backend)
        out.float().sum().backward()
        assert feat.grad[0, 0].item() == pytest.approx(1024, rel=1e-2), (op, backend)
