"""One module per CLI verb; each exposes a click command named ``command``.

``gpse-dgl --help`` imports every verb's module (to list the verbs), so the modules here import only
click and light helpers at module level; torch, DGL and the sub-packages that load them (``pse``, ``data``,
``nn``, ``encode``, ``train``) are imported inside the command functions, when a verb runs. This is the
one place in gpse-dgl where imports inside functions are the rule (``gpse_dgl/cli.py`` follows it too).
"""
import functools

import click

from ..utils.devices import check_device_name
from ..utils.progress import configure


def cli_overrides(overrides, device, out_dir) -> list:
    """``--set key=value`` items plus the ``--device`` and ``--out`` shortcuts, as recipe overrides."""
    overrides = list(overrides)
    if device is not None:
        overrides.append(f"device={device}")
    if out_dir is not None:
        overrides.append(f"general_pipeline.save_path={out_dir}")
    return overrides


def require_one_input(**given) -> None:
    """A usage error unless exactly one of the input options is given: ``require_one_input(dataset=...,
    input=..., smiles=...)`` names them ``--dataset``, ``--input``, ``--smiles`` (underscores as dashes)."""
    flags = {f"--{name.replace('_', '-')}": value for name, value in given.items()}
    chosen = [flag for flag, value in flags.items() if value is not None]
    if len(chosen) != 1:
        raise click.UsageError(f"give exactly one of {', '.join(flags)}"
                               + (f" (got {', '.join(chosen)})" if chosen else ""))


def check_device_option(ctx, param, value):
    """click callback: the device name is well formed (whether it exists is checked when the run starts)."""
    if value is not None and (problem := check_device_name(value)):
        raise click.BadParameter(problem)
    return value


def allow_recipe_change_option(record_file: str):
    """``--allow-recipe-change`` (meaningful with ``--resume`` only; :func:`check_resume_flags` checks that)."""
    return click.option("--allow-recipe-change", is_flag=True,
                        help="With --resume: continue although the recipe changes the result (schedule, model, "
                             f"data); the changes are recorded in {record_file}.")


def print_config_option(command):
    """``--print-config``: print the recipe as the verb would run it, and exit (see :func:`echo_recipe`)."""
    return click.option("--print-config", is_flag=True,
                        help="Print the full resolved recipe (base recipes merged, --set / --device / --out "
                             "applied, defaults filled in) as YAML and exit without running.")(command)


def echo_recipe(recipe: dict) -> None:
    """Write a validated recipe to stdout as YAML (what ``--print-config`` shows)."""
    from ..recipes import dump_recipe

    click.echo(dump_recipe(recipe), nl=False)


def check_resume_flags(resume: bool, allow_recipe_change: bool) -> None:
    if allow_recipe_change and not resume:
        raise click.UsageError("--allow-recipe-change only applies with --resume")


def output_options(command):
    """Give a verb ``--quiet`` and ``--verbose`` (set up by :func:`gpse_dgl.utils.progress.configure`)."""

    @click.option("--verbose", "-v", is_flag=True, help="Also show informational log messages.")
    @click.option("--quiet", "-q", is_flag=True,
                  help="No progress output and no status lines; errors and the final result only. "
                       "(Progress bars appear only on a terminal, else a line per 10 % of the work; "
                       "GPSE_DGL_PROGRESS=1 or 0 forces bars on or off.)")
    @functools.wraps(command)
    def with_output_options(*args, quiet, verbose, **kwargs):
        if quiet and verbose:
            raise click.UsageError("--quiet and --verbose exclude each other")
        configure(quiet=quiet, verbose=verbose)
        return command(*args, **kwargs)

    return with_output_options


def recipe_job_options(job: str, set_example: str, resume_help: str, record_file: str, first_save: str,
                       progress_unit: str):
    """The options of a verb that runs a YAML recipe as a resumable job in an output directory (``pretrain``,
    ``train``): ``--set``, ``--resume``, ``--allow-recipe-change``, ``--overwrite``, the ``--device`` and ``--out``
    shortcuts, ``--print-config``, ``--no-progress`` and :func:`output_options`, passed to the command as
    ``overrides, resume, allow_recipe_change, overwrite, device, out_dir, print_config, no_progress``
    (:func:`load_recipe_for` reads the recipe with them). The words: ``job`` what the directory holds,
    ``set_example`` a key to override, ``record_file`` where recipe changes are recorded, ``first_save`` when a
    replaced job's outputs go, ``progress_unit`` what one line reports without bars."""
    options = (
        click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                     help=f"Override a recipe key, e.g. --set {set_example} (repeatable; the value is read as "
                          "YAML)."),
        click.option("--resume", is_flag=True, help=resume_help),
        allow_recipe_change_option(record_file),
        click.option("--overwrite", is_flag=True,
                     help=f"Replace a {job} already in the output directory (the old {job} stays until the new one "
                          f"has {first_save})."),
        click.option("--device", type=str, default=None, metavar="auto|cpu|cuda|cuda:N|mps",
                     callback=check_device_option, help="Device to train on (overrides the recipe's `device`)."),
        click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
                     help="Output directory (overrides general_pipeline.save_path)."),
        print_config_option,
        click.option("--no-progress", is_flag=True, help=f"No progress bars (one line per {progress_unit} instead)."),
        output_options,
    )

    def decorate(command):
        for option in reversed(options):  # the first listed is the outermost: --help lists them in this order
            command = option(command)
        return command

    return decorate


def load_recipe_for(load, recipe, overrides, device, out_dir, resume: bool, allow_recipe_change: bool,
                    print_config: bool):
    """The validated recipe a :func:`recipe_job_options` verb runs (``load(path, overrides)``, its schema's
    loader, with ``--set``, ``--device`` and ``--out`` applied), or None when ``--print-config`` printed it."""
    check_resume_flags(resume, allow_recipe_change)
    validated = load(recipe, cli_overrides(overrides, device, out_dir))
    if print_config:
        echo_recipe(validated)
        return None
    return validated


def job_log(progress: bool):
    """The ``log`` a training loop takes: silent under ``--quiet``, None (progress bars) when ``progress``, else
    one line per step on stdout."""
    from ..utils.progress import is_quiet

    if is_quiet():
        return lambda message: None
    return None if progress else click.echo
