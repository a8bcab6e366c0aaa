"""Every module under gpse_dgl/ stays a readable size, or says near its top why it is longer."""
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpse_dgl"
MAX_LINES = 450
# the reason must be a comment line starting with this within the first HEAD_LINES lines
REASON_MARK = "# size:"
HEAD_LINES = 5


def oversized_without_reason(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        name = path.relative_to(package).as_posix()
        if len(lines) <= MAX_LINES:
            continue
        if not any(line.startswith(REASON_MARK) and line[len(REASON_MARK):].strip() for line in lines[:HEAD_LINES]):
            found.append(f"{name} ({len(lines)} lines)")
    return found


def test_modules_are_a_readable_size():
    found = oversized_without_reason()
    assert not found, (f"over {MAX_LINES} lines without a '{REASON_MARK} <reason>' comment in the first "
                       f"{HEAD_LINES} lines: {', '.join(found)}; split the module or state why it is one")


def test_the_check_sees_a_long_module(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "reasoned.py").write_text(f"{REASON_MARK} one state machine\n" + "x = 1\n" * MAX_LINES)
    (tmp_path / "empty_reason.py").write_text(f"{REASON_MARK}\n" + "x = 1\n" * MAX_LINES)
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert oversized_without_reason(tmp_path) == [
        f"empty_reason.py ({MAX_LINES + 1} lines)", f"long.py ({MAX_LINES + 1} lines)"]

