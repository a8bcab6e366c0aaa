"""The fused CPU kernel of the gated sum (gpse_dgl.kernels.gated_sum, .gated_sum_packed) against the definition, and its fall-back.

Both CPU paths of ``ops.gated_sum`` also run every gated-sum test of ``tests/test_ops.py`` and
``tests/test_precision.py`` (the ``gated_path`` fixture); here: float64 references of values and all
three gradients, row views of a wider projection, the fall-back when the kernel cannot be built, and
the path a whole GPSE encoder takes.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import dgl
from gpse_dgl import kernels
from gpse_dgl.kernels import cpu, gated_sum_packed
from gpse_dgl.kernels import gated_sum as fused
from gpse_dgl.kernels.csr import GatedCSR
from gpse_dgl.nn import ops

needs_kernel = pytest.mark.skipif(cpu.kernel() is None, reason=cpu.describe())


def reference(graph, k, q, v):
    """The definition in float64 with autograd: out[v] = sum_(u, v) sigmoid(k[v] + q[u]) * val[u]."""
    src, dst = graph.edges()
    msg = torch.sigmoid(k[dst] + q[src]) * v[src]
    return torch.zeros(graph.num_dst_nodes(), k.shape[1], dtype=k.dtype).index_add_(0, dst, msg)


def graphs():
    gen = torch.Generator().manual_seed(0)
    n = 50
    src, dst = torch.randint(0, n, (400,), generator=gen), torch.randint(0, n, (400,), generator=gen)
    hub = torch.zeros(300, dtype=torch.int64)
    return {
        "multi, self-loops, isolated": dgl.graph((src, dst), num_nodes=n + 5),
        "hub": dgl.graph((torch.arange(1, 301), hub), num_nodes=301),
        "block": dgl.create_block((torch.tensor([0, 1, 5, 2, 5, 4]), torch.tensor([0, 0, 1, 2, 2, 2])),
                                  num_src_nodes=6, num_dst_nodes=3),
        "no edges": dgl.graph(([], []), num_nodes=4),
    }


@needs_kernel
@pytest.mark.parametrize("name", list(graphs()))
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_values_and_gradients_match_float64(name, dtype, tol):
    graph = graphs()[name]
    gen = torch.Generator().manual_seed(1)
    shapes = [(graph.num_dst_nodes(), 24), (graph.num_src_nodes(), 24), (graph.num_src_nodes(), 24)]
    exact = [torch.randn(*shape, generator=gen, dtype=torch.float64) for shape in shapes]
    weight = torch.randn(graph.num_dst_nodes(), 24, generator=gen, dtype=torch.float64)
    leaves = [t.detach().to(dtype).requires_grad_() for t in exact]
    out = fused.gated_sum(graph, *leaves)
    assert out.dtype == torch.float32
    (out * weight.float()).sum().backward()
    # the reference from the rounded inputs: only the kernel's own arithmetic is compared
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = reference(graph, *ref_leaves)
    (ref * weight).sum().backward()
    scale = max(1.0, float(ref.detach().abs().max()))
    torch.testing.assert_close(out.double(), ref, atol=tol * scale, rtol=tol)
    for leaf, ref_leaf in zip(leaves, ref_leaves):
        assert leaf.grad.dtype == dtype
        torch.testing.assert_close(leaf.grad.double(), ref_leaf.grad, atol=tol * max(1.0, float(ref_leaf.grad.abs().max())),
                                   rtol=tol)


@needs_kernel
def test_operands_that_do_not_fit_the_graph_are_refused_before_the_kernel_reads_them():
    """The kernel indexes rows by node id: a key short of a row per destination, or a query short of a row per
    source, is a ValueError (as on the Triton path), not a read past the tensor."""
    graph = graphs()["block"]  # 6 sources, 3 destinations
    k, q, v = torch.randn(3, 8), torch.randn(6, 8), torch.randn(6, 8)
    for args in ((k[:2], q, v), (k, q[:5], v), (k, q, v[:5]), (k[:, :4], q, v)):
        with pytest.raises(ValueError, match="gated_sum on a graph of 6 sources and 3 destinations"):
            fused.gated_sum(graph, *args)
    with pytest.raises(ValueError, match=r"out must be \(3, 8\)"):
        fused.gated_sum(graph, k, q, v, out=torch.zeros(1, 8))
    with pytest.raises(ValueError, match="3 destinations"):
        ops.gated_sum(graph, k[:2], q, v)  # through the op's dispatch too


@needs_kernel
def test_rows_of_a_wider_projection_are_read_in_place():
    """q and val as column slices of one (N, 2d) projection (what ResGatedConv hands over): no copy, same sum."""
    graph = graphs()["multi, self-loops, isolated"]
    gen = torch.Generator().manual_seed(2)
    k = torch.randn(graph.num_nodes(), 16, generator=gen)
    both = torch.randn(graph.num_nodes(), 32, generator=gen)
    q, v = both[:, :16], both[:, 16:]
    assert not q.is_contiguous()
    with torch.no_grad():
        out = ops.gated_sum(graph, k, q, v, backend="torch")
    torch.testing.assert_close(out, reference(graph, k, q.contiguous(), v.contiguous()), atol=1e-5, rtol=1e-5)


@needs_kernel
def test_out_is_added_to_in_place():
    graph = graphs()["hub"]
    k, q, v = (torch.randn(301, 8) for _ in range(3))
    base = torch.randn(301, 8)
    acc = base.clone()
    with torch.no_grad():
        result = ops.gated_sum(graph, k, q, v, backend="torch", out=acc)
    assert result is acc
    torch.testing.assert_close(acc, base + reference(graph, k, q, v), atol=1e-4, rtol=1e-5)


@needs_kernel
def test_out_may_be_a_column_slice_of_a_wider_tensor():
    """The skip term of ResGatedConv's one product is a column block of it: the sum is added where it is."""
    graph = graphs()["multi, self-loops, isolated"]
    gen = torch.Generator().manual_seed(3)
    k, q, v = (torch.randn(graph.num_nodes(), 8, generator=gen) for _ in range(3))
    wide = torch.randn(graph.num_nodes(), 32, generator=gen)
    before = wide.clone()
    with torch.no_grad():
        result = fused.gated_sum(graph, k, q, v, out=wide[:, 8:16])
    assert result.data_ptr() == wide[:, 8:16].data_ptr()
    torch.testing.assert_close(wide[:, 8:16], before[:, 8:16] + reference(graph, k, q, v), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wide[:, :8], before[:, :8], atol=0, rtol=0)
    torch.testing.assert_close(wide[:, 16:], before[:, 16:], atol=0, rtol=0)


