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

from ....utils.text import did_you_mean
from .spec import PESource

__all__ = ["PESource", "PE_SOURCE_REGISTRY", "register_source", "get_source", "source_names"]


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
