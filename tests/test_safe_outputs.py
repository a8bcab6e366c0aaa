"""Outputs survive concurrent writers and kills; run directories are locked; --overwrite keeps the old run.

The concurrency tests use real processes and real signals (no mocks). Their writers import only
``gpse_dgl.utils`` (no torch), so each process starts in a fraction of a second.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpse_dgl.train.rundir import RunDirectory
from gpse_dgl.utils.io import TEMP_SUFFIX, atomic_path, atomic_write_bytes, atomic_write_text, remove_stale_temps
from gpse_dgl.utils.lock import RunLock, RunLockedError

REPO = Path(__file__).resolve().parent.parent
SIZE = 4 << 20  # large enough that one write takes many system calls


def start(code: str, *args) -> subprocess.Popen:
    """A Python process running ``code`` with this checkout's gpse_dgl; its stdout is a pipe."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_line(process: subprocess.Popen, expected: str) -> None:
    line = process.stdout.readline().strip()
    assert line == expected, (line, process.stderr.read() if process.poll() is not None else "")


def temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(TEMP_SUFFIX))


WRITER = """
    import sys
    from gpse_dgl.utils.io import atomic_write_bytes
    target, byte, size, rounds = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3]), int(sys.argv[4])
    for _ in range(rounds):
        atomic_write_bytes(target, byte * size)
"""

SLOW_WRITER = """
    import os, signal, sys, time
    from gpse_dgl.utils.io import atomic_path
    # Ctrl-C as in a foreground process: a job a shell starts in the background inherits SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    target = sys.argv[1]
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(b"N" * 1000)
            handle.flush()
            print("writing", flush=True)
            time.sleep(60)
"""


def test_two_concurrent_writers_never_mix(tmp_path):
    target = tmp_path / "out.bin"
    writers = [start(WRITER, target, byte, SIZE, 5) for byte in ("A", "B")]
    for writer in writers:
        assert writer.wait(60) == 0, writer.stderr.read()
    data = target.read_bytes()
    assert len(data) == SIZE and data in (b"A" * SIZE, b"B" * SIZE)
    assert temps(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_kill_during_write_keeps_previous_file(tmp_path, sig):
    target = tmp_path / "out.bin"
    atomic_write_text(target, "previous good file")
    writer = start(SLOW_WRITER, target)
    wait_for_line(writer, "writing")
    assert len(temps(tmp_path)) == 1  # the half-written new file is beside the target, not in it
    os.kill(writer.pid, sig)
    writer.wait(30)
    assert target.read_text() == "previous good file"
    if sig == signal.SIGKILL:  # nothing can clean up after SIGKILL: the next write does
        assert len(temps(tmp_path)) == 1
        atomic_write_text(target, "next run")
        assert target.read_text() == "next run"
    assert temps(tmp_path) == []


def test_live_writers_temp_file_is_not_removed(tmp_path):
    target = tmp_path / "out.bin"
    writer = start(SLOW_WRITER, target)
    try:
        wait_for_line(writer, "writing")
        assert remove_stale_temps(target) == [] and len(temps(tmp_path)) == 1
    finally:
        writer.kill()
        writer.wait(30)
    assert len(remove_stale_temps(target)) == 1


def test_error_inside_the_block_leaves_target_and_no_temp(tmp_path):
    target = tmp_path / "out.txt"
    atomic_write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer failed")
    assert target.read_text() == "old" and temps(tmp_path) == []


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_get_the_umask_mode(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "out.bin", b"x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == mode


def test_checkpoints_are_readable_by_the_group(tmp_path):
    """best.pt / last.pt used to be 0600 (tempfile.mkstemp's mode)."""
    import torch

    from gpse_dgl.utils.checkpoint import save_checkpoint

    previous = os.umask(0o022)
    try:
        save_checkpoint(tmp_path / "best.pt", {"w": torch.zeros(2)})
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "best.pt").stat().st_mode) == 0o644


# ------------------------------------------------------------------ run directory lock

HOLDER = """
    import sys, time
    from gpse_dgl.utils.lock import RunLock
    with RunLock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(60)
"""


def test_lock_names_the_holder_and_dies_with_it(tmp_path):
    holder = start(HOLDER, tmp_path / "run")
    try:
        wait_for_line(holder, "locked")
        with pytest.raises(RunLockedError, match=rf"in use by another gpse-dgl process \(pid {holder.pid}\)"):
            RunLock(tmp_path / "run").acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    with RunLock(tmp_path / "run"):  # released by the kernel: no stale lock to clean
        pass


