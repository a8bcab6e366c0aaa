"""What a distributed run leaves behind when its launcher is killed, and its removal.

The graph servers and trainers of a run keep DGL's key-value store in shared memory, files
``/dev/shm/gpse-<run id>-p<partition>-*`` on every host (:func:`~gpse_dgl.distributed.runtime.shared_memory_prefix`).
The launcher removes them when the run ends or fails; a launcher killed with SIGKILL cannot (its
processes die with it, by their parent-death signal or the hang-up of their ssh connection, but the files
stay: about 2 KB per node of the graph). So the launcher writes ``LOGS/processes.json`` (:func:`record`)
before it starts anything: its own pid, the run id, the hosts and how they were reached. The next launch
into the same directory, or ``gpse-dgl launch --cleanup DIR``, finds the record of a launcher that is
gone (:func:`clean`: it holds the directory's lock, so no launcher is alive there) and removes the run's
files on this host and, over ssh or srun, on the others.

Example
-------
>>> import json, os, tempfile
>>> logs = tempfile.mkdtemp()
>>> record(logs, "0badc0de", [("127.0.0.1", 30050)], "local")
>>> leftover = "/dev/shm/" + shared_memory_prefix("0badc0de", 0) + "x"
>>> open(leftover, "wb").close()
>>> [os.path.basename(p) for p in clean(logs)]
['gpse-0badc0de-p0-x']
>>> os.path.exists(leftover), clean(logs)
(False, [])
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

from ..utils.lock import RunLock
from .hosts import LOOPBACK, ssh_command
from .runtime import shared_memory_prefix

__all__ = ["RECORD", "record", "clean", "clean_directory", "shared_memory_glob", "remove_shared_memory"]

RECORD = "processes.json"
REMOTE_SECONDS = 30  # for the removal on another host (ssh / srun)


def shared_memory_glob(run_id: str) -> str:
    """``/dev/shm`` file names of every partition of run ``run_id`` (a glob)."""
    return f"{shared_memory_prefix(run_id, '*')}*"


def record(logs, run_id: str, hosts: list, via: str, processes: list | None = None) -> None:
    """Write ``LOGS/processes.json``: this launcher, the run, its hosts and (once started) its processes."""
    data = {"launcher": os.getpid(), "run_id": run_id, "via": via,
            "hosts": sorted({host for host, _ in hosts}), "shared_memory": f"/dev/shm/{shared_memory_glob(run_id)}",
            "processes": processes or []}
    path = Path(logs) / RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def remove_shared_memory(run_id: str, hosts=(), via: str = "local") -> list:
    """Remove run ``run_id``'s files from ``/dev/shm`` here and, for ``via`` ssh / srun, on ``hosts``;
    return the paths removed here (remote removals are best effort and not listed)."""
    removed = []
    for path in glob.glob(f"/dev/shm/{shared_memory_glob(run_id)}"):
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    if via in ("ssh", "srun"):
        line = f"rm -f /dev/shm/{shared_memory_glob(run_id)}"
        for host in hosts:
            command = ([*ssh_command(), "-o", "BatchMode=yes", host, line] if via == "ssh" else
                       ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={host}", "sh", "-c", line])
            try:
                subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=REMOTE_SECONDS, check=False)
            except (OSError, subprocess.TimeoutExpired):
                pass
    return removed


def clean(logs) -> list:
    """Remove what the run recorded in ``LOGS/processes.json`` left in shared memory; return the files
    removed on this host. The caller holds the run directory's lock (the recorded launcher is gone)."""
    path = Path(logs) / RECORD
    try:
        data = json.loads(path.read_text())
        run_id = str(data["run_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
    remote = [h for h in data.get("hosts", []) if h != LOOPBACK]
    return remove_shared_memory(run_id, remote, data.get("via", "local"))


def clean_directory(directory) -> list:
    """:func:`clean` of a ``gpse-dgl launch --out`` directory (its ``logs/``) or of a logs directory,
    under the directory's lock: a one-line :class:`~gpse_dgl.utils.lock.RunLockedError` while a launch
    still runs there."""
    directory = Path(directory)
    logs = directory / "logs" if (directory / "logs" / RECORD).is_file() else directory
    if not (logs / RECORD).is_file():
        return []
    with RunLock(logs, label=f"{logs} (a launch)"):
        return clean(logs)
