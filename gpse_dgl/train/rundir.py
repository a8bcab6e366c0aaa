"""A run directory's life: checked, locked, and replaced by ``--overwrite`` only once the new run works.

:class:`RunDirectory` is what ``pretrain`` and ``train`` wrap a run in:

* :meth:`~RunDirectory.open` checks, before any work, that the run directory and the cache directory can
  be written (:mod:`gpse_dgl.utils.preflight`), then takes the directory's lock
  (:class:`gpse_dgl.utils.lock.RunLock`): a second process gets one line naming the holder's pid;
* with ``--overwrite`` the old run's outputs stay untouched while the new run validates its recipe and
  loads its data; :meth:`~RunDirectory.replace_previous` (called just before the new run writes its first
  file) moves them into ``.previous-run/``, and :meth:`~RunDirectory.commit` (called once the new run's
  first checkpoint exists) deletes them. A run that fails in between gets the old outputs back on the
  way out; a run killed in between gets them back when the next process opens the directory;
* :func:`recipe_changes` lists what a ``--resume`` recipe changes against the checkpoint's; anything
  but the result-neutral keys in :data:`NEUTRAL_KEYS` is refused unless ``--allow-recipe-change``;
  :func:`restore_training_state` loads a checkpoint's states into the resumed run's objects.

Example
-------
>>> import os, tempfile
>>> from gpse_dgl.train.rundir import RunDirectory
>>> root = tempfile.mkdtemp()
>>> _ = open(os.path.join(root, "last.pt"), "w").write("old")
>>> with RunDirectory(root, ["last.pt"], overwrite=True) as run:
...     run.replace_previous()                 # the new run starts writing
...     _ = open(os.path.join(root, "last.pt"), "w").write("new")
...     run.commit()                           # its first checkpoint exists: the old run goes
>>> open(os.path.join(root, "last.pt")).read(), sorted(os.listdir(root))
('new', ['.gpse-dgl.lock', 'last.pt'])
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..utils import checkpoint as ckpt
from ..utils.errors import CheckpointError, RecipeError
from ..utils.lock import RunLock
from ..utils.preflight import check_output_dir
from ..utils.text import first_line

__all__ = ["RunDirectory", "NEUTRAL_KEYS", "recipe_changes", "check_resumed_recipe", "restore_training_state"]

PREVIOUS = ".previous-run"
DISCARDED = ".previous-run.discarded"

# recipe keys that change where or how fast a run goes, never what it computes
NEUTRAL_KEYS = frozenset({
    "device", "data.root", "data.cache_dir", "data.target_device", "general_pipeline.save_path",
    "general_pipeline.num_threads", "general_pipeline.log_every", "general_pipeline.time_limit_minutes",
    "general_pipeline.num_seeds", "general_pipeline.save_checkpoints", "general_pipeline.distributed",
})


class RunDirectory:
    """Checks, lock and safe ``--overwrite`` of one run directory (a context manager; see the module doc).

    ``outputs`` names what a run writes there (file or directory names, globs allowed): only these are
    moved aside by ``--overwrite``, so a directory shared with other files is never emptied.
    """

    def __init__(self, root: str | os.PathLike, outputs: Iterable[str], overwrite: bool = False,
                 cache_dir: str | os.PathLike | None = None, allow_recipe_change: bool = False,
                 label: str = "general_pipeline.save_path"):
        self.root = Path(root)
        self.outputs = list(outputs)
        self.overwrite = overwrite
        self.cache_dir = cache_dir
        self.allow_recipe_change = allow_recipe_change
        self.label = label
        self.recipe_changes: list[str] = []  # what a --resume accepted with allow_recipe_change
        self._lock = RunLock(self.root)
        self._moved = False
        self._created = False

    @property
    def previous(self) -> Path:
        return self.root / PREVIOUS

    def open(self) -> "RunDirectory":
        check_output_dir(self.root, self.label)
        if self.cache_dir is not None:
            check_output_dir(self.cache_dir, "cache directory")
        self._created = not self.root.exists()
        self._lock.acquire()
        try:
            self._recover()
        except BaseException:
            self._lock.release()
            raise
        return self

    def _recover(self) -> None:
        """Finish what a killed process left: a committed replacement is deleted, an uncommitted one undone."""
        if (self.root / DISCARDED).exists():
            shutil.rmtree(self.root / DISCARDED, ignore_errors=True)
        if self.previous.is_dir():
            self._restore()

    def _existing_outputs(self, folder: Path) -> list[Path]:
        found: list[Path] = []
        for pattern in self.outputs:
            found += [p for p in sorted(folder.glob(pattern)) if p not in found]
        return found

    def replace_previous(self) -> None:
        """With ``overwrite``: move the old run's outputs aside (kept until :meth:`commit`)."""
        if not self.overwrite or self._moved:
            return
        self._moved = True
        old = self._existing_outputs(self.root)
        if not old:
            return
        self.previous.mkdir()
        for path in old:
            os.replace(path, self.previous / path.relative_to(self.root))

    def commit(self) -> None:
        """The new run has its first checkpoint: delete the old outputs moved aside."""
        if self.previous.is_dir():
            os.replace(self.previous, self.root / DISCARDED)  # one rename: a kill cannot leave half
            shutil.rmtree(self.root / DISCARDED, ignore_errors=True)

    def commit_after(self, callback: Callable[[dict], None] | None) -> Callable[[dict], None]:
        """``callback`` (an ``on_epoch_end``) preceded by :meth:`commit`: epochs end after checkpoints."""
        def on_epoch_end(record: dict) -> None:
            self.commit()
            if callback is not None:
                callback(record)

        return on_epoch_end

    def _restore(self) -> None:
        """Put the outputs moved aside back, removing what the failed replacement wrote."""
        for path in self._existing_outputs(self.root):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
        for path in sorted(self.previous.iterdir()):
            os.replace(path, self.root / path.name)
        self.previous.rmdir()

    def close(self, failed: bool = False) -> None:
        try:
            if failed and self.previous.is_dir():
                self._restore()
        finally:
            if failed and self._created:
                self._remove_if_only_the_lock()
            self._lock.release()

    def _remove_if_only_the_lock(self) -> None:
        """A run that failed before writing anything leaves no directory behind (it made the directory)."""
        if [p.name for p in self.root.iterdir()] == [self._lock.path.name]:
            with contextlib.suppress(OSError):
                self._lock.path.unlink()
                self.root.rmdir()

    def __enter__(self) -> "RunDirectory":
        return self.open()

    def __exit__(self, exc_type, exc, traceback) -> None:
        self.close(failed=exc_type is not None)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def recipe_changes(saved: Mapping[str, Any], recipe: Mapping[str, Any],
                   neutral: Iterable[str] = NEUTRAL_KEYS) -> list[str]:
    """``"key: old -> new"`` for every key whose value differs, result-neutral keys left out."""
    old, new = _flatten(saved), _flatten(recipe)
    neutral = set(neutral)
    return [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in list(new) + [k for k in old if k not in new]
            if key not in neutral and old.get(key) != new.get(key)]


