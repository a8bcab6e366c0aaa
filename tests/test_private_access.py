"""Each private DGL / torch access of gpse_dgl/_private.py against its public counterpart, and the
releases it was checked against."""
import io
import json
import os
import pickle
import pickletools

import numpy as np
import pytest
import torch

import gpse_dgl  # noqa: F401  (before dgl: graphbolt guard)
import dgl
from gpse_dgl import _private


def _release(version: str) -> str:
    return version.split("+", maxsplit=1)[0]


def test_installed_releases_were_checked():
    """On a new DGL or torch release, re-read every access listed in gpse_dgl/_private.py's docstring
    against it, run this file, then add the release to CHECKED_VERSIONS."""
    dgl_release = _release(dgl.__version__)
    assert dgl_release in _private.CHECKED_VERSIONS["dgl"], (
        f"DGL {dgl_release} is not among the releases gpse_dgl/_private.py was checked against "
        f"({', '.join(_private.CHECKED_VERSIONS['dgl'])}): re-check its private accesses, then add it")
    torch_minor = ".".join(_release(torch.__version__).split(".")[:2])
    assert torch_minor in _private.CHECKED_VERSIONS["torch"], (
        f"torch {torch_minor} is not among the releases gpse_dgl/_private.py was checked against "
        f"({', '.join(_private.CHECKED_VERSIONS['torch'])}): re-check its private accesses, then add it")


@pytest.fixture
def graphs():
    return [dgl.graph(([0, 1, 2], [1, 2, 0])), dgl.graph(([], []), num_nodes=2),
            dgl.graph(([0, 3, 3], [1, 1, 2]), num_nodes=5), dgl.graph(([0], [0]))]


def test_union_edges_equals_dgl_batch(graphs):
    counts, src, dst = _private.union_edges(graphs)
    batch = dgl.batch(graphs)
    b_src, b_dst = batch.edges()
    assert counts.tolist() == batch.batch_num_nodes().tolist()
    assert src.tolist() == b_src.tolist() and dst.tolist() == b_dst.tolist()
    assert src.dtype == dst.dtype == np.int64
    one = _private.union_edges(graphs[2:3])
    assert one[0].tolist() == [5] and one[1].tolist() == [0, 3, 3]


def test_union_edges_declines_batched_and_inconsistent_graphs(graphs):
    assert _private.union_edges([dgl.batch(graphs[:2]), graphs[2]]) is None
    graphs = [g.clone() for g in graphs]
    graphs[1]._node_frames[0]._num_rows += 1  # a frame out of step with its graph
    assert _private.union_edges(graphs) is None


def test_is_batch_equals_batch_size(graphs):
    g = graphs[0]
    assert not _private.is_batch(g)
    g.batch_num_nodes()  # fills DGL's one-entry cache on a plain graph
    assert not _private.is_batch(g) and g.batch_size == 1
    batch = dgl.batch(graphs)
    assert _private.is_batch(batch) and batch.batch_size == len(graphs)


def test_node_frame_rows_equal_num_nodes(graphs):
    graphs = graphs + [dgl.batch(graphs[:2])]
    assert _private.node_frame_rows(graphs).tolist() == [g.num_nodes() for g in graphs]


def test_node_column_writer_equals_ndata_update(graphs, tmp_path):
    fields = {"a": torch.zeros(0, 3), "b": torch.zeros(0, dtype=torch.int64)}
    writer = _private.NodeColumnWriter.create(fields)
    assert writer is not None
    public = [g.clone() for g in graphs]
    for g, p in zip(graphs, public):
        n = g.num_nodes()
        columns = {"a": torch.randn(n, 3), "b": torch.arange(n)}
        assert writer.write(g, columns, n)
        p.ndata.update(columns)
        assert set(g.ndata) == set(p.ndata) == {"a", "b"}
        assert all(torch.equal(g.ndata[k], p.ndata[k]) for k in ("a", "b"))
        assert g.node_attr_schemes() == p.node_attr_schemes()
    batch = dgl.batch(graphs)  # DGL's own code reads the columns back
    assert torch.equal(batch.ndata["a"], dgl.batch(public).ndata["a"])
    dgl.save_graphs(str(tmp_path / "g.bin"), graphs)
    loaded, _ = dgl.load_graphs(str(tmp_path / "g.bin"))
    assert torch.equal(loaded[2].ndata["b"], public[2].ndata["b"])
    assert not writer.write(graphs[0], {"a": torch.zeros(9, 3)}, 9)  # wrong row count: declined


def test_dgl_library_state_matches_the_files():
    import os

    from dgl._ffi import base

    assert os.path.isfile(_private.libdgl_path())
    assert os.path.basename(_private.libdgl_path()).startswith("libdgl")
    assert _private.tensoradapter_loaded() in (True, False)
    assert _private.tensoradapter_loaded() == bool(getattr(base, "tensor_adapter_loaded", False))
    lines = _private.dgl_libraries()
    assert set(lines) == {"libdgl", "tensoradapter", "graphbolt"} and _private.libdgl_path() in lines["libdgl"]


