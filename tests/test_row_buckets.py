"""Row buckets (gpse_dgl.utils.row_buckets): padded linear layers give the unpadded results, in the contexts
that turn them on."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gpse_dgl.utils.precision import autocast
from gpse_dgl.utils.row_buckets import RowBuckets, bucket_rows


def test_bucket_sizes_are_few_and_tight():
    sizes = {bucket_rows(rows) for rows in range(1, 20_001)}
    assert all(bucket_rows(rows) >= rows for rows in range(1, 20_001))
    assert all(bucket_rows(rows) - rows <= max(63, rows // 16) for rows in range(1, 20_001))
    assert len(sizes) <= 16 + 16 * 5  # 64..1024 in steps of 64, then 16 per doubling up to 32k
    assert bucket_rows(0) == 0 and bucket_rows(64) == 64 and bucket_rows(65) == 128


def linear_rows(run) -> list:
    """Row counts of the ``aten::linear`` calls that ``run()`` makes (from torch's profiler; autocast
    dispatches one call twice)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    return sorted({event.input_shapes[0][0] for event in prof.events() if event.name == "aten::linear"})


@pytest.mark.parametrize("shape", [(1000, 8), (70, 3, 8), (64, 8), (5, 8)])
def test_padded_linear_equals_unpadded_values_and_gradients(shape):
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(*shape, requires_grad=True)
    expected = lin(x)
    (expected * torch.arange(4.0)).sum().backward()
    expected_grads = [x.grad.clone(), lin.weight.grad.clone(), lin.bias.grad.clone()]
    x.grad = lin.weight.grad = lin.bias.grad = None
    with RowBuckets():
        got = lin(x)
    (got * torch.arange(4.0)).sum().backward()
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)
    for a, b in zip([x.grad, lin.weight.grad, lin.bias.grad], expected_grads):
        # weight / bias gradients sum up to 1,000 rows: a padded product may sum them in another order
        # (float32 rounding, ~1e-6 relative); a wrong pad or slice would be off by O(1)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


def test_only_cpu_low_precision_autocast_pads():
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(1000, 8)

    def under(precision):
        with autocast(precision, "cpu"):
            return lin(x)

    assert linear_rows(lambda: under("fp32")) == [1000]
    assert linear_rows(lambda: under("bf16")) == [1024]
    assert linear_rows(lambda: lin(x)) == [1000]  # outside any context
    out = under("bf16")
    assert out.shape == (1000, 4) and out.dtype == torch.bfloat16


def test_gpse_encoder_in_bf16_is_unchanged_by_the_buckets():
    import dgl

    from gpse_dgl.nn.gpse import GPSE

    torch.manual_seed(0)
    graphs = [dgl.rand_graph(n, 3 * n) for n in (7, 19, 30)]
    graph = dgl.batch([dgl.to_bidirected(g) for g in graphs])
    model = GPSE(dim_in=4, dim_hidden=16, num_layers=2).eval()
    x = torch.randn(graph.num_nodes(), 4)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        plain = model(graph, x)
    with torch.no_grad(), autocast("bf16", "cpu"):
        bucketed = model(graph, x)
    torch.testing.assert_close(bucketed, plain)
