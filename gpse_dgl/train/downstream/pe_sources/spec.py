"""What a PE source is: :class:`PESource` (the registry in :mod:`gpse_dgl.train.downstream.pe_sources` holds them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

__all__ = ["PESource"]


def _no_settings(pe: dict) -> dict:
    return {}


@dataclass(frozen=True)
class PESource:
    """Description of one PE source.

    Parameters
    ----------
    name : str
        The ``model.pe.source`` value.
    description : str
        One line for docs and ``--help``.
    compute : callable, optional
        ``compute(graphs, pe, device, progress) -> NodeTable``: the table of every graph (``pe`` is the
        recipe's ``model.pe`` section). None: the source has no table (``none``).
    width : callable
        ``width(pe) -> int``: columns of the table; None when only the computed table knows (GPSE).
    settings : callable
        ``settings(pe) -> dict``: the ``model.pe`` values that change the table (its cache key).
    encoder : dict
        The PE encoder the authors' configuration gives this source (what ``model.pe.model: auto`` and
        ``model.pe.dropout_in: null`` mean): ``kind`` (``linear``, ``mlp``, ``deepset``, ``noise``) and
        optionally ``batchnorm``, ``dropout_in``, ``layers``.
    kinds : tuple of str
        PE encoder kinds that can read this source's table.
    cached : bool
        Cache the table on disk (cheap or random tables are not).
    code : tuple of str
        Sub-packages of ``gpse_dgl`` whose code digest joins the cache fingerprint.
    replaces_node_features : bool
        The encoder's output is the node input, in place of the dataset's node features.
    """

    name: str
    description: str
    compute: Optional[Callable] = None
    width: Callable = field(default=lambda pe: 0)
    settings: Callable = _no_settings
    encoder: dict = field(default_factory=lambda: {"kind": "linear", "batchnorm": True, "dropout_in": 0.0})
    kinds: tuple = ("linear", "mlp")
    cached: bool = True
    code: tuple = ()
    replaces_node_features: bool = False