@needs_kernel
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_gates_beyond_the_factorisation_range_are_exact(dtype, tol):
    """sigmoid(k + q) = 1 / (1 + exp(-k) exp(-q)) only while both factors are normal floats: rows with entries
    beyond that range (here k = 100 against q = -99.5 on every third node, whose gate is sigmoid(0.5), where
    the factors would give sigmoid(-1)) take the direct form, forward and backward, mixed with ordinary rows
    on the same destinations."""
    graph = graphs()["multi, self-loops, isolated"]
    n = graph.num_nodes()
    gen = torch.Generator().manual_seed(4)
    k, q, v = (torch.randn(n, 24, generator=gen, dtype=torch.float64) for _ in range(3))
    big = torch.arange(n) % 3 == 0
    k[big, :4] = 100.0
    q[big, :4] = -99.5
    weight = torch.randn(n, 24, generator=gen, dtype=torch.float64)
    flags = fused.factors(q.to(dtype))[1]
    assert flags.bool().tolist() == big.tolist()
    leaves = [t.to(dtype).requires_grad_() for t in (k, q, v)]
    out = fused.gated_sum(graph, *leaves)
    (out * weight.float()).sum().backward()
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    ref = reference(graph, *ref_leaves)
    (ref * weight).sum().backward()
    torch.testing.assert_close(out.double(), ref, atol=tol * max(1.0, float(ref.detach().abs().max())), rtol=tol)
    for leaf, ref_leaf in zip(leaves, ref_leaves):
        scale = max(1.0, float(ref_leaf.grad.abs().max()))
        torch.testing.assert_close(leaf.grad.double(), ref_leaf.grad, atol=tol * scale, rtol=tol)


