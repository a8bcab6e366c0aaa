"""Progress reports that suit where they go: live bars on a terminal, a few plain lines in a log file.

:func:`progress` returns what a loop reports through (iterate over it, or call ``update(n)``):

* a tqdm bar when stderr is a terminal (or ``GPSE_DGL_PROGRESS=1``);
* otherwise (or ``GPSE_DGL_PROGRESS=0``) a :class:`LineProgress` that prints one line per 10 % of the work
  (``PSEs: 30% (921/3,071 graphs, 1.2 s)``), and nothing for transient bars (``leave=False``, such as the
  batches of one epoch, whose summary is the epoch's own line): a redirected run stays a readable log
  instead of thousands of carriage-return redraws;
* nothing at all with ``enabled=False`` or after ``configure(quiet=True)`` (the CLI's ``--quiet``).

``delay`` (seconds) keeps both silent until the work has run that long, so a step that may be quick or
slow (one large graph) reports only when it is slow.

``configure(verbose=True)`` (the CLI's ``--verbose``) also shows gpse_dgl's INFO log messages.

Example
-------
>>> from gpse_dgl.utils.progress import progress
>>> total = 0
>>> for item in progress(range(5), desc="items", enabled=False):
...     total += item
>>> total
10
"""
from __future__ import annotations

import logging
import os
import sys
import time

from tqdm.auto import tqdm

__all__ = ["ENV_VAR", "configure", "is_quiet", "bars_wanted", "progress", "LineProgress"]

ENV_VAR = "GPSE_DGL_PROGRESS"

_SETTINGS = {"quiet": False, "verbose": False}


def configure(quiet: bool = False, verbose: bool = False) -> None:
    """Set the process-wide output level: ``quiet`` hides progress and INFO logs, ``verbose`` shows INFO."""
    _SETTINGS.update(quiet=bool(quiet), verbose=bool(verbose))
    logger = logging.getLogger("gpse_dgl")
    if verbose:
        logger.setLevel(logging.INFO)
        if not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
            logger.addHandler(handler)
    elif quiet:
        logger.setLevel(logging.ERROR)


def is_quiet() -> bool:
    return _SETTINGS["quiet"]


def bars_wanted(stream=None) -> bool:
    """Live bars? ``GPSE_DGL_PROGRESS`` (1 or 0) decides when set, else whether ``stream`` is a terminal."""
    forced = os.environ.get(ENV_VAR, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def progress(iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it", leave: bool = True,
             initial: int = 0, enabled: bool = True, delay: float = 0.0, **tqdm_options):
    """A progress reporter over ``iterable`` (or, without one, for ``update(n)`` calls); see the module doc."""
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)
    if not enabled or _SETTINGS["quiet"] or (not leave and not bars_wanted()):
        if iterable is not None:
            return iterable
        return LineProgress(None, total, desc, unit, silent=True, initial=initial)
    if bars_wanted():
        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, initial=initial, dynamic_ncols=True,
                    delay=delay, **tqdm_options)
    return LineProgress(iterable, total, desc, unit, initial=initial, delay=delay)


class LineProgress:
    """The subset of tqdm's interface the package uses, printing a line per 10 % to stderr (or nothing).

    ``initial`` counts work done before (a resumed run); lines report the 10 % marks crossed after it.
    Marks crossed in the first ``delay`` seconds are not reported.
    """

    def __init__(self, iterable=None, total: int | None = None, desc: str = "", unit: str = "it",
                 silent: bool = False, initial: int = 0, stream=None, delay: float = 0.0):
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.silent, self.n, self.stream, self.delay = silent, initial, stream, delay
        self._started = time.perf_counter()
        self._next_tenth = self._tenths() + 1
        self._closed = False

    def _tenths(self) -> int:
        return 10 * self.n // self.total if self.total else 0

    @property
    def format_dict(self) -> dict:
        return {"n": self.n, "total": self.total, "elapsed": time.perf_counter() - self._started}

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __len__(self) -> int:
        return self.total or 0

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.total and self._tenths() >= self._next_tenth:
            self._next_tenth = self._tenths() + 1
            self._say(f"{min(100, 100 * self.n // self.total)}%")

    def _say(self, status: str) -> None:
        if self.silent or time.perf_counter() - self._started < self.delay:
            return
        done = f"{self.n:,}/{self.total:,}" if self.total else f"{self.n:,}"
        unit = self.unit if (self.total or self.n) == 1 else f"{self.unit}s"
        label = f"{self.desc}: " if self.desc else ""
        print(f"{label}{status} ({done} {unit}, {time.perf_counter() - self._started:.1f} s)",
              file=self.stream or sys.stderr, flush=True)

    def close(self) -> None:
        if not self._closed and not self.total and self.n:
            self._say("done")
        self._closed = True

    # tqdm methods that only change what a live bar shows
    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def set_postfix_str(self, *args, **kwargs) -> None:
        pass

    def set_description(self, *args, **kwargs) -> None:
        pass

    def refresh(self, *args, **kwargs) -> None:
        pass
