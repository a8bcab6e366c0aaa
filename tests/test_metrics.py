"""R^2 metrics against direct per-column / per-graph formulas."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpse_dgl.train.pretraining.r2 import (R2Accumulator, column_r2, group_scores, nanmean,
                                    per_graph_column_r2)


def direct_r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Textbook R^2 of one column (NaN for a constant target, the authors' convention)."""
    tss = float(((y_true - y_true.mean()) ** 2).sum())
    if tss <= 1e-6:
        return math.nan
    return 1.0 - float(((y_true - y_pred) ** 2).sum()) / tss


def random_batch(rng, sizes, node_cols=3, graph_cols=2):
    n = sum(sizes)
    node_true = rng.normal(size=(n, node_cols))
    node_pred = node_true + 0.3 * rng.normal(size=(n, node_cols))
    graph_true = rng.normal(size=(len(sizes), graph_cols)) * 5 + 10
    graph_pred = graph_true + rng.normal(size=(len(sizes), graph_cols))
    return [torch.tensor(a, dtype=torch.float32) for a in (node_pred, node_true, graph_pred, graph_true)]


def test_column_r2_matches_direct_formula():
    rng = np.random.default_rng(0)
    y_true, y_pred = rng.normal(size=(50, 4)), rng.normal(size=(50, 4))
    y_pred[:, 0] = y_true[:, 0]  # perfect column
    y_pred[:, 1] = y_true[:, 1].mean()  # predicting the mean gives 0
    got = column_r2(torch.tensor(y_true), torch.tensor(y_pred)).numpy()
    want = [direct_r2(y_true[:, c], y_pred[:, c]) for c in range(4)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[0] == pytest.approx(1.0) and got[1] == pytest.approx(0.0, abs=1e-12)


def test_constant_target_column_has_no_score():
    y_true = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    scores = column_r2(y_true, torch.zeros(3, 2))
    assert not math.isnan(float(scores[0])) and math.isnan(float(scores[1]))


def test_per_graph_r2_matches_a_loop_over_graphs():
    rng = np.random.default_rng(1)
    sizes = [3, 5, 1, 4]
    y_true, y_pred = rng.normal(size=(13, 3)), rng.normal(size=(13, 3))
    y_true[3:8, 2] = 0.7  # constant within graph 1 -> NaN there
    got = per_graph_column_r2(torch.tensor(y_true), torch.tensor(y_pred), torch.tensor(sizes)).numpy()
    start = 0
    for g, n in enumerate(sizes):
        for c in range(3):
            want = direct_r2(y_true[start:start + n, c], y_pred[start:start + n, c])
            if math.isnan(want):
                assert math.isnan(got[g, c])
            else:
                assert got[g, c] == pytest.approx(want, rel=1e-9)
        start += n
    assert np.isnan(got[2]).all()  # a single node has no variance


def test_accumulator_over_batches_equals_direct_computation():
    rng = np.random.default_rng(2)
    batches = [(random_batch(rng, sizes), sizes) for sizes in ([4, 6, 3], [5, 2], [7])]
    columns = [("A", 0), ("A", 1), ("B", 0), ("G", 0), ("G", 1)]
    acc = R2Accumulator(columns, num_node_columns=3)
    for (node_pred, node_true, graph_pred, graph_true), sizes in batches:
        acc.update(node_pred, node_true, graph_pred, graph_true, torch.tensor(sizes))
    report = acc.compute()

    node_pred = np.concatenate([b[0][0].numpy() for b in batches]).astype(np.float64)
    node_true = np.concatenate([b[0][1].numpy() for b in batches]).astype(np.float64)
    graph_pred = np.concatenate([b[0][2].numpy() for b in batches]).astype(np.float64)
    graph_true = np.concatenate([b[0][3].numpy() for b in batches]).astype(np.float64)
    sizes = [n for _, s in batches for n in s]
    bounds = np.cumsum([0] + sizes)
    per_graph = [[direct_r2(node_true[a:b, c], node_pred[a:b, c]) for c in range(3)]
                 for a, b in zip(bounds[:-1], bounds[1:])]
    node_cols = [np.nanmean([row[c] for row in per_graph]) for c in range(3)]
    graph_cols = [direct_r2(graph_true[:, c], graph_pred[:, c]) for c in range(2)]
    expected = node_cols + graph_cols

    np.testing.assert_allclose(report["r2_per_column"], expected, rtol=1e-6)
    assert report["r2"] == pytest.approx(np.mean(expected), rel=1e-6)
    assert report["r2_per_pse"]["A"] == pytest.approx(np.mean(expected[:2]), rel=1e-6)
    assert report["r2_per_pse"]["B"] == pytest.approx(expected[2], rel=1e-6)
    assert report["r2_per_pse"]["G"] == pytest.approx(np.mean(expected[3:]), rel=1e-6)
    global_node = [direct_r2(node_true[:, c], node_pred[:, c]) for c in range(3)]
    assert report["r2_global"] == pytest.approx(np.mean(global_node + graph_cols), rel=1e-6)
    assert report["mae_node"] == pytest.approx(np.abs(node_true - node_pred).mean(), rel=1e-6)
    assert report["mae_graph"] == pytest.approx(np.abs(graph_true - graph_pred).mean(), rel=1e-6)
    assert report["num_graphs"] == len(sizes)


def test_perfect_predictions_score_one_and_noise_scores_lower():
    rng = np.random.default_rng(3)
    node_pred, node_true, graph_pred, graph_true = random_batch(rng, [6, 8, 5])
    columns = [("A", i) for i in range(3)] + [("G", i) for i in range(2)]
    perfect = R2Accumulator(columns, 3)
    perfect.update(node_true, node_true, graph_true, graph_true, torch.tensor([6, 8, 5]))
    noisy = R2Accumulator(columns, 3)
    noisy.update(node_pred, node_true, graph_pred, graph_true, torch.tensor([6, 8, 5]))
    assert perfect.compute()["r2"] == pytest.approx(1.0)
    assert noisy.compute()["r2"] < 0.99


def test_overall_is_column_weighted_like_the_paper():
    # the paper's per-PSE values weighted by their column counts give its reported overall 0.979
    per_pse = {"ElstaticPE": (0.964, 7), "LapPE": (0.973, 4), "RWSE": (0.984, 20),
               "HKdiagSE": (0.981, 20), "EigVals": (0.982, 4), "CycleGE": (0.977, 7)}
    scores = [v for v, n in per_pse.values() for _ in range(n)]
    columns = [(name, i) for name, (_, n) in per_pse.items() for i in range(n)]
    assert round(nanmean(scores), 3) == 0.979
    assert group_scores(scores, columns) == pytest.approx({k: v for k, (v, _) in per_pse.items()})


def test_nanmean_ignores_nan_and_is_nan_when_empty():
    assert nanmean([1.0, math.nan, 3.0]) == 2.0
    assert math.isnan(nanmean([math.nan]))
