"""``gpse-dgl models``: list the registered GPSE models; ``gpse-dgl models fetch NAME`` downloads one."""
from __future__ import annotations

import click

from . import output_options


def _status(spec) -> str:
    from ..encode.models import model_path

    path = model_path(spec)
    if spec.shipped:
        return "shipped" if path.is_file() else "shipped, missing from this install"
    return f"downloaded: {path}" if path.is_file() else "not downloaded"


@click.group("models", invoke_without_command=True)
@click.pass_context
@output_options
def command(ctx):
    """List pretrained GPSE models: name, size, training data, held-out R^2, source, whether on disk.

    Any listed name works as --checkpoint (gpse-dgl encode) and as model.pe.checkpoint (downstream
    recipes), like a file path does.

    \b
    Examples:
      gpse-dgl models
      gpse-dgl models fetch molpcba
      gpse-dgl encode --dataset embedded-molecules --checkpoint molpcba --out gpse.bin
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..encode.models import DEFAULT_MODEL, available_models, get_model, models_dir

    for name in available_models():
        spec = get_model(name)
        default = " (default)" if name == DEFAULT_MODEL else ""
        click.echo(f"{name}{default}: {spec.architecture} GPSE, {spec.format} format; {_status(spec)}")
        click.echo(f"    trained on   {spec.training_data}")
        click.echo(f"    held-out R^2 {spec.heldout_r2}")
        click.echo(f"    source       {spec.source}" + (f"; {spec.url}" if spec.url else ""))
    click.echo(f"fetched models go to {models_dir()} ($GPSE_DGL_CACHE/models)")


@command.command("fetch")
@click.argument("name")
@click.option("--url", default=None, help="Download from this URL instead of the registered one (a mirror).")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Install into this folder instead of the models cache (names then do not find it).")
@click.option("--timeout", type=click.FloatRange(min=1.0), default=60.0, show_default=True,
              help="Seconds to wait for the server.")
@output_options
def fetch(name, url, directory, timeout):
    """Download a registered model, verify that it loads as that GPSE, and keep it in the cache.

    The file is written next to its final place under a temporary name and renamed only once it has
    the announced size and loads (weights only) with the registered architecture; a truncated or wrong
    download is removed. Without network the error names the path to put the file by hand.

    \b
    Example:
      gpse-dgl models fetch molpcba
    """
    from ..encode.fetch import fetch_model
    from ..encode.models import get_model

    spec = get_model(name)
    path = fetch_model(spec.name, url=url, directory=directory, timeout=timeout)
    click.echo(f"{spec.name}: {path} ({spec.architecture} GPSE, verified)")
