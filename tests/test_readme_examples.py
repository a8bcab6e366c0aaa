"""The README's "Using GPSE in your DGL pipeline" and "Your own data" code runs as written.

Python blocks run with ``exec`` and ``gpse-dgl`` lines of bash blocks through the CLI's ``main``, in one
temporary directory (with links to the repository's ``recipes`` and ``tests``), DGL's raw_dir and the
gpse-dgl cache pointed into it. Training commands get one epoch added, to stay fast.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch

from gpse_dgl.cli import main

REPO = Path(__file__).resolve().parent.parent
SECTIONS = ("Using GPSE in your DGL pipeline", "Your own data")
_SHORT_TRAINING = ["--set", "general_pipeline.num_epochs=1", "--set", "general_pipeline.save_checkpoints=false",
                   "--set", "general_pipeline.num_threads=1", "--no-progress"]


def section_blocks(title: str) -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block in the README section ``## title``."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert match, f"README has no section {title!r}"
    return re.findall(r"^```(\w+)\n(.*?)^```", match.group(1), flags=re.S | re.M)


def _cli_lines(code: str) -> list[list[str]]:
    commands = [shlex.split(line, comments=True) for line in code.splitlines()]
    assert all(argv[0] == "gpse-dgl" for argv in commands if argv), code
    return [argv[1:] + (_SHORT_TRAINING if argv[1] == "train" else []) for argv in commands if argv]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for name in ("recipes", "tests"):
        (tmp_path / name).symlink_to(REPO / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DGL_DOWNLOAD_DIR", str(tmp_path / "dgl"))
    monkeypatch.setenv("GPSE_DGL_CACHE", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny workloads: extra threads only wait on each other
    yield tmp_path
    torch.set_num_threads(threads)


@pytest.mark.parametrize("title", SECTIONS)
def test_readme_section_runs_as_written(title, workdir, capsys):
    blocks = section_blocks(title)
    assert {language for language, _ in blocks} == {"python", "bash"}
    for language, code in blocks:
        if language == "python":
            exec(compile(code, f"README:{title}", "exec"), {"__name__": "__readme__"})
            continue
        for argv in _cli_lines(code):
            try:
                main(argv)
            except SystemExit as exc:
                pytest.fail(f"gpse-dgl {' '.join(argv)} exited {exc.code}: {capsys.readouterr().err[-500:]}")
    if title == SECTIONS[0]:
        assert list((workdir / "cache" / "gpse_encodings").glob("*.bin")), "precompute_gpse wrote no cache"
    else:
        assert (workdir / "mols_gpse.bin").is_file() and (workdir / "runs" / "own-molecules" / "results.json").is_file()
