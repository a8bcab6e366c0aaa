"""Registry of pretrained GPSE models: shipped ones and published ones that can be fetched.

Every ``--checkpoint`` (``gpse-dgl encode``) and ``model.pe.checkpoint`` (downstream recipes) accepts a
registered name as well as a path: :func:`resolve_checkpoint` turns a name into the file it stands for
(the package asset of a shipped model, or ``<models_dir()>/<file_name>`` of a fetched one). An existing
path always wins over a name, so a file called ``molpcba`` in the working directory is still a file.

Registered here:

``rdkit-base``
    The 16 x 256 model of ``recipes/rdkit-base.yaml`` (and its three follow-up stages) on every molecule
    set shipped inside RDKit (``rdkit-molecules``), with random regular graphs added in the last stage,
    shipped in ``gpse_dgl/assets``: the default when no checkpoint is given.
``quickstart``
    The 12 x 64 model of ``recipes/quickstart.yaml`` on RDKit's NCI skeletons, shipped in
    ``gpse_dgl/assets``: small and fast, but it ignores its random input (a colour-refinement feature
    extractor rather than GPSE; ``benchmarks/RESULTS.md``).
``molpcba``, ``zinc``, ``pcqm4mv2``, ``geom``, ``chembl``
    The authors' 20 x 512 models (Cantürk et al., ICML 2024), Zenodo record 8145095, files
    ``gpse_model_<name>_1.0.pt``, at the URLs PyG's ``torch_geometric.nn.GPSE.from_pretrained`` uses.
    ``gpse-dgl models fetch NAME`` downloads one (:mod:`gpse_dgl.encode.fetch`).

A new model is one :func:`register_model` call with a :class:`ModelSpec`.

Example
-------
>>> from gpse_dgl.encode.models import get_model, available_models
>>> available_models()[:3]
['chembl', 'geom', 'molpcba']
>>> DEFAULT_MODEL
'rdkit-base'
>>> get_model("molpcba").file_name
'gpse_model_molpcba_1.0.pt'
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..data.cache import CACHE_ENV, default_cache_dir
from ..utils.errors import CheckpointError, GPSEError

__all__ = ["ModelSpec", "UnknownModelError", "ModelNotFetchedError", "register_model", "available_models",
           "get_model", "models_dir", "model_path", "resolve_checkpoint", "DEFAULT_MODEL", "CACHE_ENV"]

DEFAULT_MODEL = "rdkit-base"
_ZENODO = "https://zenodo.org/record/8145095/files/"


class UnknownModelError(GPSEError, ValueError):
    """Neither a registered model name nor an existing file; the message lists the registered names."""


class ModelNotFetchedError(CheckpointError):
    """A registered model whose file is not on disk; the message says how to fetch it or where to put it."""


@dataclass(frozen=True)
class ModelSpec:
    """One pretrained GPSE: what it is, where it comes from, how to check a copy of it.

    ``num_layers`` / ``dim_hidden`` are what a loaded file must have (a fetched file of another size is
    the wrong file); ``size_bytes`` / ``sha256`` are checked when known; ``format`` is the checkpoint
    layout :func:`gpse_dgl.encode.load_gpse` detects (``"gpse-dgl"`` or ``"authors"``).
    """

    name: str
    num_layers: int
    dim_hidden: int
    training_data: str
    heldout_r2: str          # "0.934 test (...)" or "not published"
    source: str              # where it comes from, in words
    file_name: str
    format: str
    url: str | None = None   # None: shipped with gpse-dgl
    size_bytes: int | None = None
    sha256: str | None = None

    @property
    def shipped(self) -> bool:
        return self.url is None

    @property
    def architecture(self) -> str:
        return f"{self.num_layers} x {self.dim_hidden}"


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec, overwrite: bool = False) -> None:
    """Register ``spec`` under ``spec.name`` (lower-case); ``overwrite`` replaces an existing entry."""
    key = spec.name.lower()
    if key in _REGISTRY and not overwrite:
        raise ValueError(f"model {key!r} is already registered")
    _REGISTRY[key] = spec


def unregister_model(name: str) -> None:
    """Remove a registration (tests register temporary models)."""
    _REGISTRY.pop(name.lower(), None)


def available_models() -> list[str]:
    """Sorted registered names."""
    return sorted(_REGISTRY)


def _unknown(name: str) -> UnknownModelError:
    return UnknownModelError(f"unknown model {name!r} (not a file either); registered models: "
                             f"{', '.join(available_models())} (see `gpse-dgl models`)")


def get_model(name: str) -> ModelSpec:
    """The :class:`ModelSpec` registered as ``name`` (case-insensitive); :class:`UnknownModelError` else."""
    spec = _REGISTRY.get(str(name).strip().lower())
    if spec is None:
        raise _unknown(name)
    return spec


def models_dir() -> Path:
    """Where fetched models live: ``$GPSE_DGL_CACHE/models``, else ``~/.cache/gpse-dgl/models``."""
    return default_cache_dir() / "models"


def model_path(spec: ModelSpec) -> Path:
    """The file of a registered model (the package asset when shipped; it may not exist yet)."""
    if spec.shipped:
        return Path(__file__).resolve().parent.parent / "assets" / spec.file_name
    return models_dir() / spec.file_name


def resolve_checkpoint(name_or_path: str | os.PathLike | None) -> tuple[Path, ModelSpec | None]:
    """``(file, spec)`` for a registered name, an existing path, or None (the default model).

    Raises :class:`ModelNotFetchedError` for a registered model not on disk, and
    :class:`UnknownModelError` for a string that is neither a name nor an existing file but reads
    like a name (no directory part, no ``.pt`` suffix); any other string is returned as a path, so
    the loader's own one-line "not found" applies.
    """
    if name_or_path is None:
        name_or_path = DEFAULT_MODEL
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path, None
    text = str(name_or_path).strip()
    spec = _REGISTRY.get(text.lower())
    if spec is None:
        looks_like_path = os.sep in text or "/" in text or path.suffix in (".pt", ".pth", ".ckpt")
        if looks_like_path:
            return path, None
        raise _unknown(text)
    where = model_path(spec)
    if not where.is_file():
        if spec.shipped:
            raise ModelNotFetchedError(f"the shipped model {spec.name!r} is missing from {where}; reinstall "
                                       "gpse-dgl or pass --checkpoint PATH")
        raise ModelNotFetchedError(f"model {spec.name!r} is not downloaded: run `gpse-dgl models fetch "
                                   f"{spec.name}`, or put {spec.file_name} ({spec.url}) at {where}")
    return where, spec


_AUTHORS_DATA = {
    "molpcba": ("ogbg-molpcba: 323,555 unique molecule skeletons", "0.979 test (paper; 5 % of MolPCBA)"),
    "zinc": ("ZINC 250k: 219,384 unique molecule skeletons", "not published"),
    "pcqm4mv2": ("PCQM4Mv2 (full): 273,920 unique molecule skeletons", "not published"),
    "geom": ("GEOM: 169,925 unique molecule skeletons", "not published"),
    "chembl": ("ChEMBL 32: 970,963 unique molecule skeletons", "not published"),
}


def _register_builtins() -> None:
    register_model(ModelSpec(
        name="rdkit-base", num_layers=16, dim_hidden=256, format="gpse-dgl", file_name="gpse_rdkit_base.pt",
        training_data="rdkit-molecules: 13,893 unique skeletons of every molecule file shipped with RDKit "
                      "+ ring-edited copies (+ random regular graphs in the last two stages, Cayley graphs "
                      "in the last)",
        heldout_r2="0.974 test / 0.975 val (benchmarks/RESULTS.md section 2d)",
        source="shipped with gpse-dgl (recipes/rdkit-base.yaml, then rdkit-base-stage2 to -stage5.yaml)"))
    register_model(ModelSpec(
        name="quickstart", num_layers=12, dim_hidden=64, format="gpse-dgl", file_name="gpse_quickstart.pt",
        training_data="embedded-molecules: 3,071 NCI skeletons shipped with RDKit + ring-edited copies",
        heldout_r2="0.934 test / 0.917 val (benchmarks/RESULTS.md section 2a)",
        source="shipped with gpse-dgl (recipes/quickstart.yaml)"))
    for name, (data, r2) in _AUTHORS_DATA.items():
        file_name = f"gpse_model_{name}_1.0.pt"
        register_model(ModelSpec(
            name=name, num_layers=20, dim_hidden=512, format="authors", file_name=file_name,
            training_data=data, heldout_r2=r2, url=_ZENODO + file_name,
            source="Cantürk et al., ICML 2024; Zenodo record 8145095"))


_register_builtins()
