"""Several hosts for real on one machine: network namespaces joined by a bridge, one sshd each
(``tests/_netns.py``), and the launcher, torchrun and a killed remote worker across them.

These are the steps of docs/DISTRIBUTED.md's multi-host recipe. Every command addresses only the
namespaces the test made (10.213.7.x, on a bridge that is not joined to this machine's network) and the
namespaces are deleted in every case. Where the platform forbids namespaces (not root, no iproute2, no
OpenSSH server) the tests skip with one line; .ci/run installs openssh-server.
"""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import gpse_dgl  # noqa: F401  (before dgl: graphbolt guard)
import dgl

from _netns import Hosts, unavailable

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable  # an absolute path: ssh runs commands with the remote's own PATH
PORT = 30050

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with Hosts(2, tmp_path_factory.mktemp("ssh")) as made:
        yield made


def _env(hosts: Hosts) -> dict:
    """What a user exports on the first host: this checkout, the ssh client and the interface that
    torch.distributed (gloo) should use; the launcher passes these on to every remote process."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
            "PYTHONPATH": str(ROOT), "GPSE_DGL_SSH": hosts.ssh, "GLOO_SOCKET_IFNAME": "eth0",
            "OMP_NUM_THREADS": "1"}


def _on_host(hosts: Hosts, i: int, args: list, timeout: float = 300) -> subprocess.CompletedProcess:
    return hosts.run(i, ["env", "-i", *[f"{k}={v}" for k, v in _env(hosts).items()], PYTHON, *args],
                     cwd=ROOT, timeout=timeout)


@pytest.fixture(scope="module")
def cut(tmp_path_factory):
    """A 2,000-node graph in 2 partitions and a small random GPSE (as tests/test_distributed_graph.py)."""
    from gpse_dgl.data.synthetic import random_graph
    from gpse_dgl.distributed.partition import partition
    from gpse_dgl.nn.gpse import GPSE

    tmp = tmp_path_factory.mktemp("cut")
    g = random_graph(2000, 13800, seed=1, directed=True)
    dgl.save_graphs(str(tmp / "g.bin"), [g])
    partition(g, tmp / "parts", 2, source=str(tmp / "g.bin"))
    torch.manual_seed(0)
    model = GPSE(dim_in=20, dim_hidden=24, num_layers=4).eval()
    torch.save({"model_state": model.state_dict(),
                "model_config": {"dim_in": 20, "dim_hidden": 24, "num_layers": 4}}, tmp / "model.pt")
    return tmp, g, model


def _host_file(hosts: Hosts, path: Path) -> Path:
    path.write_text("".join(f"{address} {PORT}\n" for address in hosts.addresses))
    return path


def test_launch_over_ssh_across_hosts_equals_one_process(hosts, cut, tmp_path):
    from gpse_dgl.distributed.shards import read_encodings
    from gpse_dgl.encode.inference import encode_large

    tmp, g, model = cut
    done = _on_host(hosts, 0, ["-m", "gpse_dgl", "launch", str(tmp / "parts"), "--out", str(tmp_path / "enc"),
                               "--hosts", str(_host_file(hosts, tmp_path / "hosts.txt")), "--via", "ssh",
                               "--checkpoint", str(tmp / "model.pt"), "--seed", "3", "--timeout", "240"])
    assert done.returncode == 0, done.stdout + done.stderr
    got = read_encodings(tmp_path / "enc")
    assert (got - encode_large(model, g, seed=3)).abs().max().item() < 1e-5
    table = json.loads((tmp_path / "enc" / "logs" / "processes.json").read_text())
    assert {row["host"] for row in table["processes"]} == set(hosts.addresses)
    assert not glob.glob(table["shared_memory"])


def test_two_node_torchrun_pretraining_epoch(hosts, tmp_path):
    """torchrun on each host (--nnodes 2, rendezvous on the first), started over ssh from the first host."""
    import yaml

    recipe = {"data": {"max_graphs": 40, "cache_dir": str(tmp_path / "cache"), "split": [0.8, 0.1, 0.1]},
              "model": {"dim_hidden": 16, "num_layers": 2, "head_hidden": 8, "graph_head_hidden": 16,
                        "dropout": 0.0},
              "general_pipeline": {"num_epochs": 1, "batch_size": 8, "save_path": str(tmp_path / "run"),
                                   "num_threads": 1, "sync_batchnorm": True},
              "device": "cpu"}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    env = " ".join(f"{k}={v}" for k, v in _env(hosts).items() if k != "GPSE_DGL_SSH")
    nodes = []
    for rank, address in enumerate(hosts.addresses):
        line = (f"cd {ROOT} && exec env {env} {PYTHON} -m torch.distributed.run --nnodes 2 --nproc_per_node 1 "
                f"--node_rank {rank} --master_addr {hosts.addresses[0]} --master_port 29517 -m gpse_dgl pretrain "
                f"{tmp_path / 'recipe.yaml'} --no-progress")
        nodes.append(hosts.popen(0, [*hosts.ssh.split(), "-tt", address, line], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True))
    try:
        outputs = [node.communicate(timeout=400)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-1500:] for o in outputs)
    ran = json.loads((tmp_path / "run" / "metrics.json").read_text())["environment"]
    assert ran["world_size"] == 2 and ran["backend"] == "gloo" and ran["local_processes"] == 1


# gpse_dgl before dgl: with DGL 2.1 (Python 3.12) the package's import guard must run first (docs/INSTALL.md)
_HOLDER = ("import os, time, torch; from gpse_dgl.distributed.runtime import join_trainer; import dgl; t = join_trainer(); "
           "x = dgl.distributed.DistTensor((t.info['num_nodes'], 64), torch.float32, 'held', "
           "part_policy=t.graph.get_node_partition_policy('_N'), persistent=True); "
           "print('joined', os.getpid(), flush=True); time.sleep(300)")


def _run_processes(run_id: str) -> list[int]:
    """Processes of run ``run_id`` alive on any "host" (the namespaces share this machine's process table)."""
    found = []
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(environ, "rb") as fh:
                if f"GPSE_DGL_RUN_ID={run_id}".encode() in fh.read().split(b"\0"):
                    pid = int(environ.split("/")[2])
                    with open(f"/proc/{pid}/stat") as stat:
                        if stat.read().split(")")[-1].split()[0] != "Z":
                            found.append(pid)
        except OSError:
            pass
    return found


def test_a_killed_remote_worker_ends_the_run_with_one_line_and_leaves_nothing(hosts, cut, tmp_path):
    tmp, _, _ = cut
    logs = tmp_path / "logs"
    env = _env(hosts)
    launcher = hosts.popen(0, ["env", "-i", *[f"{k}={v}" for k, v in env.items()], PYTHON, "-m",
                               "gpse_dgl.distributed.launch", str(tmp / "parts"), "--logs", str(logs), "--hosts",
                               str(_host_file(hosts, tmp_path / "hosts.txt")), "--via", "ssh", "--timeout", "240",
                               "--", PYTHON, "-c", _HOLDER],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        joined = {}
        while len(joined) < 2:
            for rank in range(2):
                log = logs / f"trainer{rank}.log"
                words = log.read_text(errors="replace").split() if log.exists() else []
                if "joined" in words:
                    joined[rank] = int(words[words.index("joined") + 1])
            assert launcher.poll() is None, launcher.communicate()
            assert time.time() < deadline, "the trainers did not join"
            time.sleep(0.5)
        run_id = json.loads((logs / "processes.json").read_text())["run_id"]
        assert len(_run_processes(run_id)) == 8  # two servers and two trainers on two hosts, and their ssh clients
        os.kill(joined[1], signal.SIGKILL)  # the trainer on the second host (its python, not its ssh)
        _, err = launcher.communicate(timeout=90)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert launcher.returncode == 1 and len(lines) == 1, err
    assert "trainer 1 (partition 1, 10.213.7.2)" in lines[0] and "stopped the other 3 processes" in lines[0], lines
    deadline = time.time() + 30
    while _run_processes(run_id) and time.time() < deadline:
        time.sleep(0.5)
    assert not _run_processes(run_id)
    assert not glob.glob(f"/dev/shm/gpse-{run_id}-*")
    assert set(hosts.pids()) == {proc.pid for proc in hosts.sshd}  # nothing but the sshds left on the hosts
