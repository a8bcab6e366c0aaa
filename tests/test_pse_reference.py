"""Batched PSEs agree with the plain per-graph reference (gpse_dgl.pse.reference) on hundreds of graphs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from _pse_graphs import GRAPH_PSES, NODE_PSES, assert_lap_pe_equivalent, random_graphs, sym_spectrum
from gpse_dgl.pse import compute_pse_tensors, per_graph_standardize
from gpse_dgl.pse.reference import (dense_adjacency, ref_rwse, ref_standardize, reference_pses)

ATOL = 1e-5


@pytest.fixture(scope="module")
def molecules():
    from gpse_dgl.data.molecules import load_embedded_molecules

    graphs = load_embedded_molecules()
    return graphs[::20]  # ~150 molecules of all sizes


def _check_against_reference(graphs, normalize=False):
    result = compute_pse_tensors(graphs, normalize=normalize)
    offsets = np.concatenate([[0], np.cumsum(result.num_nodes.numpy())])
    simple_columns = 0
    for i, g in enumerate(graphs):
        ref = reference_pses(g, normalize=normalize)
        rows = slice(offsets[i], offsets[i + 1])
        for name in NODE_PSES:
            ours = result.node[name][rows].double().numpy()
            assert ours.shape == ref[name].shape, name
            if name == "LapPE" and not normalize:
                simple_columns += assert_lap_pe_equivalent(ours, ref[name], sym_spectrum(g), atol=ATOL)
            elif name == "LapPE":
                continue  # standardised |eigenvectors| of repeated eigenvalues are basis dependent
            else:
                np.testing.assert_allclose(ours, ref[name], atol=ATOL, rtol=1e-5, err_msg=f"{name} graph {i}")
        for name in GRAPH_PSES:
            np.testing.assert_allclose(result.graph[name][i].double().numpy(), ref[name], atol=ATOL,
                                       rtol=1e-6, err_msg=f"{name} graph {i}")
    return simple_columns


def test_random_graphs_match_reference():
    graphs = random_graphs(seed=1)  # 300 trees, Erdos-Renyi and multi-component graphs
    simple = _check_against_reference(graphs)
    assert simple > 300  # the LapPE comparison is not vacuous


def test_molecules_match_reference(molecules):
    simple = _check_against_reference(molecules)
    assert simple > 100


def test_normalized_match_reference(molecules):
    _check_against_reference(molecules[:60] + random_graphs(seed=2, trees=30, er=30, multi=30), normalize=True)


def test_rwse_spectral_formula_equals_matrix_powers():
    """RWSE from the normalised Laplacian's eigenpairs == diag(P^k) by explicit powers, incl. isolated nodes."""
    graphs = random_graphs(seed=3, trees=20, er=20, multi=40)
    result = compute_pse_tensors(graphs, ["RWSE"])
    ours = torch.split(result.node["RWSE"].double(), result.num_nodes.tolist())
    for g, value in zip(graphs, ours):
        np.testing.assert_allclose(value.numpy(), ref_rwse(dense_adjacency(g)), atol=1e-7)


def test_per_graph_standardize_matches_reference():
    rng = np.random.default_rng(0)
    counts = [1, 5, 2, 9, 0, 3]
    x = rng.normal(size=(sum(counts), 6))
    x[:, 2] = 4.0  # constant column: zero everywhere
    x[1:6, 3] = 1.0 + 1e-4 * rng.normal(size=5)  # variance below 1e-5 in graph 1 only
    out = per_graph_standardize(torch.from_numpy(x), counts).numpy()
    start = 0
    for c in counts:
        np.testing.assert_allclose(out[start:start + c], ref_standardize(x[start:start + c]), atol=1e-12)
        start += c
    assert np.all(out[:, 2] == 0) and np.all(out[1:6, 3] == 0) and np.any(out[6:, 3] != 0)
    # a standardised column has mean 0 and biased variance var / (var + 1e-5), i.e. close to 1
    col = out[8:17, 0]
    assert abs(col.mean()) < 1e-12 and abs(col.var() - 1) < 1e-3


def test_standardize_keeps_a_unit_norm_column_of_a_large_graph_and_warns_when_it_zeroes_spread():
    """A unit-norm column (a LapPE eigenvector) of n nodes has variance ~1/n: the reference's fixed 1e-5
    zeroed every one above ~100k nodes. The tolerance now shrinks as 1/n above 10,000 nodes."""
    import warnings

    from gpse_dgl.pse.standardize import ColumnZeroedWarning, standardize_stack

    n = 200_000
    x = torch.randn(n, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x /= x.norm(dim=0)  # unit-norm columns, variance 5e-6
    x[:, 2] = 0.5 + 1e-9 * x[:, 2]  # a constant up to rounding-sized noise: zeroed without a word
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for out in (per_graph_standardize(x, [n]), standardize_stack(x[None])[0]):
            assert torch.allclose(out[:, :2].std(dim=0), torch.full((2,), 0.95, dtype=torch.float64), atol=0.01)
            assert torch.all(out[:, 2] == 0)
    x[:, 1] *= 1e-2  # variance 5e-10, below the tolerance 5e-7 but not noise: zeroed, and said so
    with pytest.warns(ColumnZeroedWarning, match=r"set 1 column\(s\) to 0 whose variance \(up to 5e-10\)") as caught:
        out = per_graph_standardize(x, [n])
    assert torch.all(out[:, 1] == 0) and caught[0].message.count == 1
