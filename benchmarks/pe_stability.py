#!/usr/bin/env python
"""Why raw-encoding arms fall apart in evaluation, and whether standardising the PE columns fixes it.

Trains one arm (default: GatedGCN + RWSE on the ZINC replica, ``zinc-replica-gine.yaml``) twice with the same
seed: with ``model.pe.standardize=false`` (raw columns through BatchNorm, the earlier behaviour) and with
``true`` (columns standardised with the training split's statistics, no BatchNorm on the raw encoding).
Per epoch it records train / val / test MAE, the PE BatchNorm's running variance against each column's
variance over the training split, and the gradient norm of the PE encoder and of the whole model (median
and max over the epoch's steps). Per column of the encoding it reports the mean, std, largest value and the
share of training batches in which the column is constant (variance below 1e-12).

With ``--figure`` it draws both arms' training and validation MAE by epoch (``benchmarks/figures/pe_stability.png``
by default).

Example::

    python benchmarks/pe_stability.py --epochs 15 --threads 1
    python benchmarks/pe_stability.py --set model.name=gcn --set model.pe.source=LapPE+RWSE --epochs 6
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _common import command_line, machine_line, markdown_table, set_threads_env, today  # noqa: E402
from _figures import curves_by_epoch, figure_arg, figure_path  # noqa: E402


def column_report(table, train_index, batch_size: int, seed: int = 0) -> list:
    """Per column: mean, std, max over the training rows; share of training batches where it is constant."""
    import torch

    order = torch.as_tensor(train_index)[torch.randperm(len(train_index), generator=torch.Generator().manual_seed(seed))]
    rows = table.gather(order.tolist())
    batches = [table.gather(order[s:s + batch_size].tolist()) for s in range(0, len(order), batch_size)]
    constant = torch.stack([b.var(0, unbiased=False) < 1e-12 for b in batches]).float().mean(0)
    return [{"column": j, "mean": float(rows[:, j].mean()), "std": float(rows[:, j].std()),
             "max": float(rows[:, j].max()), "constant_batches": float(constant[j])} for j in range(rows.shape[1])]


def run_arm(recipe_file: str, overrides: list, standardize: bool, out: Path) -> dict:
    import torch
    from gpse_dgl.train.downstream import job as job_module
    from gpse_dgl.train.downstream.schema import load_downstream_recipe

    recipe = load_downstream_recipe(recipe_file, overrides + [f"model.pe.standardize={str(standardize).lower()}",
                                                              f"general_pipeline.save_path={out}",
                                                              "general_pipeline.save_checkpoints=false"])
    captured, steps = {}, {"pe": [], "all": []}
    build = job_module.build_downstream_model

    def build_and_watch(recipe_, prepared, train_index=None):  # keep the model to read its state per epoch
        model, config = build(recipe_, prepared, train_index)
        captured.update(model=model, prepared=prepared, train=train_index)
        pe = model.input_encoder.pe_encoder
        params = list(model.parameters())
        pe_ids = set(map(id, pe.parameters())) if pe is not None else set()

        def note():
            grads = [p.grad.norm() for p in params if p.grad is not None]
            pe_grads = [p.grad.norm() for p in params if id(p) in pe_ids and p.grad is not None]
            if grads:
                steps["all"].append(float(torch.linalg.vector_norm(torch.stack(grads))))
                steps["pe"].append(float(torch.linalg.vector_norm(torch.stack(pe_grads))) if pe_grads else 0.0)
        optimizer_hook[0] = note
        return model, config

    optimizer_hook = [None]
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def step(optimizer, args, kwargs):  # gradient norms as the optimiser sees them (after clipping)
        if optimizer_hook[0] is not None:
            optimizer_hook[0]()

    epochs = []

    def on_epoch_end(record):
        model, prepared = captured["model"], captured["prepared"]
        norm = getattr(model.input_encoder.pe_encoder, "norm", None)
        rows = prepared.table.gather(torch.as_tensor(captured["train"]).tolist())
        entry = {"epoch": record["epoch"], **{s: record[s]["metric"] for s in ("train", "val", "test") if s in record},
                 "grad_pe_median": statistics.median(steps["pe"]) if steps["pe"] else None,
                 "grad_pe_max": max(steps["pe"]) if steps["pe"] else None,
                 "grad_all_median": statistics.median(steps["all"]) if steps["all"] else None,
                 "grad_all_max": max(steps["all"]) if steps["all"] else None}
        if isinstance(norm, torch.nn.BatchNorm1d):
            ratio = norm.running_var.cpu() / rows.var(0).clamp(min=1e-30)
            entry["bn_running_var_over_column_var_min"] = float(ratio.min())
            entry["bn_running_var_over_column_var_max"] = float(ratio.max())
            entry["bn_column_of_min"] = int(ratio.argmin())
        steps["pe"].clear(), steps["all"].clear()
        epochs.append(entry)
        print(json.dumps(entry), flush=True)

    job_module.build_downstream_model = build_and_watch
    handle = register_optimizer_step_pre_hook(step)
    try:
        summary = job_module.train_downstream(recipe, seeds=1, overwrite=True, on_epoch_end=on_epoch_end,
                                              progress=False)
    finally:
        job_module.build_downstream_model = build
        handle.remove()
    result = summary["runs"][0] if "runs" in summary else {}
    prepared = captured["prepared"]
    columns = column_report(prepared.table, captured["train"], recipe["general_pipeline"]["batch_size"])
    return {"standardize": standardize, "epochs": epochs, "result": result, "columns": columns}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default=str(ROOT / "recipes" / "downstream" / "zinc-replica-gine.yaml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="recipe overrides (default: model.name=gatedgcn, model.pe.source=RWSE)")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--arms", default="false,true", help="model.pe.standardize values to run, in order")
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--figure", type=figure_arg, default=figure_path("pe_stability.png"),
                        help="the arms' MAE by epoch (default: %(default)s; '' for none)")
    args = parser.parse_args(argv)
    set_threads_env(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    overrides = ["model.name=gatedgcn", "model.pe.source=RWSE"] + args.set + [
        f"general_pipeline.num_epochs={args.epochs}", f"seed={args.seed}", "general_pipeline.num_seeds=1"]
    arms = []
    with tempfile.TemporaryDirectory() as tmp:
        for value in args.arms.split(","):
            arms.append(run_arm(args.recipe, overrides, value == "true", Path(tmp) / value))
    rows = []
    for arm in arms:
        best = min(arm["epochs"], key=lambda e: e["val"])
        last = arm["epochs"][-1]
        rows.append([str(arm["standardize"]).lower(), f"{best['epoch']} / {len(arm['epochs'])}",
                     f"{best['train']:.4f}", f"{best['val']:.4f}", f"{best['test']:.4f}",
                     f"{last['val']:.4f}", f"{arm['epochs'][0].get('bn_running_var_over_column_var_min', float('nan')):.2g}"])
    print(f"\n{machine_line()}; {today()}\n{command_line()}\n")
    print(markdown_table(["standardize", "best val epoch", "train MAE", "val MAE", "test MAE", "last val MAE",
                          "BN running var / column var (min, epoch 1)"], rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"overrides": overrides, "arms": arms}, indent=1))
    if args.figure:
        plot(arms, args.figure, overrides)


def plot(arms: list, path: Path, overrides: list) -> Path:
    """Training and validation MAE by epoch of each arm (log scale: a raw arm's evaluation error can grow tenfold)."""
    names = {False: "raw columns + BatchNorm (before)", True: "standardised columns (after)"}
    runs = {names[arm["standardize"]]: {split: [(e["epoch"], e[split]) for e in arm["epochs"] if split in e]
                                        for split in ("val", "train")} for arm in arms}
    subject = " + ".join(o.split("=", 1)[1] for o in overrides if o.startswith(("model.name=", "model.pe.source=")))
    title = f"{subject}: training and validation MAE by epoch"
    return curves_by_epoch(runs, path, title, "MAE (log scale)", log_y=True)


if __name__ == "__main__":
    main()
