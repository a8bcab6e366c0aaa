"""benchmarks/_ledger.py: a run made again at another budget never erases the other, merged in any order."""
from __future__ import annotations

import pytest

from _benchmarks import load_benchmark


@pytest.fixture
def ledger_module():
    return load_benchmark("_ledger")


def test_a_rerun_at_a_new_budget_keeps_the_old_record(ledger_module, tmp_path):
    ledger = ledger_module.Ledger(tmp_path / "l.json")
    ledger.add("t/a/seed0", {"budget": "old", "test": 1.0})
    ledger.add("t/a/seed0", {"budget": "new", "test": 2.0})
    assert ledger.get("t/a/seed0", "old")["test"] == 1.0 and ledger.get("t/a/seed0", "new")["test"] == 2.0
    assert ledger.get("t/a/seed0", "other") is None and not ledger.has("t/a/seed0", "other")
    again = ledger_module.Ledger(tmp_path / "l.json")  # both survive the file
    assert again.has("t/a/seed0", "old") and again.has("t/a/seed0", "new") and len(again.runs) == 2


def test_ledgers_of_two_budgets_merge_to_the_same_records_in_either_order(ledger_module, tmp_path):
    """Two workers: one still holds the run at the old budget, the other made it at the new one. However the
    ledgers are joined (and joined back), both runs are there afterwards: none overwrites the other."""
    scores = {"old": 1.0, "new": 2.0}

    def worker(budget, folder):
        ledger = ledger_module.Ledger(folder / f"{budget}.json")
        ledger.add("t/a/seed0", {"budget": budget, "test": scores[budget]})
        return ledger

    for order in (("old", "new"), ("new", "old")):
        folder = tmp_path / "-".join(order)
        folder.mkdir()
        main = ledger_module.Ledger(folder / "main.json")
        for budget in order:
            assert main.merge(worker(budget, folder)) == 1
        assert main.merge(worker("old", folder)) == 0 and main.merge(worker("new", folder)) == 0
        assert sorted((r["budget"], r["test"]) for r in main.runs.values()) == [("new", 2.0), ("old", 1.0)]
        back = worker("old", folder)  # the main ledger joined back into a worker's
        assert back.merge(main) == 1 and back.has("t/a/seed0", "new") and back.has("t/a/seed0", "old")
