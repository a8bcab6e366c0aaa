#!/usr/bin/env python
"""Downstream training speed: gpse-dgl's downstream models against their PyG equivalents, same batches, one process.

Models (``--models``), built from the ZINC-replica recipes with ``model.pe.source: none`` (the encoding is a
shared input, not timed here):

* ``gine``      ``recipes/downstream/zinc-replica-gine.yaml``: GINE 4 x 128
* ``gps``       ``recipes/downstream/zinc-replica.yaml``: GPS 10 x 64 with a GINE local MPNN, no attention
* ``gps-attn``  the same with 4-head global attention (``model.global_attention: transformer``)
* ``gatedgcn``, ``gcn``, ``gin``: the GINE recipe with ``model.name`` changed (4 x 128)

The PyG side (``benchmarks/_pyg_downstream.py``) is the model a PyG user writes: PyG's own ``GINEConv`` /
``GINConv`` / ``GCNConv`` with ``torch.nn.BatchNorm1d``, GraphGPS's GatedGCN and GPS layers, the same
encoders and head; every weight is copied from ours, so the parameter counts are equal (printed) and the
first losses agree.

Two timings per model and precision (``--precisions``; bf16 under ``torch.autocast`` on both sides, ours
through :class:`gpse_dgl.train.mixed_precision.MixedPrecision` as ``gpse-dgl train`` runs it):

* **model only**: forward, L1 loss, backward and ``torch.optim.AdamW`` step over ``--batches`` batches of
  ``--batch-size`` molecules collated before timing (DGL batches for us, PyG ``Batch`` es for PyG; the same
  molecules in the same order);
* **whole epoch** (``--epoch-models``): one training epoch of the same molecules as each library's users run
  it: ours is the project's own loop (:class:`gpse_dgl.train.downstream.loop.Trainer`: batching, target
  standardisation, the recipe's AdamW and gradient clipping, losses and scores); PyG's is a ``DataLoader``
  over ``Data`` objects, L1 loss, ``clip_grad_norm_(1.0)``, ``AdamW`` and ``loss.item()`` per step.

Rounds are interleaved (every row runs once per round, the two sides in alternating order) and the tables
give medians over rounds and the range of the per-round ratios PyG / ours (above 1: ours is faster). A
profile (``torch.profiler``, fp32, a few model-only steps) splits each side's step into the batch's CSR (ours),
edge sums, gathers, dense products, norms, element-wise passes, the optimiser (every op its step runs) and what
falls outside torch's ops (the Python of the loop and the layers). The same models' steps are then timed in
parts (forward, backward, AdamW step; no profiler), and a ceiling is printed: PyG's step over the part both sides share, our
dense products and the AdamW step, the ratio no change to the rest of our step could exceed. The products' rate in
each side's profiled step (the profiler's FLOPs of the matrix products over their self time) is printed beside this
host's rate on large float32 products, measured in the same run: how far the shared part itself could still shrink.

Usage::

    python benchmarks/downstream_speed.py                    # every model, fp32 and bf16, 3 rounds, 313 batches
    python benchmarks/downstream_speed.py --models gine,gps --rounds 5
    python benchmarks/downstream_speed.py --quick            # a few batches of every row (the test)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from _common import command_line, machine_line, markdown_table, set_threads_env, today  # noqa: E402
from _precision import matmul_peak_gflops  # noqa: E402

RECIPES = os.path.join(os.path.dirname(HERE), "recipes", "downstream")
MODELS = {
    "gine": ("zinc-replica-gine.yaml", []),
    "gps": ("zinc-replica.yaml", []),
    "gps-attn": ("zinc-replica.yaml", ["model.global_attention=transformer", "model.num_heads=4"]),
    "gatedgcn": ("zinc-replica-gine.yaml", ["model.name=gatedgcn"]),
    "gcn": ("zinc-replica-gine.yaml", ["model.name=gcn"]),
    "gin": ("zinc-replica-gine.yaml", ["model.name=gin"]),
}
#: Profile buckets: the first whose words appear in an op's name takes its self time (edge sums before dense
#: products: DGL's ``GSpMM`` contains ``mm``). Our C++ kernels' forwards are listed under their autograd names
#: (``ReluSum``, ``USum``, ``EdgeGatedSum``, ``BatchNormAct``, ``EdgeCSR``: ``GPSE_PROFILED`` in their sources).
BUCKETS = (
    ("optimiser", ("adam", "foreach", "optimizer")),
    ("batch CSR", ("edgecsr",)),
    ("edge sums", ("index_add", "scatter", "gspmm", "gsddmm", "relusum", "usum", "gatedsum", "segment", "index_put")),
    ("dense products", ("mm", "linear", "matmul", "bmm", "attention", "softmax")),
    ("norms", ("batch_norm", "layer_norm", "batchnormact")),
    ("gathers", ("index_select", "aten::index", "gather", "embedding")),
    ("element-wise", ("relu", "threshold", "add", "mul", "sub", "div", "dropout", "bernoulli", "sigmoid",
                      "copy_", "fill_", "zero", "clamp", "where", "sum", "mean", "abs", "sign", "neg")),
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    parser.add_argument("--epoch-models", default="gine,gps", help="models timed for a whole epoch too")
    parser.add_argument("--precisions", default="fp32,bf16", help="fp32 and/or bf16")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: %(default)s)")
    parser.add_argument("--batches", type=int, default=313, help="batches per timing (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=32, help="molecules per batch (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument("--profile-steps", type=int, default=20, help="model-only steps profiled per side")
    parser.add_argument("--molecules", type=int, default=12000, help="ZINC-replica molecules drawn")
    parser.add_argument("--quick", action="store_true", help="2 batches, 1 round, 400 molecules: a smoke test")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batches, args.profile_steps, args.molecules = 1, 2, 2, 400
    args.models = [m for m in args.models.split(",") if m]
    args.epoch_models = [m for m in args.epoch_models.split(",") if m in args.models]
    args.precisions = [p for p in args.precisions.split(",") if p]
    unknown = [m for m in args.models if m not in MODELS] + [p for p in args.precisions if p not in ("fp32", "bf16")]
    if unknown:
        parser.error(f"unknown model or precision: {', '.join(unknown)}")
    return args


class Row:
    """One model, precision and part: both sides' setups and their times per round."""

    def __init__(self, model: str, precision: str, part: str, ours, pyg):
        self.model, self.precision, self.part = model, precision, part
        self.run = {"ours": ours, "pyg": pyg}
        self.times = {"ours": [], "pyg": []}

    def time_round(self, round_index: int) -> None:
        sides = ("ours", "pyg") if round_index % 2 == 0 else ("pyg", "ours")
        for side in sides:
            started = time.perf_counter()
            self.run[side]()
            self.times[side].append(time.perf_counter() - started)


