#!/usr/bin/env python
"""Beyond 1-WL: an evaluation fixed before any design, with a development set and a held-out set.

Every set is a group of graphs that colour refinement (1-WL) cannot tell apart, one class per graph:

* DEVELOPMENT set (used for design): CSL (10 classes, 41 nodes, 4-regular) and the two 1-WL pairs of
  ``wl_pairs.py`` (2 classes each). The pretraining data (``--corpus``: a source or a recipe) is checked
  for every evaluation graph (:func:`gpse_dgl.train.pretraining.graph_sources.find_evaluation_graphs`); rows with a
  graph in its training split are marked ``in-sample`` (pretrain with ``data.exclude_graphs: [wl-pairs,
  csl]`` to remove them).
* HELD-OUT set (reported only, never used to choose): EXP's 1-WL-equivalent pairs (read from disk when
  there, else skipped with a line), strongly regular families (4 x 4 rook's graph vs Shrikhande; Latin
  square graphs of 10 main classes of order 7) and circulant families whose size and degree no added
  pretraining graph of the default model has together: :data:`gpse_dgl.data.families.FAMILIES`.

Protocol (cheap, no training): every class gets ``--copies`` randomly relabelled copies; each copy is
encoded and its node encodings mean-pooled into one vector; the score is leave-one-out nearest-centroid
accuracy (each vector goes to the nearest class mean, its own class's mean taken without it; distances
that differ by less than ``TIE_TOLERANCE`` of the vectors' norm are ties, scored as the share of tied
classes that is right, so identical vectors score chance). Methods:

* ``GPSE``: the checkpoint with random N(0, 1) input, a fresh draw per copy and seed;
* ``GPSE x=0``: the same with all-zero input (an MPNN with identical inputs is bounded by 1-WL);
* ``RWSE``, ``LapPE``: explicit PSEs (``gpse_dgl.pse.compute_pses``), pooled the same way.

``--methods`` adds how the encodings are computed and kept (:data:`PRECISION_METHODS`): ``GPSE bf16 pass``
runs the encoder in bf16 (``encode(..., precision="bf16")``); ``GPSE bf16 stored`` rounds the fp32
encodings to bf16 before pooling, as a user who stores them in bf16 would; ``GPSE standardised bf16
stored`` does so after subtracting each column's mean and dividing by its standard deviation (over the
set's nodes), then maps them back, so that only the rounding differs.

Each of ``--seeds`` seeds redraws the relabelling and the random input; tables give mean ± std over seeds.
EXP pairs are scored pair by pair (2 classes) and averaged over ``--exp-pairs`` pairs. CSL's full number
trains a GIN on the encodings: ``python benchmarks/csl.py`` (RESULTS 8).

Run::

    python benchmarks/expressivity.py                          # shipped default model, about 3 minutes
    python benchmarks/expressivity.py --corpus recipes/rdkit-base-stage5.yaml   # check its added graphs too
    python benchmarks/expressivity.py --checkpoint runs/x/best.pt --out benchmarks/results/expressivity-x
    python benchmarks/expressivity.py --methods GPSE --samples 8    # 8 draws of the random input averaged

Outputs: ``<out>/expressivity.md`` (both tables), ``<out>/expressivity.json`` (every per-seed score) and
the figure ``benchmarks/figures/expressivity.png`` (``--figure``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, Path(__file__).resolve().parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

METHODS = ("GPSE", "GPSE x=0", "RWSE", "LapPE")
PRECISION_METHODS = ("GPSE bf16 pass", "GPSE bf16 stored", "GPSE standardised bf16 stored")
TIE_TOLERANCE = 1e-5  # relative: float32 rounding of a 16-layer forward stays well below it
DEV_SETS = ("csl", "squares-vs-triangles", "hexagon-vs-pentagon")
FAMILY_COPIES = 8


# ---------------------------------------------------------------------------------------------------------
# scoring

def loo_nearest_centroid(vectors: np.ndarray, labels: np.ndarray, tolerance: float = TIE_TOLERANCE) -> float:
    """Leave-one-out nearest-centroid accuracy of ``vectors`` (``(n, d)``) with class ``labels``.

    Vector ``i`` is compared with every class mean, its own class's mean computed without it; distances
    within ``tolerance`` times the mean vector norm of the smallest count as tied, and a tie scores the
    share of tied classes that is right (identical vectors score chance, not 0 or 1).
    """
    vectors, labels = np.asarray(vectors, dtype=np.float64), np.asarray(labels)
    classes = np.unique(labels)
    sums = np.stack([vectors[labels == c].sum(0) for c in classes])
    counts = np.array([(labels == c).sum() for c in classes], dtype=np.float64)
    if counts.min() < 2:
        raise ValueError("loo_nearest_centroid: every class needs at least two vectors")
    scale = max(float(np.linalg.norm(vectors, axis=1).mean()), 1e-12)
    score = 0.0
    for vector, label in zip(vectors, labels):
        own = classes == label
        centroids = (sums - own[:, None] * vector) / (counts - own)[:, None]
        dist = np.linalg.norm(centroids - vector, axis=1)
        tied = dist <= dist.min() + tolerance * scale
        score += tied[own].sum() / tied.sum()
    return score / len(labels)


def pooled(model, graphs: list, method: str, seed: int, samples: int = 1) -> np.ndarray:
    """``(len(graphs), d)`` mean-pooled node encodings of ``graphs`` by ``method`` (:data:`METHODS`); GPSE
    encodings with random input are averaged over ``samples`` draws of it."""
    import torch

    if method in ("RWSE", "LapPE"):
        from gpse_dgl.pse import compute_pses

        done, _ = compute_pses([g.clone() for g in graphs], method)
        return np.stack([g.ndata[method].double().mean(0).numpy() for g in done])
    import dgl

    from gpse_dgl.encode import encode

    dim_in = getattr(model, "encoder", model).dim_in
    batch = dgl.batch(graphs)
    if method == "GPSE x=0":
        draws = [torch.zeros(batch.num_nodes(), dim_in)]
    else:  # a seeded draw per copy and sample: copies of one graph must not share features
        draws = [torch.cat([torch.randn(g.num_nodes(), dim_in, generator=torch.Generator().manual_seed(
            seed * 100_003 + i + k * 1_000_000_007)) for i, g in enumerate(graphs)]) for k in range(samples)]
    precision = "bf16" if method == "GPSE bf16 pass" else "fp32"
    nodes = sum(encode(model, batch, x=x, precision=precision) for x in draws) / len(draws)
    if method == "GPSE bf16 stored":
        nodes = nodes.to(torch.bfloat16).float()
    elif method == "GPSE standardised bf16 stored":
        mean, std = nodes.mean(0), nodes.std(0).clamp(min=1e-12)
        nodes = ((nodes - mean) / std).to(torch.bfloat16).float() * std + mean
    return torch.stack([part.double().mean(0) for part in nodes.split(batch.batch_num_nodes().tolist())]).numpy()


def score_groups(model, groups: list[dict], copies: int, seeds, methods=METHODS, samples: int = 1) -> dict:
    """Accuracy per method and seed, averaged over ``groups`` (each ``{class name: graph}``, scored alone).

    All groups' copies are encoded in one batch per method and seed; each group is scored on its own.
    """
    from gpse_dgl.data.families import family_dataset

    out = {method: [] for method in methods}
    for seed in seeds:
        datasets = [family_dataset("custom", copies, seed, graphs=group) for group in groups]
        graphs = [g for ds in datasets for g in ds.graphs]
        bounds = np.cumsum([0] + [len(ds.graphs) for ds in datasets])
        for method in methods:
            vectors = pooled(model, graphs, method, seed, samples)
            out[method].append(float(np.mean([loo_nearest_centroid(vectors[a:b], ds.labels.numpy())
                                              for a, b, ds in zip(bounds, bounds[1:], datasets)])))
    return out


# ---------------------------------------------------------------------------------------------------------
# the two sets

def dev_groups() -> dict:
    """Development set: ``{row: [group]}``."""
    from gpse_dgl.data.families import evaluation_graphs
    from gpse_dgl.data.synthetic import WL_PAIRS, wl_pair_graphs

    pairs = wl_pair_graphs()
    rows = {"csl": [evaluation_graphs("csl")]}
    for a, b in WL_PAIRS:
        rows[f"{a}-vs-{b}"] = [{a: pairs[a], b: pairs[b]}]
    return rows


def exp_groups(root, pairs: int) -> tuple[list[dict] | None, str]:
    """The first ``pairs`` EXP pairs (graphs ``2i``, ``2i + 1`` of GRAPHSAT.txt), or None and why not."""
    from gpse_dgl.data.exp import load_exp
    from gpse_dgl.data.registry import default_root
    from gpse_dgl.utils.errors import GPSEError

    try:
        dataset = load_exp(root or default_root())
    except GPSEError as exc:
        return None, f"EXP: skipped ({str(exc).splitlines()[0]})"
    from gpse_dgl.utils.graph import structure_only

    graphs = [structure_only(g) for g in dataset.graphs]
    count = min(pairs, len(graphs) // 2)
    return ([{f"exp-{i}a": graphs[2 * i], f"exp-{i}b": graphs[2 * i + 1]} for i in range(count)],
            f"EXP: {count} of {len(graphs) // 2} pairs from {dataset.info['source']}")


def in_sample_graphs(corpus: str, log=print) -> list[dict]:
    """Evaluation graphs (every set) in a pretraining corpus, with their split.

    ``corpus`` is a source name (its graphs, split as pretraining splits them) or a recipe file (its whole
    pretraining data: the split source plus the ring edits and regular graphs its training split adds).
    """
    from gpse_dgl.data.families import EVALUATION_SETS
    from gpse_dgl.train.pretraining.data import add_training_graphs
    from gpse_dgl.train.pretraining.graph_sources import find_evaluation_graphs, load_source_graphs, subset_and_split
    from gpse_dgl.train.pretraining.schema import load_pretrain_recipe, validate_pretrain_recipe

    is_recipe = corpus.endswith((".yaml", ".yml"))
    data = (load_pretrain_recipe(corpus) if is_recipe
            else validate_pretrain_recipe({"data": {"source": corpus}}, "--corpus"))["data"]
    graphs, info = load_source_graphs(data)
    graphs, codes = subset_and_split(graphs, data, info)
    if is_recipe:
        graphs, codes, _ = add_training_graphs(graphs, codes, data, info, False, lambda line: None)
    log(f"corpus {corpus}: {len(graphs):,} graphs checked")
    return find_evaluation_graphs(graphs, list(EVALUATION_SETS), codes)


# ---------------------------------------------------------------------------------------------------------
# report

def summary(scores: list[float]) -> str:
    return f"{np.mean(scores):.3f} ± {np.std(scores):.3f}"


def markdown(rows: list[dict], methods=METHODS) -> str:
    """Two tables: development (used for design), held-out (reported only)."""
    lines = []
    for role, title in (("dev", "Development set (used for design)"), ("held-out", "Held-out set (reported only)")):
        part = [r for r in rows if r["set"] == role]
        if not part:
            continue
        lines += ["", f"### {title}", "",
                  "| graphs | nodes | degree | classes | chance | " + " | ".join(methods) + " | note |",
                  "|---|---:|---:|---:|---:|" + "---:|" * len(methods) + "---|"]
        for r in part:
            cells = " | ".join(summary(r["scores"][m]) for m in methods)
            lines.append(f"| {r['name']} | {r['nodes']} | {r['degree']} | {r['classes']} | {r['chance']:.2f} | "
                         f"{cells} | {r.get('note', '')} |")
        if role == "held-out":
            families = [r for r in part if r["name"] != "exp"]
            if families:
                means = [np.mean([np.mean(r["scores"][m]) for r in families]) for m in methods]
                lines.append(f"| mean of {len(families)} families | | | | | "
                             + " | ".join(f"{v:.3f}" for v in means) + " | |")
    return "\n".join(lines).strip()


def plot(rows: list[dict], path: Path, methods=METHODS):
    """Grouped bars (rows x methods, mean ± std over seeds) with chance ticks; None without matplotlib."""
    try:
        from _figures import bars_with_errors
    except ImportError:
        return None
    groups = [_short_name(r["name"]) + ("\n(dev)" if r["set"] == "dev" else "") for r in rows]
    series = [(m, [float(np.mean(r["scores"][m])) for r in rows], [float(np.std(r["scores"][m])) for r in rows])
              for m in methods]
    return bars_with_errors(groups, series, path, "Pooled encodings, leave-one-out nearest centroid "
                            "((dev): used for design; others held out, reported only)", "accuracy",
                            reference=("chance", [r["chance"] for r in rows]), height=4.2, value_format="{:.2f}")


def _short_name(name: str) -> str:
    """Axis label of a row: ``circulant-83-deg4`` -> ``C83 d4``, ``squares-vs-triangles`` -> ``sq. / tri.``."""
    if name.startswith("circulant-"):
        _, n, degree = name.split("-")
        return f"C{n} d{degree[3:]}"
    if "-vs-" in name:
        return " /\n".join(part[:4] + "." for part in name.split("-vs-"))
    labels = {"csl": "CSL", "exp": "EXP", "srg-16-6-2-2": "rook /\nShrikh.", "latin-squares-7": "Latin\nsq. 7"}
    return labels.get(name, name)


def _describe(group: dict) -> tuple[str, str]:
    from gpse_dgl.utils.graph import graph_simple_edges

    nodes = sorted({g.num_nodes() for g in group.values()})
    degrees = sorted({int(d) for g in group.values() for d in
                      np.bincount(np.concatenate(graph_simple_edges(g)), minlength=g.num_nodes())})
    span = lambda v: str(v[0]) if len(v) == 1 else f"{v[0]}-{v[-1]}"  # noqa: E731
    return span(nodes), span(degrees)


def run(model, seeds, families, copies: int, csl_copies: int, pair_copies: int, exp_root, exp_pairs: int,
        exp_copies: int, log=print, methods=METHODS, samples: int = 1) -> tuple[list[dict], list[str]]:
    """Score every set; returns the rows and the notes (skipped sets)."""
    rows, notes = [], []
    plan = [("dev", name, groups, csl_copies if name == "csl" else pair_copies)
            for name, groups in dev_groups().items()]
    exp, line = exp_groups(exp_root, exp_pairs)
    notes.append(line)
    if exp is not None:
        plan.append(("held-out", "exp", exp, exp_copies))
    from gpse_dgl.data.families import family_graphs

    plan += [("held-out", name, [family_graphs(name)], copies) for name in families]
    for role, name, groups, n_copies in plan:
        started = time.perf_counter()
        scores = score_groups(model, groups, n_copies, seeds, methods, samples)
        nodes, degree = _describe({k: g for group in groups for k, g in group.items()})
        rows.append({"set": role, "name": name, "classes": len(groups[0]), "chance": 1.0 / len(groups[0]),
                     "nodes": nodes, "degree": degree, "copies": n_copies, "groups": len(groups), "scores": scores})
        log(f"{role} {name}: " + ", ".join(f"{m} {summary(s)}" for m, s in scores.items())
            + f" ({time.perf_counter() - started:.0f} s)")
    return rows, notes


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="GPSE checkpoint (default: the shipped model)")
    parser.add_argument("--seeds", type=int, default=3, help="random-input seeds (default 3)")
    parser.add_argument("--copies", type=int, default=FAMILY_COPIES, help="copies per class of a family")
    parser.add_argument("--csl-copies", type=int, default=15, help="copies per CSL class (benchmark: 15)")
    parser.add_argument("--pair-copies", type=int, default=20, help="copies per 1-WL pair graph (paper: 20)")
    parser.add_argument("--families", default="all", help="comma-separated FAMILIES names, or all")
    parser.add_argument("--exp-root", default=None, help="folder holding EXP/raw/GRAPHSAT.txt (default: the "
                                                          "data registry's root)")
    parser.add_argument("--exp-pairs", type=int, default=100, help="EXP pairs scored (of 600)")
    parser.add_argument("--exp-copies", type=int, default=4, help="copies per EXP graph")
    parser.add_argument("--corpus", default="rdkit-molecules",
                        help="pretraining source name or recipe file checked for evaluation graphs (a recipe "
                             "includes the graphs it adds; none: skip the check)")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"comma-separated, from {', '.join(METHODS + PRECISION_METHODS)}")
    parser.add_argument("--samples", type=int, default=1, help="draws of the random input averaged per GPSE "
                        "encoding (encode's samples; default 1, as a single encode call)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/expressivity"), help="output folder")
    parser.add_argument("--figure", type=Path, default=ROOT / "benchmarks" / "figures" / "expressivity.png",
                        help="PNG path (default: benchmarks/figures/expressivity.png)")
    args = parser.parse_args(argv)

    import torch

    from gpse_dgl.data.families import FAMILIES
    from gpse_dgl.encode import describe_checkpoint, load_gpse
    from gpse_dgl.utils.errors import GPSEError

    torch.set_num_threads(args.threads)
    families = list(FAMILIES) if args.families == "all" else [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        sys.exit(f"error: unknown family {unknown[0]!r}; choose from {', '.join(FAMILIES)}")
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS + PRECISION_METHODS]
    if unknown:
        sys.exit(f"error: unknown method {unknown[0]!r}; choose from {', '.join(METHODS + PRECISION_METHODS)}")
    try:
        model = load_gpse(args.checkpoint)
    except GPSEError as exc:
        sys.exit(f"error: {exc}")
    started = time.perf_counter()
    rows, notes = run(model, range(args.seeds), families, args.copies, args.csl_copies, args.pair_copies,
                      args.exp_root, args.exp_pairs, args.exp_copies, methods=methods, samples=args.samples)
    in_sample = [] if args.corpus == "none" else in_sample_graphs(args.corpus)
    _mark_in_sample(rows, in_sample)
    notes.insert(0, f"GPSE: {describe_checkpoint(model)}; {args.seeds} seeds (mean ± std); "
                    f"{args.samples} random-input draw(s) averaged per encoding; mean-pooled encodings; "
                    f"leave-one-out nearest-centroid accuracy; {time.perf_counter() - started:.0f} s.")
    if args.corpus != "none":
        found = ", ".join(f"{item['graph']} ({item['split']})" for item in in_sample) or "none"
        notes.append(f"evaluation graphs in the pretraining data of {args.corpus}: {found}")
    notes.append("CSL with the paper's GIN protocol: python benchmarks/csl.py --checkpoint <checkpoint>")
    png = plot(rows, args.figure, methods)
    notes.append(f"plot: {png}" if png else "plot: not drawn (matplotlib is not installed)")
    table = markdown(rows, methods)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "expressivity.md").write_text(table + "\n\n" + "\n".join(notes) + "\n", encoding="utf-8")
    record = {"checkpoint": describe_checkpoint(model), "seeds": args.seeds, "samples": args.samples,
              "methods": methods,
              "rows": rows, "in_sample": in_sample, "notes": notes}
    (args.out / "expressivity.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    print(table)
    print("\n" + "\n".join(notes))


def _mark_in_sample(rows: list[dict], found: list[dict]) -> None:
    """Note on each row which of its graphs the pretraining data holds, and in which split."""
    for row in rows:
        hits = [f"{graph} ({item['split']})" for item in found
                for set_name, graph in [item["graph"].split("/", 1)]
                if set_name == row["name"] or (set_name == "wl-pairs" and graph in row["name"].split("-vs-"))]
        if hits:
            row["note"] = "in pretraining data: " + ", ".join(hits)


if __name__ == "__main__":
    main()
