"""Encode any graph dataset with a pretrained GPSE: ours, the authors' weights, or the shipped default.

Modules:

* :mod:`.loading` - :func:`load_gpse` (gpse-dgl and authors' checkpoints, auto-detected, weights-only).
* :mod:`.inference` - :func:`encode` (one batched graph), :func:`encode_dataset` (many graphs, batched,
  with a progress bar), :func:`encode_large` (exact, bounded memory), :func:`encode_sampled`
  (neighbour-sampled approximation).
* :mod:`.transform` - :class:`AddGPSE` (a DGL transform ``g -> g``); :mod:`.precompute` -
  :func:`precompute_gpse` (a whole dataset in batches, written into its graphs, optionally cached).
* :mod:`.large_graph` - layer-wise and sampled inference (their own loops over node chunks and sampled
  blocks, running the encoder's stages); :mod:`.chunk_plan` - the destination ranges those loops take;
  :mod:`.graphs` - simple undirected views and per-draw seeds.
* :mod:`.sharded` - encoding shared out among ``torchrun``'s processes, with one process's output.
* :mod:`.models` - the registry of pretrained models (shipped and published names for ``--checkpoint``);
  :mod:`.fetch` - downloading a registered model, verified before it is kept.

Example
-------
>>> import dgl
>>> from gpse_dgl.encode import encode
>>> from gpse_dgl.nn.gpse import GPSE
>>> model = GPSE(dim_hidden=16, num_layers=2)       # or load_gpse("gpse_model_molpcba_1.0.pt")
>>> encode(model, dgl.graph(([0, 1], [1, 2])), seed=0).shape
torch.Size([3, 16])
"""
from .inference import encode, encode_dataset, encode_large, encode_sampled
from .large_graph import DEFAULT_FANOUTS
from .loading import CheckpointInfo, default_checkpoint_path, describe_checkpoint, load_gpse
from .precompute import precompute_gpse
from .transform import AddGPSE

__all__ = ["load_gpse", "default_checkpoint_path", "describe_checkpoint", "CheckpointInfo", "encode",
           "encode_dataset", "encode_large", "encode_sampled", "DEFAULT_FANOUTS", "AddGPSE", "precompute_gpse"]
