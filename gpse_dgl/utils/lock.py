"""One writer per run directory: an OS file lock that the kernel releases when its process dies.

:class:`RunLock` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<directory>/.gpse-dgl.lock`` and writes
its pid into the file. A second process asking for the same directory gets :class:`RunLockedError`, one
line naming the holder's pid. There is no stale lock to clean after a crash or a kill -9: the lock belongs
to the open file description, which the kernel closes with the process. The lock file itself stays (it is
tiny; removing it would let two processes lock two different inodes of the same name).

Example
-------
>>> import tempfile
>>> from gpse_dgl.utils.lock import RunLock, RunLockedError
>>> folder = tempfile.mkdtemp()
>>> with RunLock(folder):
...     try:
...         RunLock(folder).acquire()      # a second writer, here in the same process
...     except RunLockedError as exc:
...         print("refused")
refused
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .errors import GPSEError

__all__ = ["LOCK_NAME", "RunLock", "RunLockedError"]

LOCK_NAME = ".gpse-dgl.lock"


class RunLockedError(GPSEError):
    """Another live process writes to the same run directory (a failure to start: exit status 1)."""

    exit_code = 1


class RunLock:
    """Exclusive, non-blocking lock of a run directory (created if missing); a context manager."""

    def __init__(self, directory: str | os.PathLike, name: str = LOCK_NAME, label: str | None = None):
        self.directory = Path(directory)
        self.path = self.directory / name
        self.label = label or str(self.directory)  # what the error names
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunLockedError(f"{self.label} is in use by another gpse-dgl process (pid {holder}); "
                                 f"wait for it to finish or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()
