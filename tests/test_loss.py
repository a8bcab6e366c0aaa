import pytest
import torch
import torch.nn.functional as F

from gpse_dgl.nn.loss import gpse_loss


def _batch(seed=0, bnn=(3, 7, 1, 5, 0, 4), kn=6, kg=3):
    gen = torch.Generator().manual_seed(seed)
    bnn = torch.tensor(bnn)
    n, b = int(bnn.sum()), len(bnn)
    node_pred, node_true = torch.randn(n, kn, generator=gen), torch.randn(n, kn, generator=gen)
    graph_pred, graph_true = torch.randn(b, kg, generator=gen), torch.randn(b, kg, generator=gen)
    node_true[:3, 1] = 0.0  # graph 0, column 1 all zero -> left out
    node_true[3:10, :] = 0.0  # graph 1 all zero -> left out
    node_true[11, 4] = 0.0  # one zero inside a kept pair
    graph_true[:, 2] = 0.0  # graph column 2 all zero -> left out
    return node_pred, node_true, graph_pred, graph_true, bnn


def _direct(node_pred, node_true, graph_pred, graph_true, bnn):
    """Per-graph loop over the definition (references' reductions)."""
    n, kn = node_pred.shape
    b, kg = graph_pred.shape
    l1 = ((node_pred - node_true).abs().sum() + (graph_pred - graph_true).abs().sum()) / ((n + b) * (kn + kg))
    terms = []
    start = 0
    for n_i in bnn.tolist():
        p, t = node_pred[start:start + n_i], node_true[start:start + n_i]
        start += n_i
        for k in range(kn):
            if torch.any(t[:, k] != 0):
                terms.append(1 - F.cosine_similarity(p[:, k], t[:, k], dim=0))
    for k in range(kg):
        if torch.any(graph_true[:, k] != 0):
            terms.append(1 - F.cosine_similarity(graph_pred[:, k], graph_true[:, k], dim=0))
    return l1 + torch.stack(terms).mean(), l1, len(terms)


def test_matches_direct_per_graph_computation():
    node_pred, node_true, graph_pred, graph_true, bnn = _batch()
    loss, parts = gpse_loss(node_pred, node_true, graph_pred, graph_true, bnn)
    expected, l1, num = _direct(node_pred, node_true, graph_pred, graph_true, bnn)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(parts["l1"], l1)
    assert int(parts["num_pairs"]) == num == (6 - 1) + 0 + 6 + 6 + 6 + 2
    torch.testing.assert_close(parts["l1"] + parts["cosine"], loss)


def test_gradient_matches_direct():
    node_pred, node_true, graph_pred, graph_true, bnn = _batch(seed=1)
    a = [node_pred.clone().requires_grad_(), graph_pred.clone().requires_grad_()]
    b = [node_pred.clone().requires_grad_(), graph_pred.clone().requires_grad_()]
    gpse_loss(a[0], node_true, a[1], graph_true, bnn)[0].backward()
    _direct(b[0], node_true, b[1], graph_true, bnn)[0].backward()
    torch.testing.assert_close(a[0].grad, b[0].grad)
    torch.testing.assert_close(a[1].grad, b[1].grad)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_pyg_gpse_loss(seed):
    gpse_mod = pytest.importorskip("torch_geometric.nn.models.gpse")
    node_pred, node_true, graph_pred, graph_true, bnn = _batch(seed=seed)
    kn, kg = node_pred.shape[1], graph_pred.shape[1]
    # The references' stacked layout; graph rows first so that to_dense_batch sees sorted ids.
    pred = torch.vstack([F.pad(graph_pred, (kn, 0)), F.pad(node_pred, (0, kg))])
    true = torch.vstack([F.pad(graph_true, (kn, 0)), F.pad(node_true, (0, kg))])
    seg = torch.repeat_interleave(torch.arange(len(bnn)), bnn)
    batch_idx = torch.cat([-torch.ones(len(bnn), dtype=torch.long), seg])
    ref, _ = gpse_mod.gpse_loss(pred, true, batch_idx)
    ours, _ = gpse_loss(node_pred, node_true, graph_pred, graph_true, bnn)
    torch.testing.assert_close(ours, ref)


def test_perfect_prediction_and_degenerate_cases():
    node_pred, node_true, graph_pred, graph_true, bnn = _batch()
    loss, parts = gpse_loss(node_true, node_true, graph_true, graph_true, bnn)
    assert abs(float(loss)) < 1e-6
    # all targets zero: no cosine pair left -> cosine term 0, no NaN
    zeros_n, zeros_g = torch.zeros_like(node_true), torch.zeros_like(graph_true)
    loss, parts = gpse_loss(node_pred, zeros_n, graph_pred, zeros_g, bnn)
    assert torch.isfinite(loss) and float(parts["cosine"]) == 0.0 and int(parts["num_pairs"]) == 0
    # zero prediction on a non-zero target: cosine 0 -> term 1, finite gradient
    p = torch.zeros_like(node_true, requires_grad=True)
    loss, _ = gpse_loss(p, node_true, None, None, bnn)
    loss.backward()
    assert torch.isfinite(p.grad).all()
    # no graph-level targets
    loss, parts = gpse_loss(node_pred, node_true, None, None, bnn)
    assert float(parts["graph_cosine"]) == 0.0
    n, kn = node_pred.shape
    torch.testing.assert_close(parts["l1"], (node_pred - node_true).abs().sum() / ((n + len(bnn)) * kn))


