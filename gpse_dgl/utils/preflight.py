"""Checks of output locations made before any work starts, so a bad path costs seconds, not a run.

:func:`check_output_file` and :func:`check_output_dir` raise :class:`OutputPathError` (one line, CLI exit
status 2) when a location cannot take the output: a directory where a file is expected, a file where a
directory is expected (the path itself or one of its parents), a directory nobody can create files in,
or (best effort) a file system with less than ``min_free_bytes`` free. Writability is tested by creating
and removing a probe file, which is the only test that also holds for root and read-only mounts.

Example
-------
>>> import os, tempfile
>>> from gpse_dgl.utils.preflight import OutputPathError, check_output_file
>>> folder = tempfile.mkdtemp()
>>> check_output_file(os.path.join(folder, "new", "out.bin"))        # parents may be missing
>>> try:
...     check_output_file(folder, "--out")
... except OutputPathError as exc:
...     print(str(exc).split(": ", 1)[1])
is a directory, expected a file path
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from .errors import GPSEError

__all__ = ["OutputPathError", "check_output_file", "check_output_dir", "MIN_FREE_BYTES"]

MIN_FREE_BYTES = 16 << 20  # below 16 MiB free nothing useful fits (a checkpoint alone is larger)


class OutputPathError(GPSEError, OSError):
    """An output file or directory cannot be written; the message names it."""


def _label(path: Path, option: str | None) -> str:
    return f"{option} {path}" if option else str(path)


def _existing_ancestor(path: Path, label: str) -> Path:
    """The nearest existing ancestor of ``path``, refusing a file on the way."""
    parent = path.parent
    while not parent.exists():
        if parent.is_symlink():  # a dangling link cannot be created through
            raise OutputPathError(f"{label}: {parent} is a broken symbolic link")
        parent = parent.parent
    if not parent.is_dir():
        raise OutputPathError(f"{label}: {parent} is a file, not a directory")
    return parent


def _check_can_create_in(folder: Path, label: str) -> None:
    try:
        handle, probe = tempfile.mkstemp(prefix=".gpse-write-probe-", dir=folder)
    except OSError as exc:
        raise OutputPathError(f"{label}: cannot create files in {folder} ({exc.strerror or exc})") from None
    os.close(handle)
    os.unlink(probe)


def _check_free_space(folder: Path, label: str, min_free_bytes: int) -> None:
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # best effort: some file systems do not report usage
    if free < min_free_bytes:
        raise OutputPathError(f"{label}: only {free / 2**20:.1f} MiB free on the file system of {folder}")


def check_output_file(path: str | os.PathLike, option: str | None = None,
                      min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Refuse a file path the caller could not write (see the module docstring); ``option`` names it."""
    path = Path(path)
    label = _label(path, option)
    if path.is_dir():
        raise OutputPathError(f"{label}: is a directory, expected a file path")
    folder = _existing_ancestor(path, label)
    _check_can_create_in(folder, label)
    _check_free_space(folder, label, min_free_bytes)


def check_output_dir(path: str | os.PathLike, option: str | None = None,
                     min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Refuse a directory the caller could not create or write files in; ``option`` names it."""
    path = Path(path)
    label = _label(path, option)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{label}: is a file, expected a directory")
    folder = path if path.is_dir() else _existing_ancestor(path, label)
    _check_can_create_in(folder, label)
    _check_free_space(folder, label, min_free_bytes)
