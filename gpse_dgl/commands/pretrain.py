"""``gpse-dgl pretrain RECIPE``: pretrain GPSE as a YAML recipe says."""
from __future__ import annotations

import click

from ..utils.progress import is_quiet
from ..utils.text import plural
from . import job_log, load_recipe_for, recipe_job_options


@click.command("pretrain")
@click.argument("recipe", type=click.Path(dir_okay=False))
@recipe_job_options(job="run", set_example="general_pipeline.num_epochs=5",
                    resume_help="Continue the run in the output directory from its last checkpoint (last.pt).",
                    record_file="metrics.json", first_save="written its first checkpoint", progress_unit="epoch")
def command(recipe, overrides, resume, allow_recipe_change, overwrite, device, out_dir, print_config, no_progress):
    """Pretrain a GPSE encoder from the YAML recipe RECIPE.

    The recipe is validated completely before any work starts. Outputs go to
    general_pipeline.save_path (or --out): best.pt (best validation R^2; what `encode` loads),
    last.pt (for --resume), metrics.json, recipe.yaml, tensorboard/ and report.html (figures; `gpse-dgl
    report` re-creates it).

    \b
    Examples:
      gpse-dgl pretrain recipes/quickstart.yaml
      gpse-dgl pretrain recipes/quickstart.yaml --set general_pipeline.num_epochs=5 --out runs/try
      gpse-dgl pretrain recipes/molpcba.yaml --set data.root=/data/ogb --device cuda
      gpse-dgl pretrain recipes/quickstart.yaml --out runs/try --resume
      gpse-dgl pretrain recipes/quickstart.yaml --set model.num_layers=8 --print-config
    """
    from ..train.pretraining.schema import load_pretrain_recipe

    validated = load_recipe_for(load_pretrain_recipe, recipe, overrides, device, out_dir, resume, allow_recipe_change,
                                print_config)
    if validated is None:
        return

    from ..train.pretraining import format_r2_table, pretrain
    from ..train.pretraining.time_budget import REPORT_SECONDS

    progress = not no_progress and not is_quiet()
    summary = pretrain(validated, resume=resume, progress=progress, overwrite=overwrite,
                       log=job_log(progress),
                       allow_recipe_change=allow_recipe_change, reserve_seconds=REPORT_SECONDS)
    if summary.get("rank"):  # under torchrun rank 0 alone reports
        return
    paths = summary["paths"]
    click.echo("")
    click.echo(f"finished: {summary['status']}; {plural(summary['epochs_completed'], 'epoch')}, best epoch "
               f"{summary['best_epoch']}, {summary['wall_time_seconds'] / 60:.1f} min")
    click.echo(f"best checkpoint:  {summary['evaluated_checkpoint']}")
    click.echo(f"last checkpoint:  {paths['last_checkpoint']}")
    click.echo(f"metrics:          {paths['metrics']}")
    click.echo(f"tensorboard logs: {paths['tensorboard']}  (tensorboard --logdir {paths['tensorboard']})")
    click.echo("")
    click.echo("held-out R^2 of the best checkpoint:")
    click.echo(format_r2_table(summary["r2_table"]))

    left = summary.get("time_left_seconds")
    if left is not None and left < REPORT_SECONDS:  # the run's slow-down used the report's share
        click.echo(f"report: not written: the time limit leaves {max(left, 0.0):.0f} s, the report keeps "
                   f"{REPORT_SECONDS:.0f} s (gpse-dgl report {paths['run']} writes it)")
        return
    from ..train.pretraining.report import report_after_run

    report_after_run(paths["run"], log=click.echo)
