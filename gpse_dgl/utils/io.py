"""Atomic output files: a reader sees the previous file or the new one, never a mix or a torn write.

Contract of :func:`atomic_path` (every file the CLI writes goes through it):

1. the content is written to a temporary file ``.<name>.<pid>.<random>.gpse-tmp`` in the target's own
   directory (same file system, so the final step is a rename, not a copy);
2. the temporary file is flushed to disk (``fsync``) and given the mode a plain ``open()`` would give
   (``0o666 & ~umask``: 0644 by default; ``tempfile.mkstemp`` alone would leave 0600);
3. ``os.replace`` moves it onto the target in one step, and the directory is synced (best effort).

On any error, ``KeyboardInterrupt`` (SIGINT) or SIGTERM the temporary file is removed and the target is
left as it was. A SIGKILL cannot be caught: the temporary file it leaves has a dead writer's pid in its
name, never matches the target's name, and is removed by the next write to the same target
(:func:`remove_stale_temps`). Two processes writing one target concurrently each write their own
temporary file, so the target ends up as one of the two complete files.

Example
-------
>>> import os, tempfile
>>> from gpse_dgl.utils.io import atomic_path, atomic_write_text
>>> folder = tempfile.mkdtemp()
>>> target = os.path.join(folder, "out.txt")
>>> atomic_write_text(target, "hello\\n")
>>> with atomic_path(target) as tmp:          # any writer that takes a path
...     with open(tmp, "w") as handle:
...         _ = handle.write("world\\n")
>>> open(target).read(), os.listdir(folder)
('world\\n', ['out.txt'])
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import threading
from pathlib import Path
from typing import Iterator

from .. import _env  # noqa: F401
import dgl

from .errors import GPSEError
from .lock import RunLock

__all__ = ["TEMP_SUFFIX", "atomic_path", "atomic_directory", "check_replaceable", "atomic_write_text",
           "atomic_write_bytes", "save_graphs_atomic", "remove_stale_temps", "file_mode"]

TEMP_SUFFIX = ".gpse-tmp"

# temporary files being written by this process (removed by the SIGTERM handler)
_LIVE: set[str] = set()
_LIVE_LOCK = threading.Lock()
_HANDLER_INSTALLED = [False]


def _umask() -> int:
    try:  # Linux reports it without changing it (other threads may be creating files meanwhile)
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    # elsewhere it can only be read by setting it; the process is briefly at 0o077 (the safe side)
    current = os.umask(0o077)
    os.umask(current)
    return current


def file_mode() -> int:
    """Permission bits ``open()`` gives a new file under the current umask (0o644 for umask 022)."""
    return 0o666 & ~_umask()


def _temp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove temporary files for ``path`` whose writer process no longer exists; return them.

    Temporary files of live writers (another process writing the same target right now) are kept.
    """
    path = Path(path)
    removed = []
    try:
        candidates = list(path.parent.glob(f".{path.name}.*{TEMP_SUFFIX}"))
    except OSError:
        return removed
    for candidate in candidates:
        pid_text = candidate.name[len(path.name) + 2:].split(".", 1)[0]
        if not pid_text.isdigit() or _pid_alive(int(pid_text)):
            continue
        with contextlib.suppress(OSError):
            if candidate.is_dir() and not candidate.is_symlink():  # an atomic_directory's
                shutil.rmtree(candidate)
            else:
                candidate.unlink()
            removed.append(candidate)
    return removed


def _on_sigterm(signum, frame):
    with _LIVE_LOCK:
        live = list(_LIVE)
    for name in live:
        with contextlib.suppress(OSError):
            os.unlink(name)
    # die of the same signal, as the default action would have
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_sigterm_handler() -> None:
    """Clean temporary files on SIGTERM, where the default action is to die without cleanup."""
    if _HANDLER_INSTALLED[0] or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    _HANDLER_INSTALLED[0] = True


def _sync_directory(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; when the block succeeds it becomes ``path`` atomically.

    The writer inside the block must create the file at the yielded path (and may close it). The parent
    directory is created when missing. Nothing is moved when the block raises.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    _install_sigterm_handler()
    tmp = _temp_for(path)
    with _LIVE_LOCK:
        _LIVE.add(str(tmp))
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
        _sync_directory(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(str(tmp))


def check_replaceable(path: str | os.PathLike, overwrite: bool, option: str = "--out") -> None:
    """One-line error unless ``path`` is missing, an empty directory, or a directory and ``overwrite``
    (a check a command makes before its work; :func:`atomic_directory` makes it again)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise GPSEError(f"{option} {path}: is a file, expected a directory")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise GPSEError(f"{option} {path} already exists and is not empty; pass --overwrite to replace it")


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, overwrite: bool = False, option: str = "--out") -> Iterator[Path]:
    """Yield a new temporary directory next to ``path``; when the block succeeds it becomes ``path``.

    A ``path`` that exists and is not empty is refused (one line naming ``option``) unless ``overwrite``;
    then the old directory stays until the new one is complete, is moved aside in one rename and removed
    after the new one is renamed in, so no file of the old one (a stale ``part3/``) survives in the new.
    One writer at a time: a second gets :class:`~gpse_dgl.utils.lock.RunLockedError` at once. On an
    error the temporary directory is removed and ``path`` is left as it was; one left by a killed
    process is removed by the next write (:func:`remove_stale_temps`).
    """
    path = Path(path)
    check_replaceable(path, overwrite, option)
    path.parent.mkdir(parents=True, exist_ok=True)
    with RunLock(path.parent, name=f".{path.name}.lock", label=f"{option} {path}"):
        check_replaceable(path, overwrite, option)  # again under the lock: another writer may have finished
        remove_stale_temps(path)
        tmp = _temp_for(path)
        tmp.mkdir()
        try:
            yield tmp
            old = _temp_for(path) if path.exists() else None
            if old is not None:
                os.replace(path, old)
            os.replace(tmp, path)
            _sync_directory(path.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`atomic_path`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def save_graphs_atomic(path: str | os.PathLike, graphs: list, labels: dict | None = None) -> None:
    """``dgl.save_graphs(path, graphs, labels)`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp:
        dgl.save_graphs(str(tmp), list(graphs), labels or None)
