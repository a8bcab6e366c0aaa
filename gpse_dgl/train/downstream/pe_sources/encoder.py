"""The PE encoder a recipe's ``model.pe`` section and its source ask for, as a plain-dict config.

``model.pe.model: auto`` and ``model.pe.dropout_in: null`` take the source's own encoder (the one the GPSE
authors' configuration gives it, :class:`~gpse_dgl.train.downstream.pe_sources.PESource`); any other
value is checked against the encoder kinds that can read the source's table (a source that only one
kind can read, such as ``rand``, takes that one whatever the key says). With
``model.pe.standardize`` (the default) a Linear / MLP encoder standardises each raw column with the
training split's mean and standard deviation, floored at :data:`STD_FLOOR` so that a column that is
constant up to rounding (RWSE's odd steps on graphs without odd cycles) is shifted, never blown up; these
fixed statistics replace the BatchNorm on the raw encoding (``model.pe.batchnorm`` applies without them).
:func:`gpse_dgl.nn.pe_encoder.build_pe_encoder` builds the config.

Example
-------
>>> import torch
>>> from gpse_dgl.train.downstream.pe_sources.encoder import column_statistics
>>> shift, scale = column_statistics(torch.tensor([[0.0, 1.0], [2.0, 1.0 + 1e-9]]))
>>> shift, scale
([1.0, 1.0], [1.0, 1.0])
"""
from __future__ import annotations

import torch

from ....utils.errors import RecipeError
from . import get_source

#: Smallest standard deviation a column is divided by.
STD_FLOOR = 1e-3


def column_statistics(rows: torch.Tensor) -> tuple[list, list]:
    """Per-column mean and floored standard deviation of ``rows``, NaN entries left out."""
    rows = rows.double()
    present = ~torch.isnan(rows)
    count = present.sum(0).clamp(min=1)
    mean = torch.where(present, rows, 0.0).sum(0) / count
    std = (torch.where(present, rows - mean, 0.0) ** 2).sum(0).div(count).sqrt()
    return mean.tolist(), torch.where(std < STD_FLOOR, torch.ones_like(std), std).tolist()


def encoder_config(pe: dict, table, dim_hidden: int, train_rows=None) -> dict | None:
    """Config of the PE encoder for source ``pe["source"]`` reading ``table`` (None: no encoder).

    ``train_rows``: the training split's rows of ``table`` for the standardisation (None: every row).
    """
    spec = get_source(pe["source"])
    # a source only one encoder can read (rand's noise) ignores the key
    kind = spec.encoder["kind"] if pe["model"] == "auto" or len(spec.kinds) < 2 else pe["model"]
    if kind is None or table is None:
        return None
    if kind not in spec.kinds:
        raise RecipeError(f"model.pe.model: a {kind} encoder cannot read source {spec.name}; use auto or one of "
                          f"{', '.join(spec.kinds)}")
    if kind == "noise":
        return {"kind": "noise", "dim_pe": dim_hidden}
    if kind == "deepset":
        return {"kind": "deepset", "dim_in": table.dim, "dim_pe": pe["dim_pe"],
                "n_layers": spec.encoder.get("layers", pe["layers"]) if pe["model"] == "auto" else pe["layers"]}
    dropout_in = pe["dropout_in"] if pe["dropout_in"] is not None else spec.encoder.get("dropout_in", 0.0)
    standardize = pe.get("standardize", True)
    # fixed statistics take BatchNorm's place: a column constant in most batches (a rare ring size) has a
    # batch variance of 0 there, so BatchNorm's running variance ends far below the column's and blows up
    # the rare rows in evaluation (benchmarks/pe_stability.py)
    config = {"kind": kind, "dim_in": table.dim, "dim_pe": pe["dim_pe"], "batchnorm": pe["batchnorm"] and not standardize,
              "dropout_in": dropout_in, "dropout_out": pe["dropout_out"], "n_layers": pe["layers"]}
    if standardize:
        rows = table.values if train_rows is None else train_rows
        config["shift"], config["scale"] = column_statistics(rows.float())
    return config
