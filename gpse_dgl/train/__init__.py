"""Training loops, metrics and checkpoints.

* :func:`gpse_dgl.train.pretrain.pretrain` - GPSE pretraining from a recipe (``gpse-dgl pretrain``).
* :mod:`gpse_dgl.train.data` - pretraining data: unique skeletons, fixed split, cached targets.
* :mod:`gpse_dgl.train.metrics` - R^2 per target column, per PSE and overall (the paper's metric).
* :mod:`gpse_dgl.train.checkpoint` - atomic, weights-only-loadable checkpoints (:mod:`gpse_dgl.utils.checkpoint`,
  which :mod:`gpse_dgl.encode` reads too).

Submodules are imported on demand (``from gpse_dgl.train.pretrain import pretrain``), so importing
this package stays cheap.
"""
