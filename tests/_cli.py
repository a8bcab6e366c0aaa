"""Run the ``gpse-dgl`` CLI in-process in tests: exit code and captured output."""
from __future__ import annotations

from gpse_dgl.cli import main


def run_cli(argv, capsys) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``gpse-dgl *argv``."""
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err
