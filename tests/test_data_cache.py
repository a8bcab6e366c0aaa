"""Atomic DGL-binary caches: round trip and every way a cache can be unusable."""
import json
import os

import pytest
import torch

import gpse_dgl  # noqa: F401
import dgl
from gpse_dgl.data.cache import fingerprint_of, load_graphs_cached, save_graphs_cached


@pytest.fixture
def graphs():
    g1 = dgl.graph((torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])), num_nodes=4)
    g1.ndata["feat"] = torch.arange(8, dtype=torch.float32).reshape(4, 2)
    g1.edata["w"] = torch.tensor([1, 2, 3])
    g2 = dgl.graph((torch.tensor([0]), torch.tensor([1])), num_nodes=2)
    return [g1, g2]


def test_round_trip(tmp_path, graphs):
    fp = fingerprint_of([], dataset="x", k=3)
    path = tmp_path / "sub" / "c.bin"
    labels = {"labels": torch.tensor([[0.5], [1.5]]), "train": torch.tensor([0])}
    assert save_graphs_cached(path, graphs, labels, fp)
    out = load_graphs_cached(path, fp)
    assert out is not None
    got, got_labels = out
    assert len(got) == 2 and torch.equal(got[0].ndata["feat"], graphs[0].ndata["feat"])
    assert torch.equal(torch.stack(got[0].edges()), torch.stack(graphs[0].edges()))
    assert torch.equal(got[0].edata["w"], graphs[0].edata["w"]) and got[1].num_nodes() == 2
    assert torch.equal(got_labels["labels"], labels["labels"]) and torch.equal(got_labels["train"], labels["train"])
    assert not list(tmp_path.glob("sub/*.tmp-*"))  # no temporary files left behind


def test_fingerprint_mismatch(tmp_path, graphs):
    path = tmp_path / "c.bin"
    save_graphs_cached(path, graphs, {}, fingerprint_of([], k=1))
    assert load_graphs_cached(path, fingerprint_of([], k=2)) is None
    assert load_graphs_cached(path, fingerprint_of([], k=1)) is not None


def test_source_change_invalidates(tmp_path, graphs):
    src = tmp_path / "raw.csv"
    src.write_text("1\n")
    path = tmp_path / "c.bin"
    save_graphs_cached(path, graphs, {}, fingerprint_of([src]))
    assert load_graphs_cached(path, fingerprint_of([src])) is not None
    src.write_text("1\n2\n")
    assert load_graphs_cached(path, fingerprint_of([src])) is None


def test_missing_file_and_missing_sidecar(tmp_path, graphs):
    fp = fingerprint_of([])
    assert load_graphs_cached(tmp_path / "nothing.bin", fp) is None
    path = tmp_path / "c.bin"
    save_graphs_cached(path, graphs, {}, fp)
    (tmp_path / "c.bin.meta.json").unlink()  # write interrupted before the sidecar: not valid
    assert load_graphs_cached(path, fp) is None


def test_truncated_file(tmp_path, graphs):
    fp = fingerprint_of([])
    path = tmp_path / "c.bin"
    save_graphs_cached(path, graphs, {"y": torch.ones(2)}, fp)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert load_graphs_cached(path, fp) is None


def test_corrupt_same_size(tmp_path, graphs):
    fp = fingerprint_of([])
    path = tmp_path / "c.bin"
    save_graphs_cached(path, graphs, {}, fp)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    assert load_graphs_cached(path, fp) is None


def test_garbage_file_and_garbage_sidecar(tmp_path):
    fp = fingerprint_of([])
    path = tmp_path / "c.bin"
    path.write_bytes(os.urandom(1000))
    meta = {"fingerprint": json.loads(json.dumps(fp, sort_keys=True, default=str)), "size": 1000, "sha256": "0"}
    (tmp_path / "c.bin.meta.json").write_text(json.dumps(meta))
    assert load_graphs_cached(path, fp) is None
    (tmp_path / "c.bin.meta.json").write_text("{not json")
    assert load_graphs_cached(path, fp) is None


def test_garbage_with_matching_checksum_is_caught_by_dgl(tmp_path):
    # A sidecar that vouches for a non-DGL file (e.g. written by hand): DGL's reader fails -> None.
    import hashlib

    fp = fingerprint_of([])
    path = tmp_path / "c.bin"
    blob = b"not a dgl file" * 10
    path.write_bytes(blob)
    meta = {"fingerprint": json.loads(json.dumps(fp, sort_keys=True, default=str)), "size": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest()}
    (tmp_path / "c.bin.meta.json").write_text(json.dumps(meta))
    assert load_graphs_cached(path, fp) is None


def test_unwritable_location_returns_false(tmp_path, graphs):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert save_graphs_cached(blocker / "c.bin", graphs, {}, fingerprint_of([])) is False


def test_rows_round_trip_and_a_file_without_them_is_a_miss(tmp_path):
    from gpse_dgl.data.cache import fingerprint_of, load_rows_cached, save_graphs_cached, save_rows_cached

    values, offsets = torch.arange(12.0).reshape(6, 2), torch.tensor([0, 2, 6])
    fingerprint = fingerprint_of(kind="rows-test")
    assert save_rows_cached(tmp_path / "rows.bin", values, offsets, fingerprint, "pe")
    got_values, got_offsets = load_rows_cached(tmp_path / "rows.bin", fingerprint, "pe")
    assert torch.equal(got_values, values) and torch.equal(got_offsets, offsets)
    assert load_rows_cached(tmp_path / "rows.bin", fingerprint, "gpse") is None  # rows stored under another key
    assert load_rows_cached(tmp_path / "rows.bin", fingerprint_of(kind="other"), "pe") is None
    save_graphs_cached(tmp_path / "graphs.bin", [dgl.graph(([0], [1]))], None, fingerprint)
    assert load_rows_cached(tmp_path / "graphs.bin", fingerprint, "pe") is None  # graphs, not rows