def test_second_pretrain_on_a_locked_out_fails_with_the_pid(tmp_path, capsys):
    from gpse_dgl.cli import main

    out = tmp_path / "run"
    holder = start(HOLDER, out)
    try:
        wait_for_line(holder, "locked")
        with pytest.raises(SystemExit) as exc:
            main(["pretrain", str(REPO / "recipes" / "quickstart.yaml"), "--out", str(out), "--quiet",
                  "--set", f"data.cache_dir={tmp_path / 'cache'}"])
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 1
    assert err == (f"gpse-dgl: error: {out} is in use by another gpse-dgl process (pid {holder.pid}); "
                   f"wait for it to finish or choose another --out")


# ------------------------------------------------------------------ --overwrite keeps the old run

def old_run(folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    files = {"best.pt": "old best", "last.pt": "old last", "metrics.json": json.dumps({"old": True}),
             "recipe.yaml": "seed: 0\n"}
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


def assert_old_run(folder: Path, files: dict) -> None:
    for name, text in files.items():
        assert (folder / name).read_text() == text
    assert not (folder / ".previous-run").exists()


@pytest.mark.parametrize("recipe_text, message", [
    ("general_pipeline:\n  num_epoch: 3\n", "did you mean 'num_epochs'"),             # typo'd key
    ("data:\n  source: smiles\n  smiles_file: MISSING\n", "SMILES file not found"),  # data that fails to load
])
def test_overwrite_with_a_bad_recipe_keeps_the_old_run(tmp_path, capsys, recipe_text, message):
    from gpse_dgl.cli import main

    out = tmp_path / "run"
    files = old_run(out)
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(recipe_text.replace("MISSING", str(tmp_path / "missing.smi")))
    with pytest.raises(SystemExit) as exc:
        main(["pretrain", str(recipe), "--out", str(out), "--overwrite", "--quiet",
              "--set", f"data.cache_dir={tmp_path / 'cache'}"])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert_old_run(out, files)


def test_failure_after_the_old_run_moved_aside_restores_it(tmp_path):
    out = tmp_path / "run"
    files = old_run(out)
    with pytest.raises(RuntimeError):
        with RunDirectory(out, ["best.pt", "last.pt", "metrics.json", "recipe.yaml"], overwrite=True) as run:
            run.replace_previous()
            (out / "recipe.yaml").write_text("new recipe")  # the new run started writing, then failed
            raise RuntimeError("first epoch failed")
    assert_old_run(out, files)


KILLED_OVERWRITE = """
    import sys, time
    from pathlib import Path
    from gpse_dgl.train.rundir import RunDirectory
    out = Path(sys.argv[1])
    run = RunDirectory(out, ["best.pt", "last.pt", "metrics.json", "recipe.yaml"], overwrite=True).open()
    run.replace_previous()
    (out / "recipe.yaml").write_text("new recipe")
    print("replacing", flush=True)
    time.sleep(60)
"""


def test_overwrite_killed_before_its_first_checkpoint_is_undone_by_the_next_process(tmp_path):
    out = tmp_path / "run"
    files = old_run(out)
    process = start(KILLED_OVERWRITE, out)
    wait_for_line(process, "replacing")
    assert not (out / "last.pt").exists() and (out / ".previous-run" / "last.pt").exists()
    os.kill(process.pid, signal.SIGKILL)
    process.wait(30)
    with RunDirectory(out, ["best.pt", "last.pt", "metrics.json", "recipe.yaml"]):
        assert_old_run(out, files)


def test_overwrite_commits_once_the_first_checkpoint_exists(tmp_path):
    out = tmp_path / "run"
    old_run(out)
    with RunDirectory(out, ["best.pt", "last.pt", "metrics.json", "recipe.yaml"], overwrite=True) as run:
        run.replace_previous()
        (out / "last.pt").write_text("new last")
        run.commit_after(None)({"epoch": 1})
    assert (out / "last.pt").read_text() == "new last" and not (out / "best.pt").exists()
    assert sorted(p.name for p in out.iterdir()) == [".gpse-dgl.lock", "last.pt"]


def test_lock_file_left_behind_never_blocks_the_next_run(tmp_path):
    """The lock file stays after release (removing it would race); it holds the latest holder's pid."""
    for _ in range(2):
        with RunLock(tmp_path):
            assert (tmp_path / ".gpse-dgl.lock").read_text().strip() == str(os.getpid())