def test_torch_pickle_globals_are_what_a_tensor_pickles_to():
    data = pickle.dumps(torch.arange(4.0), protocol=2)
    named = set()
    for op, arg, _ in pickletools.genops(io.BytesIO(data)):
        if op.name == "GLOBAL":
            named.add(tuple(arg.split(" ", 1)))
    rebuilders = {pair for pair in named if pair[0] == "torch._utils"}
    assert rebuilders and rebuilders <= set(_private.torch_pickle_globals())
    for module, name in _private.torch_pickle_globals():
        assert callable(_private.torch_pickle_global(module, name))


def test_reset_multihead_attention_equals_torch_init():
    """The same draws as torch's documented initialisation of the projections: xavier-uniform weights,
    zero biases."""
    attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    with torch.no_grad():
        for p in attention.parameters():
            p.fill_(7.0)
    torch.manual_seed(3)
    expected = torch.nn.init.xavier_uniform_(torch.empty(24, 8))
    torch.manual_seed(3)
    _private.reset_multihead_attention(attention)
    assert torch.equal(attention.in_proj_weight, expected)
    assert torch.count_nonzero(attention.in_proj_bias) == 0 and torch.count_nonzero(attention.out_proj.bias) == 0
    assert torch.all(attention.out_proj.weight == 7.0)  # left to out_proj.reset_parameters()


def test_tensor_version_counts_in_place_changes_of_the_tensor_and_its_views():
    t = torch.zeros(4)
    start = _private.tensor_version(t)
    _ = t + 1
    assert _private.tensor_version(t) == start
    t.add_(1)
    after_add = _private.tensor_version(t)
    assert after_add > start
    t[:2].mul_(2)  # a view shares the counter
    assert _private.tensor_version(t) > after_add
    assert _private.tensor_version(t[1:]) == _private.tensor_version(t)


def test_isolated_shared_memory_names_carry_the_prefix():
    from dgl.distributed import kvstore

    original = kvstore.empty_shared_mem
    _private.isolate_dgl_shared_memory("gpse-test-p0-")
    try:
        array = kvstore.empty_shared_mem("probe-kvdata-", True, (4,), "float32")
        assert os.path.exists("/dev/shm/gpse-test-p0-probe-kvdata-")
        del array
    finally:
        kvstore.empty_shared_mem = original
        if os.path.exists("/dev/shm/gpse-test-p0-probe-kvdata-"):
            os.unlink("/dev/shm/gpse-test-p0-probe-kvdata-")


def test_pinned_machine_id_overrides_the_address_match():
    from dgl.distributed import rpc_client

    original = rpc_client.get_local_machine_id
    namebook = {0: [0, "192.0.2.1", 30050, 1], 1: [1, "127.0.0.1", 30051, 1]}
    try:
        assert original(namebook) == 1  # loopback is this host's address
        _private.pin_dgl_machine_id(0)
        assert rpc_client.get_local_machine_id(namebook) == 0
    finally:
        rpc_client.get_local_machine_id = original


def test_setup_cfg_admits_only_checked_releases():
    """An unpinned `pip install -e .` must resolve releases this file was checked against, per Python: the
    ranges of setup.cfg admit no other torch minor and no other DGL release (a fresh 3.12 environment once
    resolved torch 2.14, and the test above failed there)."""
    import configparser
    from pathlib import Path

    from packaging.requirements import Requirement

    setup = configparser.ConfigParser()
    setup.read(Path(__file__).resolve().parent.parent / "setup.cfg", encoding="utf-8")
    lines = [line.split("#")[0].strip() for line in setup["options"]["install_requires"].splitlines()]
    requirements = [Requirement(line) for line in lines if line]
    candidates = {"torch": ["2.1.0", "2.12.1", "2.13.0", "2.13.1", "2.14.0", "2.14.1", "2.15.0", "3.0.0"],
                  "dgl": ["1.1.2", "1.1.3", "2.0.0", "2.1.0", "2.2.1", "2.4.0"]}
    for python in ("3.10", "3.11", "3.12"):
        for name, versions in candidates.items():
            specs = [r.specifier for r in requirements
                     if r.name == name and (r.marker is None or r.marker.evaluate({"python_version": python}))]
            assert len(specs) == 1, (python, name, specs)
            admitted = [v for v in versions if v in specs[0]]
            checked = _private.CHECKED_VERSIONS[name]
            key = (lambda v: ".".join(v.split(".")[:2])) if name == "torch" else (lambda v: v)
            assert admitted and all(key(v) in checked for v in admitted), (python, name, admitted, checked)


def test_random_partition_takes_the_given_assignment(tmp_path):
    g = dgl.graph(([0, 1, 2, 3, 4], [1, 2, 3, 4, 0]))
    assignment = torch.tensor([1, 0, 1, 0, 1])
    with _private.dgl_random_partition(assignment) as fixed:
        assert fixed
        orig, _ = dgl.distributed.partition_graph(g, "g", 2, str(tmp_path), part_method="random",
                                                  return_mapping=True)
    config = json.loads((tmp_path / "g.json").read_text())
    (start0, stop0), (start1, stop1) = config["node_map"]["_N"]
    assert sorted(orig[start0:stop0].tolist()) == [1, 3] and sorted(orig[start1:stop1].tolist()) == [0, 2, 4]
    import dgl.distributed.partition as module

    assert module.random_choice is not None and getattr(module.random_choice, "__name__", "") != "fixed"