def test_input_validation():
    node_pred, node_true, graph_pred, graph_true, bnn = _batch()
    with pytest.raises(ValueError, match="sums to"):
        gpse_loss(node_pred, node_true, graph_pred, graph_true, bnn + 1)
    with pytest.raises(ValueError, match="differ"):
        gpse_loss(node_pred, node_true[:, :2], graph_pred, graph_true, bnn)
    with pytest.raises(ValueError, match="rows"):
        gpse_loss(node_pred, node_true, graph_pred[:2], graph_true[:2], bnn)


@pytest.mark.parametrize("regression", ["mse", "l1+mse"])
def test_squared_error_terms_match_direct(regression):
    node_pred, node_true, graph_pred, graph_true, bnn = _batch(seed=3)
    n, kn = node_pred.shape
    b, kg = graph_pred.shape
    expected_l1_cos, l1, _ = _direct(node_pred, node_true, graph_pred, graph_true, bnn)
    cosine = expected_l1_cos - l1
    mse = (((node_pred - node_true) ** 2).sum() + ((graph_pred - graph_true) ** 2).sum()) / ((n + b) * (kn + kg))
    loss, parts = gpse_loss(node_pred, node_true, graph_pred, graph_true, bnn, regression=regression)
    torch.testing.assert_close(parts["mse"], mse)
    torch.testing.assert_close(parts["cosine"], cosine)
    if regression == "mse":
        assert "l1" not in parts
        torch.testing.assert_close(loss, mse + cosine)
    else:
        torch.testing.assert_close(parts["l1"], l1)
        torch.testing.assert_close(loss, l1 + mse + cosine)


def test_unknown_regression_term():
    node_pred, node_true, graph_pred, graph_true, bnn = _batch()
    with pytest.raises(ValueError, match="regression must be one of l1, mse, l1\\+mse"):
        gpse_loss(node_pred, node_true, graph_pred, graph_true, bnn, regression="huber")


def test_graph_weight_matches_direct():
    """graph_weight w: graph entries count w times in the element-wise term, graph cosine pairs w times
    in the cosine mean; w = 1 is the references' loss."""
    node_pred, node_true, graph_pred, graph_true, bnn = _batch(seed=4)
    n, kn = node_pred.shape
    b, kg = graph_pred.shape
    w = 7.5
    node_terms, graph_terms = [], []
    start = 0
    for n_i in bnn.tolist():
        p, t = node_pred[start:start + n_i], node_true[start:start + n_i]
        start += n_i
        node_terms += [1 - F.cosine_similarity(p[:, k], t[:, k], dim=0) for k in range(kn) if torch.any(t[:, k] != 0)]
    graph_terms = [1 - F.cosine_similarity(graph_pred[:, k], graph_true[:, k], dim=0)
                   for k in range(kg) if torch.any(graph_true[:, k] != 0)]
    cosine = (sum(node_terms) + w * sum(graph_terms)) / (len(node_terms) + w * len(graph_terms))
    entries = (n + b) * (kn + kg)
    l1 = ((node_pred - node_true).abs().sum() + w * (graph_pred - graph_true).abs().sum()) / entries
    mse = (((node_pred - node_true) ** 2).sum() + w * ((graph_pred - graph_true) ** 2).sum()) / entries
    loss, parts = gpse_loss(node_pred, node_true, graph_pred, graph_true, bnn, regression="l1+mse",
                            graph_weight=w)
    torch.testing.assert_close(parts["cosine"], cosine)
    torch.testing.assert_close(parts["l1"], l1)
    torch.testing.assert_close(parts["mse"], mse)
    torch.testing.assert_close(loss, l1 + mse + cosine)
    same = gpse_loss(node_pred, node_true, graph_pred, graph_true, bnn, graph_weight=1.0)[0]
    torch.testing.assert_close(same, gpse_loss(node_pred, node_true, graph_pred, graph_true, bnn)[0])
    with pytest.raises(ValueError, match="graph_weight"):
        gpse_loss(node_pred, node_true, graph_pred, graph_true, bnn, graph_weight=-1.0)


@pytest.mark.parametrize("regression", ["l1", "mse", "l1+mse"])
def test_unknown_graph_targets_are_left_out(regression):
    """NaN graph targets: no error term, and each graph column's cosine runs over its known graphs only."""
    node_pred, node_true, graph_pred, graph_true, bnn = _batch(seed=3)
    graph_true[[0, 3], 0] = float("nan")
    graph_true[:, 1] = float("nan")  # a column unknown everywhere: no cosine pair at all
    pred = graph_pred.clone().requires_grad_()
    loss, parts = gpse_loss(node_pred, node_true, pred, graph_true, bnn, regression=regression)
    loss.backward()
    known = ~torch.isnan(graph_true)
    n, kn = node_pred.shape
    b, kg = graph_pred.shape
    err = (graph_pred - torch.nan_to_num(graph_true))[known]
    node_err = node_pred - node_true
    terms = {"l1": node_err.abs().sum() + err.abs().sum(), "mse": (node_err ** 2).sum() + (err ** 2).sum()}
    elementwise = sum(terms[t] for t in regression.split("+")) / ((n + b) * (kn + kg))
    pairs = []
    start = 0
    for n_i in bnn.tolist():
        p, t = node_pred[start:start + n_i], node_true[start:start + n_i]
        start += n_i
        pairs += [1 - F.cosine_similarity(p[:, k], t[:, k], dim=0) for k in range(kn) if torch.any(t[:, k] != 0)]
    for k in range(kg):
        rows = known[:, k]
        if torch.any(graph_true[rows, k] != 0):
            pairs.append(1 - F.cosine_similarity(graph_pred[rows, k], graph_true[rows, k], dim=0))
    torch.testing.assert_close(loss, elementwise + torch.stack(pairs).mean())
    assert int(parts["num_pairs"]) == len(pairs)
    assert torch.isfinite(pred.grad).all() and bool((pred.grad[~known] == 0).all())
