"""Start one graph server per partition and its trainers; stop everything when one of them fails.

One host (the default): partition ``i``'s server and trainers run here, each partition a "machine" of
DGL's IP configuration on loopback (``127.0.0.1``, free ports). Several hosts: a host file lists one
host per partition (``HOST`` or ``HOST PORT`` per line, ``#`` comments; a host may repeat), and each
process is started there with ``ssh`` (key-based, ``BatchMode``) or SLURM's ``srun`` (inside an
allocation). The partition directory, the output directory and this Python environment must be at the
same paths on every host (a shared file system). A host listed without a port gets 30050, or the next
port not yet taken on that host when it repeats; the plan (ports 1-65535, no host and port twice, the
trainers' rendezvous port 1000 above the first server's) is checked before any process starts
(:func:`check_host_plan`).

Every process gets the environment :mod:`gpse_dgl.distributed.runtime` documents, its own process
group and, on Linux, a parent-death signal, and writes its output to ``LOGS/<role><i>.log``
(``LOGS/processes.json``, written before anything starts, names this launcher, the run's shared-memory
files and the processes with their pids: :mod:`gpse_dgl.distributed.leftovers` removes what a killed
launcher left when the next launch into the same logs starts, or on ``gpse-dgl launch --cleanup``;
one launcher at a time holds the logs directory's lock). The launcher watches them all: when one exits with an error or a signal, or a server stops while trainers
still run, or ``timeout`` passes, it stops the others (SIGTERM to each process group, SIGKILL after a
grace period), removes the shared memory the run left on this host and raises :class:`LaunchError`
with one line naming the process and, for an error, the last line of its log. When every trainer has
finished, the servers shut down (DGL's last client stops them) and are stopped if they linger.

Command line (a generic launcher, DGL's ``tools/launch.py`` in our terms; ``gpse-dgl launch`` runs the
GPSE encoding with it)::

    python -m gpse_dgl.distributed.launch PARTITION_DIR --logs runs/logs -- python my_trainer.py --arg 1
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..utils.errors import GPSEError, RunFailedError
from ..utils.lock import RunLock
from . import leftovers
from .hosts import DEFAULT_PORT, LOOPBACK, MASTER_PORT_OFFSET, check_host_plan, read_host_file, ssh_command
from .partition import read_partition_info

__all__ = ["LaunchError", "Process", "launch", "read_host_file", "check_host_plan", "LOOPBACK", "VIA"]

VIA = ("local", "ssh", "srun")
GRACE_SECONDS = 5.0
SERVER_GONE_SECONDS = 15.0
#: glibc's MALLOC_MMAP_THRESHOLD_ for the started processes (unless set): buffers above it are mmap'd
MMAP_THRESHOLD = 1 << 17
POLL_SECONDS = 0.1


class LaunchError(RunFailedError):
    """A process of a distributed run failed; the message is one line."""


@dataclass
class Process:
    role: str               # "server" or "trainer"
    index: int              # server id, or trainer rank
    part: int
    host: str
    command: list
    log: Path
    popen: object = None
    started: float = 0.0
    ended: float | None = None
    returncode: int | None = None
    peak_rss_bytes: int | None = None   # the process's own report (LOGS/stats), when it wrote one
    cpu_seconds: float | None = None    # user + system time, from wait4 (local processes only)

    @property
    def name(self) -> str:
        return f"{self.role} {self.index} (partition {self.part}{'' if self.host == LOOPBACK else ', ' + self.host})"

    @property
    def seconds(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


def _free_ports(count: int) -> list:
    """``count`` distinct TCP ports free on loopback now (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _die_with_parent() -> None:
    """In the child before exec: receive SIGKILL when the launcher dies (Linux ``PR_SET_PDEATHSIG``)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _remote(via: str, host: str, env: dict, command: list) -> list:
    # GLOO_ / TP_: torch.distributed's choice of network interface (GLOO_SOCKET_IFNAME) on hosts with several
    exports = {k: v for k, v in env.items() if k.startswith(("DGL_", "GPSE_DGL_", "MASTER_", "OMP_", "GLOO_", "TP_"))
               or k in ("RANK", "WORLD_SIZE", "PYTHONPATH", "PYTHONUNBUFFERED", "MALLOC_MMAP_THRESHOLD_")}
    if via == "ssh":
        line = " ".join([f"cd {shlex.quote(os.getcwd())} &&", "exec", "env"]
                        + [f"{k}={shlex.quote(v)}" for k, v in sorted(exports.items())]
                        + [shlex.quote(c) for c in command])
        # -tt: the remote command gets a terminal, so it is hung up when this ssh is stopped
        return [*ssh_command(), "-tt", "-o", "BatchMode=yes", host, line]
    # srun inherits this environment (--export=ALL) and stops its task when it is stopped
    return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={host}", "--export=ALL", "--kill-on-bad-exit=1",
            *command]


def _describe_exit(proc: Process) -> str:
    code = proc.returncode
    if code is not None and code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with status {code}"
        last = _last_line(proc.log)
        if last:
            how += f": {last}"
    return f"{proc.name}, pid {proc.popen.pid}, {how}"


def _reported_peak(proc: Process) -> int | None:
    """The peak RSS a process wrote into ``LOGS/stats/<role><index>.json`` (our workers do), or None."""
    try:
        with open(proc.log.parent / "stats" / f"{proc.role}{proc.index}.json") as fh:
            return int(json.load(fh)["peak_rss_bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - 4096))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


class _Run:
    def __init__(self, processes: list, timeout: float | None, run_id: str, hosts: list, via: str):
        self.processes = processes
        self.timeout = timeout
        self.run_id = run_id
        self.hosts, self.via = hosts, via

    def start(self, envs: list) -> None:
        for proc, env in zip(self.processes, envs):
            proc.log.parent.mkdir(parents=True, exist_ok=True)
            with open(proc.log, "wb") as log:
                proc.started = time.perf_counter()
                proc.popen = subprocess.Popen(proc.command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True,
                                              preexec_fn=_die_with_parent)
        table = [{"role": p.role, "index": p.index, "part": p.part, "host": p.host, "pid": p.popen.pid,
                  "log": str(p.log)} for p in self.processes]
        leftovers.record(self.processes[0].log.parent, self.run_id, self.hosts, self.via, table)

    def _reap(self, proc: Process) -> bool:
        if proc.returncode is not None:
            return True
        pid, status, usage = os.wait4(proc.popen.pid, os.WNOHANG)
        if pid == 0:
            return False
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.popen.returncode = proc.returncode
        proc.ended = time.perf_counter()
        # (wait4's ru_maxrss is not used: it includes this launcher's size at the fork)
        proc.peak_rss_bytes = _reported_peak(proc)
        proc.cpu_seconds = usage.ru_utime + usage.ru_stime
        return True

    def watch(self) -> None:
        deadline = None if self.timeout is None else time.perf_counter() + self.timeout
        trainers = [p for p in self.processes if p.role == "trainer"]
        servers = [p for p in self.processes if p.role == "server"]
        while True:
            for proc in self.processes:
                if self._reap(proc) and proc.returncode != 0:
                    raise LaunchError(self._stop_after(_describe_exit(proc)))
            trainers_done = all(p.returncode is not None for p in trainers)
            for proc in servers:
                # A server stops with status 0 once every trainer has said goodbye: the trainers are
                # then exiting. One that stays longer lost its server.
                if proc.returncode is not None and not trainers_done \
                        and time.perf_counter() - proc.ended > SERVER_GONE_SECONDS:
                    raise LaunchError(self._stop_after(f"{_describe_exit(proc)} while trainers were running"))
            if trainers_done:
                self._wait_servers()
                return
            if deadline is not None and time.perf_counter() > deadline:
                raise LaunchError(self._stop_after(f"the run passed its timeout of {self.timeout:g} s"))
            time.sleep(POLL_SECONDS)

    def _wait_servers(self) -> None:
        end = time.perf_counter() + 30
        while time.perf_counter() < end:
            if all(self._reap(p) for p in self.processes):
                return
            time.sleep(POLL_SECONDS)
        self.stop()

    def _stop_after(self, what: str) -> str:
        others = sum(1 for p in self.processes if p.returncode is None)
        self.stop()
        logs = self.processes[0].log.parent
        return f"{what}; stopped the other {others} process{'es' if others != 1 else ''} (logs: {logs})"

    def stop(self) -> None:
        """SIGTERM to every live process group, SIGKILL after the grace period; reap all; clean /dev/shm."""
        live = [p for p in self.processes if p.popen is not None and not self._reap(p)]
        for sig, wait in ((signal.SIGTERM, GRACE_SECONDS), (signal.SIGKILL, GRACE_SECONDS)):
            for proc in live:
                try:
                    os.killpg(proc.popen.pid, sig)
                except ProcessLookupError:
                    pass
            end = time.perf_counter() + wait
            while live and time.perf_counter() < end:
                live = [p for p in live if not self._reap(p)]
                time.sleep(POLL_SECONDS)
            if not live:
                break
        for proc in self.processes:  # members a process group leader left behind
            if proc.popen is not None:
                try:
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.clean_shared_memory()

    def clean_shared_memory(self) -> None:
        remote = sorted({host for host, _ in self.hosts if host != LOOPBACK})
        leftovers.remove_shared_memory(self.run_id, remote, self.via)


@dataclass
class LaunchResult:
    processes: list = field(default_factory=list)
    seconds: float = 0.0
    cleaned: list = field(default_factory=list)  # shared-memory files of a killed earlier launch, removed

    def table(self) -> list:
        """One dict per process: role, index, partition, seconds, CPU seconds (local runs) and peak RSS
        (bytes, as the process reported it; None if it wrote no statistics)."""
        return [{"role": p.role, "index": p.index, "part": p.part, "host": p.host, "seconds": p.seconds,
                 "cpu_seconds": p.cpu_seconds, "peak_rss_bytes": p.peak_rss_bytes} for p in self.processes]


def launch(part_dir, trainer_command: list, logs, trainers_per_part: int = 1, hosts=None, via: str = "local",
           timeout: float | None = None, threads: int | None = None, env: dict | None = None) -> LaunchResult:
    """Run ``trainer_command`` as ``trainers_per_part`` trainers per partition of ``part_dir``, with one
    graph server per partition; returns when all trainers finished (see the module docstring).

    Parameters
    ----------
    part_dir : path
        A ``gpse-dgl partition`` output directory.
    trainer_command : list of str
        The trainer's command line (it calls :func:`gpse_dgl.distributed.runtime.join_trainer`).
    logs : path
        Directory for the processes' logs, the IP configuration and ``stats/``.
    hosts : list of ``(host, port)``, optional
        One per partition (:func:`read_host_file`); default: all on loopback with free ports.
    via : str
        ``"local"`` (this host), ``"ssh"`` or ``"srun"`` (hosts needed).
    timeout : float, optional
        Seconds the whole run may take.
    threads : int, optional
        ``OMP_NUM_THREADS`` of each trainer (default: this host's cores shared among its trainers).
    env : dict, optional
        Extra environment for every process.
    """
    info = read_partition_info(part_dir)
    parts = info["num_parts"]
    if via not in VIA:
        raise GPSEError(f"via {via!r}: expected one of {', '.join(VIA)}")
    if via != "local" and hosts is None:
        raise GPSEError(f"--via {via} needs a host file (--hosts)")
    if trainers_per_part < 1:
        raise GPSEError(f"trainers per partition must be at least 1, got {trainers_per_part}")
    if hosts is None:
        hosts = [(LOOPBACK, port) for port in _free_ports(parts)]
    check_host_plan(hosts)
    logs = Path(logs).resolve()
    with RunLock(logs, label=f"logs {logs}"):
        cleaned = leftovers.clean(logs)
        return _launch(info, trainer_command, logs, trainers_per_part, hosts, via, timeout, threads, env, cleaned)


def _launch(info: dict, trainer_command: list, logs: Path, trainers_per_part: int, hosts: list, via: str,
            timeout: float | None, threads: int | None, env: dict | None, cleaned: list) -> LaunchResult:
    parts = info["num_parts"]
    ip_config = logs / "ip_config.txt"
    ip_config.write_text("".join(f"{host} {port}\n" for host, port in hosts))
    run_id = uuid.uuid4().hex[:8]
    leftovers.record(logs, run_id, hosts, via)  # before anything starts: a killed launcher's files are found
    world = parts * trainers_per_part
    master = hosts[0][0]
    master_port = _free_ports(1)[0] if master == LOOPBACK else hosts[0][1] + MASTER_PORT_OFFSET
    per_host: dict = {}
    for host, _ in hosts:
        per_host[host] = per_host.get(host, 0) + trainers_per_part
    base = dict(os.environ)
    base.update(env or {})
    # Trainers pull and free row buffers of tens of MB per chunk; with glibc's adaptive threshold those
    # come from the heap after the first free and stay resident (measured: 1.13 GB instead of 0.75 GB
    # peak per trainer at 100,000 nodes x 256).
    base.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD))
    base.update({"DGL_DIST_MODE": "distributed", "DGL_IP_CONFIG": str(ip_config), "DGL_NUM_SERVER": "1",
                 "DGL_NUM_CLIENT": str(world), "DGL_CONF_PATH": info["part_config_path"],
                 "DGL_GRAPH_FORMAT": "csc", "DGL_NUM_SAMPLER": "0", "GPSE_DGL_PART_DIR": info["directory"],
                 "GPSE_DGL_RUN_ID": run_id, "GPSE_DGL_TRAINERS": str(trainers_per_part),
                 "GPSE_DGL_STATS_DIR": str(logs / "stats"), "MASTER_ADDR": master,
                 "MASTER_PORT": str(master_port), "WORLD_SIZE": str(world), "PYTHONUNBUFFERED": "1"})
    processes, envs = [], []
    for part, (host, _) in enumerate(hosts):
        server_env = dict(base, DGL_ROLE="server", DGL_SERVER_ID=str(part), GPSE_DGL_PART=str(part))
        command = [sys.executable, "-m", "gpse_dgl.distributed.worker", "server"]
        processes.append(Process("server", part, part, host, command, logs / f"server{part}.log"))
        envs.append(server_env)
    for part, (host, _) in enumerate(hosts):
        for local in range(trainers_per_part):
            rank = part * trainers_per_part + local
            cores = os.cpu_count() or 1
            omp = str(threads or max(1, cores // per_host[host]))
            trainer_env = dict(base, DGL_ROLE="client", GPSE_DGL_PART=str(part), GPSE_DGL_LOCAL_RANK=str(local),
                               RANK=str(rank), OMP_NUM_THREADS=omp)
            processes.append(Process("trainer", rank, part, host, list(trainer_command),
                                     logs / f"trainer{rank}.log"))
            envs.append(trainer_env)
    if via != "local":
        for proc, penv in zip(processes, envs):
            proc.command = _remote(via, proc.host, penv, proc.command)
    run = _Run(processes, timeout, run_id, hosts, via)
    start = time.perf_counter()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    for sig in previous:
        signal.signal(sig, interrupted)
    try:
        run.start(envs)
        run.watch()
    except KeyboardInterrupt:
        run.stop()
        raise
    except BaseException:
        run.stop()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        run.clean_shared_memory()
    return LaunchResult(processes, time.perf_counter() - start, cleaned)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpse_dgl.distributed.launch",
        description="Start one DGL graph server per partition and the trainer command on each partition.",
        epilog="example: python -m gpse_dgl.distributed.launch parts/ --logs logs/ -- python my_trainer.py")
    parser.add_argument("part_dir")
    parser.add_argument("--logs", required=True)
    parser.add_argument("--trainers-per-part", type=int, default=1)
    parser.add_argument("--hosts", default=None, help="host file: one 'HOST [PORT]' line per partition")
    parser.add_argument("--via", choices=VIA, default=None)
    parser.add_argument("--timeout", type=float, default=None)
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        parser.error("give the trainer command after --")
    split = argv.index("--")
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    if not command:
        parser.error("give the trainer command after --")
    try:
        info = read_partition_info(args.part_dir)
        hosts = None if args.hosts is None else read_host_file(args.hosts, info["num_parts"])
        via = args.via or ("local" if hosts is None else "ssh")
        result = launch(args.part_dir, command, args.logs, args.trainers_per_part, hosts, via, args.timeout)
    except GPSEError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted; stopped every process", file=sys.stderr)
        return 130
    for row in result.table():
        print(f"{row['role']} {row['index']} (partition {row['part']}): {row['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
