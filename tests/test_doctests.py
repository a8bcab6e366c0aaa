"""Every docstring example in the package runs and shows what it says (``doctest`` on each module)."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import gpse_dgl


def _module_names() -> list[str]:
    # ``__main__`` runs the CLI on import; it has no examples.
    return sorted(info.name for info in pkgutil.walk_packages(gpse_dgl.__path__, prefix="gpse_dgl.")
                  if not info.name.endswith("__main__"))


def _examples(name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(name)
    return [test for test in doctest.DocTestFinder(exclude_empty=True).find(module, name)
            if test.examples and getattr(test, "filename", None)]


_CASES = [(name, test) for name in _module_names() for test in _examples(name)]


def test_examples_were_found():
    assert len(_CASES) >= 40, "the package's docstring examples were not collected"


@pytest.mark.parametrize("name,test", _CASES, ids=[test.name for _, test in _CASES])
def test_docstring_example(name, test):
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
