"""A ZINC-like pretraining corpus for GPSE: MOSES molecules, with the ZINC replica's evaluation graphs left out.

The lever RESULTS 16 tests where GPSE does not beat the best explicit encoding on the ZINC replica: an
encoder pretrained on molecules like the replica's (the paper pretrains on MolPCBA; ``rdkit-base`` on the
molecule files inside RDKit). This script writes the SMILES file that ``recipes/moses-finetune.yaml``
continues the shipped model's pretraining on.

What is drawn and what is left out:

* ``--molecules`` SMILES from MOSES's ``train.csv.gz`` (the ``molsets`` wheel, read without importing it),
  drawn without replacement by ``numpy.random.default_rng(--seed)``; the replica draws with seed 0.
* GPSE sees a molecule only as its bare skeleton (``gpse_dgl.data.molecules``: no atom or bond types), so
  a molecule is left out when its **skeleton** is the skeleton of any molecule in the replica's
  validation or test split: the corpus holds no evaluation graph, not even under other atom types.
  The replica's training molecules may occur (they are MOSES molecules too); the downstream model
  trains on them anyway. Two things this file does not control: the recipe's ring-edited copies of the
  training skeletons (``data.skeleton_edits``) are not checked against the evaluation skeletons, and the
  model it continues (``rdkit-base``) was pretrained on RDKit's molecule files, as the shipped GPSE row's was.

Example::

    python benchmarks/moses_corpus.py                      # runs/moses-corpus/moses-15k.smi
    gpse-dgl pretrain recipes/moses-finetune.yaml           # continue rdkit-base on it
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpse_dgl.data.molecules import skeleton_smiles  # noqa: E402
from gpse_dgl.data.zinc_replica import NUM_MOLECULES, draw_moses_smiles, load_zinc_replica  # noqa: E402
from gpse_dgl.utils.io import atomic_write_text  # noqa: E402

#: The replica's draw (``load_zinc_replica``'s default).
REPLICA_SEED = 0


def replica_evaluation_skeletons(root=None, num_molecules: int = NUM_MOLECULES) -> set[str]:
    """Canonical skeleton SMILES of the replica's validation and test molecules, read from the dataset itself
    (its splits and canonical SMILES; ``root``: the datasets root, default the registry's)."""
    from gpse_dgl.data.registry import default_root

    dataset = load_zinc_replica(root or default_root(), seed=REPLICA_SEED, num_molecules=num_molecules)
    held_out = dataset.splits["val"].tolist() + dataset.splits["test"].tolist()
    return {s for s in (skeleton_smiles(dataset.info["smiles"][i]) for i in held_out) if s is not None}


def moses_corpus(molecules: int, seed: int, banned: set[str] | None = None) -> tuple[list[str], dict]:
    """``(smiles, counts)``: ``molecules`` MOSES SMILES drawn with ``seed``, less those whose skeleton is in
    ``banned`` (default: :func:`replica_evaluation_skeletons`), in draw order."""
    if seed == REPLICA_SEED:
        raise SystemExit(f"--seed {seed} is the replica's own draw; choose another")
    banned = replica_evaluation_skeletons() if banned is None else banned
    drawn = draw_moses_smiles(molecules, seed)
    kept = [s for s in drawn if skeleton_smiles(s) not in banned]
    return kept, {"drawn": len(drawn), "left out": len(drawn) - len(kept), "kept": len(kept),
                  "evaluation skeletons": len(banned)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--molecules", type=int, default=15_000, help="MOSES molecules drawn (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the draw; not 0, the replica's (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "moses-corpus" / "moses-15k.smi",
                        help="SMILES file to write (default: %(default)s)")
    args = parser.parse_args(argv)
    smiles, counts = moses_corpus(args.molecules, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    header = "smiles\n"  # read_smiles_file skips a header naming the column
    atomic_write_text(args.out, header + "\n".join(smiles) + "\n")
    print(f"{args.out}: {counts['kept']:,} SMILES ({counts['drawn']:,} drawn with seed {args.seed}, "
          f"{counts['left out']:,} left out for sharing a skeleton with the replica's "
          f"{counts['evaluation skeletons']:,} validation and test skeletons)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
