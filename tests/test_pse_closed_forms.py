"""PSEs of graphs whose values are known in closed form (path, cycle, star, complete, disconnected)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from _pse_graphs import complete, cycle, graph, path, star
from gpse_dgl.pse import compute_pse_tensors

K_RW = np.arange(2, 22)
T_HK = np.arange(1, 21)


def pses(g, names=None):
    r = compute_pse_tensors([g], names)
    out = {k: v.double().numpy() for k, v in r.node.items()}
    out.update({k: v[0].double().numpy() for k, v in r.graph.items()})
    return out


def sorted_nonzero(values, k=4):
    vals = sorted(v for v in values if abs(v) >= 1e-6)[:k]
    return np.array(vals + [0.0] * (k - len(vals)))


# ----------------------------------------------------------------------------------------- eigenvalues
@pytest.mark.parametrize("n", [3, 5, 6, 9])
def test_eigvals_cycle(n):
    expected = sorted_nonzero([1 - math.cos(2 * math.pi * k / n) for k in range(n)])
    np.testing.assert_allclose(pses(cycle(n), ["EigVals"])["EigVals"], expected, atol=1e-6)


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_eigvals_complete(n):
    expected = sorted_nonzero([n / (n - 1)] * (n - 1))
    np.testing.assert_allclose(pses(complete(n), ["EigVals"])["EigVals"], expected, atol=1e-6)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_eigvals_path(n):
    expected = sorted_nonzero([1 - math.cos(math.pi * k / (n - 1)) for k in range(n)])
    np.testing.assert_allclose(pses(path(n), ["EigVals"])["EigVals"], expected, atol=1e-6)


def test_eigvals_star():
    # star with m leaves: normalised Laplacian eigenvalues 0, 1 (m - 1 times), 2
    np.testing.assert_allclose(pses(star(5), ["EigVals"])["EigVals"], [1, 1, 1, 1], atol=1e-6)
    np.testing.assert_allclose(pses(star(2), ["EigVals"])["EigVals"], [1, 2, 0, 0], atol=1e-6)


def test_disconnected_with_isolated_node():
    """Two triangles and an isolated node: 2 zero eigenvalues, the isolated node contributes 1."""
    g = graph(7, [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5)])
    out = pses(g)
    np.testing.assert_allclose(out["EigVals"], [1.0, 1.5, 1.5, 1.5], atol=1e-6)
    # first kept eigenvector is the indicator of the isolated node (L_sym e_6 = e_6)
    np.testing.assert_allclose(out["LapPE"][:, 0], [0, 0, 0, 0, 0, 0, 1], atol=1e-6)
    np.testing.assert_array_equal(out["RWSE"][6], 0.0)
    np.testing.assert_array_equal(out["HKdiagSE"][6], 0.0)
    np.testing.assert_allclose(out["CycleGE"], [6, 2, 0, 0, 0, 0, 0])
    # triangle nodes: the same values as a lone triangle (components do not interact) ...
    tri = pses(complete(3))
    for name in ("RWSE", "HKdiagSE"):
        np.testing.assert_allclose(out[name][:6], np.tile(tri[name][:1], (6, 1)), atol=1e-6)
    # ... except ElstaticPE, whose column/row statistics run over all 7 nodes. Its neighbour columns
    # are defined for every node with neighbours (not NaN -> 0 for the whole graph as in the authors' code)
    assert np.all(np.abs(out["ElstaticPE"][:6, 5:]) > 1e-3)
    np.testing.assert_array_equal(out["ElstaticPE"][6, 5:], 0.0)


# ----------------------------------------------------------------------------------------------- RWSE
def rw_cycle(n, k):
    """Return probability after k steps of the simple random walk on C_n: closed +-1 walks / 2^k."""
    return sum(math.comb(k, j) for j in range(k + 1) if (2 * j - k) % n == 0) / 2 ** k


@pytest.mark.parametrize("n", [3, 4, 7])
def test_rwse_cycle(n):
    expected = np.array([rw_cycle(n, k) for k in K_RW])
    np.testing.assert_allclose(pses(cycle(n), ["RWSE"])["RWSE"], np.tile(expected, (n, 1)), atol=1e-7)


@pytest.mark.parametrize("n", [2, 3, 6])
def test_rwse_complete(n):
    # P = (J - I) / (n - 1) has eigenvalues 1 and -1/(n-1) (n - 1 times)
    expected = (1 + (n - 1) * (-1 / (n - 1)) ** K_RW) / n
    np.testing.assert_allclose(pses(complete(n), ["RWSE"])["RWSE"], np.tile(expected, (n, 1)), atol=1e-7)


def test_rwse_star():
    m = 4
    out = pses(star(m), ["RWSE"])["RWSE"]
    even = K_RW % 2 == 0
    np.testing.assert_allclose(out[0], np.where(even, 1.0, 0.0), atol=1e-7)  # centre
    np.testing.assert_allclose(out[1:], np.tile(np.where(even, 1 / m, 0.0), (m, 1)), atol=1e-7)


def test_rwse_path3_by_hand():
    # P3: end nodes return after k=2 with prob 1/2, centre with prob 1; odd k impossible (bipartite)
    out = pses(path(3), ["RWSE"])["RWSE"]
    np.testing.assert_allclose(out[:, 0], [0.5, 1.0, 0.5], atol=1e-7)
    np.testing.assert_allclose(out[:, 1], 0.0, atol=1e-7)


# ------------------------------------------------------------------------------------------- HKdiagSE
@pytest.mark.parametrize("n", [2, 4, 6])
def test_hkdiag_complete(n):
    # L = nI - J: eigenvalue n on the (n-1)-dim space orthogonal to 1, diag of its projector = (n-1)/n
    expected = np.exp(-T_HK * n) * (n - 1) / n
    np.testing.assert_allclose(pses(complete(n), ["HKdiagSE"])["HKdiagSE"], np.tile(expected, (n, 1)),
                               rtol=1e-6, atol=1e-30)


def test_hkdiag_cycle():
    n = 6
    mu = 2 - 2 * np.cos(2 * np.pi * np.arange(1, n) / n)  # non-zero eigenvalues of the cycle's L
    expected = np.exp(-np.outer(T_HK, mu)).sum(1) / n  # vertex-transitive: diag = trace / n
    np.testing.assert_allclose(pses(cycle(n), ["HKdiagSE"])["HKdiagSE"], np.tile(expected, (n, 1)),
                               rtol=1e-5, atol=1e-12)


# ----------------------------------------------------------------------------------------- ElstaticPE
@pytest.mark.parametrize("n", [2, 3, 5])
def test_elstatic_complete(n):
    # L+ = (I - J/n)/n, so Q = -1/n off the diagonal and 0 on it
    col = [-1 / n, -(n - 1) / n ** 2, n ** -1.5, -1 / n, n ** -1.5, -1 / n, -1 / n]
    np.testing.assert_allclose(pses(complete(n), ["ElstaticPE"])["ElstaticPE"], np.tile(col, (n, 1)),
                               atol=1e-6)


def test_elstatic_path3_by_hand():
    # L of P3 = [[1,-1,0],[-1,2,-1],[0,-1,1]]; L+ = [[5,-1,-4],[-1,2,-1],[-4,-1,5]] / 9
    lp = np.array([[5, -1, -4], [-1, 2, -1], [-4, -1, 5]]) / 9
    q = lp - np.diag(lp)[None, :]
    a = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=float)
    dinv_a = a / a.sum(1, keepdims=True)
    expected = np.stack([q.min(0), q.mean(0), q.std(0, ddof=1), q.min(1), q.std(1, ddof=1),
                         (dinv_a * q).sum(0), (dinv_a * q).sum(1)], 1)
    np.testing.assert_allclose(pses(path(3), ["ElstaticPE"])["ElstaticPE"], expected, atol=1e-6)
    # sanity of the hand-made pseudo-inverse
    lap = np.diag(a.sum(1)) - a
    np.testing.assert_allclose(np.linalg.pinv(lap), lp, atol=1e-12)


# --------------------------------------------------------------------------------------------- LapPE
def test_lappe_path_simple_spectrum():
    # P_n has simple normalised-Laplacian eigenvalues; eigenvectors are known: for P_2, (1, -1)/sqrt(2)
    np.testing.assert_allclose(pses(path(2), ["LapPE"])["LapPE"], [[2 ** -0.5, 0, 0, 0]] * 2, atol=1e-6)
    out = pses(path(6), ["LapPE"])["LapPE"]
    np.testing.assert_allclose(np.linalg.norm(out, axis=0), 1.0, atol=1e-6)
    # simple eigenvalues and the path's mirror symmetry: each |eigenvector| is a palindrome
    np.testing.assert_allclose(out, out[::-1], atol=1e-6)
    assert np.all(out[:, 0] > 1e-3)  # the Fiedler-like first mode has no zero entry on P_6


def test_lappe_complete_subspace():
    # K_5: the 4 kept eigenvectors span the complement of D^1/2 1 = const: diag of that projector = 1 - 1/n
    out = pses(complete(5), ["LapPE"])["LapPE"]
    np.testing.assert_allclose((out ** 2).sum(1), 1 - 1 / 5, atol=1e-6)


# -------------------------------------------------------------------------------------------- CycleGE
@pytest.mark.parametrize("n", [3, 4, 5, 6, 8])
def test_cycles_complete(n):
    expected = [math.comb(n, 2)] + [math.comb(n, k) * math.factorial(k - 1) // 2 for k in range(3, 9)]
    np.testing.assert_allclose(pses(complete(n), ["CycleGE"])["CycleGE"], expected)


@pytest.mark.parametrize("n", [3, 5, 8, 9])
def test_cycles_cycle(n):
    expected = [n] + [1 if k == n else 0 for k in range(3, 9)]
    np.testing.assert_allclose(pses(cycle(n), ["CycleGE"])["CycleGE"], expected)


def test_cycles_tree_and_star():
    np.testing.assert_allclose(pses(star(6), ["CycleGE"])["CycleGE"], [6, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(pses(path(10), ["CycleGE"])["CycleGE"], [9, 0, 0, 0, 0, 0, 0])


# ------------------------------------------------------------------------------------------ tiny cases
def test_single_node():
    out = pses(graph(1, []))
    np.testing.assert_array_equal(out["LapPE"], [[1, 0, 0, 0]])  # L_sym = [1]
    np.testing.assert_array_equal(out["EigVals"], [1, 0, 0, 0])
    for name in ("ElstaticPE", "RWSE", "HKdiagSE"):
        np.testing.assert_array_equal(out[name], 0.0)
        assert out[name].shape[0] == 1
    np.testing.assert_array_equal(out["CycleGE"], 0.0)


def test_no_edges():
    n = 6
    out = pses(graph(n, []))
    for name in ("ElstaticPE", "RWSE", "HKdiagSE"):
        np.testing.assert_array_equal(out[name], 0.0)
    # every isolated node keeps L_ii = 1: all eigenvalues are 1, so EigVals = 1 and the 4 LapPE columns
    # are unit vectors of that (6-dim, degenerate) eigenspace
    np.testing.assert_allclose(out["EigVals"], [1, 1, 1, 1], atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(out["LapPE"], axis=0), 1.0, atol=1e-6)
    np.testing.assert_array_equal(out["CycleGE"], 0.0)


def test_empty_graph():
    g = graph(0, [])
    r = compute_pse_tensors([g, complete(3)])
    for name, value in r.node.items():
        assert value.shape[0] == 3 and not torch.isnan(value).any()
    for name, value in r.graph.items():
        np.testing.assert_array_equal(value[0].numpy(), 0.0)
        assert value.shape[0] == 2
