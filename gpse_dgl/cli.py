"""``gpse-dgl`` command line: a click group whose verbs live one per file in :mod:`gpse_dgl.commands`.

Library errors derived from :class:`gpse_dgl.utils.errors.GPSEError` (and a few standard ones users cause,
such as a missing file) are printed as one line ``error: ...`` with exit status 2, never a traceback.
Set ``GPSE_DGL_DEBUG=1`` to see the traceback.
"""
from __future__ import annotations

import importlib
import os
import sys

import click

from . import _env  # noqa: F401

# verb -> module in gpse_dgl.commands exposing a click command called ``command``
VERBS = {
    "info": "info",
    "pse": "pse",
    "pretrain": "pretrain",
    "encode": "encode",
    "train": "train",
}


class LazyGroup(click.Group):
    """Imports a verb's module only when that verb runs (keeps ``--help`` and ``info`` fast)."""

    def list_commands(self, ctx):
        return [v for v in VERBS if importlib.util.find_spec(f"gpse_dgl.commands.{VERBS[v]}")]

    def get_command(self, ctx, name):
        if name not in VERBS:
            return None
        try:
            module = importlib.import_module(f"gpse_dgl.commands.{VERBS[name]}")
        except ModuleNotFoundError as exc:
            if exc.name == f"gpse_dgl.commands.{VERBS[name]}":
                return None
            raise
        return module.command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpse-dgl")
def cli():
    """GPSE on DGL: explicit PSEs, GPSE pretraining, encoding and downstream benchmarks.

    \b
    Examples:
      gpse-dgl info
      gpse-dgl pse --dataset embedded-molecules --out pse.bin
      gpse-dgl pretrain recipes/quickstart.yaml
      gpse-dgl encode --dataset embedded-molecules --out gpse.bin
    """


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"warning: {str(message).strip().splitlines()[0]}\n"


def main(argv=None):
    """Console-script entry point: run the CLI, turning user errors into one-line messages."""
    import warnings

    from .utils.errors import GPSEError

    warnings.formatwarning = _one_line_warning  # warnings read like the error lines: one line each
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except (GPSEError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        if os.environ.get("GPSE_DGL_DEBUG"):
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        click.echo(f"error: {msg}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
