"""Every use gpse-dgl makes of private DGL and torch internals, in one module.

Private attributes change without notice between releases. The DGL accesses are there for speed only:
each function checks what it can and returns ``None`` (or ``False``) when the layout is not the known one,
so that the caller takes the public route instead. The torch ones have no public equivalent: the names a
pickled tensor refers to, torch's own initialisation of attention layers, and a tensor's version counter.
``tests/test_private_access.py`` compares each one with its public counterpart and fails on a DGL or torch
release not listed in :data:`CHECKED_VERSIONS`: on an upgrade, run that test, re-read the accesses below
against the new release, and add the version.

DGL (checked against 1.1.3 and 2.1.0):

* :func:`union_edges` -- ``dgl.heterograph_index.disjoint_union(metagraph, [g._graph ...])`` (the C++ call
  ``dgl.batch`` makes, without its per-graph Python bookkeeping, which costs more than a molecule's
  PSEs), ``g._graph.num_nodes(0)``, ``g._graph.edges(0)``, ``g._graph.metagraph``,
  ``g._node_frames``, ``g._edge_frames``.
* :func:`node_frame_rows` -- ``g._node_frames[0].num_rows``: a graph's node count as a Python attribute
  (``g.num_nodes()`` asks the C++ graph, through a foreign-function call per graph).
* :func:`is_batch` -- ``g._batch_num_nodes`` (``g.batch_size`` would fill that cache on a plain graph).
* :class:`NodeColumnWriter` -- ``dgl.frame.Frame``, ``Column``, ``Scheme`` and ``Frame._columns``: a
  finished tensor goes into a graph's node frame without ``g.ndata.update``'s per-call checks (they
  cost more per field and graph than the PSEs of a molecule).
* :func:`dgl_libraries` (``gpse-dgl info``), through :func:`libdgl_path` and :func:`tensoradapter_loaded`
  -- ``dgl._ffi.base._LIB._name`` and ``dgl._ffi.base.tensor_adapter_loaded``.

* :func:`isolate_dgl_shared_memory` -- ``dgl.distributed.kvstore.empty_shared_mem`` (the module-level
  name the key-value store creates and opens its shared-memory tensors with): a per-partition prefix on
  every name, so that several partitions' servers and trainers on one host do not map the same
  ``/dev/shm`` file (DGL names them after the tensor only; measured: without the prefix two partitions
  on one host read each other's rows). Used by :mod:`gpse_dgl.distributed` only.
* :func:`pin_dgl_machine_id` -- ``dgl.distributed.rpc_client.get_local_machine_id``: a trainer's machine
  (partition) id is found by matching the host's IP addresses against the IP configuration, which
  gives machine 0 to every trainer when several partitions share one host; the launcher names it instead.
* :func:`dgl_random_partition` -- ``dgl.distributed.partition.random_choice`` (the module-level name
  ``partition_graph(part_method="random")`` draws its node assignment with): replaced for one call by a
  given assignment, because DGL's draw depends on the number of OpenMP threads (not reproducible from a
  seed) and may leave a partition empty, which ``partition_graph`` answers with a ``KeyError``.

The import guard for DGL 2.x's graphbolt (:mod:`gpse_dgl._dgl_compat`) relies on DGL's package layout
(``dgl/graphbolt/libgraphbolt_pytorch_<torch version>.so``), not on private attributes; it is checked by
``tests/test_dgl_compat.py``.

torch (checked against 2.13):

* :func:`torch_pickle_global` -- ``torch._utils._rebuild_tensor`` and ``_rebuild_tensor_v2``: the names a
  pickled tensor refers to, admitted by the restricted unpickler of :mod:`gpse_dgl.data._io`.
* :func:`reset_multihead_attention` -- ``nn.MultiheadAttention._reset_parameters()``: torch's own
  initialisation of the attention projections (it has no public ``reset_parameters``).
* :func:`tensor_version` -- ``Tensor._version``: the counter of in-place changes that autograd keeps, which
  tells a cache derived from a tensor (a low-precision copy of a weight, the gate factors of a projection)
  that the tensor has changed since.

Example
-------
>>> import dgl, torch
>>> from gpse_dgl import _private
>>> graphs = [dgl.graph(([0, 1], [1, 2])), dgl.graph(([0], [1]), num_nodes=4)]
>>> counts, src, dst = _private.union_edges(graphs)
>>> counts.tolist(), src.tolist(), dst.tolist()
([3, 4], [0, 1, 3], [1, 2, 4])
"""
from __future__ import annotations

import contextlib
import functools
import importlib

