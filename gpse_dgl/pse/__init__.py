"""Explicit positional and structural encodings (PSEs), computed in batches.

Six encodings, defined exactly as the GPSE reference computes them (``docs/PSE.md``):

=============  =======  ===  =====================================================================
name           level    dim  definition (module)
=============  =======  ===  =====================================================================
``ElstaticPE`` node     7    statistics of the Laplacian pseudo-inverse potential (:mod:`.electrostatic`)
``LapPE``      node     4    abs. eigenvectors of the normalised Laplacian (:mod:`.laplacian`)
``RWSE``       node     20   random-walk return probabilities, k = 2..21 (:mod:`.random_walk`)
``HKdiagSE``   node     20   heat-kernel diagonals, t = 1..20 (:mod:`.heat_kernel`)
``EigVals``    graph    4    smallest non-zero normalised-Laplacian eigenvalues (:mod:`.laplacian`)
``CycleGE``    graph    7    simple-cycle counts, length 2..8 (:mod:`.cycle_encoding`, :mod:`.cycles`)
=============  =======  ===  =====================================================================

Inputs are read as simple undirected graphs (:func:`gpse_dgl.utils.graph.simple_edges`): edge direction
is ignored (directed input is symmetrised), self-loops and multi-edges are dropped.

Entry points: :func:`compute_pses` (many graphs, batched), :class:`AddPSE` (DGL-style transform),
:func:`pretraining_targets` (GPSE's 51 + 11 targets), :func:`per_graph_standardize`.
New encodings: one module plus one :func:`register_pse` line in :mod:`.registry`.
"""
from .. import _env  # noqa: F401
from .compute import DEFAULT_DENSE_LIMIT, compute_pse_tensors, compute_pses
from .registry import (ALL_PSES, GRAPH_TARGETS, NODE_TARGETS, PSE_REGISTRY, PSESpec, register_pse,
                       resolve_pse_names)
from .standardize import per_graph_standardize
from .targets import NODE_TARGET_KEY, pretraining_targets, target_columns
from .transform import AddPSE

__all__ = [
    "compute_pses",
    "compute_pse_tensors",
    "DEFAULT_DENSE_LIMIT",
    "PSE_REGISTRY",
    "PSESpec",
    "register_pse",
    "resolve_pse_names",
    "NODE_TARGETS",
    "GRAPH_TARGETS",
    "ALL_PSES",
    "per_graph_standardize",
    "pretraining_targets",
    "target_columns",
    "NODE_TARGET_KEY",
    "AddPSE",
]
