"""Parity with PyTorch Geometric: a random PyG ``GPSE`` saved in the authors' format, loaded with
``load_gpse``, encodes like PyG's own encoder run the way ``precompute_GPSE`` runs it
(``VirtualNode`` transform, zero input on the virtual node, ``IdentityHead`` as in ``from_pretrained``)."""
from __future__ import annotations

import pytest
import torch

import dgl

pyg = pytest.importorskip("torch_geometric")
pytest.importorskip("torch_geometric.nn.models.gpse")

from torch_geometric.data import Batch, Data  # noqa: E402
import torch_geometric.transforms as T  # noqa: E402
from torch_geometric.nn import GPSE as PyGGPSE  # noqa: E402
from torch_geometric.nn.models.gpse import IdentityHead  # noqa: E402

from gpse_dgl.data.molecules import (embedded_smiles_path, load_embedded_molecules,  # noqa: E402
                                     read_smiles_file, smiles_to_skeleton)
from gpse_dgl.encode import encode, encode_large, load_gpse  # noqa: E402
from gpse_dgl.encode.graphs import as_simple_undirected  # noqa: E402

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def pyg_model_and_file(tmp_path_factory):
    torch.manual_seed(0)
    model = PyGGPSE()  # default arguments: the architecture of every published checkpoint
    gen = torch.Generator().manual_seed(1)
    for module in model.modules():  # fresh BatchNorms are identities; make them matter
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.1)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
            module.weight.data.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
            module.bias.data.copy_(torch.randn(module.num_features, generator=gen) * 0.1)
    path = tmp_path_factory.mktemp("authors") / "gpse_model_random_1.0.pt"
    torch.save({"model_state": {"model." + k: v for k, v in model.state_dict().items()},
                "optimizer_state": {}, "scheduler_state": {}}, path)
    model.post_mp = IdentityHead()  # what GPSE.from_pretrained does for encodings
    return model.eval(), path


def _pyg_encode(model, graphs, x) -> torch.Tensor:
    """PyG encodings of ``graphs`` (node features ``x``), as ``precompute_GPSE`` computes them."""
    add_vn = T.VirtualNode()
    data, start = [], 0
    for g in graphs:
        src, dst = g.edges()
        n = g.num_nodes()
        data.append(add_vn(Data(edge_index=torch.stack([src, dst]).long(), x=x[start:start + n], num_nodes=n)))
        start += n
    batch = Batch.from_data_list(data)
    with torch.no_grad():
        out, _ = model(batch)
    keep = torch.ones(batch.num_nodes, dtype=torch.bool)
    keep[batch.ptr[1:] - 1] = False  # the virtual node is the last node of each graph
    return out[keep]


def _molecules(count: int) -> list:
    """The first ``count`` valid molecule skeletons of the embedded SMILES file (fast: no dedup pass)."""
    graphs = (smiles_to_skeleton(s) for s in read_smiles_file(embedded_smiles_path()))
    return [g for g in graphs if g is not None and g.num_edges() > 0][:count]


def _larger_graphs(sizes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for n in sizes:
        src = torch.randint(0, n, (3 * n,), generator=gen)
        dst = torch.randint(0, n, (3 * n,), generator=gen)
        graphs.append(as_simple_undirected(dgl.graph((src, dst), num_nodes=n)))
    return graphs


def _check(pyg_model_and_file, graphs, large=False):
    pyg_model, path = pyg_model_and_file
    ours = load_gpse(path)
    batch = dgl.batch(graphs)
    x = torch.randn(batch.num_nodes(), 20, generator=torch.Generator().manual_seed(2))
    expected = _pyg_encode(pyg_model, graphs, x)
    got = encode_large(ours, batch, x=x, chunk_edges=512) if large else encode(ours, batch, x=x)
    diff = (got - expected).abs().max().item()
    assert diff <= TOLERANCE, f"max abs diff {diff:.2e}"
    return ours, batch, x, expected


def test_molecules_match_pyg(pyg_model_and_file):
    graphs = _molecules(200)
    ours, batch, x, expected = _check(pyg_model_and_file, graphs)
    # the comparison can fail: one perturbed tensor is noticed
    with torch.no_grad():
        ours.norms[7].running_mean[3] += 0.5
    assert (encode(ours, batch, x=x) - expected).abs().max() > 10 * TOLERANCE


def test_larger_graphs_match_pyg(pyg_model_and_file):
    _check(pyg_model_and_file, _larger_graphs((150, 300, 450)))


def test_layerwise_matches_pyg(pyg_model_and_file):
    _check(pyg_model_and_file, _larger_graphs((600,), seed=3), large=True)


@pytest.mark.slow
def test_embedded_molecules_across_the_set_and_big_graphs_match_pyg(pyg_model_and_file):
    # every 10th of the ~3,070 embedded molecules (the whole set took 6 minutes of CI's budget)
    _check(pyg_model_and_file, load_embedded_molecules()[::10])
    _check(pyg_model_and_file, _larger_graphs((1500,), seed=4))  # 1,000-3,000 nodes took 4 minutes of it
