"""Smoke tests of the pretraining-quality benchmark scripts on a tiny pretraining run."""
from __future__ import annotations

import copy
import pathlib

import pytest
import torch

from _benchmarks import load_benchmark
from gpse_dgl.recipes import dump_recipe
from gpse_dgl.train.pretraining.schema import validate_pretrain_recipe
from gpse_dgl.train.pretraining import pretrain

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def _script(name):
    return load_benchmark(name)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_pretrain")
    recipe = validate_pretrain_recipe({
        "data": {"max_graphs": 40, "cache_dir": str(root / "cache"), "split": [0.6, 0.2, 0.2]},
        "model": {"dim_hidden": 8, "num_layers": 2, "head_hidden": 4, "graph_head_hidden": 8},
        "general_pipeline": {"num_epochs": 1, "batch_size": 16, "save_path": str(root / "run"),
                             "num_threads": 1},
        "device": "cpu",
    }, "test")
    pretrain(copy.deepcopy(recipe), progress=False)
    path = root / "recipe.yaml"
    path.write_text(dump_recipe(recipe), encoding="utf-8")
    return root / "run" / "best.pt", path


def test_pretrain_quality_reports_every_pse_and_column(tiny_run, capsys):
    checkpoint, _ = tiny_run
    _script("pretrain_quality").main(["--checkpoint", str(checkpoint), "--input", "seeded",
                                      "--input", "zeros", "--input", "mean-of-2", "--columns"])
    out = capsys.readouterr().out
    for name in ("ElstaticPE", "LapPE", "RWSE", "HKdiagSE", "EigVals", "CycleGE", "Overall", "RWSE[19]",
                 "CycleGE[6]", "zeros val", "mean-of-2 test"):
        assert name in out, name


def test_wl_ceiling_bounds_node_columns(tiny_run, capsys):
    _, recipe = tiny_run
    _script("wl_ceiling").main(["--recipe", str(recipe), "--split", "val"])
    out = capsys.readouterr().out
    assert "distinct 1-WL colour histograms" in out
    # the bound is a least-squares optimum within colour classes: HKdiagSE is a function of the colour
    hk = next(line for line in out.splitlines() if line.startswith("HKdiagSE"))
    assert float(hk.split()[-1]) > 0.99


@pytest.mark.slow
def test_pretrain_sizing_reports_each_size(capsys):
    _script("pretrain_sizing").main(["--recipe", str(BENCHMARKS.parent / "recipes" / "quickstart.yaml"),
                                     "--quick", "--sizes", "2x8,3x16", "--steps", "1",
                                     "--set", "data.skeleton_edits=0"])
    out = capsys.readouterr().out
    assert "targets: 500 graphs" in out
    assert "| 2 x 8 |" in out and "| 3 x 16 |" in out


