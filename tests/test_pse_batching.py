"""Batching, permutation equivariance, input handling, dense limit / sparse path, targets and transform."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dgl
from _pse_graphs import (GRAPH_PSES, NODE_PSES, assert_lap_pe_equivalent, complete, cycle, graph, path,
                         permute, random_graphs, sym_spectrum)
from gpse_dgl.pse import (ALL_PSES, AddPSE, PSE_REGISTRY, compute_pse_tensors, compute_pses,
                          per_graph_standardize, pretraining_targets, register_pse, resolve_pse_names,
                          target_columns)
from gpse_dgl.pse.standardize import standardize_stack
from gpse_dgl.utils.errors import GPSEError, GraphTooLargeError


@pytest.fixture(scope="module")
def mixed():
    from gpse_dgl.data.molecules import load_embedded_molecules

    return load_embedded_molecules()[::60] + random_graphs(seed=5, trees=15, er=15, multi=15)


def _split(result):
    counts = result.num_nodes.tolist()
    return {name: torch.split(value, counts) for name, value in result.node.items()}


# ------------------------------------------------------------------------------------------- batching
def test_batched_equals_one_by_one(mixed):
    together = compute_pse_tensors(mixed)
    nodes = _split(together)
    for i, g in enumerate(mixed):
        alone = compute_pse_tensors([g])
        for name in NODE_PSES:
            torch.testing.assert_close(nodes[name][i], alone.node[name], atol=1e-6, rtol=0)
        for name in GRAPH_PSES:
            torch.testing.assert_close(together.graph[name][i], alone.graph[name][0], atol=1e-6, rtol=0)


def test_chunking_and_batched_graph_input(mixed):
    ref = compute_pse_tensors(mixed)
    tiny_chunks = compute_pse_tensors(mixed, chunk_bytes=1)  # one graph per chunk
    batched = compute_pse_tensors([dgl.batch(mixed[:20]), dgl.batch(mixed[20:])])
    for other in (tiny_chunks, batched):
        assert torch.equal(other.num_nodes, ref.num_nodes)
        for table in ("node", "graph"):
            for name, value in getattr(ref, table).items():
                torch.testing.assert_close(getattr(other, table)[name], value, atol=1e-6, rtol=0)


def test_compute_pses_writes_ndata_and_graph_level(mixed):
    graphs = [g.clone() for g in mixed[:10]]
    graphs[0].ndata["feat"] = torch.ones(graphs[0].num_nodes(), 3)
    out, graph_level = compute_pses(graphs, "RWSE,EigVals")
    assert out is not None and len(out) == 10 and out[0] is graphs[0]
    assert set(graph_level) == {"EigVals"} and graph_level["EigVals"].shape == (10, 4)
    assert graph_level["EigVals"].dtype == torch.float32
    for g in graphs:
        assert g.ndata["RWSE"].shape == (g.num_nodes(), 20) and g.ndata["RWSE"].dtype == torch.float32
        assert "EigVals" not in g.ndata
    assert torch.equal(graphs[0].ndata["feat"], torch.ones(graphs[0].num_nodes(), 3))  # untouched
    single, gl = compute_pses(graphs[1], ["LapPE"])
    assert single is graphs[1] and gl == {}


def test_only_needed_decompositions(monkeypatch):
    """EigVals alone uses eigvalsh (no eigenvectors); node PSEs use one eigh per Laplacian kind."""
    calls = {"eigh": 0, "eigvalsh": 0}
    real_eigh, real_eigvalsh = torch.linalg.eigh, torch.linalg.eigvalsh

    def eigh(x):
        calls["eigh"] += 1
        return real_eigh(x)

    def eigvalsh(x):
        calls["eigvalsh"] += 1
        return real_eigvalsh(x)

    monkeypatch.setattr(torch.linalg, "eigh", eigh)
    monkeypatch.setattr(torch.linalg, "eigvalsh", eigvalsh)
    graphs = [cycle(5), cycle(7), complete(5)]  # two size groups, no bipartite graph (see test_pse_bipartite)
    compute_pse_tensors(graphs, ["EigVals"])
    assert calls == {"eigh": 0, "eigvalsh": 1}  # sizes 5 and 7 share one padded chunk
    calls.update(eigh=0, eigvalsh=0)
    compute_pse_tensors(graphs, ALL_PSES)
    assert calls == {"eigh": 4, "eigvalsh": 0}  # (sym + comb) x 2 groups, shared by all five spectral PSEs
    calls.update(eigh=0, eigvalsh=0)
    compute_pse_tensors(graphs, ["CycleGE"])
    assert calls == {"eigh": 0, "eigvalsh": 0}
    compute_pse_tensors(graphs, ["ElstaticPE"])  # pseudo-inverse by Cholesky, no eigenpairs
    assert calls == {"eigh": 0, "eigvalsh": 0}


def test_pinv_by_cholesky_equals_eigenpairs(mixed):
    """ElstaticPE alone (Cholesky of L + P) == ElstaticPE next to HKdiagSE (shared eigenpairs), including
    graphs with several components and isolated nodes (a component projector P per graph)."""
    extra = [graph(7, [(0, 1), (1, 2), (4, 5)]), graph(5, []), graph(6, [(0, 1), (2, 3), (4, 5)])]
    graphs = mixed + extra
    alone = compute_pse_tensors(graphs, ["ElstaticPE"])
    shared = compute_pse_tensors(graphs, ["ElstaticPE", "HKdiagSE"])
    torch.testing.assert_close(alone.node["ElstaticPE"], shared.node["ElstaticPE"], atol=1e-6, rtol=0)
    from gpse_dgl.pse.spectral import DenseBatch

    adj = torch.zeros(1, 7, 7, dtype=torch.float64)
    for u, v in [(0, 1), (1, 2), (4, 5)]:
        adj[0, u, v] = adj[0, v, u] = 1.0
    batch = DenseBatch(adj, {"comb_pinv"})
    torch.testing.assert_close(batch.comb_pinv(1e-6)[0], torch.linalg.pinv(batch.comb_matrix[0], hermitian=True),
                               atol=1e-12, rtol=0)
    assert "comb" not in batch.__dict__


# ------------------------------------------------------------------------------------ equivariance
def test_permutation_equivariance(mixed):
    rng = np.random.default_rng(7)
    perms = [rng.permutation(g.num_nodes()) for g in mixed]
    permuted = [permute(g, p) for g, p in zip(mixed, perms)]
    a, b = compute_pse_tensors(mixed), compute_pse_tensors(permuted)
    na, nb = _split(a), _split(b)
    simple = 0
    for i, (g, p) in enumerate(zip(mixed, perms)):
        for name in NODE_PSES:
            x, y = na[name][i].double().numpy(), nb[name][i][torch.as_tensor(p)].double().numpy()
            if name == "LapPE":  # compare per eigenspace: rotations inside repeated eigenvalues are free
                simple += assert_lap_pe_equivalent(y, x, sym_spectrum(g), atol=1e-5)
            else:
                np.testing.assert_allclose(y, x, atol=1e-5, err_msg=name)
        for name in GRAPH_PSES:
            np.testing.assert_allclose(b.graph[name][i], a.graph[name][i], atol=1e-5, err_msg=name)
    assert simple > 50


# --------------------------------------------------------------------------------------- input forms
def test_directed_self_loops_multi_edges_are_simplified():
    base = graph(5, [(0, 1), (1, 2), (2, 0), (2, 3)])
    directed = graph(5, [(0, 1), (2, 1), (2, 0), (3, 2)], bidirected=False)
    messy = graph(5, [(0, 1), (1, 2), (2, 0), (2, 3), (0, 1), (3, 3), (4, 4), (2, 3)])
    ref = compute_pse_tensors([base])
    for other in (directed, messy):
        res = compute_pse_tensors([other])
        for table in ("node", "graph"):
            for name, value in getattr(ref, table).items():
                torch.testing.assert_close(getattr(res, table)[name], value, atol=1e-6, rtol=0)
    assert ref.graph["CycleGE"][0, 0] == 4  # self-loops and duplicates not counted as edges


def test_empty_inputs():
    graphs, gl = compute_pses([])
    assert graphs == [] and all(v.shape == (0, PSE_REGISTRY[k].dim) for k, v in gl.items())
    empty = graph(0, [])
    g, gl = compute_pses(empty)
    assert all(g.ndata[n].shape == (0, PSE_REGISTRY[n].dim) for n in NODE_PSES)
    assert all(torch.equal(v, torch.zeros(1, PSE_REGISTRY[k].dim)) for k, v in gl.items())


def test_no_nan_anywhere():
    graphs = [graph(0, []), graph(1, []), graph(4, []), graph(3, [(0, 1)]), path(2), complete(2)]
    for normalize in (False, True):
        res = compute_pse_tensors(graphs, normalize=normalize)
        for value in list(res.node.values()) + list(res.graph.values()):
            assert torch.isfinite(value).all()


def test_bad_names_and_heterographs():
    with pytest.raises(ValueError, match="unknown PSE 'Nope'"):
        compute_pses([cycle(4)], ["Nope"])
    assert resolve_pse_names("rwse, LapPE,RWSE") == ["RWSE", "LapPE"]
    hetero = dgl.heterograph({("a", "r", "b"): (torch.tensor([0]), torch.tensor([0]))})
    with pytest.raises(GPSEError, match="homogeneous"):
        compute_pses([hetero], ["RWSE"])
    with pytest.raises(TypeError):
        compute_pses([np.zeros(3)])


# ------------------------------------------------------------------------------- dense limit / sparse
def test_dense_only_pse_over_limit_raises_before_work():
    graphs = [cycle(4), cycle(12)]
    for name in ("ElstaticPE", "HKdiagSE"):
        with pytest.raises(GraphTooLargeError, match=r"graph 1 has 12 nodes, above dense_limit=10.*--dense-limit"):
            compute_pses(graphs, [name, "RWSE"], dense_limit=10)
    # CycleGE has no dense step and ignores the limit; raising the limit makes the others work
    compute_pse_tensors(graphs, ["CycleGE"], dense_limit=10)
    compute_pse_tensors(graphs, ["ElstaticPE"], dense_limit=12)


def test_sparse_path_matches_dense():
    pytest.importorskip("gpse_dgl.pse.sparse")
    rng = np.random.default_rng(11)
    graphs = random_graphs(seed=12, trees=4, er=0, multi=4)
    graphs += [path(40), cycle(33)]
    graphs = [g for g in graphs if g.num_nodes() >= 12]
    names = ["LapPE", "EigVals", "RWSE"]
    dense = compute_pse_tensors(graphs, names)
    sparse = compute_pse_tensors(graphs, names, dense_limit=11)
    torch.testing.assert_close(sparse.node["RWSE"], dense.node["RWSE"], atol=1e-5, rtol=0)
    torch.testing.assert_close(sparse.graph["EigVals"], dense.graph["EigVals"], atol=1e-5, rtol=0)
    sd, ss = _split(dense)["LapPE"], _split(sparse)["LapPE"]
    for g, a, b in zip(graphs, sd, ss):
        assert_lap_pe_equivalent(b.numpy(), a.numpy(), sym_spectrum(g), atol=1e-4)
    del rng


# -------------------------------------------------------------------------------- standardisation
def test_normalize_flag_and_stack_standardisation(mixed):
    raw = compute_pse_tensors(mixed, ["RWSE", "ElstaticPE", "EigVals"])
    norm = compute_pse_tensors(mixed, ["RWSE", "ElstaticPE", "EigVals"], normalize=True)
    for name in ("RWSE", "ElstaticPE"):
        expected = per_graph_standardize(raw.node[name].double(), raw.num_nodes)
        torch.testing.assert_close(norm.node[name].double(), expected, atol=2e-5, rtol=0)
    torch.testing.assert_close(norm.graph["EigVals"], raw.graph["EigVals"])  # graph level stays raw
    x = torch.randn(7, 5, 3, dtype=torch.float64)
    torch.testing.assert_close(standardize_stack(x).reshape(-1, 3),
                               per_graph_standardize(x.reshape(-1, 3), [5] * 7))


# ------------------------------------------------------------------------------------------ targets
def test_pretraining_targets(mixed):
    graphs = [g.clone() for g in mixed[:25]]
    y_graph = pretraining_targets(graphs)
    assert y_graph.shape == (25, 11) and y_graph.dtype == torch.float32
    norm = compute_pse_tensors(graphs, normalize=True)
    node = torch.cat([norm.node[n] for n in ("ElstaticPE", "LapPE", "RWSE", "HKdiagSE")], dim=1)
    stacked = torch.cat([g.ndata["gpse_node_target"] for g in graphs])
    assert stacked.shape == (node.shape[0], 51)
    torch.testing.assert_close(stacked, node)
    torch.testing.assert_close(y_graph, torch.cat([norm.graph["EigVals"], norm.graph["CycleGE"]], dim=1))
    assert "RWSE" not in graphs[0].ndata
    cols = target_columns()
    assert len(cols) == 62 and cols[0] == ("ElstaticPE", 0) and cols[7] == ("LapPE", 0)
    assert cols[51] == ("EigVals", 0) and cols[-1] == ("CycleGE", 6)
    with pytest.raises(ValueError, match="graph-level"):
        target_columns(node_names=["EigVals"])


# ---------------------------------------------------------------------------------------- transform
def test_add_pse_transform():
    g = cycle(5)
    g = AddPSE(["RWSE", "CycleGE"])(g)
    assert g.ndata["RWSE"].shape == (5, 20)
    assert torch.equal(g.ndata["CycleGE"], torch.tensor([[5.0, 0, 0, 1, 0, 0, 0]]).repeat(5, 1))
    h = AddPSE(["EigVals"], graph_level="attr")(path(4))
    assert h.graph_pse["EigVals"].shape == (1, 4) and "EigVals" not in h.ndata
    k = AddPSE(None, graph_level="skip", normalize=True)(complete(4))
    assert set(k.ndata) == set(NODE_PSES)
    b = AddPSE(["CycleGE"])(dgl.batch([cycle(3), cycle(4)]))
    assert b.ndata["CycleGE"][:, 0].tolist() == [3, 3, 3, 4, 4, 4, 4]
    with pytest.raises(ValueError):
        AddPSE(graph_level="labels")


def test_register_new_pse_is_one_line():
    def degree_pe(batch):
        return batch.deg.unsqueeze(-1)

    try:
        register_pse("DegreeTest", "node", 1, dense=degree_pe)
        g, _ = compute_pses(path(3), ["DegreeTest"])
        assert g.ndata["DegreeTest"].squeeze(-1).tolist() == [1, 2, 1]
    finally:
        PSE_REGISTRY.pop("DegreeTest", None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(mixed):
    cpu = compute_pse_tensors(mixed, ["RWSE", "ElstaticPE", "HKdiagSE", "EigVals"])
    gpu = compute_pse_tensors(mixed, ["RWSE", "ElstaticPE", "HKdiagSE", "EigVals"], device="cuda")
    for table in ("node", "graph"):
        for name, value in getattr(cpu, table).items():
            torch.testing.assert_close(getattr(gpu, table)[name], value, atol=1e-5, rtol=0)


def test_partial_eigensolver_matches_full(mixed, monkeypatch):
    """LapPE / EigVals alone use LAPACK's partial MRRR solver for larger graphs; the result (canonical
    basis included, so also for repeated eigenvalues) equals the one from the full decomposition."""
    import gpse_dgl.pse.spectral as spectral

    graphs = mixed + [cycle(12), complete(9), graph(10, [(0, 1), (2, 3), (4, 5)])]
    full = compute_pse_tensors(graphs, ["LapPE", "EigVals", "RWSE"])  # RWSE forces the full eigh
    monkeypatch.setattr(spectral, "PARTIAL_MIN_N", 1)
    for names in (["LapPE", "EigVals"], ["EigVals"], ["LapPE"]):
        part = compute_pse_tensors(graphs, names)
        if "LapPE" in names:
            torch.testing.assert_close(part.node["LapPE"], full.node["LapPE"], atol=1e-6, rtol=0)
        if "EigVals" in names:
            torch.testing.assert_close(part.graph["EigVals"], full.graph["EigVals"], atol=1e-7, rtol=0)


def test_worker_threads_and_id_types(mixed):
    """Thread-parallel chunks give the same values; int32 / int64 / batched inputs mix (public path)."""
    serial = compute_pse_tensors(mixed, num_workers=1)
    threaded = compute_pse_tensors(mixed, num_workers=3)
    for table in ("node", "graph"):
        for name, value in getattr(serial, table).items():
            assert torch.equal(getattr(threaded, table)[name], value), name
    mixed_types = [mixed[0].int(), mixed[1], dgl.batch([mixed[2], mixed[3]])]
    res = compute_pse_tensors(mixed_types)
    ref = compute_pse_tensors(mixed[:4])
    for table in ("node", "graph"):
        for name, value in getattr(ref, table).items():
            torch.testing.assert_close(getattr(res, table)[name], value, atol=1e-6, rtol=0)


def test_laplacian_from_edges_equals_from_adjacency(mixed):
    """DenseBatch.from_collection builds L_sym straight from the edge list and takes components from the
    collection; both equal what the adjacency stack gives (isolated nodes keep 1 on the diagonal of
    L_sym), and A is only built when read."""
    from gpse_dgl.pse.spectral import DenseBatch, EdgeCollection

    graphs = mixed + [graph(6, [(0, 1), (1, 2), (4, 5)]), graph(6, [])]  # isolated nodes, no edges
    coll = EdgeCollection.from_graphs(graphs)
    for n in (6, int(coll.num_nodes.max())):
        gids = np.flatnonzero(coll.num_nodes == n)
        lazy = DenseBatch.from_collection(coll, gids, n)
        eager = DenseBatch(coll.dense_adjacency(gids, n))
        torch.testing.assert_close(lazy.sym_matrix, eager.sym_matrix, atol=1e-15, rtol=0)
        assert "adj" not in lazy.__dict__  # L_sym alone does not build the adjacency
        torch.testing.assert_close(lazy.comb_matrix, eager.comb_matrix, atol=0, rtol=0)
        # components from one pass over the collection: same partition, so the same null projector
        torch.testing.assert_close(lazy.null_projector, eager.null_projector, atol=0, rtol=0)


# ------------------------------------------------------------------------------------- padded chunks
def test_padded_chunks_equal_exact_size_chunks(mixed, monkeypatch):
    """LapPE / EigVals alone run on padded chunks of nearby sizes; the values (raw and standardised)
    equal those of exact-size chunks, with worker threads and without."""
    import dataclasses

    from gpse_dgl.pse import registry

    graphs = mixed + [cycle(5), cycle(7), complete(6), path(2), graph(1, []), graph(6, [(0, 1), (2, 3)])]
    padded = {w: {norm: compute_pse_tensors(graphs, ["LapPE", "EigVals"], normalize=norm, num_workers=w)
                  for norm in (False, True)} for w in (1, 2)}
    for name in ("LapPE", "EigVals"):
        monkeypatch.setitem(registry.PSE_REGISTRY, name,
                            dataclasses.replace(registry.PSE_REGISTRY[name], padded=False))
    for norm in (False, True):
        exact = compute_pse_tensors(graphs, ["LapPE", "EigVals"], normalize=norm, num_workers=1)
        for w in (1, 2):
            torch.testing.assert_close(padded[w][norm].node["LapPE"], exact.node["LapPE"], atol=1e-6, rtol=0)
            torch.testing.assert_close(padded[w][norm].graph["EigVals"], exact.graph["EigVals"], atol=1e-7, rtol=0)


def test_size_buckets_and_padded_chunks():
    from gpse_dgl.pse.chunks import dense_chunks, size_buckets

    sizes = np.array([1, 2, 3, 4, 5, 8, 9, 10, 11, 20, 24, 26, 63, 64, 80])
    assert size_buckets(sizes, 64).tolist() == [1, 1, 1, 4, 4, 8, 8, 8, 11, 20, 20, 26, 63, 64, 80]
    assert size_buckets(sizes, 0).tolist() == sizes.tolist()  # no padding: exact sizes
    chunks = list(dense_chunks(np.array([5, 2, 4, 0, 4, 9]), dense_limit=8, chunk_bytes=2**20, pad_below=64))
    # [2, 4, 4] share a chunk of width 4; 5 starts the next bucket; 0 nodes and 9 > dense_limit are skipped
    assert [(n, gids.tolist()) for n, gids in chunks] == [(4, [1, 2, 4]), (5, [0])]
    # a bucket never reaches past dense_limit (graphs above it take the sparse path)
    chunks = list(dense_chunks(np.array([18, 20, 21, 22]), dense_limit=20, chunk_bytes=2**20, pad_below=64))
    assert [(n, gids.tolist()) for n, gids in chunks] == [(20, [0, 1])]


def test_padded_batch_serves_only_lowest_eigenpairs():
    from gpse_dgl.pse.spectral import DenseBatch, EdgeCollection

    coll = EdgeCollection.from_graphs([path(3), path(5)])
    with pytest.raises(ValueError, match="padded batches serve"):
        DenseBatch.from_collection(coll, np.array([0, 1]), 5, {"comb"}, sizes=[3, 5])
    batch = DenseBatch.from_collection(coll, np.array([0, 1]), 5, {"sym_low"}, sizes=[3, 5])
    assert batch.node_counts.tolist() == [3, 5]
    assert batch.sym_matrix[0, 3:, 3:].diagonal().tolist() == [3.0, 3.0]  # padding: an eigenvalue of 3
    with pytest.raises(ValueError, match="no adjacency"):
        batch.adj


def test_standardize_padded_stack():
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    sizes = [6, 4, 1]
    out = standardize_stack(x, sizes)
    for b, n in enumerate(sizes):
        torch.testing.assert_close(out[b, :n], per_graph_standardize(x[b, :n], [n]), atol=1e-12, rtol=0)
        assert torch.all(out[b, n:] == 0)
    torch.testing.assert_close(standardize_stack(x, [6, 6, 6]), standardize_stack(x), atol=1e-12, rtol=0)


def test_torch_thread_setting_is_restored(mixed):
    """Worker threads run LAPACK single-threaded; torch's (process-wide) setting comes back afterwards."""
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        compute_pse_tensors(mixed[:20], ["LapPE", "RWSE"], num_workers=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_worker_pool_is_reused_per_process(mixed, monkeypatch):
    """One pool per (process, size) across calls; a forked child (other pid) gets its own."""
    from gpse_dgl.pse import pipeline

    pool = pipeline._worker_pool(2)
    assert pipeline._worker_pool(2) is pool
    compute_pse_tensors(mixed[:10], ["LapPE"], num_workers=2)
    assert pipeline._worker_pool(2) is pool
    real_pid = pipeline.os.getpid()
    monkeypatch.setattr(pipeline.os, "getpid", lambda: real_pid + 1)
    child = pipeline._worker_pool(2)
    assert child is not pool and all(key[0] == real_pid + 1 for key in pipeline._POOLS)


def test_worker_error_propagates_and_pool_survives(mixed, monkeypatch):
    """A failing decomposition on a worker raises in the caller; the next call works normally."""
    from gpse_dgl.pse import pipeline

    expected = compute_pse_tensors(mixed, ["LapPE"], num_workers=2)

    def broken(batches):
        raise RuntimeError("LAPACK failed")

    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "_precompute_all", broken)
        with pytest.raises(RuntimeError, match="LAPACK failed"):
            compute_pse_tensors(mixed, ["LapPE"], num_workers=2)
    again = compute_pse_tensors(mixed, ["LapPE"], num_workers=2)
    assert torch.equal(again.node["LapPE"], expected.node["LapPE"])


