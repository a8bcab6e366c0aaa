"""Several "hosts" on one machine: network namespaces on a private bridge, each with its own sshd.

:class:`Hosts` builds, for one test run,

* a namespace ``gpse<pid>sw`` holding a bridge, and namespaces ``gpse<pid>h0`` .. ``h<k-1>``, each with one
  interface ``eth0`` (a veth whose other end is on the bridge) at ``10.213.7.<i+1>/24`` and ``lo`` up; the
  namespaces are joined to each other only, never to this machine's own network;
* an OpenSSH server in each host namespace, listening on that address alone, with a host key, a client
  key and configurations generated in a temporary folder (``ssh_config`` is what ``GPSE_DGL_SSH`` points
  the launcher at; nothing in ``~/.ssh`` or ``/etc/ssh`` is read or written).

Commands run "on" host ``i`` through :meth:`Hosts.run` (``ip netns exec``) or over ssh from host 0, as a user
on the first machine of a cluster would. :meth:`Hosts.close` stops every process still inside the
namespaces and deletes them; the context manager calls it whatever happens. :func:`unavailable` says in
one line why the platform cannot do this (not root, no ``ip``, no ``sshd``, namespaces refused).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

SUBNET = "10.213.7"
SSHD = "/usr/sbin/sshd"


def unavailable() -> str | None:
    """Why namespaces with sshd cannot be built here (one line), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (iproute2 / openssh-client)"
    if not os.access(SSHD, os.X_OK):
        return f"no {SSHD} (install openssh-server)"
    probe = f"gpse{os.getpid()}probe"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"network namespaces not permitted here ({(done.stderr.strip() or 'ip netns add failed')[:120]})"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Hosts:
    """``count`` namespaces with sshd (see the module docstring); a context manager."""

    def __init__(self, count: int, folder: Path):
        self.count, self.folder = count, Path(folder)
        tag = f"gpse{os.getpid()}"
        self.switch = f"{tag}sw"
        self.names = [f"{tag}h{i}" for i in range(count)]
        self.addresses = [f"{SUBNET}.{i + 1}" for i in range(count)]
        self.sshd: list[subprocess.Popen] = []
        self.created: list[str] = []

    # -- building
    def __enter__(self) -> "Hosts":
        try:
            self._network()
            self._keys()
            for i in range(self.count):
                self._start_sshd(i)
            for i in range(self.count):
                self._wait_for_ssh(i)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _network(self) -> None:
        for name in (self.switch, *self.names):
            _ip("netns", "add", name)
            self.created.append(name)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, (name, address) in enumerate(zip(self.names, self.addresses)):
            # created inside the namespaces: this machine's own interfaces are never touched
            _ip("-n", self.switch, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", name)
            _ip("-n", self.switch, "link", "set", f"v{i}", "master", "br0")
            _ip("-n", self.switch, "link", "set", f"v{i}", "up")
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")

    def _keys(self) -> None:
        f = self.folder
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"gpse-test-{key}", "-f",
                            str(f / key)], check=True, capture_output=True)
        shutil.copyfile(f / "client_key.pub", f / "authorized_keys")
        (f / "ssh_config").write_text(
            f"Host {SUBNET}.*\n  User root\n  IdentityFile {f / 'client_key'}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n"
            "  ConnectTimeout 10\n")
        for i, address in enumerate(self.addresses):
            (f / f"sshd_config{i}").write_text(
                f"ListenAddress {address}\nPort 22\nHostKey {f / 'host_key'}\nAuthorizedKeysFile {f / 'authorized_keys'}\n"
                f"PidFile {f / f'sshd{i}.pid'}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPrintMotd no\nAcceptEnv none\n")
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory (the package makes it)

    @property
    def ssh(self) -> str:
        """The ssh client line for ``GPSE_DGL_SSH``."""
        return f"ssh -F {self.folder / 'ssh_config'}"

    def _start_sshd(self, i: int) -> None:
        log = open(self.folder / f"sshd{i}.log", "wb")
        self.sshd.append(subprocess.Popen(["ip", "netns", "exec", self.names[i], SSHD, "-D", "-e", "-f",
                                           str(self.folder / f"sshd_config{i}")], stdout=log, stderr=log,
                                          stdin=subprocess.DEVNULL))

    def _wait_for_ssh(self, i: int, seconds: float = 30) -> None:
        deadline = time.time() + seconds
        while True:
            done = self.run(0, [*self.ssh.split(), self.addresses[i], "true"], timeout=20)
            if done.returncode == 0:
                return
            if time.time() > deadline:
                log = (self.folder / f"sshd{i}.log").read_text(errors="replace")[-500:]
                raise RuntimeError(f"sshd on {self.addresses[i]} did not answer: {done.stderr[-300:]} {log}")
            time.sleep(0.3)

    # -- using
    def run(self, i: int, command: list, **kwargs) -> subprocess.CompletedProcess:
        """``command`` inside host ``i``'s namespace (captured text output)."""
        return subprocess.run(["ip", "netns", "exec", self.names[i], *command], capture_output=True, text=True,
                              **kwargs)

    def popen(self, i: int, command: list, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.names[i], *command], **kwargs)

    def pids(self) -> list[int]:
        """Processes living in the host namespaces now (sshd included)."""
        pids = []
        for name in self.names:
            done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
            pids += [int(p) for p in done.stdout.split()]
        return pids

    # -- tearing down
    def close(self) -> None:
        for proc in self.sshd:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.sshd:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid in self.pids() if self.created else []:  # anything a test left inside: ours alone
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.created = []