@needs_kernel
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_a_hub_is_summed_by_every_thread_in_fixed_pieces(dtype, tol):
    """A destination with more in-edges than the kernel's hub threshold (16,384; a virtual node has one from every
    node) is summed in pieces spread over the threads: the definition's value, and the same bits on 1 and 2
    threads (the pieces do not depend on the thread count)."""
    gen = torch.Generator().manual_seed(5)
    n = 40_000
    src = torch.cat([torch.arange(1, n), torch.randint(0, n, (5_000,), generator=gen)])
    dst = torch.cat([torch.zeros(n - 1, dtype=torch.int64), torch.randint(1, n, (5_000,), generator=gen)])
    graph = dgl.graph((src, dst), num_nodes=n)
    k, q, v = (torch.randn(n, 16, generator=gen, dtype=torch.float64) for _ in range(3))
    q[::7, 0] = -60.0  # flagged sources: their edges into the hub take the direct form
    threads = torch.get_num_threads()
    try:
        sums = []
        for count in (1, 2):
            torch.set_num_threads(count)
            sums.append(fused.gated_sum(graph, *(t.to(dtype) for t in (k, q, v))))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(sums[0], sums[1])
    ref = reference(graph, *(t.to(dtype).double() for t in (k, q, v)))
    torch.testing.assert_close(sums[0].double(), ref, atol=tol * float(ref.abs().max()), rtol=tol)


def packed_sum(graph, k, q, v, out=None):
    """The packed kernel's sum over a graph's in-edges (``out`` added to in place)."""
    csr = GatedCSR.of(graph)
    slab = torch.full(gated_sum_packed.packed_shape(*q.shape, q.dtype), float("nan"), dtype=q.dtype)
    sources = gated_sum_packed.pack_sources(q, v, out=slab)
    out = torch.zeros(graph.num_dst_nodes(), q.shape[1]) if out is None else out
    gated_sum_packed.packed_gated_sum(csr.dst_indptr, csr.dst_index, k, sources, out)
    return out


