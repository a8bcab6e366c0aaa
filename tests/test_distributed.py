"""Multi-process runs (torchrun's environment, gloo on 127.0.0.1): N processes train and encode as one.

Processes are started as ``torchrun`` starts them (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT`` set; ``python -m gpse_dgl``), without its agent, so a test sees each rank's exit status
and output. Tolerances: float32 summation order differs between one process and two (BatchNorm sums
and gradient all-reduce), so weights agree to 1e-4 and losses to 1e-5 relative, not bit for bit.
"""
from __future__ import annotations

import copy
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from gpse_dgl.train.pretraining.schema import validate_pretrain_recipe
from gpse_dgl.utils.checkpoint import load_pretrain_checkpoint
from gpse_dgl.train.pretraining.data import build_pretraining_data
from gpse_dgl.train.pretraining import pretrain
from gpse_dgl.utils import distributed as dist_utils
from gpse_dgl.utils.distributed import Context, DistributedError

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(args: list, world_size: int = 2, extra_env: dict | None = None) -> list:
    """Start ``world_size`` ranks of ``python ARGS`` in torchrun's environment; return the Popen objects."""
    port, procs = _free_port(), []
    for rank in range(world_size):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
               "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(extra_env or {})}
        procs.append(subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs: list, timeout: float = 240) -> list:
    outputs = [proc.communicate(timeout=timeout) for proc in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-2000:]
    return outputs


def tiny_recipe(save_path, cache_dir, **general) -> dict:
    """Small GPSE, no dropout, BatchNorm synchronised across ranks."""
    return validate_pretrain_recipe({
        "data": {"max_graphs": 40, "cache_dir": str(cache_dir), "split": [0.8, 0.1, 0.1]},
        "model": {"dim_hidden": 16, "num_layers": 2, "head_hidden": 8, "graph_head_hidden": 16,
                  "dropout": 0.0},
        "general_pipeline": {"num_epochs": 1, "batch_size": 8, "save_path": str(save_path), "num_threads": 1,
                             "optimizer": {"lr": 0.01}, "lr_scheduler": {"warmup_epochs": 1},
                             "sync_batchnorm": True, **general},
        "device": "cpu",
    }, "test")


