"""``gpse-dgl train RECIPE``: train and evaluate a downstream model as a YAML recipe says."""
from __future__ import annotations

import click

from . import job_log, load_recipe_for, recipe_job_options


@click.command("train")
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--seeds", type=click.IntRange(min=1), default=None, metavar="N",
              help="Number of runs with seeds seed .. seed+N-1 (overrides general_pipeline.num_seeds; with "
                   "cross-validation each run draws its own folds).")
@recipe_job_options(job="job", set_example="model.pe.source=RWSE",
                    resume_help="Continue the job in the output directory: finished runs are kept, an interrupted "
                                "run continues from its last.pt.",
                    record_file="results.json", first_save="saved its first epoch", progress_unit="run")
def command(recipe, seeds, overrides, resume, allow_recipe_change, overwrite, device, out_dir, print_config,
            no_progress):
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

    validated = load_recipe_for(load_downstream_recipe, recipe, overrides, device, out_dir, resume,
                                allow_recipe_change, print_config)
    if validated is None:
        return

    from ..train.downstream import format_summary, train_downstream

    progress = not no_progress and not is_quiet()
    summary = train_downstream(validated, resume=resume, seeds=seeds, progress=progress, overwrite=overwrite,
                               log=job_log(progress),
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