@needs_kernel
@pytest.mark.parametrize("name", list(graphs()))
@pytest.mark.parametrize("width", [24, 64])  # 16 float32 / 32 bf16 lanes a block: a partial last block, whole ones
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_packed_sums_equal_the_row_kernels(name, width, dtype, tol):
    """Sums by column blocks of packed sources: the row kernel's sums (the same arithmetic and edge order) and the
    definition's, with flagged sources and destinations (the direct form) among ordinary ones."""
    graph = graphs()[name]
    gen = torch.Generator().manual_seed(8)
    k = torch.randn(graph.num_dst_nodes(), width, generator=gen, dtype=torch.float64)
    q, v = (torch.randn(graph.num_src_nodes(), width, generator=gen, dtype=torch.float64) for _ in range(2))
    k[::4, -1] = 100.0
    q[::3, 0] = -99.5
    k, q, v = (t.to(dtype) for t in (k, q, v))
    got = packed_sum(graph, k, q, v)
    rows = fused.gated_sum(graph, k, q, v)
    scale = max(1.0, float(rows.abs().max()))
    torch.testing.assert_close(got, rows, atol=1e-6 * scale, rtol=1e-6)
    ref = reference(graph, k.double(), q.double(), v.double())
    torch.testing.assert_close(got.double(), ref, atol=tol * scale, rtol=tol)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_slab_layout(dtype):
    """Record (b, u): 64 bytes of exp(-q[u]) over block b's columns (q[u] itself on a flagged row), then as many of
    the value; lanes past the width are zero."""
    gen = torch.Generator().manual_seed(9)
    q, v = (torch.randn(5, 20, generator=gen).to(dtype) for _ in range(2))
    q[2, 7] = 50.0
    lanes = 64 // q.element_size()
    slab = torch.full(gated_sum_packed.packed_shape(5, 20, dtype), float("nan"), dtype=dtype)
    assert slab.shape == (-(-20 // lanes), 5, 2 * lanes)
    sources = gated_sum_packed.pack_sources(q, v, out=slab)
    assert sources.flags.tolist() == [0, 0, 1, 0, 0] and sources.slab is slab and sources.src_gate is q
    padded = lambda t: torch.cat([t, t.new_zeros(5, slab.shape[0] * lanes - 20)], 1)  # noqa: E731
    factors = torch.where(sources.flags.bool()[:, None], q, torch.exp(-q.float()).to(dtype))
    for block in range(slab.shape[0]):
        cols = slice(block * lanes, (block + 1) * lanes)
        torch.testing.assert_close(slab[block, :, :lanes].float(), padded(factors)[:, cols].float(),
                                   atol=0, rtol=1e-6 if dtype == torch.float32 else 1e-2)
        assert torch.equal(slab[block, :, lanes:], padded(v)[:, cols])


@needs_kernel
def test_packed_sums_add_into_column_slices():
    """Keys and sums may be column slices of wider tensors (a group's ``[key | skip]``): only the slice is written."""
    graph = graphs()["multi, self-loops, isolated"]
    n = graph.num_nodes()
    gen = torch.Generator().manual_seed(10)
    destinations, q, v = torch.randn(n, 48, generator=gen), torch.randn(n, 24, generator=gen), torch.randn(n, 24)
    wide = torch.randn(n, 72, generator=gen)
    before = wide.clone()
    packed_sum(graph, destinations[:, :24], q, v, out=wide[:, 24:48])
    expected = before[:, 24:48] + fused.gated_sum(graph, destinations[:, :24].contiguous(), q, v)
    torch.testing.assert_close(wide[:, 24:48], expected, atol=1e-5, rtol=1e-6)
    assert torch.equal(wide[:, :24], before[:, :24]) and torch.equal(wide[:, 48:], before[:, 48:])


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_hub_is_summed_in_fixed_pieces(dtype):
    """A hub (here 40,000 in-edges) is summed in the row kernel's fixed pieces: the same bits on 1 and 2 threads."""
    gen = torch.Generator().manual_seed(11)
    n = 40_000
    src = torch.cat([torch.arange(1, n), torch.randint(0, n, (5_000,), generator=gen)])
    dst = torch.cat([torch.zeros(n - 1, dtype=torch.int64), torch.randint(1, n, (5_000,), generator=gen)])
    graph = dgl.graph((src, dst), num_nodes=n)
    k, q, v = (torch.randn(n, 40, generator=gen).to(dtype) for _ in range(3))
    q[::7, 0] = -60.0
    threads = torch.get_num_threads()
    try:
        sums = []
        for count in (1, 2):
            torch.set_num_threads(count)
            sums.append(packed_sum(graph, k, q, v))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(sums[0], sums[1])
    rows = fused.gated_sum(graph, k, q, v)
    torch.testing.assert_close(sums[0], rows, atol=1e-6 * float(rows.abs().max()), rtol=1e-6)


@needs_kernel
def test_packed_sums_refuse_a_malformed_csr():
    """The packed sum takes its CSR from the caller: offsets that do not run from 0 to the number of edges or that
    decrease, a source out of range, and sums into overlapping rows raise instead of reading outside the slab."""
    q, v, k = torch.randn(4, 16), torch.randn(4, 16), torch.randn(3, 16)
    sources = gated_sum_packed.pack_sources(q, v, out=torch.empty(gated_sum_packed.packed_shape(4, 16, torch.float32)))
    good = torch.tensor([0, 2, 3, 4]), torch.tensor([1, 3, 0, 2])
    out = torch.zeros(3, 16)
    gated_sum_packed.packed_gated_sum(*good, k, sources, out)
    cases = [
        ("from 0 to the number of edges", torch.tensor([0, 2, 3, 9]), good[1]),
        ("not decrease", torch.tensor([0, 3, 2, 4]), good[1]),
        (r"in \[0, 4\)", good[0], torch.tensor([1, 3, 4, 2])),
        (r"in \[0, 4\)", good[0], torch.tensor([1, -1, 0, 2])),
    ]
    for message, indptr, index in cases:
        with pytest.raises(RuntimeError, match=message):
            gated_sum_packed.packed_gated_sum(indptr, index, k, sources, out)
    with pytest.raises(ValueError, match="do not overlap"):
        gated_sum_packed.packed_gated_sum(*good, k, sources, torch.zeros(1, 16).expand(3, 16))
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        gated_sum_packed.packed_shape(4, 16, torch.float64)


def test_packing_is_refused_off_its_path(monkeypatch):
    """A slab of the wrong shape or dtype is refused with a message; off the CPU kernel's path nothing is packed."""
    q, v = torch.randn(6, 4), torch.randn(6, 4)
    if cpu.kernel() is not None:
        with pytest.raises(ValueError, match="packed_shape"):
            gated_sum_packed.pack_sources(q, v, out=torch.empty(6, 4))
        with pytest.raises(ValueError, match="packed_shape"):
            gated_sum_packed.pack_sources(q, v, out=torch.empty(gated_sum_packed.packed_shape(6, 4, torch.float32), dtype=torch.bfloat16))
        assert kernels.packs_sources(torch.device("cpu"), torch.bfloat16)
    assert not kernels.packs_sources(torch.device("cpu"), torch.float16)
    assert not kernels.packs_sources(torch.device("meta"), torch.float32)
    monkeypatch.setenv("GPSE_DGL_BACKEND", "dgl")
    assert not kernels.packs_sources(torch.device("cpu"), torch.float32)
    monkeypatch.delenv("GPSE_DGL_BACKEND")
    monkeypatch.setattr(cpu, "_state", {"module": None, "reason": "turned off by the test"})
    assert not kernels.packs_sources(torch.device("cpu"), torch.float32)
    with pytest.raises(RuntimeError, match="turned off by the test"):
        gated_sum_packed.packed_shape(6, 4, torch.float32)


@needs_kernel
def test_source_factors_are_kept_while_the_sources_are_unchanged():
    """Chunks of one layer share their sources' factors; a new projection into the same buffer renews them."""
    q = torch.randn(10, 8)
    first = fused.factors(q, keep=True)[0]
    assert fused.factors(q, keep=True)[0] is first
    torch.testing.assert_close(first, torch.exp(-q), atol=0, rtol=1e-6)
    q.mul_(2)
    second = fused.factors(q, keep=True)[0]
    assert second is not first
    torch.testing.assert_close(second, torch.exp(-q), atol=0, rtol=1e-6)
    assert fused.factors(torch.randn(3, 8))[0] is not fused.factors(torch.randn(3, 8))[0]


@needs_kernel
def test_stale_factors_are_released_before_new_ones_are_allocated(monkeypatch):
    """Each layer of a memory-short layer-wise encode renews its sources' factors (hundreds of MB): the last
    layer's go first, so that two buffers are never held at once."""
    import weakref

    q = torch.randn(10, 8)
    old = weakref.ref(fused.factors(q, keep=True)[0])
    q.add_(1)
    alive_at_allocation = []
    allocate = fused.memory.empty
    monkeypatch.setattr(fused.memory, "empty", lambda *a, **k: (alive_at_allocation.append(old() is not None),
                                                                  allocate(*a, **k))[1])
    fused.factors(q, keep=True)
    assert alive_at_allocation == [False]


@needs_kernel
def test_kept_factors_go_with_their_tensor():
    """The kept factors do not outlive the sources they belong to (a layer-wise encode's are hundreds of MB)."""
    import gc
    import weakref

    q = torch.randn(10, 8)
    factor = weakref.ref(fused.factors(q, keep=True)[0])
    gc.collect()
    assert factor() is not None
    del q
    gc.collect()
    assert factor() is None


@needs_kernel
def test_layerwise_encoding_in_inference_mode():
    """Layer-wise inference under inference mode (its tensors have no version counters) gives the encodings of
    no_grad."""
    from gpse_dgl.encode.large_graph import layerwise_forward
    from gpse_dgl.nn.gpse import GPSE

    graph = dgl.graph(([0, 1, 1, 2, 2, 3, 3, 0], [1, 0, 2, 1, 3, 2, 0, 3]))
    torch.manual_seed(0)
    model = GPSE(dim_in=4, dim_hidden=16, num_layers=2).eval()
    x = torch.randn(4, 4)
    with torch.no_grad():
        expected = layerwise_forward(model, graph, x, chunk_edges=3)
    with torch.inference_mode():
        got = layerwise_forward(model, graph, x, chunk_edges=3)
    torch.testing.assert_close(got, expected, atol=0, rtol=0)


@needs_kernel
def test_inference_mode_runs_without_a_cache():
    """Inference-mode tensors have no version counter: nothing is kept, and the encoder gives what it gives
    under no_grad (also when the model itself was built in inference mode)."""
    from gpse_dgl.nn.gpse import GPSE

    graph = dgl.graph(([0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]))
    torch.manual_seed(0)
    model = GPSE(dim_hidden=16, num_layers=2).eval()
    x = torch.randn(4, model.dim_in)
    with torch.no_grad():
        expected = model(graph, x)
    for precision in (torch.float32, torch.bfloat16):
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision != torch.float32):
            got = model(graph, x)
            with torch.no_grad():
                reference = model(graph, x)
        torch.testing.assert_close(got, reference, atol=0, rtol=0)
        if precision == torch.float32:
            torch.testing.assert_close(got, expected, atol=0, rtol=0)
    with torch.inference_mode():
        built_there = GPSE(dim_hidden=16, num_layers=2).eval()
        built_there.load_state_dict(model.state_dict())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert built_there(graph, x).isfinite().all()


@needs_kernel
def test_out_with_overlapping_rows_is_not_written_by_the_kernel():
    graph = graphs()["hub"]
    k, q, v = (torch.randn(301, 8) for _ in range(3))
    with torch.no_grad(), pytest.raises(RuntimeError):
        fused.gated_sum(graph, k, q, v, out=torch.zeros(1, 8).expand(301, 8))


def test_other_dtypes_and_devices_take_the_torch_ops_path():
    k = torch.zeros(3, 4, dtype=torch.float16)
    assert not cpu.supports(k, k, k)
    assert not cpu.supports(torch.zeros(3, 4), torch.zeros(3, 4, dtype=torch.bfloat16), torch.zeros(3, 4))
    assert not cpu.supports(torch.zeros(3, 4, dtype=torch.float64), torch.zeros(3, 4, dtype=torch.float64),
                               torch.zeros(3, 4, dtype=torch.float64))


def test_turned_off_it_says_so_and_the_torch_path_runs():
    """GPSE_DGL_NATIVE=0 (or no compiler): one line names the path, and gated_sum gives the same result."""
    code = ("from gpse_dgl.kernels import cpu; from gpse_dgl.nn import ops; import dgl, torch\n"
            "print(cpu.describe())\n"
            "g = dgl.graph(([0, 1, 2], [1, 2, 0])); x = torch.ones(3, 4, requires_grad=True)\n"
            "print(type(ops.gated_sum(g, x, x, x).grad_fn).__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, "GPSE_DGL_NATIVE": "0"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines == ["torch: the compiled kernels are not available (GPSE_DGL_NATIVE=0)", "_GatedSumBackward"]


def test_the_kernels_build_where_a_compiler_and_ninja_are_found():
    """Every kernel test skips where the extension did not build, so a source that no longer compiles must fail
    here instead, wherever the build's tools are (the test extra installs ninja)."""
    import os
    import shutil
    from pathlib import Path

    ninja = shutil.which("ninja") or (Path(sys.executable).parent / "ninja").exists()
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if os.environ.get("GPSE_DGL_NATIVE", "1").strip() == "0" or not (ninja and compiler):
        pytest.skip("no C++ compiler or ninja here, or GPSE_DGL_NATIVE=0: the torch path is the expected one")
    assert cpu.kernel() is not None, cpu.describe()


def test_a_failed_build_falls_back_with_its_reason(monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions\nmore detail")

    monkeypatch.setattr(cpu, "_state", {})
    monkeypatch.setattr("torch.utils.cpp_extension.load", broken)
    assert cpu.kernel() is None
    assert cpu.describe() == ("torch: the compiled kernels are not available (RuntimeError: Ninja is required "
                                 "to load C++ extensions)")


@needs_kernel
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_encoder_gives_the_same_encodings_on_both_paths(monkeypatch, precision):
    """A whole GPSE encoder (batched molecules' shape, virtual node) on the fused kernel and on torch ops."""
    from gpse_dgl.encode.inference import encode
    from gpse_dgl.nn.gpse import GPSE

    torch.manual_seed(0)
    model = GPSE(dim_hidden=32, num_layers=3).eval()
    graph = dgl.batch([dgl.to_bidirected(dgl.rand_graph(12, 20)) for _ in range(4)])
    fused = encode(model, graph, seed=3, precision=precision)
    monkeypatch.setattr(cpu, "_state", {"module": None, "reason": "turned off by the test"})
    plain = encode(model, graph, seed=3, precision=precision)
    tol = 1e-5 if precision == "fp32" else 2e-2
    torch.testing.assert_close(fused, plain, atol=tol, rtol=tol)


def test_info_and_run_records_name_the_path(capsys, monkeypatch):
    from _cli import run_cli
    from gpse_dgl.train.runtime import run_environment
    from gpse_dgl.utils.precision import decide_precision
    from gpse_dgl.utils.distributed import Context

    monkeypatch.setattr(cpu, "_state", {"module": None, "reason": "turned off by the test"})
    code, out, _ = run_cli(["info"], capsys)
    assert code == 0
    assert "kernels: torch: the compiled kernels are not available (turned off by the test)" in out
    # without their kernels the neighbour sums and the edge-gated sum take the other ops' rule (DGL on a graph
    # above SMALL_GRAPH_EDGES), GINE's and the encoder's sums their own torch ops
    assert ("paths: message_passing dgl, gated_sum torch, relu_sum torch, edge_gated_sum dgl, copy_u_sum dgl, "
            "copy_u_mean dgl, batch_norm_act torch, dropout_noise torch," in out)
    record = run_environment(Context(), "cpu", decide_precision("fp32", "cpu"), None)
    assert record["kernels"]["state"] == cpu.describe()
    assert record["kernels"]["paths"]["gated_sum"] == "torch"


def test_a_lock_left_by_a_killed_build_is_removed(tmp_path):
    import os
    import time

    stale, fresh = tmp_path / "stale", tmp_path / "fresh"
    stale.write_text("")
    fresh.write_text("")
    old = time.time() - cpu.STALE_LOCK_SECONDS - 5
    os.utime(stale, (old, old))
    cpu._remove_stale_lock(stale)
    cpu._remove_stale_lock(fresh)
    cpu._remove_stale_lock(tmp_path / "missing")
    assert not stale.exists() and fresh.exists()


def test_a_lock_that_goes_stale_while_waiting_is_removed(tmp_path):
    """torch waits without a limit on a build's lock; one still young when the wait began must not hang it."""
    import time

    lock = tmp_path / "lock"
    lock.write_text("")
    with cpu._watching_lock(lock, stale_seconds=0.3, poll=0.05):
        waited = time.monotonic()
        while lock.exists() and time.monotonic() - waited < 10:  # torch's own wait, in short
            time.sleep(0.02)
        assert not lock.exists()
    fresh = tmp_path / "fresh"
    fresh.write_text("")
    with cpu._watching_lock(fresh, stale_seconds=60, poll=0.01):
        time.sleep(0.1)
    assert fresh.exists()  # a live build's lock stays


def test_an_old_lock_stays_while_a_build_runs_in_its_directory(tmp_path):
    """A loaded host can take longer than the stale age to compile: the lock of a build still running is kept."""
    import os
    import subprocess
    import time

    lock = tmp_path / "lock"
    lock.write_text("")
    old = time.time() - cpu.STALE_LOCK_SECONDS - 5
    os.utime(lock, (old, old))
    if not os.path.isdir("/proc"):
        pytest.skip("no /proc: a build's liveness is not known here")
    compiler = subprocess.Popen(["sleep", "30"], cwd=tmp_path)  # stands in for ninja, working in the build folder
    try:
        assert cpu._build_running(tmp_path)
        assert not cpu._remove_stale_lock(lock) and lock.exists()
    finally:
        compiler.kill()
        compiler.wait()
    assert not cpu._build_running(tmp_path)
    assert cpu._remove_stale_lock(lock) and not lock.exists()


@needs_kernel
def test_gradient_buffers_must_have_the_rows_dtype():
    """The gradient kernels write every row in the rows' dtype: a float32 buffer for bf16 rows is refused."""
    graph = graphs()["hub"]
    rows = torch.zeros(graph.num_nodes(), 8, dtype=torch.bfloat16)
    csr = GatedCSR.of(graph)
    grad_out = torch.zeros(graph.num_nodes(), 8)
    with pytest.raises(RuntimeError, match=r"^grad_k must be contiguous, \(\d+, 8\), of the rows' dtype"):
        cpu.kernel().gated_sum_grad_key(csr.dst_indptr, csr.dst_index, rows, rows, rows, *fused.factors(rows),
                                        grad_out, torch.zeros(graph.num_nodes(), 8))
    with pytest.raises(RuntimeError, match="grad_val must be contiguous"):
        cpu.kernel().gated_sum_grad_source(*csr.by_source, rows, rows, rows, *fused.factors(rows), grad_out,
                                           None, torch.zeros(graph.num_nodes(), 8, dtype=torch.bfloat16).t())


def test_each_environment_keeps_a_build_of_its_own(monkeypatch, tmp_path):
    """Two environments or checkouts sharing the build cache (another interpreter, another torch installation,
    the sources in another folder) get different build names: torch would otherwise rebuild the one directory in
    place, silently, each time they alternate."""
    name = cpu._build_name()
    assert cpu._build_name() == name
    monkeypatch.setattr(torch, "__file__", str(tmp_path / "torch" / "__init__.py"))
    assert cpu._build_name() != name
    monkeypatch.undo()
    monkeypatch.setattr(sys.implementation, "cache_tag", "cpython-399")
    assert cpu._build_name() != name
    monkeypatch.undo()
    monkeypatch.setattr(cpu, "_CSRC", tmp_path / "another-checkout" / "csrc")  # the same sources elsewhere
    assert cpu._build_name() != name