def write_recipe(recipe: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


def pretrain_args(recipe_path: Path, *extra) -> list:
    return ["-m", "gpse_dgl", "pretrain", str(recipe_path), "--no-progress", *extra]


def assert_same_training(dir_a: Path, dir_b: Path) -> None:
    a, b = load_pretrain_checkpoint(dir_a / "last.pt"), load_pretrain_checkpoint(dir_b / "last.pt")
    assert a["epoch"] == b["epoch"]
    for key, tensor in a["model_state"].items():
        torch.testing.assert_close(b["model_state"][key].float(), tensor.float(), atol=1e-4, rtol=1e-4,
                                   msg=lambda m: f"{key}: {m}")
    losses_a = [record["train"]["loss"] for record in a["history"]]
    losses_b = [record["train"]["loss"] for record in b["history"]]
    assert losses_b == pytest.approx(losses_a, rel=1e-5)


def test_two_processes_train_like_one_and_resume_across_world_sizes(tmp_path):
    one = tiny_recipe(tmp_path / "one", tmp_path / "cache_one")
    pretrain(copy.deepcopy(one), progress=False)                                   # 1 process, epoch 1
    shutil.copytree(tmp_path / "one", tmp_path / "one_then_two")
    two = tiny_recipe(tmp_path / "two", tmp_path / "cache_two")                     # targets computed by 2
    finish(launch(pretrain_args(write_recipe(two, tmp_path / "two.yaml"))))
    assert_same_training(tmp_path / "one", tmp_path / "two")
    # metrics.json says how each ran
    import json

    ran = {name: json.loads((tmp_path / name / "metrics.json").read_text())["environment"] for name in ("one", "two")}
    assert (ran["one"]["world_size"], ran["one"]["backend"]) == (1, None)
    assert (ran["two"]["world_size"], ran["two"]["backend"], ran["two"]["local_processes"]) == (2, "gloo", 2)
    assert ran["two"]["threads"] == 1 and ran["two"]["precision"]["name"] == "fp32" and ran["two"]["device"] == "cpu"
    assert ran["two"]["versions"]["torch"] == torch.__version__ and ran["two"]["cpu_capability"]

    # the targets computed by two processes are those of one, under the same fingerprint
    data_one, data_two = (build_pretraining_data(r["data"], log=lambda m: None) for r in (one, two))
    assert data_one.info["fingerprint"] == data_two.info["fingerprint"]
    for split in ("train", "val", "test"):
        assert torch.equal(data_one.splits[split].node_targets, data_two.splits[split].node_targets)
        assert torch.equal(data_one.splits[split].graph_targets, data_two.splits[split].graph_targets)

    # resume for epoch 2: 1 -> 1 (reference), 2 -> 1, 1 -> 2
    for recipe in (one, two):
        recipe["general_pipeline"]["num_epochs"] = 2
        pretrain(copy.deepcopy(recipe), progress=False, resume=True, allow_recipe_change=True)
    assert_same_training(tmp_path / "one", tmp_path / "two")
    one_then_two = tiny_recipe(tmp_path / "one_then_two", tmp_path / "cache_one", num_epochs=2)
    finish(launch(pretrain_args(write_recipe(one_then_two, tmp_path / "resume.yaml"), "--resume",
                                 "--allow-recipe-change")))
    assert_same_training(tmp_path / "one", tmp_path / "one_then_two")


ENCODE_SCRIPT = """
import sys, torch
import gpse_dgl  # before dgl: its import guard for DGL 2.x (gpse_dgl._dgl_compat)
import dgl
from gpse_dgl.encode import load_gpse
from gpse_dgl.encode.sharded import encode_dataset_sharded
from gpse_dgl.encode.inference import encode_large
from gpse_dgl.data.synthetic import erdos_renyi_graphs, random_graph
from gpse_dgl.utils.distributed import process_group

model = load_gpse(None)
graphs = erdos_renyi_graphs(23, 12, 0.3, seed=1)
big = random_graph(300, 1500, seed=2)
with process_group("gloo") as ctx:
    many = encode_dataset_sharded(model, graphs, batch_size=4, progress=False, seed=3)
    large = encode_large(model, big, seed=3, chunk_edges=200, shard=True)
    if ctx.is_main:
        torch.save({"many": many, "large": large}, sys.argv[1])
"""


def test_two_process_encoding_equals_one_process(tmp_path):
    from gpse_dgl.data.synthetic import erdos_renyi_graphs, random_graph
    from gpse_dgl.encode import load_gpse
    from gpse_dgl.encode.inference import encode_dataset, encode_large

    out = tmp_path / "encodings.pt"
    procs = launch(["-c", ENCODE_SCRIPT, str(out)])
    model = load_gpse(None)
    many = encode_dataset(model, erdos_renyi_graphs(23, 12, 0.3, seed=1), batch_size=4, progress=False, seed=3)
    large = encode_large(model, random_graph(300, 1500, seed=2), seed=3, chunk_edges=200)
    finish(procs)
    sharded = torch.load(out, weights_only=True)
    assert len(sharded["many"]) == len(many)
    assert all(torch.equal(a, b) for a, b in zip(sharded["many"], many))
    assert torch.equal(sharded["large"], large)


def test_a_killed_rank_ends_the_others_with_one_line_and_keeps_the_checkpoint(tmp_path):
    recipe = tiny_recipe(tmp_path / "run", tmp_path / "cache", num_epochs=200)
    procs = launch(pretrain_args(write_recipe(recipe, tmp_path / "run.yaml")),
                   extra_env={dist_utils.TIMEOUT_ENV: "30"})
    last = tmp_path / "run" / "last.pt"
    deadline = time.monotonic() + 240
    while not last.exists() and time.monotonic() < deadline and procs[0].poll() is None:
        time.sleep(0.2)
    assert last.exists(), procs[0].communicate()[1][-2000:]
    procs[1].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    _, err = procs[0].communicate(timeout=60)
    assert time.monotonic() - killed_at < 35  # the stated timeout (30 s) bounds the wait
    procs[1].communicate()
    assert procs[0].returncode == 2
    lines = err.strip().splitlines()
    assert lines[-1].startswith("gpse-dgl: error: rank 0: lost contact with the other processes"), lines[-5:]
    assert load_pretrain_checkpoint(last)["epoch"] >= 1  # the last complete checkpoint is intact


# ------------------------------------------------------------------ bad input (no processes started)


def test_a_global_batch_the_world_size_does_not_divide_is_one_line():
    from gpse_dgl.train.data_parallel import global_batches

    with pytest.raises(DistributedError, match="global batch of 10 graphs does not divide among 3") as info:
        next(global_batches(torch.arange(30), 10, Context(rank=0, world_size=3)))
    assert "\n" not in str(info.value)


def _main(argv, monkeypatch, capsys, **env) -> tuple[int, str]:
    from gpse_dgl.cli import main

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr().err


def test_nccl_without_cuda_is_one_line(tmp_path, monkeypatch, capsys):
    recipe = write_recipe(tiny_recipe(tmp_path / "run", tmp_path / "cache"), tmp_path / "r.yaml")
    code, err = _main(["pretrain", str(recipe), "--set", "general_pipeline.distributed=nccl"], monkeypatch,
                      capsys, WORLD_SIZE="2", RANK="0")
    assert code == 2 and err.startswith("gpse-dgl: error: general_pipeline.distributed: nccl needs CUDA")
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_verbs_that_are_not_sharded_refuse_torchrun(monkeypatch, capsys):
    code, err = _main(["info"], monkeypatch, capsys, WORLD_SIZE="2", RANK="0")
    assert code == 2 and err.startswith("gpse-dgl: error: 'info' does not run under torchrun")
    assert err.count("\n") == 1


def test_each_process_defaults_to_its_share_of_the_cores(monkeypatch):
    from gpse_dgl.train import runtime

    monkeypatch.setattr(runtime.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert runtime.thread_share() == 4
    assert runtime.fit_threads(None) == (4, None) and runtime.fit_threads(3) == (3, None)
    threads, line = runtime.fit_threads(6)
    assert threads == 4 and line == ("threads: general_pipeline.num_threads asks for 6; using 4, this process's "
                                     "share of the machine (2 processes on 8 cores)")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert runtime.fit_threads(None) == (2, None)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")  # one process: torch's default unless the recipe says
    assert runtime.fit_threads(None) == (None, None) and runtime.fit_threads(8) == (8, None)
    assert runtime.fit_threads(9)[0] == 8
    lines, before = [], torch.get_num_threads()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    with runtime.torch_threads(2, lines.append):
        assert torch.get_num_threads() == 1 and len(lines) == 1
    assert torch.get_num_threads() == before


def test_leaving_the_group_frees_the_ddp_models_it_served():
    """A DDP model kept by a reference cycle, left to interpreter shutdown, frees its gloo group there, which
    aborts the process (see :func:`leave_group`). Leaving the group must free it while Python is alive."""
    import gc
    import weakref

    import torch.distributed as dist

    assert not dist.is_initialized()
    collecting = gc.isenabled()
    gc.disable()  # only leave_group may collect the cycle
    try:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
        model(torch.randn(3, 4)).sum().backward()
        alive = weakref.ref(model)
        holder = {"model": model}
        holder["itself"] = holder  # a cycle, as DDP's own hooks and a training loop's references make
        del model, holder
        assert alive() is not None
        dist_utils.leave_group()
        assert alive() is None and not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        if collecting:
            gc.enable()


def test_shares_cover_every_global_batch_in_order():
    from gpse_dgl.train.data_parallel import BatchShare, num_global_batches

    sizes = torch.tensor([3, 1, 4, 1, 5])
    shares = [BatchShare.of(sizes, Context(rank, 2)) for rank in range(2)]
    assert [s.graphs for s in shares] == [(0, 3), (3, 5)]
    assert [s.node_rows for s in shares] == [(0, 8), (8, 14)]
    generator = torch.Generator().manual_seed(0)
    draw = torch.randn(14, 4, generator=generator)
    parts = [s.features(4, torch.Generator().manual_seed(0)) for s in shares]
    assert torch.equal(torch.cat(parts), draw)
    assert num_global_batches(33, 16, Context(0, 2)) == 2  # a last batch of 1 graph cannot be split in 2
    assert num_global_batches(33, 16, Context(0, 1)) == 3


@pytest.mark.slow
def test_torchrun_itself_runs_the_cli(tmp_path):
    """The real launcher: ``torchrun --nproc_per_node=2 -m gpse_dgl encode ...``."""
    smiles = tmp_path / "m.smi"
    smiles.write_text("CCO\nc1ccccc1\nCC(=O)O\nCCN\nC1CC1\n", encoding="utf-8")
    out = tmp_path / "two.bin"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port",
                    str(_free_port()), "-m", "gpse_dgl", "encode", "--smiles", str(smiles), "--out", str(out)],
                   cwd=REPO, check=True, capture_output=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    import dgl

    from gpse_dgl.encode import load_gpse
    from gpse_dgl.encode.inference import encode_dataset

    graphs, _ = dgl.load_graphs(str(out))
    reference, _ = dgl.load_graphs(str(out))
    expected = encode_dataset(load_gpse(None), reference, progress=False)
    for g, e in zip(graphs, expected):  # each rank batched its own graphs: float sums in another order
        torch.testing.assert_close(g.ndata["gpse"], e, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_two_processes_train_a_downstream_model_like_one(tmp_path):
    """CSL with GIN, no BatchNorm, no dropout: 2 processes give 1 process's losses and weights."""
    from gpse_dgl.utils.checkpoint import load_checkpoint
    from gpse_dgl.train.downstream import train_downstream
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    settings = ["model.pe.source=RWSE", "model.dim_hidden=32", "model.pe.dim_pe=32", "model.batchnorm=false",
                "model.pe.batchnorm=false", "general_pipeline.num_epochs=2", "data.max_folds=1",
                f"data.cache_dir={tmp_path / 'cache'}", "general_pipeline.num_threads=1", "device=cpu"]
    recipe = REPO / "recipes/downstream/csl.yaml"
    train_downstream(load_downstream_recipe(recipe, [*settings, f"general_pipeline.save_path={tmp_path / 'one'}"]),
                     progress=False)
    finish(launch(["-m", "gpse_dgl", "train", str(recipe), "--no-progress", "--out", str(tmp_path / "two"),
                   *[arg for setting in settings for arg in ("--set", setting)]]))
    one, two = (load_checkpoint(tmp_path / name / "seed0-fold0" / "last.pt") for name in ("one", "two"))
    for key, tensor in one["model_state"].items():
        torch.testing.assert_close(two["model_state"][key].float(), tensor.float(), atol=1e-4, rtol=1e-4)
    assert [r["train"]["loss"] for r in two["history"]] == pytest.approx(
        [r["train"]["loss"] for r in one["history"]], rel=1e-5)
