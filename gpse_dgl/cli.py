"""``gpse-dgl`` command line: a click group whose verbs live one per file in :mod:`gpse_dgl.commands`.

Every error is one line ``gpse-dgl: error: ...`` on stderr, never a traceback: exit status 2 for a wrong
command line or input (click's usage errors, :class:`gpse_dgl.utils.errors.GPSEError`, a missing file),
1 for a failure during the run (a ``GPSEError`` subclass with ``exit_code = 1``, an I/O error such as a
full disk), 130 when interrupted. Set ``GPSE_DGL_DEBUG=1`` to see the traceback.
"""
from __future__ import annotations

import importlib
import os
import sys
import warnings

import click

from . import _env  # noqa: F401
from .utils.errors import GPSEError
from .utils.text import first_line

# verb -> module in gpse_dgl.commands exposing a click command called ``command``
VERBS = {
    "info": "info",
    "pse": "pse",
    "pretrain": "pretrain",
    "encode": "encode",
    "train": "train",
    "models": "models",
    "report": "report",
    "partition": "partition",
    "launch": "launch",
}
# verbs whose work is shared out among torchrun's processes (docs/DISTRIBUTED.md)
SHARDED_VERBS = ("pretrain", "train", "encode")


class LazyGroup(click.Group):
    """Imports a verb's module only when that verb runs (keeps ``--help`` and ``info`` fast)."""

    def list_commands(self, ctx):
        return [v for v in VERBS if importlib.util.find_spec(f"gpse_dgl.commands.{VERBS[v]}")]

    def get_command(self, ctx, name):
        if name not in VERBS:
            return None
        if name not in SHARDED_VERBS:
            from .utils.torchrun_env import refuse_under_torchrun  # without torch: --help lists every verb

            refuse_under_torchrun(name, SHARDED_VERBS)
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
      gpse-dgl partition big.bin --parts 2 --out parts/ && gpse-dgl launch parts/ --out enc/
    """


PROG = "gpse-dgl"


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"{PROG}: warning: {str(message).strip().splitlines()[0]}\n"


def _fail(message: str, exit_code: int) -> None:
    click.echo(f"{PROG}: error: {message}", err=True)
    sys.exit(exit_code)


def main(argv=None):
    """Console-script entry point: run the CLI, turning every user error into one line (see the module doc)."""
    warnings.formatwarning = _one_line_warning  # warnings read like the error lines: one line each
    try:
        cli.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo(f"{PROG}: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        _fail(first_line(click.ClickException(exc.format_message()), limit=None) + hint, 2)
    except click.ClickException as exc:
        _fail(first_line(click.ClickException(exc.format_message()), limit=None), exc.exit_code)
    except (GPSEError, FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        if os.environ.get("GPSE_DGL_DEBUG"):
            raise
        _fail(first_line(exc, limit=None), getattr(exc, "exit_code", 2))
    except OSError as exc:  # e.g. a disk that filled up during the run
        if os.environ.get("GPSE_DGL_DEBUG"):
            raise
        _fail(first_line(exc, limit=None), 1)
    except KeyboardInterrupt:
        click.echo(f"{PROG}: interrupted", err=True)
        sys.exit(130)