import numpy as np
import torch

from . import _dgl_compat
from . import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl  # noqa: E402
from dgl.distributed import kvstore as _dgl_kvstore, rpc_client as _dgl_rpc_client  # noqa: E402

#: Releases the accesses below were read against; ``tests/test_private_access.py`` fails on any other.
CHECKED_VERSIONS = {"dgl": ("1.1.3", "2.1.0"), "torch": ("2.13",)}


def union_edges(graphs: list):
    """``(node counts, src, dst)`` (int64 numpy) of the disjoint union of unbatched homogeneous graphs,
    or None (batched or heterogeneous inputs, mixed id types, or DGL internals not the known ones).

    Node counts come from the node frames, checked against the union's node total.
    """
    if not graphs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    try:
        from dgl import heterograph_index  # here, not at the top: a DGL without it must still import gpse_dgl

        if any(len(g._node_frames) != 1 or len(g._edge_frames) != 1 or is_batch(g) for g in graphs):
            return None
        counts = np.fromiter((g._node_frames[0].num_rows for g in graphs), dtype=np.int64, count=len(graphs))
        if len(graphs) == 1:
            src, dst = graphs[0].edges()
            total = graphs[0]._graph.num_nodes(0)
        else:
            union = heterograph_index.disjoint_union(graphs[0]._graph.metagraph, [g._graph for g in graphs])
            src, dst, _ = union.edges(0)
            total = union.num_nodes(0)
        if int(counts.sum()) != total:
            return None
        src, dst = torch.as_tensor(src), torch.as_tensor(dst)
        return counts, src.numpy().astype(np.int64, copy=False), dst.numpy().astype(np.int64, copy=False)
    except Exception:  # noqa: BLE001 - internals changed or mixed id types: the caller takes the public path
        return None


def is_batch(g) -> bool:
    """Whether a homogeneous DGLGraph holds several member graphs. (DGL also caches a one-entry batch
    size on plain graphs once ``batch_num_nodes()`` has been asked, which does not count.)"""
    sizes = g._batch_num_nodes
    return sizes is not None and next(iter(sizes.values())).shape[0] != 1


def node_frame_rows(graphs: list):
    """int64 ``(G,)`` rows of each graph's node frame (its node count; a batched graph's total), or None
    when a graph's frames are not the known layout."""
    try:
        return np.fromiter((g._node_frames[0].num_rows for g in graphs), np.int64, len(graphs))
    except Exception:  # noqa: BLE001 - DGL internals differ: the caller asks for the exact sizes
        return None


@functools.lru_cache(maxsize=1)
def _frame_classes():
    """``(Frame, Column, Scheme)`` of DGL's frame module, or None if its layout is not the known one."""
    try:
        from dgl.frame import Column, Frame, Scheme  # here: a DGL without them must still import gpse_dgl

        frame = Frame(num_rows=1)
        frame._columns["_probe"] = Column(torch.zeros(1, 1), Scheme((1,), torch.float32))
        if frame["_probe"].shape != (1, 1):
            return None
        return Frame, Column, Scheme
    except Exception:  # noqa: BLE001 - any mismatch: the caller uses the public API
        return None


class NodeColumnWriter:
    """Stores whole node columns (``name -> (num_nodes, ...) tensor``) straight into graphs' node frames.

    ``fields`` maps each name to an example tensor of the right trailing shape and dtype; a scheme is
    built once per field. :meth:`write` returns False (and writes nothing) for a graph it cannot serve:
    a frame that is not DGL's plain ``Frame``, a row count that differs, or a graph on a non-CPU device;
    the caller then uses ``g.ndata.update``.
    """

    def __init__(self, frame_classes, fields: dict):
        self.frame_cls, self.column_cls, scheme_cls = frame_classes
        self.schemes = {name: scheme_cls(tuple(value.shape[1:]), value.dtype) for name, value in fields.items()}
        self.check_device = torch.cuda.is_available()  # a CPU-only DGL build has CPU graphs only

    @classmethod
    def create(cls, fields: dict):
        """A writer for ``fields``, or None when DGL's frame module is not the known one."""
        classes = _frame_classes()
        return None if classes is None else cls(classes, fields)

    def write(self, g, columns: dict, num_rows: int) -> bool:
        frames = getattr(g, "_node_frames", None)
        if (frames is None or len(frames) != 1 or type(frames[0]) is not self.frame_cls
                or frames[0].num_rows != num_rows or (self.check_device and g.device.type != "cpu")):
            return False
        target = frames[0]._columns
        for name, value in columns.items():
            target[name] = self.column_cls(value, self.schemes[name])
        return True


