"""Registry of explicit positional and structural encodings (PSEs).

Every PSE is described by one :class:`PSESpec`: its name, level (``"node"`` or ``"graph"``), width and the
functions that compute it. The batched driver (:mod:`gpse_dgl.pse.compute`) only talks to specs, so adding
an encoding is one new module holding its functions plus one :func:`register_pse` line at the bottom of
this file::

    from . import my_family
    register_pse("MyPE", "node", 8, dense=my_family.my_pe, needs=("comb",))

A spec has up to three ways to compute its values; the driver picks per graph:

``dense(batch)``
    Vectorised over a :class:`gpse_dgl.pse.spectral.DenseBatch`, i.e. ``B`` graphs with the same number of
    nodes ``n`` held as float64 ``(B, n, n)`` stacks. Returns ``(B, n, dim)`` (node level) or ``(B, dim)``
    (graph level). Used for graphs with at most ``dense_limit`` nodes.
``sparse(graph)``
    One large graph (a :class:`gpse_dgl.pse.spectral.SparseGraph`) without any ``n x n`` allocation; used
    above ``dense_limit``. A spec without it raises :class:`~gpse_dgl.utils.errors.GraphTooLargeError`
    for such graphs.
``edges(collection, **options)``
    Whole-collection function of the simple edge list (a :class:`gpse_dgl.pse.spectral.EdgeCollection`),
    for encodings that are neither dense nor per graph (cycle counting). Returns ``(G, dim)`` or
    ``(N, dim)``. When present it is used for every graph and ``dense``/``sparse`` are ignored.

``needs`` names the dense decompositions the spec reads, so a batch computes exactly those once and
shares them between all requested PSEs: ``"sym"`` (all eigenpairs of the normalised Laplacian),
``"sym_low"`` / ``"sym_low_values"`` (only its lowest eigenpairs / eigenvalues), ``"comb"`` (all
eigenpairs of the combinatorial Laplacian), ``"comb_pinv"`` (its pseudo-inverse: from ``"comb"`` when
that is computed anyway, otherwise from a Cholesky factorisation). See
:class:`gpse_dgl.pse.spectral.DenseBatch`.

Names and widths of the six built-in PSEs, in pretraining-target order (``docs/PSE.md``):
node level ``ElstaticPE`` 7, ``LapPE`` 4, ``RWSE`` 20, ``HKdiagSE`` 20; graph level ``EigVals`` 4,
``CycleGE`` 7.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from ..utils.text import did_you_mean

__all__ = [
    "PSESpec",
    "PSE_REGISTRY",
    "register_pse",
    "resolve_pse_names",
    "NODE_TARGETS",
    "GRAPH_TARGETS",
    "ALL_PSES",
]

LEVELS = ("node", "graph")
DECOMPOSITIONS = ("sym", "sym_low", "sym_low_values", "comb", "comb_pinv")


@dataclass(frozen=True)
class PSESpec:
    """Description of one PSE.

    Parameters
    ----------
    name : str
        Registry key; also the ``ndata`` key (node level) or ``dgl.save_graphs`` label (graph level).
    level : {"node", "graph"}
        Node-level values are ``(num_nodes, dim)`` per graph, graph-level values ``(dim,)`` per graph.
    dim : int
        Number of columns.
    dense, sparse, edges : callable, optional
        Computation paths, see the module docstring. At least one of ``dense`` / ``edges`` is required.
    needs : tuple of str
        Dense decompositions read by ``dense`` (subset of :data:`DECOMPOSITIONS`).
    columns : tuple of str
        Column labels (e.g. ``"k=2"``), ``dim`` of them; generated as ``"0".."dim-1"`` when omitted.
    description : str
        One line for ``--help`` texts and docs.
    padded : bool
        ``dense`` accepts padded batches: graphs of up to ``batch.n`` nodes, each with
        ``batch.node_counts[b]`` real ones (its rows past that are dropped). When every requested PSE
        does, small graphs of nearby sizes share one batch, which saves per-batch overhead.
    """

    name: str
    level: str
    dim: int
    dense: Optional[Callable] = None
    sparse: Optional[Callable] = None
    edges: Optional[Callable] = None
    needs: tuple = ()
    columns: tuple = field(default=())
    description: str = ""
    padded: bool = False

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"PSE {self.name!r}: level must be one of {LEVELS}, got {self.level!r}")
        if self.dense is None and self.edges is None:
            raise ValueError(f"PSE {self.name!r}: needs a dense or an edges function")
        unknown = set(self.needs) - set(DECOMPOSITIONS)
        if unknown:
            raise ValueError(f"PSE {self.name!r}: unknown decompositions {sorted(unknown)}")
        if not self.columns:
            object.__setattr__(self, "columns", tuple(str(i) for i in range(self.dim)))
        if len(self.columns) != self.dim:
            raise ValueError(f"PSE {self.name!r}: {len(self.columns)} column labels for dim {self.dim}")

    @property
    def has_sparse_path(self) -> bool:
        """Whether graphs above ``dense_limit`` can be handled (sparse or edge-list computation)."""
        return self.sparse is not None or self.edges is not None


PSE_REGISTRY: dict[str, PSESpec] = {}


def register_pse(name: str, level: str, dim: int, **kwargs) -> PSESpec:
    """Create a :class:`PSESpec` and add it to :data:`PSE_REGISTRY` (replacing one of the same name).

    Returns the spec. Keyword arguments are those of :class:`PSESpec`.
    """
    spec = PSESpec(name=name, level=level, dim=dim, **kwargs)
    PSE_REGISTRY[name] = spec
    return spec


def resolve_pse_names(names: Optional[Iterable[str] | str] = None) -> list[str]:
    """Validate PSE names; ``None`` means all registered PSEs (in registry order).

    Accepts a list, or one string with comma-separated names. Duplicates are dropped, order kept.
    Unknown names raise ``ValueError`` listing the known ones.
    """
    if names is None:
        return list(PSE_REGISTRY)
    if isinstance(names, str):
        names = [names]
    out: list[str] = []
    for item in names:
        for name in str(item).split(","):
            name = name.strip()
            if not name:
                continue
            if name not in PSE_REGISTRY:
                # case-insensitive convenience ("rwse" -> "RWSE")
                match = [k for k in PSE_REGISTRY if k.lower() == name.lower()]
                if not match:
                    raise ValueError(f"unknown PSE {name!r}{did_you_mean(name, PSE_REGISTRY)}; "
                                     f"choose from {', '.join(PSE_REGISTRY)}")
                name = match[0]
            if name not in out:
                out.append(name)
    if not out:
        raise ValueError(f"no PSE selected; choose from {', '.join(PSE_REGISTRY)}")
    return out


# ---------------------------------------------------------------------------------------------------------
# Built-in PSEs: one module per encoding family, one line each. Order = pretraining target order.
# ---------------------------------------------------------------------------------------------------------
from . import cycle_encoding, electrostatic, heat_kernel, laplacian, random_walk  # noqa: E402

register_pse("ElstaticPE", "node", 7, dense=electrostatic.elstatic_pe, needs=("comb_pinv",),
             columns=electrostatic.COLUMNS, description=electrostatic.DESCRIPTION)
register_pse("LapPE", "node", 4, dense=laplacian.lap_pe, sparse=laplacian.lap_pe_sparse, needs=("sym_low",),
             columns=tuple(f"eigvec{i + 1}" for i in range(4)), description=laplacian.LAPPE_DESCRIPTION,
             padded=True)
register_pse("RWSE", "node", 20, dense=random_walk.rwse, sparse=random_walk.rwse_sparse, needs=("sym",),
             columns=tuple(f"k={k}" for k in random_walk.STEPS), description=random_walk.DESCRIPTION)
register_pse("HKdiagSE", "node", 20, dense=heat_kernel.hkdiag_se, needs=("comb",),
             columns=tuple(f"t={t}" for t in heat_kernel.TIMES), description=heat_kernel.DESCRIPTION)
register_pse("EigVals", "graph", 4, dense=laplacian.eigvals, sparse=laplacian.eigvals_sparse,
             needs=("sym_low_values",), columns=tuple(f"lambda{i + 1}" for i in range(4)),
             description=laplacian.EIGVALS_DESCRIPTION, padded=True)
register_pse("CycleGE", "graph", 7, edges=cycle_encoding.cycle_ge,
             columns=tuple(f"len={k}" for k in cycle_encoding.LENGTHS), description=cycle_encoding.DESCRIPTION)

#: Node-level pretraining targets, in target order (51 columns).
NODE_TARGETS = ("ElstaticPE", "LapPE", "RWSE", "HKdiagSE")
#: Graph-level pretraining targets, in target order (11 columns).
GRAPH_TARGETS = ("EigVals", "CycleGE")
#: The six PSEs of the paper.
ALL_PSES = NODE_TARGETS + GRAPH_TARGETS
