"""Support-vector regression on molecular descriptors, tuned as MoleculeACE tuned its SVM (for moleculeace.py).

MoleculeACE's protocol (its ``Data/configures/default/SVM.yml`` and ``models/optimize.py``, read from the
wheel): an RBF-kernel ``sklearn.svm.SVR`` with ``epsilon = 0.1``, ``C`` in {1, 10, 100, 1000, 10000} and
``gamma`` in {1e-6, ..., 0.1} (:data:`GRID`; the paper's Bayesian search tries all 30 pairs since it may
take 50), each scored by the mean validation RMSE of a 5-fold ``StratifiedKFold`` of the training split
(shuffled with seed 42, stratified on the training labels cut at their median); the best pair is refitted
on the whole training split. The RBF kernel

    K(a, b) = exp(-gamma * ||a - b||^2)

only sees squared distances, so they are computed once per descriptor (:func:`squared_distances`) and
every (gamma, C) pair fits ``SVR(kernel="precomputed")`` on ``exp(-gamma * D)``: the same model as
``SVR(kernel="rbf", gamma=gamma)``, without recomputing the kernel 150 times.

Descriptors:

* ECFP: Morgan fingerprints of radius 2 folded to 1,024 bits (MoleculeACE's ``Featurizer.ecfp``);
* GPSE: the node encodings of a pretrained GPSE pooled per molecule (:func:`pool`), each column
  standardised with the training split's mean and std;
* ECFP + GPSE: the sum of the two squared distances, the GPSE part scaled so that its mean over training
  pairs is ``weight`` times ECFP's (the concatenation ``[ecfp, s * gpse]`` with that ``s``).

Example
-------
>>> import numpy as np
>>> d = squared_distances(np.array([[0.0, 0.0], [3.0, 4.0]]))
>>> d.tolist()
[[0.0, 25.0], [25.0, 0.0]]
"""
from __future__ import annotations

import numpy as np

GRID = {"C": (1, 10, 100, 1000, 10000), "gamma": (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)}
EPSILON = 0.1
FOLDS, CV_SEED = 5, 42
POOLINGS = ("mean", "sum", "mean+max")


def ecfp(smiles, radius: int = 2, bits: int = 1024) -> np.ndarray:
    """``(n, bits)`` float32 0/1 Morgan fingerprints (MoleculeACE's ECFP)."""
    from rdkit import Chem, DataStructs  # rdkit: a heavy import, for molecules only
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    out = np.zeros((len(smiles), bits), dtype=np.float32)
    for row, text in enumerate(smiles):
        DataStructs.ConvertToNumpyArray(generator.GetFingerprint(Chem.MolFromSmiles(text)), out[row])
    return out


def pool(encodings, how: str) -> np.ndarray:
    """One row per molecule from its ``(n_atoms, d)`` encodings: ``mean``, ``sum`` or ``mean+max``."""
    rows = []
    for enc in encodings:
        enc = np.asarray(enc, dtype=np.float64)
        parts = {"mean": [enc.mean(0)], "sum": [enc.sum(0)], "mean+max": [enc.mean(0), enc.max(0)]}[how]
        rows.append(np.concatenate(parts))
    return np.stack(rows)


def standardise(x: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Columns scaled by the training rows' mean and std (constant columns left at 0)."""
    mean, std = x[train].mean(0), x[train].std(0)
    return (x - mean) / np.where(std > 0, std, 1.0)


def squared_distances(x: np.ndarray) -> np.ndarray:
    """``(n, n)`` float64 ``||x_i - x_j||^2`` (clipped at 0 against rounding)."""
    x = np.asarray(x, dtype=np.float64)
    norms = (x * x).sum(1)
    return np.maximum(norms[:, None] + norms[None, :] - 2.0 * x @ x.T, 0.0)


def combined_distances(d_ecfp: np.ndarray, d_gpse: np.ndarray, train: np.ndarray, weight: float) -> np.ndarray:
    """ECFP's squared distances plus GPSE's scaled so that its mean over training pairs is ``weight`` times
    ECFP's."""
    block = np.ix_(train, train)
    return d_ecfp + weight * d_ecfp[block].mean() / max(d_gpse[block].mean(), 1e-12) * d_gpse


def cv_folds(y_train: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """MoleculeACE's folds: ``StratifiedKFold(5, shuffle, seed 42)`` on the labels cut at their median."""
    from sklearn.model_selection import StratifiedKFold

    labels = (y_train >= np.median(y_train)).astype(int)
    return list(StratifiedKFold(n_splits=FOLDS, shuffle=True, random_state=CV_SEED).split(labels, labels))


def _fit_predict(kernel: np.ndarray, y: np.ndarray, fit: np.ndarray, predict: np.ndarray, c: float) -> np.ndarray:
    from sklearn.svm import SVR

    model = SVR(kernel="precomputed", C=c, epsilon=EPSILON)
    model.fit(kernel[np.ix_(fit, fit)], y[fit])
    return model.predict(kernel[np.ix_(predict, fit)])


def tuned_svr(distances: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray,
              grid: dict | None = None) -> dict:
    """Choose (C, gamma) by MoleculeACE's cross-validation on ``train``, refit on it, predict ``test``.

    Returns ``{"C", "gamma", "cv_rmse", "pred"}`` (``pred`` aligned with ``test``).
    """
    grid = grid or GRID
    folds = cv_folds(y[train])
    best = None
    for gamma in grid["gamma"]:
        kernel = np.exp(-gamma * distances)
        for c in grid["C"]:
            errors = [np.sqrt(np.mean((_fit_predict(kernel, y, train[a], train[b], c) - y[train[b]]) ** 2))
                      for a, b in folds]
            score = float(np.mean(errors))
            if best is None or score < best["cv_rmse"]:
                best = {"C": c, "gamma": gamma, "cv_rmse": score}
    kernel = np.exp(-best["gamma"] * distances)
    return {**best, "pred": _fit_predict(kernel, y, train, test, best["C"])}
