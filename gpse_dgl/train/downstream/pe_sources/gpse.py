"""Source ``GPSE``: the encoding of a pretrained GPSE (``model.pe.checkpoint``; null = the shipped default).

Seeded per graph (:func:`gpse_dgl.encode.encode_dataset`), so the table does not depend on the batch size
or the order of the graphs. Its cache key names the checkpoint by its content (a copied or renamed file
still hits the cache). The authors' ZINC encoder for it (``configs/mol_bench/zinc-GPS+GPSE.yaml``): a
2-layer MLP after BatchNorm, input dropout 0.5.
"""
from __future__ import annotations

from typing import Sequence

from ....data.cache import file_sha256
from ....encode import default_checkpoint_path, encode_dataset, load_gpse
from ....encode.models import resolve_checkpoint
from ....utils.errors import CheckpointError
from .table import NodeTable
from .spec import PESource


def gpse_features(graphs: Sequence, checkpoint: str | None = None, *, model=None, seed: int = 0,
                  samples: int = 1, batch_size: int = 256, sampled: bool = False,
                  fanouts: Sequence[int] | None = None, device=None, progress: bool = False,
                  precision: str = "fp32") -> NodeTable:
    """Encodings of a pretrained GPSE (``model``, or loaded from ``checkpoint``; None = shipped default);
    ``precision`` as in :func:`gpse_dgl.encode.encode`."""
    if model is None:
        model = load_gpse(checkpoint, device=device or "cpu")
    encodings = encode_dataset(model, list(graphs), batch_size=batch_size, seed=seed, samples=samples,
                               progress=progress, device=device, sampled=sampled,
                               fanouts=[int(f) for f in fanouts] if fanouts else None, precision=precision)
    return NodeTable.from_list(encodings)


def checkpoint_identity(checkpoint: str | None) -> dict:
    """The GPSE checkpoint by content (a copied or renamed file still hits the cache)."""
    path = resolve_checkpoint(checkpoint)[0] if checkpoint else default_checkpoint_path()
    if not path.is_file():
        where = "the shipped default " if checkpoint is None else ""
        raise CheckpointError(f"{where}GPSE checkpoint {path} not found; set model.pe.checkpoint to a "
                              f"gpse-dgl best.pt or an authors' gpse_model_<name>_1.0.pt")
    return {"sha256": file_sha256(path), "default": checkpoint is None}


def _compute(graphs, pe: dict, device, progress) -> NodeTable:
    return gpse_features(graphs, pe.get("checkpoint"), seed=pe.get("gpse_seed", 0), samples=pe.get("gpse_samples", 1),
                         batch_size=pe.get("gpse_batch_size", 256), sampled=pe.get("gpse_sampled", False),
                         fanouts=pe.get("gpse_fanouts"), device=device, progress=progress,
                         precision=pe.get("gpse_precision") or "fp32")


def _settings(pe: dict) -> dict:
    settings = {"checkpoint": checkpoint_identity(pe.get("checkpoint")), "gpse_seed": pe.get("gpse_seed", 0),
                "gpse_samples": pe.get("gpse_samples", 1), "gpse_sampled": pe.get("gpse_sampled", False)}
    if settings["gpse_sampled"]:
        settings["gpse_fanouts"] = [int(f) for f in pe["gpse_fanouts"]]
    settings["storage"] = pe.get("storage", "float32")
    precision = pe.get("gpse_precision")  # decided by the job (None: fp32)
    if precision is not None and precision.autocast_enabled:  # fp32 keys stay those of earlier caches
        settings["precision"] = precision.name
    return settings


def describe():
    return PESource("GPSE", "encodings of a pretrained GPSE (model.pe.checkpoint; null = the shipped model)",
                    compute=_compute, width=lambda pe: None, settings=_settings,
                    encoder={"kind": "mlp", "layers": 2, "batchnorm": True, "dropout_in": 0.5})
