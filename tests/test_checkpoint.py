"""Checkpoints: weights-only loading, atomic writes, one-line errors for bad files, RNG states."""
from __future__ import annotations

import os
import pickle
import random

import numpy as np
import pytest
import torch

from gpse_dgl.utils.checkpoint import (FORMAT, FORMAT_VERSION, capture_rng_state, load_checkpoint,
                                       load_pretrain_checkpoint, restore_rng_state, save_checkpoint)
from gpse_dgl.utils.errors import CheckpointError


def sample_payload() -> dict:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "model_state": model.state_dict(),
            "model_config": {"dim_hidden": 4, "virtual_node": True}, "optimizer_state": optimizer.state_dict(),
            "scheduler_state": scheduler.state_dict(), "rng_state": capture_rng_state(),
            "recipe": {"model": {"num_layers": 2}}, "epoch": 3, "best_metric": float("-inf"),
            "history": [{"epoch": 1, "val": None}]}


def one_line_error(path) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def test_round_trip_loads_with_weights_only(tmp_path):
    payload = sample_payload()
    path = save_checkpoint(tmp_path / "sub" / "ck.pt", payload)
    direct = torch.load(path, weights_only=True)  # what any user can do safely
    loaded = load_pretrain_checkpoint(path)
    for key in payload["model_state"]:
        assert torch.equal(loaded["model_state"][key], payload["model_state"][key])
        assert torch.equal(direct["model_state"][key], payload["model_state"][key])
    assert loaded["model_config"] == payload["model_config"]
    assert loaded["epoch"] == 3 and loaded["best_metric"] == float("-inf")
    assert loaded["optimizer_state"]["param_groups"] == payload["optimizer_state"]["param_groups"]
    assert loaded["scheduler_state"]["base_lrs"] == [1e-3]


def test_load_always_uses_weights_only(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "ck.pt", sample_payload())
    seen = {}
    original = torch.load

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    load_checkpoint(path)
    assert seen.get("weights_only") is True


def test_pickled_objects_are_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo should-never-run",))

    path = tmp_path / "evil.pt"
    torch.save({"model_state": Evil()}, path)
    message = one_line_error(path)
    # the whole reason, not torch's multi-paragraph text cut off mid-sentence
    assert message.endswith("refused: it holds Python objects that only an unsafe load could restore (global "
                            "posix.system); gpse-dgl loads tensors and plain containers only"), message


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_garbage_and_truncated_files_raise_one_line(tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"this is not a checkpoint" * 10)
    assert "not a readable checkpoint" in one_line_error(garbage)

    good = save_checkpoint(tmp_path / "good.pt", sample_payload())
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    one_line_error(truncated)

    pickled = tmp_path / "pickle.pt"
    pickled.write_bytes(pickle.dumps([1, 2, 3]))
    one_line_error(pickled)


def test_missing_directory_and_non_dict(tmp_path):
    assert "checkpoint not found" in one_line_error(tmp_path / "missing.pt")
    assert "is a directory" in one_line_error(tmp_path)
    tensor_file = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor_file)
    assert "expected a dict" in one_line_error(tensor_file)


def test_pretrain_checkpoint_needs_its_keys_and_format(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"state_dict": {}}, path)
    with pytest.raises(CheckpointError, match="missing format, model_state, model_config"):
        load_pretrain_checkpoint(path)
    torch.save({"format": "something-else", "model_state": {}, "model_config": {}}, path)
    with pytest.raises(CheckpointError, match="not a gpse-dgl pretraining checkpoint"):
        load_pretrain_checkpoint(path)


def test_unsavable_payload_is_refused_before_writing(tmp_path):
    path = save_checkpoint(tmp_path / "ck.pt", sample_payload())
    before = path.read_bytes()
    with pytest.raises(TypeError, match="cannot be stored"):
        save_checkpoint(path, {"model_state": {}, "callback": lambda: 1})
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ck.pt"]  # no temporary files left behind


def test_interrupted_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "ck.pt", sample_payload())
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, sample_payload())
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ck.pt"]


def test_rng_state_round_trip_through_a_checkpoint(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    path = save_checkpoint(tmp_path / "rng.pt", {"rng_state": capture_rng_state()})
    expected = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    torch.manual_seed(99), np.random.seed(99), random.seed(99)
    restore_rng_state(load_checkpoint(path)["rng_state"])
    got = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    assert torch.equal(expected[0], got[0])
    np.testing.assert_array_equal(expected[1], got[1])
    assert expected[2] == got[2]
