"""The shipped default model is GPSE, not a colour-refinement feature extractor: its random input tells apart
graphs that 1-WL cannot (the paper's 1-WL pairs), and constant input cannot."""
from __future__ import annotations

import dgl
import pytest
import torch

from gpse_dgl.data.synthetic import WL_PAIRS, wl_pair_graphs
from gpse_dgl.encode import encode, load_gpse

COPIES = 20


@pytest.fixture(scope="module")
def default_model():
    return load_gpse(None)


def pooled(model, graph, x_of_copy) -> torch.Tensor:
    """``(COPIES, d)`` mean-pooled encodings of ``COPIES`` copies of ``graph``, copy ``i`` with input ``x_of_copy(i)``."""
    return torch.stack([encode(model, graph, x=x_of_copy(i)).mean(0) for i in range(COPIES)]).double()


@pytest.mark.parametrize("pair", WL_PAIRS, ids=["-".join(p) for p in WL_PAIRS])
def test_default_model_separates_1wl_pairs_with_random_input_only(default_model, pair):
    graphs = wl_pair_graphs()
    dim_in = default_model.dim_in

    def random_input(member):
        n = graphs[pair[member]].num_nodes()
        return lambda i: torch.randn(n, dim_in, generator=torch.Generator().manual_seed(100 * member + i))

    a, b = (pooled(default_model, graphs[name], random_input(m)) for m, name in enumerate(pair))
    gap = (a.mean(0) - b.mean(0)).norm()
    spread = torch.cat([a - a.mean(0), b - b.mean(0)]).pow(2).sum(1).mean().sqrt()
    assert gap > 1.5 * spread, (float(gap), float(spread))  # shipped model: 3.0 and 5.3; quickstart: 0.3 and 0.2

    ones = {name: encode(default_model, graphs[name], x=torch.ones(graphs[name].num_nodes(), dim_in)).mean(0)
            for name in pair}
    torch.testing.assert_close(ones[pair[0]], ones[pair[1]], rtol=1e-4, atol=1e-5)  # the 1-WL bound