def _assert_same_tables(a, b, atol=1e-6):
    assert torch.equal(a.num_nodes, b.num_nodes)
    for table in ("node", "graph"):
        assert getattr(a, table).keys() == getattr(b, table).keys()
        for name, value in getattr(a, table).items():
            torch.testing.assert_close(getattr(b, table)[name], value, atol=atol, rtol=0, msg=name)


@pytest.mark.parametrize("normalize", [False, True])
def test_parts_pipeline_equals_one_part(mixed, monkeypatch, normalize):
    """Inputs of many graphs run as pipelined parts; values, ndata and graph-level results are those
    of one part, batched input graphs included (they count their members)."""
    from gpse_dgl.pse import pipeline

    graphs = list(mixed[:30]) + [dgl.batch(mixed[30:33])] + list(mixed[33:])
    one_part = compute_pse_tensors(graphs, normalize=normalize, num_workers=2)
    monkeypatch.setattr(pipeline, "PART_GRAPHS", 7)
    assert len(pipeline._graph_parts(graphs, 2)) == len(graphs) // 7
    assert len(pipeline._graph_parts(graphs, 1)) == 1  # no pool, no parts
    _assert_same_tables(one_part, compute_pse_tensors(graphs, normalize=normalize, num_workers=2,
                                                      progress=True))
    fresh = [g.clone() for g in mixed]  # the same member graphs, unbatched: ndata written part by part
    _, graph_level = compute_pses(fresh, normalize=normalize, num_workers=2)
    nodes = _split(one_part)
    for i, g in enumerate(fresh):
        for name in NODE_PSES:
            torch.testing.assert_close(g.ndata[name], nodes[name][i], atol=1e-6, rtol=0)
    for name in GRAPH_PSES:
        torch.testing.assert_close(graph_level[name], one_part.graph[name], atol=1e-6, rtol=0)


