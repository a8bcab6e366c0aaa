"""``gpse-dgl train RECIPE``: train and evaluate a downstream model as a YAML recipe says."""
from __future__ import annotations

import click

from . import (allow_recipe_change_option, check_device_option, check_resume_flags, echo_recipe,
               output_options, print_config_option)


@click.command("train")
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a recipe key, e.g. --set model.pe.source=RWSE (repeatable; the value is read "
                   "as YAML).")
@click.option("--seeds", type=click.IntRange(min=1), default=None, metavar="N",
              help="Number of runs with seeds seed .. seed+N-1 (overrides general_pipeline.num_seeds; with "
                   "cross-validation each run draws its own folds).")
@click.option("--resume", is_flag=True, help="Continue the job in the output directory: finished runs are "
                                            "kept, an interrupted run continues from its last.pt.")
@allow_recipe_change_option("results.json")
@click.option("--overwrite", is_flag=True, help="Replace a job already in the output directory (the old job "
                                               "stays until the new one has saved its first epoch).")
@click.option("--device", type=str, default=None, metavar="auto|cpu|cuda|cuda:N|mps", callback=check_device_option,
              help="Device to train on (overrides the recipe's `device`).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output directory (overrides general_pipeline.save_path).")
@print_config_option
@click.option("--no-progress", is_flag=True, help="No progress bars (one line per run instead).")
@output_options
def command(recipe, overrides, seeds, resume, allow_recipe_change, overwrite, device, out_dir, no_progress,
            print_config):
    """Train a downstream model from the YAML recipe RECIPE and report test scores at the best
    validation epoch, mean ± std over the runs.

    The recipe is validated completely before any work starts; the encoding fed to the model is
    chosen by model.pe.source (none, random, LapPE, RWSE, LapPE+RWSE, AllPSE, GPSE) and cached on
    disk. Outputs go to general_pipeline.save_path (or --out): results.json, recipe.yaml and one
    folder per run with last.pt, best.pt, result.json and tensorboard/.

    \b
    Examples:
      gpse-dgl train recipes/downstream/csl.yaml --set model.pe.source=RWSE --seeds 10
      gpse-dgl train recipes/downstream/zinc.yaml --set data.root=/data --set model.pe.checkpoint=best.pt
      gpse-dgl train recipes/downstream/ogbg-molhiv.yaml --out runs/molhiv --resume
      gpse-dgl train recipes/downstream/zinc.yaml --print-config   # the recipe with its base merged in
    """
    from ..train.downstream.schema import load_downstream_recipe
    from ..utils.progress import is_quiet
    from ..utils.text import plural

    from . import cli_overrides

    check_resume_flags(resume, allow_recipe_change)
    validated = load_downstream_recipe(recipe, cli_overrides(overrides, device, out_dir))
    if print_config:
        echo_recipe(validated)
        return

    from ..train.downstream import format_summary, train_downstream

    progress = not no_progress and not is_quiet()
    summary = train_downstream(validated, resume=resume, seeds=seeds, progress=progress, overwrite=overwrite,
                               log=(lambda message: None) if is_quiet() else None if progress else click.echo,
                               allow_recipe_change=allow_recipe_change)
    if summary.get("rank"):  # under torchrun rank 0 alone reports
        return
    click.echo("")
    click.echo(f"finished: {summary['status']}; {summary['dataset']} with PE {summary['pe_source']}, "
               f"{plural(summary['num_runs'], 'run')}, {summary['model']['num_parameters']:,} parameters, "
               f"{summary['wall_time_seconds'] / 60:.1f} min")
    click.echo(f"results: {summary['paths']['results']}")
    click.echo("")
    click.echo(format_summary(summary))
