"""One graph on dgl.distributed: partition, launcher, layer-wise encoding equal to one process, failures.

The end-to-end tests start 2 graph servers and 2 trainers on loopback (about 20 s each on a 2-core
machine, mostly process start-up and DGL's connection retries).
"""
from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import gpse_dgl  # noqa: F401  (before dgl: graphbolt guard)
import dgl

from gpse_dgl.data.synthetic import random_graph
from gpse_dgl.distributed.encode import FEATURE_ROWS, node_features, plan_chunks
from gpse_dgl.distributed.launch import read_host_file
from gpse_dgl.distributed.partition import orig_ids, partition, read_partition_info
from gpse_dgl.distributed.shards import read_encodings
from gpse_dgl.encode.inference import encode_large
from gpse_dgl.nn.gpse import GPSE
from gpse_dgl.nn.random_features import random_node_features, structure_keys
from gpse_dgl.utils.errors import GPSEError
from gpse_dgl.utils.graph import as_simple_undirected

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           OMP_NUM_THREADS="1")


@pytest.mark.parametrize("n, dim", [(5, 20), (37, 4), (FEATURE_ROWS + 3, 2), (2 * FEATURE_ROWS + 40, 20)])
def test_node_features_are_the_one_process_draw(n, dim):
    g = random_graph(n, 2 * n, seed=3)
    key = structure_keys(g)[0]
    full = random_node_features(g, dim, seed=11)
    wanted = torch.randperm(n)[: max(1, n // 3)]
    assert torch.equal(node_features(n, dim, 11, key, wanted), full[wanted])


def test_chunks_cover_every_in_edge_once():
    src = torch.tensor([5, 6, 7, 5, 9, 9, 9])
    dst = torch.tensor([0, 0, 1, 2, 2, 1, 0])
    chunks = plan_chunks(src, dst, 3, chunk_edges=2)
    seen = []
    for chunk in chunks:
        for piece in chunk.pieces:
            s, d = piece.block.edges()
            srcs = piece.sources[s.long()]
            seen += [(int(a), chunk.start + int(b)) for a, b in zip(srcs, d)]
    assert sorted(seen) == sorted((int(a), int(b)) for a, b in zip(src, dst))


def test_partition_records_ids_and_whole_in_neighbourhoods(tmp_path):
    g = random_graph(400, 1200, seed=2, directed=True)
    info = partition(g, tmp_path, 2, method="metis")
    simple = as_simple_undirected(g)
    assert info["num_edges"] == simple.num_edges() and info["feature_key"] == structure_keys(simple)[0]
    ids = torch.cat([orig_ids(tmp_path, p) for p in range(2)])
    assert sorted(ids.tolist()) == list(range(400))
    for part in range(2):
        local, *_ = dgl.distributed.load_partition(str(tmp_path / "graph.json"), part, load_feats=False)
        inner = local.ndata["inner_node"].bool()
        degrees = local.in_degrees()[inner]
        original = orig_ids(tmp_path, part)
        assert torch.equal(degrees, simple.in_degrees(original))
    with pytest.raises(GPSEError, match="not a gpse-dgl partition"):
        read_partition_info(tmp_path / "part0")


def test_host_file_needs_one_host_per_partition(tmp_path):
    path = tmp_path / "hosts.txt"
    path.write_text("# machines\nnode-a 30050\nnode-b\n")
    assert read_host_file(path, 2) == [("node-a", 30050), ("node-b", 30050)]
    with pytest.raises(GPSEError, match="2 host line"):
        read_host_file(path, 3)


def test_host_and_port_plans_are_checked_before_anything_starts(tmp_path):
    """A host listed twice without a port made both servers bind 30050 ("Cannot bind"); a port of 99999
    was not checked up front."""
    path = tmp_path / "hosts.txt"
    path.write_text("node-a\nnode-a\nnode-b 30051\nnode-b\n")
    assert read_host_file(path, 4) == [("node-a", 30050), ("node-a", 30051), ("node-b", 30051), ("node-b", 30050)]
    for text, expected in (("node-a 99999\nnode-b\n", "hosts.txt:1: port 99999 is not in 1-65535"),
                           ("node-a 30050\nnode-a 30050\n", "partitions 0 and 1 both use node-a port 30050"),
                           ("node-a 65000\nnode-b\n", "the trainers meet on node-a port 66000"),
                           ("node-a 30050\nnode-a 31050\n", "port 31050 (the first server's port + 1000), "
                                                             "which is a server port")):
        path.write_text(text)
        with pytest.raises(GPSEError, match=re.escape(expected)):
            read_host_file(path, 2)
    parts = tmp_path / "parts"
    partition(random_graph(40, 100, seed=1), parts, 2, method="random")
    path.write_text("node-a 99999\nnode-b\n")
    done = _cli("launch", str(parts), "--out", str(tmp_path / "enc"), "--hosts", str(path), timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "99999" in done.stderr, done.stderr
    assert not (tmp_path / "enc").exists()


def _cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "gpse_dgl", *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A 2,000-node graph of arXiv's degree in 2 METIS partitions and a small random GPSE."""
    tmp = tmp_path_factory.mktemp("dist")
    g = random_graph(2000, 13800, seed=1, directed=True)
    dgl.save_graphs(str(tmp / "g.bin"), [g])
    torch.manual_seed(0)
    model = GPSE(dim_in=20, dim_hidden=24, num_layers=4).eval()
    for norm in [model.pre_norm, *model.norms]:
        norm.running_mean.normal_(0, 0.1)
        norm.running_var.uniform_(0.5, 2.0)
    torch.save({"model_state": model.state_dict(),
                "model_config": {"dim_in": 20, "dim_hidden": 24, "num_layers": 4}}, tmp / "model.pt")
    done = _cli("partition", str(tmp / "g.bin"), "--parts", "2", "--out", str(tmp / "parts"))
    assert done.returncode == 0, done.stderr
    return tmp, g, model


def test_two_servers_two_trainers_equal_one_process(small_run):
    tmp, g, model = small_run
    done = _cli("launch", str(tmp / "parts"), "--out", str(tmp / "enc"), "--checkpoint", str(tmp / "model.pt"),
                "--seed", "3", "--chunk-edges", "3000", "--gather", str(tmp / "all.bin"), "--timeout", "200")
    assert done.returncode == 0, done.stderr
    expected = encode_large(model, g, seed=3)
    got = read_encodings(tmp / "enc")
    assert (got - expected).abs().max().item() < 1e-5
    gathered, _ = dgl.load_graphs(str(tmp / "all.bin"))
    assert gathered[0].num_edges() == g.num_edges() and torch.equal(gathered[0].ndata["gpse"], got)
    stats = [json.loads(p.read_text()) for p in sorted((tmp / "enc" / "logs" / "stats").glob("*.json"))]
    assert sorted(s["role"] for s in stats) == ["server", "server", "trainer", "trainer"]
    assert sum(s["nodes"] for s in stats if s["role"] == "trainer") == 2000
    assert not _shared_memory_left(tmp / "enc" / "logs")


_SLEEPER = ("import os, time; from gpse_dgl.distributed.runtime import join_trainer; t = join_trainer(); "
            "print('joined', os.getpid(), flush=True); time.sleep(120)")
#: as _SLEEPER, with rows in shared memory (what the encoding's DistTensors leave when the launcher is killed)
_HOLDER = _SLEEPER.replace("print(", "import dgl, torch; x = dgl.distributed.DistTensor((t.info['num_nodes'], 64), "
                           "torch.float32, 'held', part_policy=t.graph.get_node_partition_policy('_N'), "
                           "persistent=True); print(")


def _shared_memory_left(logs: Path) -> list:
    """The run's files still in /dev/shm (the launcher removes them at the end)."""
    return glob.glob(json.loads((logs / "processes.json").read_text())["shared_memory"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("victim", ["trainer 1", "server 0"])
def test_a_killed_process_ends_the_run_with_one_line(small_run, victim, tmp_path):
    tmp, _, _ = small_run
    logs = tmp_path / "logs"
    launcher = subprocess.Popen([sys.executable, "-m", "gpse_dgl.distributed.launch", str(tmp / "parts"),
                                 "--logs", str(logs), "--timeout", "200", "--", sys.executable, "-c", _SLEEPER],
                                env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.time() + 150
        while time.time() < deadline:
            logs_text = [(logs / f"trainer{r}.log") for r in range(2)]
            if all(p.exists() and "joined" in p.read_text() for p in logs_text):
                break
            assert launcher.poll() is None, launcher.communicate()
            time.sleep(0.5)
        else:
            pytest.fail("the trainers did not join")
        table = json.loads((logs / "processes.json").read_text())["processes"]
        pids = {f"{row['role']} {row['index']}": row["pid"] for row in table}
        os.kill(pids[victim], signal.SIGKILL)
        _, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert launcher.returncode == 1 and len(lines) == 1, err
    assert victim in lines[0] and "SIGKILL" in lines[0] and "stopped the other 3 processes" in lines[0]
    time.sleep(0.5)
    assert not [name for name, pid in pids.items() if _alive(pid)]
    assert not _shared_memory_left(logs)


def test_launch_errors_are_one_line(tmp_path):
    done = _cli("launch", str(tmp_path), "--out", str(tmp_path / "enc"), timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "gpse-dgl partition" in done.stderr


def test_partition_refuses_bad_input_in_one_line_and_leaves_nothing(tmp_path):
    """An edgeless graph used to end in a DGL traceback (combine_frames) with a partial directory."""
    for graph, parts, method, expected in ((dgl.graph(([], []), num_nodes=50), 2, "metis", "has no edges"),
                                           (dgl.graph(([0, 1], [0, 1]), num_nodes=9), 2, "random",
                                            "has no edges besides self-loops"),
                                           (dgl.rand_graph(4, 8), 5, "random", "cannot be cut into 5")):
        source = tmp_path / "g.bin"
        dgl.save_graphs(str(source), [graph])
        done = _cli("partition", str(source), "--parts", str(parts), "--method", method, "--out",
                    str(tmp_path / "parts"), timeout=120)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and expected in done.stderr, done.stderr
        assert not (tmp_path / "parts").exists() and not list(tmp_path.glob(".parts.*gpse-tmp"))


def test_random_partitions_are_dealt_evenly_from_a_seed(tmp_path):
    """DGL's own random draw depends on its thread count and could leave a partition empty (a KeyError
    from partition_graph); the nodes are now dealt out in a seeded order."""
    g = dgl.graph(([0, 1, 2, 3], [1, 2, 3, 0]))
    cuts = []
    for seed in range(6):
        info = partition(g, tmp_path / "parts", 3, method="random", seed=seed, overwrite=True)
        assert sorted(info["part_nodes"]) == [1, 1, 2]
        cuts.append(torch.cat([orig_ids(tmp_path / "parts", p) for p in range(3)]).tolist())
    assert len({tuple(c) for c in cuts}) > 1  # the seed matters
    again = partition(g, tmp_path / "again", 3, method="random", seed=5)
    assert again["part_nodes"] == info["part_nodes"]
    assert torch.cat([orig_ids(tmp_path / "again", p) for p in range(3)]).tolist() == cuts[-1]


def test_partition_replaces_a_directory_only_with_overwrite_and_as_a_whole(tmp_path):
    g = random_graph(80, 300, seed=4)
    out = tmp_path / "parts"
    partition(g, out, 3, method="random")
    with pytest.raises(GPSEError, match="already exists and is not empty; pass --overwrite"):
        partition(g, out, 2, method="random")
    assert read_partition_info(out)["num_parts"] == 3
    partition(g, out, 2, method="random", overwrite=True)
    assert read_partition_info(out)["num_parts"] == 2 and not (out / "part2").exists()  # no stale part
    from gpse_dgl.utils.io import atomic_directory
    from gpse_dgl.utils.lock import RunLockedError

    with atomic_directory(tmp_path / "other"):
        with pytest.raises(RunLockedError, match="--out .*other is in use by another gpse-dgl process"):
            partition(g, tmp_path / "other", 2)


def test_gather_refuses_a_replaced_source_of_the_same_size(tmp_path):
    from gpse_dgl.distributed.shards import gather, write_manifest, write_shard

    g = random_graph(30, 90, seed=5)
    dgl.save_graphs(str(tmp_path / "g.bin"), [g])
    info = partition(g, tmp_path / "parts", 1, method="random", source=str(tmp_path / "g.bin"))
    write_shard(tmp_path / "enc", 0, torch.arange(30), torch.ones(30, 4))
    write_manifest(tmp_path / "enc", read_partition_info(tmp_path / "parts"), 1, 4, 0)
    assert gather(tmp_path / "enc", tmp_path / "a.bin").is_file()
    dgl.save_graphs(str(tmp_path / "g.bin"), [random_graph(30, 90, seed=6)])  # another graph, same size
    with pytest.raises(GPSEError, match=r"g.bin is not the graph that was partitioned \(structure key"):
        gather(tmp_path / "enc", tmp_path / "b.bin")
    assert not (tmp_path / "b.bin").exists() and info["num_nodes"] == 30


def test_shared_memory_of_a_killed_launcher_is_removed_by_the_next_start_or_cleanup(small_run, tmp_path):
    """SIGKILL of the launcher: its workers die (parent-death signal) but their /dev/shm files stayed.
    The next launch into the same --out removes them (and says so), as does `launch --cleanup`."""
    tmp, _, _ = small_run
    out = tmp_path / "enc"
    logs = out / "logs"
    launcher = subprocess.Popen([sys.executable, "-m", "gpse_dgl.distributed.launch", str(tmp / "parts"),
                                 "--logs", str(logs), "--timeout", "200", "--", sys.executable, "-c", _HOLDER],
                                env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        deadline = time.time() + 150
        while not all((logs / f"trainer{r}.log").exists() and "joined" in (logs / f"trainer{r}.log").read_text()
                      for r in range(2)):
            assert launcher.poll() is None and time.time() < deadline, "the trainers did not join"
            time.sleep(0.5)
        pids = [row["pid"] for row in json.loads((logs / "processes.json").read_text())["processes"]]
        launcher.kill()
        launcher.wait(timeout=30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    deadline = time.time() + 30
    while any(_alive(pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in pids)
    left = _shared_memory_left(logs)
    assert left, "the killed run left no shared memory: nothing to test"
    done = _cli("launch", str(tmp / "parts"), "--out", str(out), timeout=60)  # refused (earlier run), cleaned
    assert done.returncode == 2 and "pass --overwrite" in done.stderr, done.stderr
    assert f"removed {len(left)} shared-memory file(s)" in done.stdout, done.stdout
    assert not _shared_memory_left(logs)
    open(left[0], "wb").close()  # as if another host's launch had left one: --cleanup removes it
    done = _cli("launch", "--cleanup", str(out), timeout=60)
    assert done.returncode == 0 and "removed 1 shared-memory file(s)" in done.stdout, done.stdout + done.stderr
    assert not os.path.exists(left[0])


def test_the_srun_path_with_a_stub_srun(small_run, tmp_path):
    """``--via srun`` against a stub ``srun`` that records its arguments and runs the task here (the docs
    say this path has not run on a real SLURM cluster)."""
    tmp, g, model = small_run
    stub = tmp_path / "bin" / "srun"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\n"
                    f"printf '%s\\n' \"$*\" >> {tmp_path / 'srun_calls.txt'}\n"
                    "while [ $# -gt 0 ]; do case \"$1\" in --*) shift ;; *) break ;; esac; done\n"
                    "exec \"$@\"\n")
    stub.chmod(0o755)
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("127.0.0.1 30061\n127.0.0.1\n")  # a host twice, the second without a port
    env = dict(ENV, PATH=f"{stub.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run([sys.executable, "-m", "gpse_dgl", "launch", str(tmp / "parts"), "--out",
                           str(tmp_path / "enc"), "--hosts", str(hosts), "--via", "srun", "--checkpoint",
                           str(tmp / "model.pt"), "--seed", "3", "--timeout", "200"],
                          env=env, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert (read_encodings(tmp_path / "enc") - encode_large(model, g, seed=3)).abs().max().item() < 1e-5
    calls = (tmp_path / "srun_calls.txt").read_text().splitlines()
    assert len(calls) == 4 and all(c.startswith("--nodes=1 --ntasks=1 --nodelist=127.0.0.1 --export=ALL "
                                                "--kill-on-bad-exit=1 ") for c in calls), calls
    assert sum("gpse_dgl.distributed.worker server" in c for c in calls) == 2
    assert sum("gpse_dgl.distributed.worker encode" in c for c in calls) == 2
    ip_config = (tmp_path / "enc" / "logs" / "ip_config.txt").read_text()
    assert ip_config == "127.0.0.1 30061\n127.0.0.1 30050\n"
