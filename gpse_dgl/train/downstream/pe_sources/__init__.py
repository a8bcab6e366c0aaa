"""Registry of PE sources: what ``model.pe.source`` may name, each described by one :class:`PESource`.

A source says how wide its per-node table is, which recipe keys change its values (the cache key), how
to compute it, and which PE encoder reads it. :mod:`..features` (computing and caching) and
:mod:`..models` (building the encoder) only talk to specs, so a new source is one module plus one
:func:`register_source` line at the bottom of this file::

    from . import my_source
    register_source("MyPE", my_source.describe())

Built-in sources, each with the encoder the GPSE authors' configuration gives it
(``configs/mol_bench/zinc-GPS+*.yaml`` of github.com/G-Taxonomy-Workgroup/GPSE):

==============  ======  ==========================================  ===============================
source          width   every node gets                             encoder (``model.pe.model: auto``)
==============  ======  ==========================================  ===============================
``none``        0       nothing                                     none
``rand``        --      fresh N(0, 1) noise on every forward pass,  noise (``NormalRE``)
                        in place of the node features
``random``      r       N(0, 1) features fixed per graph            Linear + BatchNorm
``LapPE``       2 m     m = 8 signed eigenvectors of L = D - A       DeepSet (GraphGPS LapPE)
                        and their eigenvalues (NaN-padded)
``LapPE-abs``   4       absolute eigenvectors of the normalised      Linear + BatchNorm
                        Laplacian (GPSE's pretraining target)
``RWSE``        20      random-walk return probabilities k=2..21    Linear + BatchNorm
``LapPE+RWSE``  24      LapPE-abs and RWSE                          Linear + BatchNorm
``AllPSE``      62      the six pretraining PSEs                    Linear + BatchNorm
``GPSE``        d       a pretrained GPSE's encoding                2-layer MLP + BatchNorm,
                                                                    input dropout 0.5
==============  ======  ==========================================  ===============================

Example
-------
>>> from gpse_dgl.train.downstream.pe_sources import get_source
>>> get_source("RWSE").width({})
20
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from ....utils.text import did_you_mean

__all__ = ["PESource", "PE_SOURCE_REGISTRY", "register_source", "get_source", "source_names"]


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


PE_SOURCE_REGISTRY: dict[str, PESource] = {}


def register_source(name: str, spec: PESource) -> PESource:
    """Add ``spec`` under ``name`` (replacing one of the same name); return it."""
    PE_SOURCE_REGISTRY[name] = spec
    return spec


def source_names() -> tuple:
    """Registered source names, in registration order."""
    return tuple(PE_SOURCE_REGISTRY)


def get_source(name: str) -> PESource:
    """The spec of ``name``; an unknown name raises ``ValueError`` with the choices."""
    if name not in PE_SOURCE_REGISTRY:
        raise ValueError(f"unknown PE source {name!r}{did_you_mean(name, PE_SOURCE_REGISTRY)}; choose one of "
                         f"{', '.join(PE_SOURCE_REGISTRY)}")
    return PE_SOURCE_REGISTRY[name]


# ---------------------------------------------------------------------------------------------------------
# Built-in sources: one module each (the explicit PSE concatenations share one), one line each.
# ---------------------------------------------------------------------------------------------------------
from . import explicit, fixed_random, fresh_random, gpse, lappe, none  # noqa: E402

register_source("none", none.describe())
register_source("rand", fresh_random.describe())
register_source("random", fixed_random.describe())
register_source("LapPE", lappe.describe())
register_source("LapPE-abs", explicit.describe("LapPE-abs", ("LapPE",)))
register_source("RWSE", explicit.describe("RWSE", ("RWSE",)))
register_source("LapPE+RWSE", explicit.describe("LapPE+RWSE", ("LapPE", "RWSE")))
register_source("AllPSE", explicit.describe("AllPSE", ("LapPE", "EigVals", "ElstaticPE", "RWSE", "HKdiagSE",
                                                       "CycleGE")))
register_source("GPSE", gpse.describe())
