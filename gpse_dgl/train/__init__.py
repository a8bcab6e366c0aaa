"""Training loops, metrics and checkpoints.

* :func:`gpse_dgl.train.pretrain.pretrain` - GPSE pretraining from a recipe (``gpse-dgl pretrain``).
* :mod:`gpse_dgl.train.data` - pretraining data: unique skeletons, fixed split, cached targets.
* :func:`gpse_dgl.train.downstream.train_downstream` - downstream benchmarks from a recipe (``gpse-dgl train``;
  a package: data, models, runs, loop, evaluation, checkpoints, job).
* :mod:`gpse_dgl.train.schedule` - the learning-rate schedule both loops use.
* :mod:`gpse_dgl.train.metrics` - R^2 per target column, per PSE and overall (the paper's metric).
* :mod:`gpse_dgl.train.checkpoint` - atomic, weights-only-loadable checkpoints (:mod:`gpse_dgl.utils.checkpoint`,
  which :mod:`gpse_dgl.encode` reads too).

Submodules are imported on demand (``from gpse_dgl.train.pretrain import pretrain``), so importing
this package stays cheap.
"""
