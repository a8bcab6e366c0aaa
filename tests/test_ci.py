"""`.ci/run` runs every test, the slow ones included; `python -m pytest -q` (the README's) stays the fast set."""
from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _selects(expression: str, markers: set) -> bool:
    """pytest's ``-m`` expressions over marker names (and, or, not, parentheses)."""
    words = {name: name in markers for name in re.findall(r"[A-Za-z_]\w*", expression)
             if name not in ("and", "or", "not")}
    return bool(eval(expression, {"__builtins__": {}}, words))  # noqa: S307 - a test's own constant


def test_ci_runs_slow_and_fast_tests():
    pytest_lines = [line for line in (ROOT / ".ci/run").read_text(encoding="utf-8").splitlines()
                    if "-m pytest" in line and not line.lstrip().startswith("#")]
    assert len(pytest_lines) == 1, pytest_lines
    words = shlex.split(pytest_lines[0].rstrip("\\"))
    expression = words[words.index("-m", words.index("pytest")) + 1]
    assert _selects(expression, {"slow"}) and _selects(expression, set())


def test_plain_pytest_stays_the_fast_set():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg", encoding="utf-8")
    addopts = shlex.split(setup["tool:pytest"]["addopts"])
    expression = addopts[addopts.index("-m") + 1]
    assert not _selects(expression, {"slow"}) and _selects(expression, set())
