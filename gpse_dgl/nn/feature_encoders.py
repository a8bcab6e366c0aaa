"""Input feature encoders: raw node / edge features -> ``dim``-wide embeddings.

Which encoder fits which data:

=================  ==========================================  ===========================================
kind               input                                       used for
=================  ==========================================  ===========================================
``"atom"``         int64 ``(N, 9)`` OGB atom features           ogbg-mol*, PCQM4Mv2, MoleculeNet
``"bond"``         int64 ``(E, 3)`` OGB bond features           the same, on edges
``"type"``         int64 ``(N,)`` or ``(N, 1)`` type index      ZINC atoms (28 types) and bonds (4 types)
``"linear"``       float ``(N, dim_in)``                        CIFAR10/MNIST superpixels, ogbn-arxiv, ...
``"constant"``     nothing (``None``) or anything with ``len``  featureless graphs (CSL, EXP, ER graphs)
=================  ==========================================  ===========================================

:func:`build_feature_encoder` maps a kind (or a ready ``nn.Module``) to a module; every encoder maps
``(num_items, ...)`` to ``(num_items, dim)``.

Example
-------
>>> import torch
>>> from gpse_dgl.nn.feature_encoders import build_feature_encoder
>>> enc = build_feature_encoder("atom", dim_out=16)
>>> enc(torch.zeros(5, 9, dtype=torch.long)).shape
torch.Size([5, 16])
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from .. import _env  # noqa: F401  (keeps ogb's version check from starting a network thread)

ENCODER_KINDS = ("atom", "bond", "type", "linear", "constant")


@functools.lru_cache(maxsize=None)
def ogb_feature_dims() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(atom_dims, bond_dims)``: vocabulary size of each of OGB's 9 atom and 3 bond features."""
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims  # ogb: heavy, only for OGB data

    return tuple(get_atom_feature_dims()), tuple(get_bond_feature_dims())


class CategoricalSumEncoder(nn.Module):
    r"""Sum of one embedding table per integer feature column (OGB's ``AtomEncoder``/``BondEncoder``).

    .. math:: h_i = \sum_{k} \mathrm{Emb}_k[x_{ik}]

    Parameters
    ----------
    vocab_sizes : sequence of int
        Number of categories of each column.
    dim_out : int
        Embedding width.
    """

    def __init__(self, vocab_sizes, dim_out: int):
        super().__init__()
        self.vocab_sizes = tuple(int(v) for v in vocab_sizes)
        self.embeddings = nn.ModuleList(nn.Embedding(v, dim_out) for v in self.vocab_sizes)
        self.reset_parameters()

    def reset_parameters(self):
        for emb in self.embeddings:
            nn.init.xavier_uniform_(emb.weight)  # OGB's initialisation

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        feat = feat.long()
        if feat.dim() == 1:
            feat = feat.unsqueeze(-1)
        if feat.shape[1] != len(self.embeddings):
            raise ValueError(f"expected {len(self.embeddings)} integer feature columns, got {feat.shape[1]}")
        out = self.embeddings[0](feat[:, 0])
        for column, emb in enumerate(self.embeddings[1:], start=1):
            out = out + emb(feat[:, column])
        return out


class AtomEncoder(CategoricalSumEncoder):
    """OGB atom encoder: the 9 integer atom features of ``ogb.utils.smiles2graph``."""

    def __init__(self, dim_out: int):
        super().__init__(ogb_feature_dims()[0], dim_out)


class BondEncoder(CategoricalSumEncoder):
    """OGB bond encoder: the 3 integer bond features of ``ogb.utils.smiles2graph``."""

    def __init__(self, dim_out: int):
        super().__init__(ogb_feature_dims()[1], dim_out)


class TypeEncoder(nn.Module):
    """One embedding per integer type (GraphGPS's ``TypeDictNode``/``TypeDictEdge``; ZINC: 28 / 4).

    Parameters
    ----------
    num_types : int
        Number of distinct types.
    dim_out : int
        Embedding width.
    """

    def __init__(self, num_types: int, dim_out: int):
        super().__init__()
        self.embedding = nn.Embedding(num_types, dim_out)

    def reset_parameters(self):
        self.embedding.reset_parameters()

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        feat = feat.long()
        if feat.dim() == 2 and feat.shape[1] == 1:
            feat = feat[:, 0]
        if feat.dim() != 1:
            raise ValueError(f"TypeEncoder expects one type index per item, got shape {tuple(feat.shape)}")
        return self.embedding(feat)


class LinearEncoder(nn.Linear):
    """``Linear(dim_in, dim_out)`` on float features (integer inputs are cast to the weight's dtype)."""

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        if feat.dim() == 1:
            feat = feat.unsqueeze(-1)
        return super().forward(feat.to(self.weight.dtype))


class ConstantEncoder(nn.Module):
    """One learned vector shared by all items, for graphs without features.

    ``forward(feat_or_count)`` accepts a tensor (only its length is used) or an int.
    """

    def __init__(self, dim_out: int):
        super().__init__()
        self.embedding = nn.Parameter(torch.empty(1, dim_out))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.normal_(self.embedding)

    def forward(self, feat_or_count) -> torch.Tensor:
        count = feat_or_count if isinstance(feat_or_count, int) else len(feat_or_count)
        return self.embedding.expand(count, -1)


def build_feature_encoder(kind, dim_out: int, dim_in: int | None = None) -> nn.Module:
    """Encoder for ``kind`` (see the module table) or ``kind`` itself if it is already a module.

    Parameters
    ----------
    kind : str or nn.Module
        One of ``ENCODER_KINDS``, or a module used as is (it must output ``dim_out`` columns).
    dim_out : int
        Embedding width.
    dim_in : int, optional
        Input width for ``"linear"``; number of types for ``"type"``; ignored otherwise.
    """
    if isinstance(kind, nn.Module):
        return kind
    if kind == "atom":
        return AtomEncoder(dim_out)
    if kind == "bond":
        return BondEncoder(dim_out)
    if kind == "constant":
        return ConstantEncoder(dim_out)
    if kind in ("linear", "type"):
        if not dim_in:
            raise ValueError(f"feature encoder {kind!r} needs dim_in (input width / number of types)")
        return LinearEncoder(dim_in, dim_out) if kind == "linear" else TypeEncoder(dim_in, dim_out)
    raise ValueError(f"unknown feature encoder {kind!r}; choose one of {ENCODER_KINDS} or pass a module")