def test_shipped_models_times_each_model_and_precision(capsys):
    _script("shipped_models").main(["--limit", "8", "--batch-size", "4", "--repeats", "1",
                                    "--precisions", "fp32,bf16"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "x |" in line]
    assert [row.split("|")[1].strip() for row in rows] == ["quickstart"] * 2 + ["rdkit-base"] * 2
    first, *_ = rows
    assert "1.00x" in first and first.rstrip(" |").endswith("1.0000")
    bf16_cosine = float(rows[1].rstrip(" |").split("|")[-1])
    assert 0.5 < bf16_cosine <= 1.0


def test_shipped_models_names_the_device_and_refuses_a_missing_gpu(capsys):
    _script("shipped_models").main(["--limit", "2", "--repeats", "1", "--precisions", "fp32", "--device", "cpu"])
    assert "; device cpu;" in capsys.readouterr().out
    if torch.cuda.is_available():
        return
    with pytest.raises(SystemExit) as exc:
        _script("shipped_models").main(["--limit", "2", "--device", "cuda"])
    assert exc.value.code == 2
    assert "--device cuda: torch sees no CUDA device here" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_train_speed_refuses_a_missing_gpu(capsys):
    with pytest.raises(SystemExit) as exc:
        _script("train_speed").main(["--device", "cuda", "--clock", "wall", "--small", "--quick"])
    assert exc.value.code == 2
    assert "--device cuda: torch sees no CUDA device here" in capsys.readouterr().err


def test_pse_families_reports_time_memory_and_refusals(capsys):
    _script("pse_families").main(["--families", "path,star", "--sizes", "6000", "--threads", "1",
                                  "--sparse-limit", "5500"])
    out = capsys.readouterr().out
    assert "| path | 6,000 | 5,999 |" in out and "| star | 6,000 | 5,999 |" in out
    assert out.count("| refused |") == 2 and "above sparse_limit=5,500" in out


def test_downstream_speed_times_both_sides_with_equal_parameters(capsys):
    from gpse_dgl.data.zinc_replica import moses_smiles_file

    if not moses_smiles_file().exists():  # read from the installed files, never imported (its imports fail)
        pytest.skip("MOSES' files are not installed (pip install --no-deps molsets)")
    pytest.importorskip("torch_geometric")
    result = _script("downstream_speed").main(["--quick", "--models", "gine", "--precisions", "fp32,bf16"])
    assert {(r["precision"], r["part"]) for r in result["records"]} == {
        (p, part) for p in ("fp32", "bf16") for part in ("model only", "whole epoch")}
    ours, pyg = result["parameters"]["gine"]
    assert ours == pyg
    shares = result["profiles"]["gine"]["ours"]
    assert abs(sum(shares.values()) - 1) < 1e-6
    assert result["step_ms"]["gine"]["ours"] > 0 and result["step_ms"]["gine"]["pyg"] > 0
    out = capsys.readouterr().out
    assert "PyG / ours" in out and "Ceiling of PyG / ours" in out
    assert all(v > 0 for side in ("ours", "pyg") for v in result["parts"]["gine"][side].values())
    bound = result["bf16_bounds"]["gine"]
    assert bound["bf16_dense_ms"] > 0 and "were only the dense products to change" in out
    rates = result["product_rates"]
    assert rates["gine"]["ours"] > 0 and rates["gine"]["pyg"] > 0 and rates["host, 1024 x 1024"] > 0
    assert "this host's float32 rate" in out


def test_aggregation_speed_times_each_op_on_both_paths(capsys):
    from gpse_dgl.kernels import cpu

    if cpu.kernel() is None:
        pytest.skip(cpu.describe())
    result = _script("aggregation_speed").main(["--quick"])
    records = result["records"]
    assert [r["op"] for r in records] == ["copy_u_sum", "copy_u_mean", "relu_sum", "edge_gated_sum"]
    assert all(r["torch"] > 0 and r["dgl"] > 0 and r["edges"] > 0 for r in records)
    assert "DGL / fused" in capsys.readouterr().out


def test_downstream_speed_bounds_bf16_on_the_unprofiled_step():
    # fp32 step 10 ms (1 s over 100 batches); its products 4 ms of a 16 ms profiled step; bf16 products 1 ms
    bounds = _script("downstream_speed").bf16_bounds(
        [{"model": "m", "precision": "fp32", "part": "model only", "ours_s": 1.0}],
        {"m": {"ours": {"dense products": 0.25}}}, {"m": {"ours": 16.0, "batches": 100}}, {"m": 1.0})
    assert bounds["m"]["fp32_dense_ms"] == 4.0
    assert abs(bounds["m"]["bound"] - 10 / 7) < 1e-12


def test_downstream_speed_counts_the_optimisers_element_wise_ops_as_the_optimisers():
    from types import SimpleNamespace

    bucket = _script("downstream_speed")._bucket
    step = SimpleNamespace(name="Optimizer.step#AdamW.step", cpu_parent=None)
    inner = SimpleNamespace(name="aten::lerp_", cpu_parent=SimpleNamespace(name="aten::_foreach_x", cpu_parent=step))
    assert bucket(inner) == "optimiser"
    assert bucket(SimpleNamespace(name="aten::lerp_", cpu_parent=None)) == "other ops"
    assert bucket(SimpleNamespace(name="aten::mul_", cpu_parent=None)) == "element-wise"
    assert bucket(SimpleNamespace(name="aten::mm", cpu_parent=None)) == "dense products"
    assert bucket(SimpleNamespace(name="GSpMM", cpu_parent=None)) == "edge sums"


def test_train_wall_time_refuses_a_folder_that_is_not_a_checkout(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        _script("train_wall_time").main(["--baseline", str(tmp_path)])
    assert exc.value.code == 2
    assert "is not a checkout of gpse-dgl" in capsys.readouterr().err


def test_train_wall_time_stops_with_the_failing_sides_last_line():
    with pytest.raises(SystemExit) as exc:
        _script("train_wall_time").main(["--baseline", str(BENCHMARKS.parent), "--rounds", "1", "--no-warm-up",
                                         "--set", "model.name=no-such-model"])
    message = str(exc.value.code)
    assert message.startswith("train_wall_time: ") and "exit 2" in message and "no-such-model" in message
