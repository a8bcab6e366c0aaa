"""GPSE encodings as a DGL transform: :class:`AddGPSE`, a callable ``g -> g``.

``AddGPSE(model)`` is like :class:`gpse_dgl.pse.AddPSE`: it writes the encodings of every node to
``g.ndata[key]`` and returns ``g``, so it composes with ``dgl.transforms.Compose`` and can be a
``dgl.data`` dataset's ``transform``. A transform runs once per graph and per access; for a whole
dataset, :func:`~gpse_dgl.encode.precompute.precompute_gpse` encodes all graphs in batches (and can
cache them) with the same values graph by graph.

Example
-------
>>> import dgl
>>> from gpse_dgl.nn.gpse import GPSE
>>> from gpse_dgl.encode import AddGPSE
>>> g = AddGPSE(GPSE(dim_hidden=8, num_layers=2))(dgl.graph(([0, 1, 2], [1, 2, 0])))
>>> g.ndata["gpse"].shape
torch.Size([3, 8])
"""
from __future__ import annotations

from .. import _env  # noqa: F401  (DGLBACKEND before dgl is imported)
import dgl

from ..utils.precision import Precision, as_precision
from .inference import bare_encoder, encode, target_device
from .loading import resolve_model

__all__ = ["AddGPSE"]


class AddGPSE:
    """Add the encodings of a pretrained GPSE to a DGLGraph: ``g.ndata[key]``, ``(num_nodes, dim)`` float32.

    Parameters
    ----------
    model : GPSE, str, PathLike or None
        An encoder, a checkpoint path (ours or the authors' ``gpse_model_<name>_1.0.pt``), or None for
        the default model shipped with gpse-dgl. Loaded once, here.
    seed : int
        Seed of the random input features (a graph's encoding depends only on the graph, seed, model).
    samples : int
        Average the encodings of this many draws of random features.
    precision : {"fp32", "bf16", "fp16"}
        Arithmetic of the forward pass; fp32 is the reference.
    key : str
        ``ndata`` key the encodings are written to.
    device : str or torch.device, optional
        Where the encoder runs; default the model's device.
    **kwargs
        Further options of :func:`gpse_dgl.encode.encode` (``undirected``, ``batch_size``).

    Examples
    --------
    >>> import dgl
    >>> from gpse_dgl.nn.gpse import GPSE
    >>> add = AddGPSE(GPSE(dim_hidden=4, num_layers=2), seed=1)
    >>> compose = dgl.transforms.Compose([dgl.transforms.AddSelfLoop(), add])
    >>> compose(dgl.graph(([0, 1], [1, 2]))).ndata["gpse"].shape
    torch.Size([3, 4])
    """

    def __init__(self, model=None, seed: int = 0, samples: int = 1, precision: Precision | str = "fp32",
                 key: str = "gpse", device=None, **kwargs):
        self.model = resolve_model(model, device)
        # decided once, for the device the encodings run on: auto is what it stands for there
        self.precision = as_precision(precision, target_device(self.model, device))
        self.options = {"seed": seed, "samples": samples, "device": device, "precision": self.precision, **kwargs}
        self.key = key

    def __call__(self, g: dgl.DGLGraph) -> dgl.DGLGraph:
        g.ndata[self.key] = encode(self.model, g, **self.options)
        return g

    def __repr__(self) -> str:
        encoder = bare_encoder(self.model)
        return (f"{type(self).__name__}(model={encoder.num_layers}x{encoder.dim_hidden}, "
                f"seed={self.options['seed']}, samples={self.options['samples']}, precision={self.precision.name!r}, "
                f"key={self.key!r})")
