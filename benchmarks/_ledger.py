"""A benchmark's ledger of finished runs: one JSON file, validated on load, merged, written atomically.

The file is ``{"about": "...", "runs": {key: record}}``; every record holds at least ``budget`` (the
fingerprint of what makes two runs comparable) and the fields its script names. A run made again at another
budget keeps the older record under ``key@<its budget>`` (:meth:`Ledger.get` finds either). A sweep that several
processes or machines share writes one ledger each and joins them with :func:`open_ledger`'s ``merge``.

A ledger that cannot be used (empty file, truncated JSON, ``{}``, a record without a field the report
needs) raises :class:`LedgerError`, a :class:`~gpse_dgl.utils.errors.GPSEError` whose message is one line
naming the file, so that a script prints ``error: <message>`` instead of a traceback; a ledger to merge or
to report from must exist.

Example::

    >>> import json, tempfile
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "other.json").write_text(json.dumps({"runs": {"t/a/seed0": {"budget": "b", "test": 1.0}}}))
    >>> ledger = open_ledger(folder / "main.json", merge=[folder / "other.json"], fields=("test",))
    ... # doctest: +ELLIPSIS
    /.../other.json: 1 run(s) taken into /.../main.json
    >>> ledger.has("t/a/seed0", "b"), ledger.has("t/a/seed0", "another budget")
    (True, False)
    >>> _ = (folder / "cut.json").write_text('{"runs": {"t/a/seed0": {"bud')
    >>> open_ledger(folder / "cut.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    _ledger.LedgerError: ledger /.../cut.json is not valid JSON (truncated? Unterminated string ...)
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, Sequence

from gpse_dgl.utils.errors import GPSEError


class LedgerError(GPSEError):
    """A ledger file that cannot be used; the message names the file and what is wrong."""


def _read(path: Path, fields: tuple[str, ...]) -> dict:
    """``path``'s runs, checked: a JSON object with a ``runs`` object of records holding ``fields``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LedgerError(f"ledger {path} cannot be read: {exc}") from None
    if not text.strip():
        raise LedgerError(f"ledger {path} is empty (no runs object); remove it to start a new ledger")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LedgerError(f"ledger {path} is not valid JSON (truncated? {exc.msg} at line {exc.lineno} "
                          f"column {exc.colno})") from None
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, dict):
        raise LedgerError(f"ledger {path} has no 'runs' object (found {_shape(data)}); not a ledger of this "
                          f"script, or written by something else")
    for key, record in runs.items():
        if not isinstance(record, dict):
            raise LedgerError(f"ledger {path}: run {key!r} is {_shape(record)}, not a record")
        missing = [name for name in ("budget", *fields) if name not in record]
        if missing:
            raise LedgerError(f"ledger {path}: run {key!r} lacks {', '.join(map(repr, missing))}")
    return runs


def _shape(value) -> str:
    if isinstance(value, dict):
        return "an object with keys " + (", ".join(map(repr, list(value)[:5])) or "none")
    return f"a JSON {type(value).__name__}"


class Ledger:
    """Finished runs, one JSON file written atomically after every run.

    ``fields``: what every record must hold besides ``budget`` (checked when the file is read);
    ``about``: the file's one-line description; ``must_exist``: a missing file is an error instead of an
    empty ledger.
    """

    def __init__(self, path: Path, fields: Iterable[str] = (), about: str = "one record per finished run",
                 must_exist: bool = False):
        self.path, self.fields, self.about = Path(path), tuple(fields), about
        if must_exist and not self.path.is_file():
            raise LedgerError(f"no ledger at {self.path}")
        self.runs = _read(self.path, self.fields) if self.path.exists() else {}

    def merge(self, other: "Ledger") -> int:
        """Take ``other``'s records that this ledger lacks (the same key at another budget counts as
        lacking, and both records are kept), e.g. from a share of the sweep run elsewhere; return how many
        were taken."""
        taken = 0
        for stored, record in other.runs.items():
            key = stored.removesuffix(f"@{record['budget']}")
            if not self.has(key, record["budget"]):
                self._put(key, record)
                taken += 1
        if taken:
            self._write()
        return taken

    def get(self, key: str, budget: str) -> dict | None:
        """The record of run ``key`` at ``budget``, or None."""
        for stored in (key, f"{key}@{budget}"):
            record = self.runs.get(stored)
            if record is not None and record.get("budget") == budget:
                return record
        return None

    def has(self, key: str, budget: str) -> bool:
        return self.get(key, budget) is not None

    def add(self, key: str, record: dict) -> None:
        self._put(key, record)
        self._write()

    def _put(self, key: str, record: dict) -> None:
        # The newest record of a run sits under its key; one of another budget moves to "key@budget", so a
        # re-run at a new budget never erases the old run, and ledgers of both budgets merge in any order.
        current = self.runs.get(key)
        if current is not None and current.get("budget") != record["budget"]:
            self.runs[f"{key}@{current['budget']}"] = current
        self.runs.pop(f"{key}@{record['budget']}", None)
        self.runs[key] = record

    def _write(self) -> None:
        from gpse_dgl.utils.io import atomic_write_text

        text = json.dumps({"about": self.about, "runs": dict(sorted(self.runs.items()))}, indent=1,
                          allow_nan=False)
        atomic_write_text(self.path, text + "\n")


