"""Host plans of a distributed run: the host file, one ``HOST [PORT]`` line per partition, and its checks.

A host listed without a port gets :data:`DEFAULT_PORT` or, when it repeats, the next port not yet taken
on that host (two servers on one host cannot bind one port). :func:`check_host_plan` refuses, before
any process starts, a port outside 1-65535, a host and port listed twice, and a first host whose port
leaves no room for the trainers' rendezvous (its port + :data:`MASTER_PORT_OFFSET`). Processes on other
hosts are started with :func:`ssh_command` (``ssh``, or the command line in ``GPSE_DGL_SSH``, e.g.
``ssh -F cluster_ssh_config``).

Example
-------
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "hosts.txt")
>>> _ = open(path, "w").write("node-a\\nnode-a\\nnode-b 30050  # a comment\\n")
>>> read_host_file(path, 3)
[('node-a', 30050), ('node-a', 30051), ('node-b', 30050)]
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path

from ..utils.errors import GPSEError

__all__ = ["DEFAULT_PORT", "LOOPBACK", "MASTER_PORT_OFFSET", "MAX_PORT", "check_host_plan", "read_host_file",
           "ssh_command"]

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 30050
MAX_PORT = 65535
MASTER_PORT_OFFSET = 1000  # the trainers' torch.distributed rendezvous: the first server's port + this


def read_host_file(path, parts: int) -> list:
    """``[(host, port), ...]``, one per partition, from a host file (``HOST [PORT]`` per line); a host
    without a port gets :data:`DEFAULT_PORT` or, when it repeats, the next port free on that host."""
    entries = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) > 2 or (len(words) == 2 and not words[1].isdigit()):
            raise GPSEError(f"{path}:{number}: expected 'HOST' or 'HOST PORT', got {line.strip()!r}")
        if len(words) == 2 and not 1 <= int(words[1]) <= MAX_PORT:
            raise GPSEError(f"{path}:{number}: port {words[1]} is not in 1-{MAX_PORT}")
        entries.append((words[0], int(words[1]) if len(words) == 2 else None))
    if len(entries) != parts:
        raise GPSEError(f"{path}: {len(entries)} host line(s) for {parts} partitions: list one host per partition")
    taken = {entry for entry in entries if entry[1] is not None}
    hosts = []
    for host, port in entries:
        if port is None:
            port = DEFAULT_PORT
            while (host, port) in taken:
                port += 1
            taken.add((host, port))
        hosts.append((host, port))
    check_host_plan(hosts, str(path))
    return hosts


def check_host_plan(hosts: list, where: str = "hosts") -> None:
    """One-line error, before any process starts, for a port out of range, a host and port listed twice
    (both servers would bind it) or a rendezvous port (the first server's + 1000) that cannot be used."""
    seen = {}
    for part, (host, port) in enumerate(hosts):
        if not 1 <= int(port) <= MAX_PORT:
            raise GPSEError(f"{where}: partition {part}: port {port} of {host} is not in 1-{MAX_PORT}")
        if (host, port) in seen:
            raise GPSEError(f"{where}: partitions {seen[host, port]} and {part} both use {host} port {port}; "
                            f"give one of them another port")
        seen[host, port] = part
    master, port = hosts[0]
    if master != LOOPBACK and (port + MASTER_PORT_OFFSET > MAX_PORT or (master, port + MASTER_PORT_OFFSET) in seen):
        raise GPSEError(f"{where}: the trainers meet on {master} port {port + MASTER_PORT_OFFSET} (the first "
                        f"server's port + {MASTER_PORT_OFFSET}), which is "
                        f"{'out of range' if port + MASTER_PORT_OFFSET > MAX_PORT else 'a server port'}; "
                        f"give the first host another port")


def ssh_command() -> list:
    """The ssh client and its options: ``GPSE_DGL_SSH`` split as a shell would (default ``ssh``)."""
    return shlex.split(os.environ.get("GPSE_DGL_SSH", "ssh")) or ["ssh"]