def libdgl_path() -> str:
    """File of the DGL kernel library this process loaded."""
    from dgl._ffi import base  # here: a DGL without it must still import gpse_dgl

    return base._LIB._name


def tensoradapter_loaded() -> bool:
    """Whether DGL loaded its optional ``tensoradapter`` library (memory shared with torch's allocator)."""
    from dgl._ffi import base  # here: a DGL without it must still import gpse_dgl

    return bool(getattr(base, "tensor_adapter_loaded", False))


def dgl_libraries() -> dict[str, str]:
    """Which of DGL's compiled libraries this process uses, one line each, for ``gpse-dgl info``.

    ``libdgl`` (the kernels; required), ``tensoradapter`` (optional: DGL then shares memory with torch's
    allocator; DGL ships it per torch release and works without it) and ``graphbolt`` (see
    :func:`gpse_dgl._dgl_compat.guard_graphbolt`).
    """
    torch_version = torch.__version__.split("+", maxsplit=1)[0]
    adapter = f"libtensoradapter_pytorch_{torch_version}.so"
    if tensoradapter_loaded():
        adapter_line = f"loaded ({adapter})"
    else:
        adapter_line = f"not loaded (DGL {dgl.__version__} ships no {adapter}; DGL runs without it)"
    return {"libdgl": f"loaded ({libdgl_path()})", "tensoradapter": adapter_line,
            "graphbolt": _dgl_compat.GRAPHBOLT_STATUS}


#: pickle ``(module, name)`` -> the torch function a pickled tensor is rebuilt with
_TORCH_PICKLE_GLOBALS = {
    ("torch._utils", "_rebuild_tensor"): lambda: torch._utils._rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): lambda: torch._utils._rebuild_tensor_v2,
}


def torch_pickle_globals() -> tuple:
    """The ``(module, name)`` pairs :func:`torch_pickle_global` resolves."""
    return tuple(_TORCH_PICKLE_GLOBALS)


def torch_pickle_global(module: str, name: str):
    """torch's tensor-rebuild function that a pickle names as ``module.name`` (see
    :func:`torch_pickle_globals`)."""
    return _TORCH_PICKLE_GLOBALS[(module, name)]()


def reset_multihead_attention(attention: torch.nn.MultiheadAttention) -> None:
    """Re-draw ``attention``'s parameters as its constructor does (``out_proj.weight`` aside, which torch
    initialises as a ``Linear``)."""
    attention._reset_parameters()


def tensor_version(tensor: torch.Tensor) -> int:
    """How many in-place changes ``tensor`` (or a view sharing its storage) has had: a cache keyed on it is
    stale once the number moves (``.data`` edits are not counted, as autograd does not count them)."""
    return tensor._version


def isolate_dgl_shared_memory(prefix: str) -> None:
    """Make ``dgl.distributed``'s key-value store prefix ``prefix`` to the name of every shared-memory
    tensor it creates or opens in this process (servers and trainers of one partition share a prefix).
    Idempotent: a second call replaces the prefix."""
    original = getattr(_dgl_kvstore, "_gpse_dgl_empty_shared_mem", _dgl_kvstore.empty_shared_mem)
    _dgl_kvstore._gpse_dgl_empty_shared_mem = original

    def prefixed(name, *args, **kwargs):
        return original(prefix + name, *args, **kwargs)

    _dgl_kvstore.empty_shared_mem = prefixed


@contextlib.contextmanager
def dgl_random_partition(assignment: torch.Tensor):
    """Within the block, ``partition_graph(..., part_method="random")`` assigns node ``i`` to partition
    ``assignment[i]`` (int64). Yields False, changing nothing, when DGL's layout is not the known one."""
    module = importlib.import_module("dgl.distributed.partition")
    original = getattr(module, "random_choice", None)
    if original is None:
        yield False
        return

    def fixed(num_parts, num_nodes):
        if num_nodes != len(assignment) or int(assignment.max()) >= num_parts:
            raise ValueError(f"the assignment covers {len(assignment)} nodes, DGL asked for {num_nodes}")
        return assignment.clone()

    module.random_choice = fixed
    try:
        yield True
    finally:
        module.random_choice = original


def pin_dgl_machine_id(machine_id: int) -> None:
    """Make ``dgl.distributed.initialize`` in this process join as machine (partition) ``machine_id``
    instead of the first machine of the IP configuration whose address is one of this host's."""
    _dgl_rpc_client.get_local_machine_id = lambda server_namebook: int(machine_id)