def test_parts_with_large_chunks_and_sparse_graphs(monkeypatch):
    """Parts holding chunks of 128+ nodes or graphs above the dense limit are finished after the
    pipeline (threaded LAPACK, sparse paths); the result equals a one-part run."""
    from gpse_dgl.pse import pipeline

    graphs = random_graphs(seed=11, trees=6, er=6, multi=4) + [cycle(130), path(150), cycle(40)]
    names = ["LapPE", "EigVals", "RWSE"]
    one_part = compute_pse_tensors(graphs, names, dense_limit=140, num_workers=2)
    monkeypatch.setattr(pipeline, "PART_GRAPHS", 4)
    _assert_same_tables(one_part, compute_pse_tensors(graphs, names, dense_limit=140, num_workers=2))


def test_parts_worker_error_propagates(mixed, monkeypatch):
    """A failing decomposition in any part raises in the caller, with no task left running."""
    from gpse_dgl.pse import pipeline

    monkeypatch.setattr(pipeline, "PART_GRAPHS", 10)
    calls = []

    def fails_later(batches):
        calls.append(len(batches))
        if len(calls) == 3:
            raise RuntimeError("LAPACK failed")
        for batch in batches:
            batch.precompute()

    monkeypatch.setattr(pipeline, "_precompute_all", fails_later)
    with pytest.raises(RuntimeError, match="LAPACK failed"):
        compute_pse_tensors(mixed, ["LapPE"], num_workers=2)
    assert len(pipeline._graph_parts(mixed, 2)) > 3 and len(calls) >= 3


def test_parts_check_the_dense_limit_before_any_work(mixed, monkeypatch):
    """A graph too large for a dense-only PSE in a later part fails the call before the first part is
    computed: nothing is written to the graphs of earlier parts."""
    from gpse_dgl.pse import pipeline

    monkeypatch.setattr(pipeline, "PART_GRAPHS", 2)  # 15 parts: early ones finish before the last
    fresh = [g.clone() for g in mixed[:30]] + [cycle(60)]  # the molecules have at most 37 nodes
    with pytest.raises(GraphTooLargeError, match=r"graph 30 has 60 nodes, above dense_limit=40"):
        compute_pses(fresh, ["ElstaticPE", "LapPE"], dense_limit=40, num_workers=2)
    assert all("ElstaticPE" not in g.ndata and "LapPE" not in g.ndata for g in fresh)