def main(argv=None) -> dict:
    args = parse_args(argv)
    set_threads_env(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    from gpse_dgl.data.registry import default_root
    from gpse_dgl.data.zinc_replica import load_zinc_replica

    dataset = load_zinc_replica(default_root(), num_molecules=args.molecules)
    rows, counts, profiles, step_ms, parts, bf16_dense_ms, rates = [], {}, {}, {}, {}, {}, {}
    for name in args.models:
        for precision in args.precisions:
            setup = _Setup(name, precision, dataset, args)
            counts[name] = setup.parameter_counts()
            rows.append(Row(name, precision, "model only", setup.ours_model_epoch, setup.pyg_model_epoch))
            if name in args.epoch_models:
                rows.append(Row(name, precision, "whole epoch", setup.ours_whole_epoch, setup.pyg_whole_epoch))
            if precision == "fp32" and args.profile_steps:
                profiles[name] = {side: profile_shares(step, args.profile_steps)
                                  for side, step in (("ours", setup.ours_step), ("pyg", setup.pyg_step))}
                step_ms[name] = {side: profiles[name][side].pop("step ms") for side in ("ours", "pyg")}
                rates[name] = {side: profiles[name][side].pop("product GFLOP/s") for side in ("ours", "pyg")}
                step_ms[name]["batches"] = len(setup.ours_batches)
                parts[name] = setup.step_parts()
            if precision == "bf16" and args.profile_steps:
                shares = profile_shares(setup.ours_step, args.profile_steps)
                bf16_dense_ms[name] = shares["dense products"] * shares["step ms"]
    if profiles:
        rates["host, 1024 x 1024"] = matmul_peak_gflops("cpu", "fp32", size=1024)
    for row in rows:  # warm-up: the kernels' first build, allocator, caches
        for side in row.run:
            row.run[side]()
    for round_index in range(args.rounds):
        for row in rows:
            row.time_round(round_index)
    return report(args, rows, counts, profiles, step_ms, parts, bf16_dense_ms, rates)


class _Setup:
    """Our model and its PyG mirror for one model and precision, with their batches and loops."""

    def __init__(self, name: str, precision: str, dataset, args):
        import torch

        from _pyg_downstream import pyg_batches, pyg_mirror, to_pyg_data
        from gpse_dgl.train.downstream.data import graph_batches, prepare_data
        from gpse_dgl.train.downstream.models import build_downstream_model
        from gpse_dgl.train.downstream.runs import plan_runs
        from gpse_dgl.train.downstream.schema import load_downstream_recipe
        from gpse_dgl.train.mixed_precision import MixedPrecision
        from gpse_dgl.utils.precision import decide_precision

        path, overrides = MODELS[name]
        self.recipe = load_downstream_recipe(os.path.join(RECIPES, path), overrides + [
            "model.pe.source=none", f"general_pipeline.precision={precision}", f"general_pipeline.batch_size="
            f"{args.batch_size}", "general_pipeline.clip_grad_norm=1.0"])
        self.prepared = prepare_data(self.recipe, dataset)
        torch.manual_seed(0)
        self.ours, self.config = build_downstream_model(self.recipe, self.prepared)
        self.pyg = pyg_mirror(self.ours)
        self.mixed_precision = decide_precision(precision, "cpu", warn=False)
        self.mixed = MixedPrecision(self.mixed_precision)
        self.precision, self.args = precision, args
        plan = plan_runs(self.prepared.dataset, self.recipe, [0])[0]
        train = plan.splits["train"][: args.batches * args.batch_size]
        plan.splits["train"] = train
        self.plan = plan
        order = train[torch.randperm(len(train), generator=torch.Generator().manual_seed(0))]
        self.ours_batches = list(graph_batches(self.prepared, order, args.batch_size))
        nkey, ekey = self.prepared.node_feat, self.prepared.edge_feat
        self.pyg_batches = pyg_batches(self.prepared.graphs, self.prepared.labels, nkey, ekey, args.batch_size,
                                       order.tolist())
        self.pyg_train = [to_pyg_data([self.prepared.graphs[i]], self.prepared.labels[i:i + 1], nkey, ekey)[0]
                          for i in train.tolist()]
        self.ours_opt = torch.optim.AdamW(self.ours.parameters(), lr=1e-3)
        self.pyg_opt = torch.optim.AdamW(self.pyg.parameters(), lr=1e-3)
        self.trainer = None
        self.epoch = 0

    def parameter_counts(self) -> tuple[int, int]:
        return tuple(sum(p.numel() for p in m.parameters()) for m in (self.ours, self.pyg))

    def _autocast(self):
        import torch

        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16")

    def _ours_loss(self, batch):
        graph, _, y = batch
        self.ours.train()
        nf = graph.ndata[self.prepared.node_feat]
        ef = graph.edata[self.prepared.edge_feat] if self.prepared.edge_feat else None
        with self.mixed.autocast():
            out = self.ours(graph, nf, ef)
        return (out.float().reshape(len(y), -1) - y.float().reshape(len(y), -1)).abs().mean()

    def _pyg_loss(self, batch):
        self.pyg.train()
        with self._autocast():
            out = self.pyg(batch)
        return (out.float() - batch.y).abs().mean()

    def _step(self, side: str, batch, clock: list | None = None):
        """One model-only step of ``side``; with ``clock``, its forward, backward and optimiser seconds are
        added to ``clock[0:3]``."""
        loss_of, optimiser = (self._ours_loss, self.ours_opt) if side == "ours" else (self._pyg_loss, self.pyg_opt)
        started = time.perf_counter()
        loss = loss_of(batch)
        forward = time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        backward = time.perf_counter()
        optimiser.step()
        if clock is not None:
            for i, span in enumerate((forward - started, backward - forward, time.perf_counter() - backward)):
                clock[i] += span
        return loss.detach()

    def ours_step(self, batch=None):
        return self._step("ours", batch or self.ours_batches[0])

    def pyg_step(self, batch=None):
        return self._step("pyg", batch or self.pyg_batches[0])

    def step_parts(self) -> dict:
        """Per side, milliseconds per model-only step in the forward pass (loss included), the backward pass
        (``zero_grad`` included) and the AdamW step, over one pass of the batches, without the profiler."""
        parts = {}
        for side, batches in (("ours", self.ours_batches), ("pyg", self.pyg_batches)):
            clock = [0.0, 0.0, 0.0]
            for batch in batches:
                self._step(side, batch, clock)
            parts[side] = dict(zip(("forward", "backward", "optimiser"), (t / len(batches) * 1e3 for t in clock)))
        return parts

    def ours_model_epoch(self):
        for batch in self.ours_batches:
            self.ours_step(batch)

    def pyg_model_epoch(self):
        for batch in self.pyg_batches:
            self.pyg_step(batch)

    def ours_whole_epoch(self):
        from pathlib import Path

        from gpse_dgl.train.downstream.loop import Trainer
        from gpse_dgl.train.optimizer import build_optimizer
        from gpse_dgl.train.schedule import LRSchedule

        if self.trainer is None:
            general = self.recipe["general_pipeline"]
            optimizer = build_optimizer(self.ours, general["optimizer"])
            scheduler = LRSchedule.from_recipe(optimizer, general, higher_is_better=False)
            self.trainer = Trainer(self.recipe, self.prepared, self.plan, self.ours, self.config, optimizer,
                                   scheduler, "cpu", Path("unused"), self.mixed)
        self.trainer._train_epoch(self.epoch)
        self.epoch += 1

    def pyg_whole_epoch(self):
        import torch
        from torch_geometric.loader import DataLoader

        loader = DataLoader(self.pyg_train, batch_size=self.args.batch_size, shuffle=True,
                            generator=torch.Generator().manual_seed(self.epoch))
        self.pyg.train()
        total = 0.0
        for batch in loader:
            with self._autocast():
                out = self.pyg(batch)
            loss = (out.float() - batch.y).abs().mean()
            self.pyg_opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.pyg.parameters(), 1.0)
            self.pyg_opt.step()
            total += loss.item()
        self.epoch += 1
        return total


