#!/usr/bin/env python
"""GPSE on 1-WL-indistinguishable graph pairs: random vs constant input features (paper appendix
"Visualization of GPSE encodings on 1-WL indistinguishable graph pairs").

Two non-isomorphic pairs that 1-WL cannot tell apart (``gpse_dgl.data.synthetic.wl_pairs_dataset``):
two 4-cycles sharing an edge vs two triangles joined by an edge, and the paper's HEXAGON (decalin) vs
PENTAGON (bicyclopentyl); 20 copies of each graph. Every graph is encoded by a pretrained GPSE

* with random N(0, 1) input features, a fresh draw per copy (seeded by ``(--seed, copy)``), as in GPSE's
  training, and
* with constant input (``x = 1`` on every node),

and its node encodings are mean-pooled into one vector per graph. Per pair the 40 vectors are projected
on their first two principal components (numpy SVD; the paper fits its PCA on ZINC encodings instead)
and plotted, and the separation of the two members is scored in the full encoding space:

* ``silhouette``: mean silhouette coefficient of the two members (1 = tight, well-separated groups,
  0 = no separation; identical points count 0);
* ``gap / spread``: distance between the two members' mean vectors divided by the RMS distance of a
  vector to its own member's mean (differences below 1e-6 of the vectors' norm are rounding noise and
  count as 0; 0 / 0 reads 0: nothing separates the members).

The paper's claim: random input features separate the members, constant input does not (an MPNN with
identical inputs is bounded by 1-WL).

Run::

    python benchmarks/wl_pairs.py --checkpoint runs/quickstart/best.pt --out benchmarks/results/wl_pairs

Outputs: ``<out>/wl_pairs.md`` (scores table), ``<out>/wl_pairs.json`` and the figure
``benchmarks/figures/wl_pairs.png`` (``--figure``; without matplotlib the scores are still written).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODES = ("random", "constant")
SPREAD_FLOOR = 1e-6


def graph_encodings(model, graphs, mode: str, seed: int = 0, samples: int = 1) -> np.ndarray:
    """``(len(graphs), d)`` mean-pooled GPSE encodings with ``mode`` input features.

    With random input every copy gets its own seeded draw (identical copies must not share features);
    ``samples > 1`` averages the encodings of that many draws per copy (less noise, same signal).
    """
    import dgl
    import torch

    from gpse_dgl.encode import encode

    dim_in = getattr(model, "encoder", model).dim_in
    batch = dgl.batch(graphs)
    draws = []
    for sample in range(1 if mode == "constant" else samples):
        if mode == "constant":
            x = torch.ones(batch.num_nodes(), dim_in)
        else:
            x = torch.cat([torch.randn(g.num_nodes(), dim_in, generator=torch.Generator().manual_seed(
                (seed * 1_000 + sample) * 100_003 + i)) for i, g in enumerate(graphs)])
        draws.append(encode(model, batch, x=x))
    nodes = torch.stack(draws).mean(0)
    return torch.stack([part.mean(0) for part in nodes.split(batch.batch_num_nodes().tolist())]).double().numpy()


def pca_2d(vectors: np.ndarray) -> np.ndarray:
    """Projection on the first two principal components (``(n, 2)``; zeros when all rows are equal).

    Deviations below ``SPREAD_FLOOR`` times the mean vector norm are rounding noise and are zeroed, so
    encodings that are equal in exact arithmetic plot as one point instead of a magnified noise pattern.
    """
    centred = vectors - vectors.mean(0, keepdims=True)
    centred[np.abs(centred) < SPREAD_FLOOR * max(float(np.linalg.norm(vectors, axis=1).mean()), 1e-12)] = 0.0
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    components = vt[:2] if vt.shape[0] >= 2 else np.vstack([vt, np.zeros_like(vt)])[:2]
    return centred @ components.T


def silhouette(vectors: np.ndarray, labels: np.ndarray) -> float:
    """Mean silhouette coefficient (Euclidean), two or more groups; 0 for points with a = b = 0.

    Distances below ``SPREAD_FLOOR`` times the mean vector norm count as 0: float32 rounding must not
    turn encodings that are equal in exact arithmetic into "perfectly separated" groups.
    """
    dist = np.sqrt(np.maximum(((vectors[:, None, :] - vectors[None, :, :]) ** 2).sum(-1), 0.0))
    dist[dist < SPREAD_FLOOR * max(float(np.linalg.norm(vectors, axis=1).mean()), 1e-12)] = 0.0
    scores = []
    for i, label in enumerate(labels):
        same = labels == label
        same[i] = False
        a = dist[i, same].mean() if same.any() else 0.0
        b = min(dist[i, labels == other].mean() for other in np.unique(labels) if other != label)
        top = max(a, b)
        scores.append(0.0 if top == 0 else (b - a) / top)
    return float(np.mean(scores))


def separation(vectors: np.ndarray, labels: np.ndarray) -> dict:
    """``gap`` between member means, within-member RMS ``spread``, their ``ratio`` and the ``silhouette``.

    Gaps and spreads below ``SPREAD_FLOOR`` times the mean vector norm are rounding noise and count as 0;
    the ratio of two zeros is 0 (nothing separates the members).
    """
    tol = SPREAD_FLOOR * max(float(np.linalg.norm(vectors, axis=1).mean()), 1e-12)
    means = [vectors[labels == m].mean(0) for m in (0, 1)]
    gap = float(np.linalg.norm(means[0] - means[1]))
    spread = float(np.sqrt(np.mean([((vectors[labels == m] - means[m]) ** 2).sum(1).mean() for m in (0, 1)])))
    gap, spread = (0.0 if gap < tol else gap), (0.0 if spread < tol else spread)
    ratio = gap / spread if spread > 0 else (0.0 if gap == 0 else float("inf"))
    return {"gap": gap, "spread": spread, "ratio": ratio, "silhouette": silhouette(vectors, labels)}


def analyse(model, copies: int = 20, seed: int = 0, samples: int = 1) -> dict:
    """Scores and 2-D projections per pair and input mode."""
    from gpse_dgl.data.synthetic import WL_PAIRS, wl_pair_graphs

    graphs = wl_pair_graphs()
    results = {}
    for pair in WL_PAIRS:
        members = [graphs[name].clone() for name in pair for _ in range(copies)]
        labels = np.repeat([0, 1], copies)
        for mode in MODES:
            vectors = graph_encodings(model, members, mode, seed, samples)
            results[(pair, mode)] = {"scores": separation(vectors, labels), "points": pca_2d(vectors),
                                     "labels": labels}
    return results


def markdown(results: dict) -> str:
    lines = ["| pair | input | silhouette | gap / spread | gap | spread |", "|---|---|---:|---:|---:|---:|"]
    for (pair, mode), item in results.items():
        s = item["scores"]
        lines.append(f"| {pair[0]} vs {pair[1]} | {mode} | {s['silhouette']:.3f} | {s['ratio']:.3g} | "
                     f"{s['gap']:.3g} | {s['spread']:.3g} |")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> bool:
    """2 x 2 scatter plots (pairs x input modes); False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    pairs = list(dict.fromkeys(pair for pair, _ in results))
    fig, axes = plt.subplots(len(pairs), len(MODES), figsize=(4.2 * len(MODES), 3.8 * len(pairs)), squeeze=False)
    for row, pair in enumerate(pairs):
        for col, mode in enumerate(MODES):
            item, ax = results[(pair, mode)], axes[row][col]
            for member, colour in ((0, "#4b0082"), (1, "#ff7f0e")):
                pts = item["points"][item["labels"] == member]
                ax.scatter(pts[:, 0], pts[:, 1], s=18, c=colour, alpha=0.75, label=pair[member])
            ax.set_title(f"{mode} input: silhouette {item['scores']['silhouette']:.2f}", fontsize=10)
            ax.set_xlabel("PC 1")
            ax.set_ylabel("PC 2")
            ax.ticklabel_format(style="sci", scilimits=(-2, 3))  # 1e-4-sized spreads: no overlapping labels
            ax.legend(fontsize=8)
    fig.suptitle("GPSE encodings (mean-pooled) of 1-WL-indistinguishable pairs, 2-D PCA")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="GPSE checkpoint (default: the shipped model)")
    parser.add_argument("--copies", type=int, default=20, help="copies of each graph (paper: 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random input features")
    parser.add_argument("--samples", type=int, default=1,
                        help="average this many random draws per copy (paper: 1; more shows the signal under "
                             "the noise of a weak encoder)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/wl_pairs"), help="output folder")
    parser.add_argument("--figure", type=Path, default=ROOT / "benchmarks" / "figures" / "wl_pairs.png",
                        help="PNG path (default: benchmarks/figures/wl_pairs.png)")
    args = parser.parse_args(argv)

    from gpse_dgl.encode import describe_checkpoint, load_gpse
    from gpse_dgl.utils.errors import GPSEError

    try:
        model = load_gpse(args.checkpoint)
    except GPSEError as exc:
        sys.exit(f"error: {exc}")
    results = analyse(model, args.copies, args.seed, args.samples)
    table = markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.figure
    plotted = plot(results, png)
    draws = "" if args.samples == 1 else f", random input averaged over {args.samples} draws"
    notes = [f"GPSE: {describe_checkpoint(model)}; {args.copies} copies per graph; mean-pooled encodings{draws}.",
             "Paper: random input separates the members of each pair, constant input (x = 1) does not."]
    notes.append(f"plot: {png}" if plotted else "plot: not drawn (matplotlib is not installed: "
                                                 "pip install matplotlib)")
    (args.out / "wl_pairs.md").write_text(table + "\n\n" + "\n".join(notes) + "\n", encoding="utf-8")
    scores = {f"{pair[0]}-vs-{pair[1]}/{mode}": item["scores"] for (pair, mode), item in results.items()}
    summary = {"checkpoint": describe_checkpoint(model), "copies": args.copies, "samples": args.samples,
               "scores": scores}
    (args.out / "wl_pairs.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(table)
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
