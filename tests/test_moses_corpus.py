"""benchmarks/moses_corpus.py: MOSES draws less every molecule whose skeleton the replica evaluates on."""
from __future__ import annotations

import pytest

from _benchmarks import load_benchmark
from gpse_dgl.data.molecules import read_smiles_file


@pytest.fixture
def corpus(monkeypatch):
    """The script with a 4-molecule replica (train 2, val 1, test 1) and a fixed 5-molecule draw."""
    script = load_benchmark("moses_corpus")
    draws = {0: ["c1ccccc1C", "CCCC", "CCO", "C1CCNC1"],           # replica: val CCO, test C1CCNC1
             1: ["CCN", "OC1CCCC1", "c1ccccc1O", "C1CCOC1", "CC(C)C"]}
    monkeypatch.setattr(script, "NUM_MOLECULES", 4)
    monkeypatch.setattr(script, "SPLIT_SIZES", (2, 1, 1))
    monkeypatch.setattr(script, "draw_moses_smiles", lambda n, seed: draws[seed][:n])
    return script


def test_molecules_sharing_an_evaluation_skeleton_are_left_out(corpus):
    kept, counts = corpus.moses_corpus(5, seed=1)
    # CCN has CCO's skeleton (validation), C1CCOC1 has C1CCNC1's (test); the replica's training skeleton
    # (toluene's, shared by phenol) stays: only evaluation graphs are withheld.
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
