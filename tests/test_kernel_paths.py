"""``kernels.paths`` (what ``gpse-dgl info`` and ``metrics.json`` report) against the path each message-passing op
of ``gpse_dgl.nn.ops`` actually runs, under every ``GPSE_DGL_BACKEND``."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import gpse_dgl  # noqa: F401  (sets DGLBACKEND before dgl is imported)
import dgl

from gpse_dgl import kernels
from gpse_dgl.nn import ops

DGL_OPS = ("copy_u_sum", "copy_u_mean", "copy_e_sum", "u_add_v", "u_mul_e_sum")


def _operands(graph, d=8):
    gen = torch.Generator().manual_seed(0)
    n, m = graph.num_nodes(), graph.num_edges()

    def rows(count):
        return torch.randn(count, d, generator=gen, requires_grad=True)

    return {
        "relu_sum": lambda: ops.relu_sum(graph, rows(n), rows(m)),
        "edge_gated_sum": lambda: ops.edge_gated_sum(graph, rows(n), rows(n), rows(n), rows(m), eps=1e-6),
        "copy_u_sum": lambda: ops.copy_u_sum(graph, rows(n)),
        "copy_u_mean": lambda: ops.copy_u_mean(graph, rows(n)),
        "gated_sum": lambda: ops.gated_sum(graph, rows(n), rows(n), rows(n)),
    }


def _path_taken(monkeypatch, run) -> str:
    """The path ``run()`` took: the registry kernel that returned a result, else DGL's if a ``dgl.ops`` kernel was
    called, else torch's."""
    taken = []

    def recording(kernel):
        def run_kernel(*operands, **options):
            result = kernel.run(*operands, **options)
            if result is not None:
                taken.append(kernel.path)
            return result
        return dataclasses.replace(kernel, run=run_kernel)

    def recording_dgl(function):
        def run_dgl(*args, **kwargs):
            taken.append("dgl")
            return function(*args, **kwargs)
        return run_dgl

    with monkeypatch.context() as patch:
        patch.setattr(kernels, "KERNELS", tuple(recording(k) for k in kernels.KERNELS))
        for name in DGL_OPS:
            patch.setattr(dgl.ops, name, recording_dgl(getattr(dgl.ops, name)))
        run()
    return taken[0] if taken else "torch"


@pytest.mark.parametrize("backend", ["auto", "dgl", "torch"])
@pytest.mark.parametrize("kernel_graph_edges", [kernels.KERNEL_GRAPH_EDGES, 16])
def test_paths_report_what_the_ops_run(monkeypatch, backend, kernel_graph_edges):
    """Every backend, on a batch-sized graph and (with the kernel-first limit lowered below its size) on a graph
    above that limit."""
    monkeypatch.setenv("GPSE_DGL_BACKEND", backend)
    monkeypatch.setattr(kernels, "KERNEL_GRAPH_EDGES", kernel_graph_edges)
    graph = dgl.to_bidirected(dgl.rand_graph(30, 60))
    reported = kernels.paths("cpu", num_edges=graph.num_edges())
    for op, run in _operands(graph).items():
        assert _path_taken(monkeypatch, run) == reported[op], (op, backend)
    if backend == "dgl":  # a backend asked for is what every message-passing op reports
        assert {reported[op] for op in _operands(graph)} == {"dgl"}


def test_path_of_without_a_kernel_follows_each_ops_fallback(monkeypatch):
    """With no kernel for the device (here: none in the registry), the neighbour sums and the edge-gated sum take
    the other ops' rule, GINE's and the encoder's sums their own torch ops."""
    monkeypatch.delenv("GPSE_DGL_BACKEND", raising=False)
    monkeypatch.setattr(kernels, "KERNELS", ())
    large = kernels.SMALL_GRAPH_EDGES + 1
    assert kernels.path_of("copy_u_sum", "cpu", num_edges=large) == "dgl"
    assert kernels.path_of("edge_gated_sum", "cpu", num_edges=large) == "dgl"
    assert kernels.path_of("edge_gated_sum", "cpu", num_edges=10) == "torch"
    assert kernels.path_of("relu_sum", "cpu", num_edges=large) == "torch"
    assert kernels.path_of("gated_sum", "cpu", num_edges=large) == "torch"


@pytest.mark.parametrize("op", ["copy_u_sum", "copy_u_mean", "relu_sum", "edge_gated_sum", "gated_sum"])
def test_rows_without_unit_column_stride_still_take_the_kernel(compiled, op):
    """Every CPU kernel's wrapper copies rows whose entries are not adjacent (a transposed tensor): the kernel runs,
    with the result and gradients of the contiguous rows, instead of declining for layout alone."""
    from gpse_dgl.kernels import cpu

    torch.manual_seed(0)
    graph = dgl.graph((torch.randint(0, 12, (40,)), torch.randint(0, 12, (40,))), num_nodes=12)
    node_rows = {"copy_u_sum": 1, "copy_u_mean": 1, "relu_sum": 1, "edge_gated_sum": 3, "gated_sum": 3}[op]
    edge_rows = {"relu_sum": 1, "edge_gated_sum": 1}.get(op, 0)
    transposed = [torch.randn(8, 12).t().requires_grad_() for _ in range(node_rows)]
    transposed += [torch.randn(8, 40).t().requires_grad_() for _ in range(edge_rows)]
    assert not any(t.stride(-1) == 1 for t in transposed) and cpu.supports(*transposed)
    contiguous = [t.detach().contiguous().requires_grad_() for t in transposed]
    options = {"eps": 1e-6} if op == "edge_gated_sum" else {}
    got = kernels.run(op, graph, *transposed, autograd=True, **options)
    expected = kernels.run(op, graph, *contiguous, autograd=True, **options)
    assert got is not None
    got, expected = (r[0] if isinstance(r, tuple) else r for r in (got, expected))
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    for a, b in zip(torch.autograd.grad(got.sum(), transposed), torch.autograd.grad(expected.sum(), contiguous)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
