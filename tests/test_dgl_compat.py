"""The graphbolt import guard (gpse_dgl/_dgl_compat.py): stubs only when DGL's own would break ``import dgl``."""
import os
import subprocess
import sys
import textwrap

import pytest

from gpse_dgl import _dgl_compat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fake_dgl(tmp_path, libraries=()):
    """A package named ``dgl`` whose import needs ``dgl.graphbolt``, as DGL 2.x's does via dgl.distributed;
    its graphbolt raises like DGL 2.1's does when its library is missing."""
    pkg = tmp_path / "dgl"
    (pkg / "graphbolt").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import graphbolt as gb\n")
    (pkg / "graphbolt" / "__init__.py").write_text("raise FileNotFoundError('Cannot find DGL C++ graphbolt library')\n")
    for name in libraries:
        (pkg / "graphbolt" / name).write_bytes(b"")
    return pkg


def _run(tmp_path, code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=60)


def test_problem_names_the_missing_library(tmp_path):
    pkg = _fake_dgl(tmp_path, libraries=[_dgl_compat.graphbolt_library_name("2.2.1")])
    assert _dgl_compat.graphbolt_library_name("2.13.0") in _dgl_compat.graphbolt_problem(str(pkg), "2.13.0+cpu", True)
    assert _dgl_compat.graphbolt_problem(str(pkg), "2.2.1+cu121", True) is None
    assert "torchdata.datapipes" in _dgl_compat.graphbolt_problem(str(pkg), "2.2.1", False)


def test_no_problem_without_graphbolt(tmp_path):
    (tmp_path / "dgl").mkdir()
    assert _dgl_compat.graphbolt_problem(str(tmp_path / "dgl"), "2.13.0", False) is None


def test_stub_raises_with_the_reason_and_keeps_dunders():
    stub = _dgl_compat.make_stub("no library")
    with pytest.raises(_dgl_compat.GraphboltUnavailable, match="no library"):
        stub.expand_indptr
    with pytest.raises(AttributeError):
        stub.__wrapped__


def test_library_names_follow_dgl():
    assert _dgl_compat.graphbolt_library_name("2.2.1+cu121", "linux") == "libgraphbolt_pytorch_2.2.1.so"
    assert _dgl_compat.graphbolt_library_name("2.2.1", "darwin") == "libgraphbolt_pytorch_2.2.1.dylib"
    assert _dgl_compat.graphbolt_library_name("2.2.1", "win32") == "graphbolt_pytorch_2.2.1.dll"


def test_import_dgl_succeeds_through_the_guard_and_fails_without_it(tmp_path):
    _fake_dgl(tmp_path)
    guarded = _run(tmp_path, """
        import gpse_dgl, dgl
        from gpse_dgl import _dgl_compat
        print(_dgl_compat.GRAPHBOLT_STATUS)
        try:
            dgl.gb.expand_indptr
        except _dgl_compat.GraphboltUnavailable as exc:
            print("raised:", exc)
    """)
    assert guarded.returncode == 0, guarded.stderr
    assert guarded.stdout.startswith("stubbed: DGL ships no ")
    assert "raised: dgl.graphbolt.expand_indptr is unavailable" in guarded.stdout
    unguarded = _run(tmp_path, "import dgl")
    assert unguarded.returncode != 0 and "Cannot find DGL C++ graphbolt library" in unguarded.stderr


def test_info_names_each_dgl_library():
    from click.testing import CliRunner

    from gpse_dgl.cli import cli

    result = CliRunner().invoke(cli, ["info"])
    assert result.exit_code == 0, result.output
    for name in ("libdgl", "tensoradapter", "graphbolt"):
        assert f"\n  {name:<13} " in result.output
    assert "  libdgl        loaded (" in result.output


@pytest.mark.parametrize("forced, expected", [(None, "'dgl' backend\n"),
                                              ("torch", "'torch' backend (set by GPSE_DGL_BACKEND)\n")])
def test_info_names_the_backend_the_ops_will_use(monkeypatch, forced, expected):
    from click.testing import CliRunner

    from gpse_dgl.cli import cli

    if forced is None:
        monkeypatch.delenv("GPSE_DGL_BACKEND", raising=False)
    else:
        monkeypatch.setenv("GPSE_DGL_BACKEND", forced)
    result = CliRunner().invoke(cli, ["info"])
    assert result.exit_code == 0, result.output
    cpu_line = next(line for line in result.output.splitlines(keepends=True) if line.startswith("  cpu "))
    assert cpu_line.endswith(expected), cpu_line


def test_stub_classes_answer_isinstance_and_refuse_construction():
    stub = _dgl_compat.make_stub("no library")
    assert not isinstance(object(), stub.FusedCSCSamplingGraph)
    with pytest.raises(_dgl_compat.GraphboltUnavailable, match="no library"):
        stub.FusedCSCSamplingGraph()
