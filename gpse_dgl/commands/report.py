"""``gpse-dgl report RUN_DIR``: (re-)create a pretraining run's report.html and its figures."""
from __future__ import annotations

import click

from . import output_options


@click.command("report")
@click.argument("run_dir", required=False, type=click.Path(file_okay=False))
@click.option("--checkpoint", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Report on this pretraining checkpoint instead of a run directory (needs --out).")
@click.option("--dataset", default=None, metavar="SOURCE",
              help="With --checkpoint: a data.source (e.g. embedded-molecules, ogbg-molpcba) whose held-out "
                   "splits are scored (default: the checkpoint's own).")
@click.option("--root", default=None, help="With --dataset: folder of an on-disk dataset (data.root).")
@click.option("--max-graphs", type=click.IntRange(min=3), default=None,
              help="With --checkpoint: a seeded subset of this many graphs before the split.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="With --checkpoint: the folder the report goes into (a run's goes into RUN_DIR).")
@output_options
def command(run_dir, checkpoint, dataset, root, max_graphs, out_dir):
    """Write report.html (self-contained: images embedded) and its PNGs.

    For a `gpse-dgl pretrain` output directory RUN_DIR: held-out R^2 per PSE and per column next to
    the paper's, predicted vs true values on the test split, and the training curves. With
    --checkpoint (and optionally --dataset), the same for any pretraining checkpoint.

    \b
    Examples:
      gpse-dgl report runs/quickstart
      gpse-dgl report --checkpoint gpse_dgl/assets/gpse_quickstart.pt --out reports/shipped
      gpse-dgl report --checkpoint runs/quickstart/best.pt --dataset ogbg-molpcba --root /data/ogb \\
          --max-graphs 20000 --out reports/molpcba
    """
    from ..train.pretraining.report import write_checkpoint_report, write_run_report

    if checkpoint is None:
        if run_dir is None:
            raise click.UsageError("give RUN_DIR, or --checkpoint with --out")
        if dataset or root or max_graphs:
            raise click.UsageError("--dataset, --root and --max-graphs go with --checkpoint")
        if out_dir is not None:
            raise click.UsageError("--out goes with --checkpoint; a run's report is written into RUN_DIR")
        write_run_report(run_dir, log=click.echo)
        return
    if run_dir is not None:
        raise click.UsageError("give either RUN_DIR or --checkpoint, not both")
    if out_dir is None:
        raise click.UsageError("--checkpoint needs --out (the folder to write the report into)")
    write_checkpoint_report(checkpoint, out_dir, dataset=dataset, root=root, max_graphs=max_graphs,
                            log=click.echo)