def open_ledger(path: Path, merge: Iterable[Path] = (), fields: Iterable[str] = (),
                about: str = "one record per finished run", report_only: bool = False,
                log: Callable[[str], None] = print) -> Ledger:
    """The ledger at ``path`` (new if absent) with the runs of every ledger in ``merge`` taken in.

    Every file in ``merge`` must exist; with ``report_only`` (nothing will be run) so must ``path``,
    unless ``merge`` brings runs to report.
    """
    merge = [Path(p) for p in merge]
    if report_only and not Path(path).is_file() and not merge:
        raise LedgerError(f"no ledger at {path}: nothing to report (run without --report-only first, or "
                          f"name an existing --ledger)")
    others = [Ledger(p, fields, must_exist=True) for p in merge]  # all checked before anything is written
    ledger = Ledger(path, fields, about)
    for other in others:
        log(f"{other.path}: {ledger.merge(other)} run(s) taken into {ledger.path}")
    return ledger


def run_processes(script: Path, argv: Sequence[str], processes: int, ledger: Ledger,
                  log: Callable[[str], None] = print) -> None:
    """Run ``script``'s sweep as ``processes`` local workers, pass after pass, joining their runs into ``ledger``.

    In a pass, worker ``i`` runs ``script argv --worker i/N --ledger <ledger>.worker<i>.json --merge <ledger>
    --skip-report`` (the options appended last override the same ones in ``argv``): it starts from every run
    joined so far and runs its share of what can be named from them. The pass's runs are then joined into
    ``ledger``. Passes go on until one adds nothing: an arm tuned on a grid names its chosen setting's runs only
    once every worker's tuning runs are joined. A worker that fails stops the sweep with one line; its
    finished runs are joined first. Worker ledgers an interrupted sweep left behind (any number of workers)
    are joined before the first pass, so that a killed sweep loses no finished run."""
    ledger._write()  # the workers merge it, so it must exist
    recover_worker_ledgers(ledger, log)
    paths = [ledger.path.with_name(f"{ledger.path.stem}.worker{i}.json") for i in range(processes)]
    for number in itertools.count(1):
        workers = [subprocess.Popen([sys.executable, str(script), *argv, "--processes", "1", "--worker",
                                     f"{i}/{processes}", "--ledger", str(path), "--merge", str(ledger.path),
                                     "--skip-report"]) for i, path in enumerate(paths)]
        codes = [worker.wait() for worker in workers]
        added = sum(ledger.merge(Ledger(path, ledger.fields)) for path in paths if path.is_file())
        for path in paths:
            path.unlink(missing_ok=True)
        log(f"pass {number}: {added} run(s) from {processes} worker(s) joined into {ledger.path}")
        failed = [(i, code) for i, code in enumerate(codes) if code]
        if failed:
            raise LedgerError(f"worker {failed[0][0]} of {script.name} exited with code {failed[0][1]} (its "
                              f"output is above); the finished runs are in {ledger.path}")
        if not added:
            return


def recover_worker_ledgers(ledger: Ledger, log: Callable[[str], None] = print) -> int:
    """Join the ``<ledger>.worker<i>.json`` files an interrupted :func:`run_processes` left beside ``ledger``
    into it and remove them; return how many runs they added. A file that cannot be read is left in place
    and named, so that nothing is deleted unread."""
    added = 0
    for path in sorted(ledger.path.parent.glob(f"{ledger.path.stem}.worker*.json")):
        try:
            taken = ledger.merge(Ledger(path, ledger.fields))
        except LedgerError as exc:
            log(f"{exc}; left in place")
            continue
        path.unlink()
        added += taken
        log(f"{path}: {taken} run(s) of an interrupted pass joined into {ledger.path}")
    return added


def add_sweep_options(parser, ledger: Path, out: Path, figures: Path, out_help: str, report_help: str) -> None:
    """The options every resumable sweep shares: ``--ledger``, ``--out``, ``--figures``, ``--report-only``,
    ``--worker I/N``, ``--merge``, ``--processes N`` and ``--skip-report``."""
    parser.add_argument("--ledger", type=Path, default=ledger, help="finished runs (JSON)")
    parser.add_argument("--out", type=Path, default=out, help=f"{out_help} (default: %(default)s)")
    parser.add_argument("--figures", type=Path, default=figures, help="folder of the PNGs")
    parser.add_argument("--report-only", action="store_true", help=report_help)
    parser.add_argument("--worker", default="0/1", metavar="I/N",
                        help="run every N-th pending run from the I-th (0-based), so that N processes or "
                             "machines share the sweep; each writes its own --ledger, joined with --merge")
    parser.add_argument("--merge", action="append", default=[], type=Path, metavar="LEDGER",
                        help="first take the finished runs of another ledger into --ledger (repeatable)")
    parser.add_argument("--processes", type=int, default=1, metavar="N",
                        help="run the sweep as N local worker processes (each with --threads), joined into "
                             "--ledger after every pass")
    parser.add_argument("--skip-report", action="store_true", help="run only; no tables or figures")
