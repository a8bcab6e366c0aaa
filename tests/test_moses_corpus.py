"""benchmarks/moses_corpus.py: MOSES draws less every molecule whose skeleton the replica evaluates on."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from _benchmarks import load_benchmark
from gpse_dgl.data.molecules import read_smiles_file, skeleton_smiles

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "datasets"
# replica: validation CCO, test C1CCNC1; the draw: CCN shares CCO's skeleton, C1CCOC1 shares C1CCNC1's, and
# phenol shares toluene's, a training skeleton, which stays: only evaluation graphs are withheld.
BANNED = {skeleton_smiles("CCO"), skeleton_smiles("C1CCNC1")}
DRAW = ["CCN", "OC1CCCC1", "c1ccccc1O", "C1CCOC1", "CC(C)C"]


@pytest.fixture
def corpus(monkeypatch):
    script = load_benchmark("moses_corpus")
    monkeypatch.setattr(script, "draw_moses_smiles", lambda n, seed: DRAW[:n])
    monkeypatch.setattr(script, "replica_evaluation_skeletons", lambda: BANNED)
    return script


def test_molecules_sharing_an_evaluation_skeleton_are_left_out(corpus):
    kept, counts = corpus.moses_corpus(5, seed=1)
    assert kept == ["OC1CCCC1", "c1ccccc1O", "CC(C)C"]
    assert counts == {"drawn": 5, "left out": 2, "kept": 3, "evaluation skeletons": 2}


def test_the_replicas_own_draw_is_refused(corpus):
    with pytest.raises(SystemExit, match="replica's own draw"):
        corpus.moses_corpus(5, seed=0)


def test_the_written_file_reads_back_as_the_kept_smiles(corpus, tmp_path, capsys):
    out = tmp_path / "corpus" / "moses.smi"
    assert corpus.main(["--molecules", "5", "--seed", "1", "--out", str(out)]) == 0
    assert read_smiles_file(out) == ["OC1CCCC1", "c1ccccc1O", "CC(C)C"]
    assert "3 SMILES (5 drawn with seed 1, 2 left out" in capsys.readouterr().out


def test_the_banned_skeletons_are_the_replicas_validation_and_test_molecules(monkeypatch, tmp_path):
    """Read from the dataset the benchmark trains on (the molsets layout with 48 MOSES SMILES): its held-out
    molecules are the tail of the replica's draw, and the corpus of another draw keeps none of them."""
    monkeypatch.syspath_prepend(str(FIXTURES / "moses"))
    importlib.invalidate_caches()
    script = load_benchmark("moses_corpus")
    banned = script.replica_evaluation_skeletons(tmp_path, num_molecules=24)  # split 20 / 2 / 2
    tail = script.draw_moses_smiles(24, 0)[20:]
    assert banned == {skeleton_smiles(s) for s in tail} and len(banned) >= 3
    kept, _ = script.moses_corpus(48, seed=1, banned=banned)
    assert {skeleton_smiles(s) for s in kept}.isdisjoint(banned) and len(kept) < 48