def check_resumed_recipe(path: str | os.PathLike, saved: Mapping[str, Any], recipe: Mapping[str, Any],
                         allow_change: bool) -> list[str]:
    """:func:`recipe_changes` of a resumed run; a :class:`RecipeError` naming the first one unless allowed."""
    changes = recipe_changes(saved, recipe)
    if changes and not allow_change:
        more = f" and {len(changes) - 1} more" if len(changes) > 1 else ""
        raise RecipeError(f"{path}: the recipe differs from the run's ({changes[0]}{more}); resume with the "
                          f"run's recipe, or pass --allow-recipe-change to continue with the new one")
    return changes


def restore_training_state(path: str | os.PathLike, payload: Mapping[str, Any], model, optimizer, scheduler,
                           mixed) -> None:
    """Load a checkpoint's model, optimiser, schedule, RNG and gradient-scaler (fp16) states into a resumed run's
    objects, in place: what both pipelines' ``last.pt`` hold, so that a resumed run continues bit for bit. A
    state that does not fit them is one :class:`CheckpointError` line naming ``path``."""
    try:
        model.load_state_dict(payload["model_state"])
        optimizer.load_state_dict(payload["optimizer_state"])
        scheduler.load_state_dict(payload["scheduler_state"])
        ckpt.restore_rng_state(payload["rng_state"])
        mixed.load_state_dict(payload.get("grad_scaler_state"))
    except (KeyError, RuntimeError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot resume from it ({first_line(exc)})") from None
