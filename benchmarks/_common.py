"""Small helpers shared by the benchmark scripts: thread setup, clocks, memory, machine description, tables.

Nothing here imports torch, dgl or torch_geometric at module level, so a script can call
:func:`set_threads_env` before those libraries load their thread pools.
"""
from __future__ import annotations

import datetime
import os
import platform
import resource
import shlex
import sys
import time
from importlib import metadata

CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
CLOCK_HELP = ("cpu: this process's CPU time (steady on a shared machine; it adds up all threads, so use it "
              "with --threads 1); wall: elapsed time (for a quiet machine)")


def set_threads_env(threads: int | None) -> None:
    """Export ``threads`` to OpenMP / MKL / OpenBLAS; only effective before numpy/torch/dgl are imported
    (and always for child processes)."""
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[var] = str(threads)


def add_molecule_timing_options(parser, default_limit_help: str = "only the first N molecules") -> None:
    """``--limit``, ``--batch-size``, ``--threads`` and ``--clock`` of the scripts that time encoding RDKit's
    embedded molecules."""
    parser.add_argument("--limit", type=int, default=None, help=default_limit_help)
    parser.add_argument("--batch-size", type=int, default=256, help="graphs per batch (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None, help="torch / BLAS threads (default: torch's)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help=CLOCK_HELP)


def timing_molecules(threads: int | None, limit: int | None) -> list:
    """The embedded molecules (the first ``limit``), with torch set to ``threads`` threads; call after
    :func:`set_threads_env`."""
    import torch

    from gpse_dgl.data.molecules import load_embedded_molecules

    if threads:
        torch.set_num_threads(threads)
    graphs = load_embedded_molecules()
    return graphs[:limit] if limit else graphs


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2 ** 20 if sys.platform == "darwin" else peak / 2 ** 10


def current_rss_mb() -> float:
    """Current resident set size of this process, in MiB (NaN where /proc is missing)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except OSError:
        return float("nan")


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_line() -> str:
    """CPU model, usable cores, and the versions that matter, on one line."""
    from gpse_dgl.train.runtime import cpu_model  # the one reader of /proc/cpuinfo

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    versions = ", ".join(f"{p} {package_version(p)}" for p in ("torch", "dgl", "torch_geometric"))
    return f"{cpu_model()}, {cores} cores; python {platform.python_version()}, {versions}"


def command_line(argv=None) -> str:
    """How this script was run, shell-quoted, with the path relative to the working directory."""
    argv = list(sys.argv if argv is None else argv)
    if argv:
        argv[0] = os.path.relpath(argv[0]) if os.path.isabs(argv[0]) else argv[0]
    return "python " + " ".join(shlex.quote(a) for a in argv)


def today() -> str:
    return datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")


def load_average() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def markdown_table(headers, rows, align=None) -> str:
    """A GitHub markdown table; ``align`` is one of ``l``/``r`` per column (default: first left, rest right)."""
    align = align or "l" + "r" * (len(headers) - 1)
    lines = ["| " + " | ".join(map(str, headers)) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)