def profile_shares(step, steps: int) -> dict:
    """Shares of ``steps`` calls of ``step`` in each bucket of :data:`BUCKETS`, ``outside ops`` and ``other``,
    and the profiled step's wall milliseconds (``step ms``)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    wall_us = (time.perf_counter() - started) * 1e6
    shares = {name: 0.0 for name, _ in BUCKETS}
    shares["other ops"] = 0.0
    inside, product_us = 0.0, 0.0
    for event in prof.events():
        self_us = event.self_cpu_time_total
        inside += self_us
        shares[_bucket(event)] += self_us
        product_us += self_us if _is_matrix_product(event) else 0.0
    shares["outside ops (Python)"] = max(wall_us - inside, 0.0)
    total = sum(shares.values()) or 1.0
    # FLOPs need the ops' shapes, whose recording slows every op's dispatch: counted in a second pass of the
    # same steps, so that the shares and the products' time above come from a plain profile.
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as counted:
        for _ in range(steps):
            step()
    flops = sum(event.flops or 0 for event in counted.events() if _is_matrix_product(event))
    return {**{name: value / total for name, value in shares.items()}, "step ms": wall_us / steps / 1e3,
            "product GFLOP/s": flops / product_us / 1e3 if product_us else 0.0}


def _is_matrix_product(event) -> bool:
    """The ops whose FLOPs torch's profiler counts among the dense products: matrix products."""
    return event.name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def _bucket(event) -> str:
    """An op's bucket: the optimiser's for every op the optimiser's step or ``zero_grad`` runs (its element-wise
    passes too), else the first of :data:`BUCKETS` whose words its name holds."""
    parent = event
    while parent is not None:
        if parent.name.startswith("Optimizer."):
            return "optimiser"
        parent = parent.cpu_parent
    key = event.name.lower()
    return next((name for name, words in BUCKETS if any(w in key for w in words)), "other ops")


