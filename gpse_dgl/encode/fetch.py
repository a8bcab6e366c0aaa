"""Download a registered GPSE model into the models directory, verified before it is kept.

``fetch_model(name)`` streams the model's URL to ``<models_dir>/<file_name>.part-<pid>`` (a progress bar
when stderr is a terminal), then checks, in this order,

1. the byte count against the server's ``Content-Length`` (a connection that closes early is a
   truncated download) and against :attr:`ModelSpec.size_bytes` when known, and the SHA-256 when known;
2. that the file loads as a GPSE checkpoint with ``torch.load(weights_only=True)``
   (:func:`gpse_dgl.encode.load_gpse`) in the registered format and architecture (``num_layers`` x
   ``dim_hidden``): a different model or an HTML error page is the wrong file;

and only then renames it onto ``<models_dir>/<file_name>``. Any failure removes the partial file and
raises :class:`ModelDownloadError` with one line; no network gives a line naming the URL and the
exact path where a copy fetched elsewhere can be put by hand. A file already in place is verified and
kept (not downloaded again).

Example
-------
>>> from gpse_dgl.encode.fetch import fetch_model
>>> path = fetch_model("molpcba")         # needs the network  # doctest: +SKIP
"""
from __future__ import annotations

import http.client
import logging
import os
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tqdm.auto import tqdm

from ..data.cache import file_sha256
from ..utils.errors import CheckpointError, GPSEError
from .loading import load_gpse
from .models import ModelSpec, get_model, model_path

__all__ = ["ModelDownloadError", "fetch_model", "verify_model_file"]

log = logging.getLogger("gpse_dgl.encode")

_BLOCK = 1 << 20
_TIMEOUT_S = 60.0


class ModelDownloadError(GPSEError):
    """A download failed (no network, truncated, wrong file); nothing was left in the models directory."""


def verify_model_file(path: Path, spec: ModelSpec) -> None:
    """Raise :class:`ModelDownloadError` unless ``path`` is a copy of ``spec`` (size, checksum, content)."""
    size = path.stat().st_size
    if spec.size_bytes is not None and size != spec.size_bytes:
        raise ModelDownloadError(f"{spec.name}: got {size:,} bytes, expected {spec.size_bytes:,} (truncated or "
                                 "wrong file)")
    if spec.sha256 is not None and file_sha256(path) != spec.sha256:
        raise ModelDownloadError(f"{spec.name}: SHA-256 differs from the published one (corrupt or wrong file)")
    try:
        model = load_gpse(path)
    except CheckpointError as exc:
        raise ModelDownloadError(f"{spec.name}: {path.name} is not a usable GPSE checkpoint ({exc})") from None
    fmt = model.checkpoint_info.format
    if fmt != spec.format or (model.num_layers, model.dim_hidden) != (spec.num_layers, spec.dim_hidden):
        raise ModelDownloadError(f"{spec.name}: {path.name} is a {model.num_layers} x {model.dim_hidden} GPSE "
                                 f"in {fmt} format, expected {spec.architecture} in {spec.format} format "
                                 "(wrong file)")


def _progress(total: int | None, name: str, enabled: bool | None):
    enabled = sys.stderr.isatty() if enabled is None else enabled
    if not enabled:
        return None

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=name, leave=False)


def _download(url: str, part: Path, name: str, progress: bool | None, timeout: float) -> None:
    """Stream ``url`` into ``part``; raise ``ModelDownloadError`` when fewer bytes arrive than announced."""
    request = urllib.request.Request(url, headers={"User-Agent": "gpse-dgl"})
    with urllib.request.urlopen(request, timeout=timeout) as response, open(part, "wb") as out:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        bar = _progress(total, name, progress)
        received = 0
        try:
            while block := response.read(_BLOCK):
                out.write(block)
                received += len(block)
                if bar is not None:
                    bar.update(len(block))
        except http.client.IncompleteRead as exc:
            received += len(exc.partial)
            total = total or received + 1
        finally:
            if bar is not None:
                bar.close()
        out.flush()
        os.fsync(out.fileno())
    if total is not None and received != total:
        raise ModelDownloadError(f"{name}: download truncated ({received:,} of {total:,} bytes)")


def fetch_model(name: str, url: str | None = None, directory: str | os.PathLike | None = None,
                progress: bool | None = None, timeout: float = _TIMEOUT_S) -> Path:
    """Download, verify and install a registered model; return its path.

    Parameters
    ----------
    name : str
        Registered model name (``gpse-dgl models`` lists them).
    url : str, optional
        Download from here instead of the registered URL (a mirror).
    directory : path-like, optional
        Install here instead of :func:`~gpse_dgl.encode.models.models_dir` (``--checkpoint`` names
        only find files in the default directory).
    progress : bool, optional
        Progress bar; default: when stderr is a terminal.
    timeout : float
        Seconds to wait for the server to answer or send more data.
    """
    spec = get_model(name)
    if spec.shipped:
        log.info("%s is shipped with gpse-dgl: nothing to fetch", spec.name)
        return model_path(spec)
    target = (Path(directory).expanduser() / spec.file_name) if directory is not None else model_path(spec)
    if target.is_file():
        verify_model_file(target, spec)
        return target
    source = url or spec.url
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f"{target.name}.part-{os.getpid()}")
    try:
        try:
            _download(source, part, spec.name, progress, timeout)
        except (urllib.error.URLError, socket.timeout, ConnectionError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ModelDownloadError(f"cannot download {spec.name} from {source} ({reason}); download "
                                     f"{spec.file_name} elsewhere and put it at {target}") from None
        verify_model_file(part, spec)
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)
    return target