def report(args, rows, counts, profiles, step_ms, parts, bf16_dense_ms, rates) -> dict:
    print(f"## Downstream training: gpse-dgl vs PyG ({today()})\n")
    print(f"command: `{command_line()}`  \nmachine: {machine_line()}  \n"
          f"{args.rounds} interleaved round(s) of {args.batches} batches x {args.batch_size} ZINC-replica molecules, "
          f"{args.threads} thread(s); medians of wall seconds; ratio = PyG / ours per round (> 1: ours faster)\n")
    table, records = [], []
    for row in rows:
        ours, pyg = statistics.median(row.times["ours"]), statistics.median(row.times["pyg"])
        ratios = [p / o for o, p in zip(row.times["ours"], row.times["pyg"])]
        records.append({"model": row.model, "precision": row.precision, "part": row.part, "ours_s": ours,
                        "pyg_s": pyg, "ratios": ratios})
        span = f"{min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else "-"
        table.append([row.model, row.precision, row.part, f"{ours:.2f}", f"{pyg:.2f}",
                      f"{statistics.median(ratios):.2f}x", span])
    print(markdown_table(["model", "precision", "timed", "ours s", "PyG s", "PyG / ours", "per-round range"],
                         table, "lllrrrr"))
    speedups = _bf16_speedups(records)
    if speedups:
        print("\nbf16 against fp32, ours (fp32 s / bf16 s, medians): "
              + ", ".join(f"{k} {v:.2f}x" for k, v in speedups.items()))
    print("\nparameters (ours = PyG): " + ", ".join(f"{k} {a:,}" + ("" if a == b else f" != {b:,}")
                                                   for k, (a, b) in counts.items()))
    if profiles:
        names = list(next(iter(profiles.values()))["ours"])
        print(f"\nWhere a model-only fp32 step goes (torch.profiler self time, {args.profile_steps} steps; "
              "'outside ops' is wall time in no torch op: the loop's and the layers' Python):\n")
        headers = ["share of step"] + [f"{m} {s}" for m in profiles for s in ("ours", "PyG")]
        body = [[n] + [f"{profiles[m][s][n]:.0%}" for m in profiles for s in ("ours", "pyg")] for n in names]
        body.append(["profiled step, ms"] + [f"{step_ms[m][s]:.1f}" for m in profiles for s in ("ours", "pyg")])
        print(markdown_table(headers, body))
        print("\nA model-only fp32 step in parts, ms (one pass of the batches after the rounds, no profiler):\n")
        print(markdown_table(["model", "side", "forward", "backward", "AdamW step", "step"],
                             [[m, side, *(f"{v:.2f}" for v in t.values()), f"{sum(t.values()):.2f}"]
                              for m, sides in parts.items() for side, t in (("ours", sides["ours"]),
                                                                           ("PyG", sides["pyg"]))], "llrrrr"))
        host = rates["host, 1024 x 1024"]
        print(f"\nThe dense products' rate in the profiled steps (matrix-product FLOPs over their self time), "
              f"GFLOP/s, against this host's float32 rate on 1024 x 1024 products ({host:.0f} GFLOP/s, "
              f"{args.threads} thread(s)): " + ", ".join(f"{m} ours {r['ours']:.0f} ({r['ours'] / host:.0%}), "
                                                         f"PyG {r['pyg']:.0f} ({r['pyg'] / host:.0%})"
                                                         for m, r in rates.items() if m in profiles))
        limits = ceilings(records, profiles, step_ms, parts)
        if limits:
            print("\nCeiling of PyG / ours, model only, fp32: PyG's step (timed above) over what both sides share, our "
                  "dense products (their profiled self time) and the AdamW step (timed in parts above), i.e. the "
                  "ratio were all else of ours free: " + ", ".join(f"{m} {c:.2f}x" for m, c in limits.items()))
    bounds = bf16_bounds(records, profiles, step_ms, bf16_dense_ms)
    if bounds:
        print("\nbf16 were only the dense products to change, ours (our fp32 step, timed above, over the same step with "
              "its fp32 dense products' profiled self time replaced by their bf16 self time; ms per step): "
              + ", ".join(f"{m} {b['bound']:.2f}x ({b['fp32_dense_ms']:.2f} -> {b['bf16_dense_ms']:.2f} of "
                          f"{b['fp32_step_ms']:.2f})" for m, b in bounds.items()))
    return {"records": records, "parameters": counts, "profiles": profiles, "step_ms": step_ms, "parts": parts,
            "bf16_speedups": speedups, "bf16_bounds": bounds, "product_rates": rates}


def ceilings(records, profiles, step_ms, parts) -> dict:
    """Per profiled model timed in fp32 model only: PyG's step (median wall time over the rounds) over our dense
    products (profiled self time) plus the AdamW step (:meth:`_Setup.step_parts`), what no change to our message
    passing, norms, element-wise passes or Python could exceed."""
    pyg_ms = {r["model"]: r["pyg_s"] / step_ms[r["model"]]["batches"] * 1e3 for r in records
              if r["precision"] == "fp32" and r["part"] == "model only" and r["model"] in step_ms}
    return {m: pyg_ms[m] / (step_ms[m]["ours"] * p["ours"]["dense products"] + parts[m]["ours"]["optimiser"])
            for m, p in profiles.items() if m in pyg_ms}


def bf16_bounds(records, profiles, step_ms, bf16_dense_ms) -> dict:
    """Per model profiled in both precisions: our fp32 model-only step (median wall time over the rounds), its
    dense products' fp32 self time, their bf16 self time, and ``bound``, the bf16 speed-up were nothing but the
    dense products to change. The denominator is the unprofiled step: shares of a profiled step understate the
    products, whose self time the profiler barely inflates while it slows every op's dispatch."""
    bounds = {}
    for r in records:
        m = r["model"]
        if r["precision"] != "fp32" or r["part"] != "model only" or m not in bf16_dense_ms or m not in profiles:
            continue
        step = r["ours_s"] / step_ms[m]["batches"] * 1e3
        dense = step_ms[m]["ours"] * profiles[m]["ours"]["dense products"]
        bounds[m] = {"fp32_step_ms": step, "fp32_dense_ms": dense, "bf16_dense_ms": bf16_dense_ms[m],
                     "bound": step / (step - dense + bf16_dense_ms[m])}
    return bounds


def _bf16_speedups(records) -> dict:
    by_key = {(r["model"], r["part"], r["precision"]): r["ours_s"] for r in records}
    return {f"{m} {part}": by_key[(m, part, "fp32")] / by_key[(m, part, "bf16")]
            for (m, part, p) in by_key if p == "bf16" and (m, part, "fp32") in by_key}


if __name__ == "__main__":
    main()
