"""Convert GPSE weights between the authors' / PyG layout and :class:`~gpse_dgl.nn.gpse.GPSEForPretraining`.

The authors' checkpoints (Zenodo record 8145095, ``gpse_model_<dataset>_1.0.pt``) are dicts with a
``model_state`` whose keys are PyG ``GPSE`` parameter names prefixed with ``model.``;
``torch_geometric.nn.GPSE().state_dict()`` has the same names without the prefix. Key map (PyG -> ours):

=====================================================================  =================================
``pre_mp.Layer_0.layer.model.weight``                                  ``encoder.pre_linear.weight``
``pre_mp.Layer_0.post_layer.0.*`` (BatchNorm, incl. buffers)           ``encoder.pre_norm.*``
``mp.layer{i}.layer.model.lin_{key,query,value,skip}.weight``          ``encoder.convs.{i}.weight``
                                                                       (row blocks key, query, value, skip)
``mp.layer{i}.layer.model.lin_{key,query,value}.bias``                 ``encoder.convs.{i}.kqv_bias``
``mp.layer{i}.layer.model.bias`` (only if the conv had a bias)         ``encoder.convs.{i}.bias``
``mp.layer{i}.post_layer.0.*``                                         ``encoder.norms.{i}.*``
``post_mp.node_post_mps.{k}.model.0.Layer_0.layer.model.{weight,bias}`` ``heads.node_hidden_{weight,bias}[k]``
``post_mp.node_post_mps.{k}.model.1.model.{weight,bias}``              ``heads.node_out_{weight,bias}[k]``
``post_mp.graph_post_mp.model.0.Layer_0.layer.model.*``                ``heads.graph_hidden_layer.*``
``post_mp.graph_post_mp.model.1.model.*``                              ``heads.graph_out.*``
=====================================================================  =================================

A state without ``post_mp`` keys (e.g. PyG's ``from_pretrained`` model, whose head is replaced by an
identity) converts to encoder keys only. A missing ``num_batches_tracked`` buffer is filled with 0.

Example
-------
>>> import torch
>>> from gpse_dgl.nn.gpse import GPSEForPretraining
>>> from gpse_dgl.nn import pyg_compat
>>> model = GPSEForPretraining.from_config({"encoder": {"dim_hidden": 8, "num_layers": 2},
...                                         "heads": {"num_node_targets": 3, "graph_hidden": 8}})
>>> authors = {"model_state": pyg_compat.to_authors_state_dict(model.state_dict())}
>>> config = pyg_compat.authors_config(authors)
>>> clone = GPSEForPretraining.from_config(config)
>>> clone.load_state_dict(pyg_compat.load_authors_state_dict(authors))
<All keys matched successfully>
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, Mapping

import torch

from ..utils.errors import CheckpointError
from .gpse import GPSE, GPSEForPretraining

__all__ = ["load_authors_state_dict", "to_authors_state_dict", "authors_config", "load_authors_model"]

_BN = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
_KQVS = ("key", "query", "value", "skip")
_NODE_HEAD = re.compile(r"post_mp\.node_post_mps\.(\d+)\.")
_MP_LAYER = re.compile(r"mp\.layer(\d+)\.")


def _pyg_state(state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Accept ``{"model_state": {...}}``, a ``model.``-prefixed state or a bare PyG state dict."""
    if not isinstance(state, Mapping):
        raise CheckpointError(f"expected a dict of tensors, got {type(state).__name__}")
    if "model_state" in state:
        state = state["model_state"]
        if not isinstance(state, Mapping):
            raise CheckpointError("model_state is not a dict of tensors")
        prefixed = True
    else:
        prefixed = bool(state) and all(k.startswith("model.") for k in state)
    out = {}
    for key, value in state.items():
        if prefixed:
            if not key.startswith("model."):
                raise CheckpointError(f"unexpected tensor {key!r} in model_state (keys must start with 'model.')")
            key = key[len("model."):]
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"entry {key!r} is a {type(value).__name__}, not a tensor")
        out[key] = value
    return out


def _get(state: dict, key: str, shape: tuple | None = None) -> torch.Tensor:
    if key not in state:
        raise CheckpointError(f"missing tensor {key!r} in GPSE checkpoint")
    value = state[key]
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise CheckpointError(f"tensor {key!r} has shape {tuple(value.shape)}, expected {tuple(shape)}")
    return value


def _bn(state: dict, prefix: str, dim: int, used: set) -> dict[str, torch.Tensor]:
    out = {}
    for name in _BN:
        key = prefix + name
        if name == "num_batches_tracked" and key not in state:
            out[name] = torch.tensor(0, dtype=torch.long)
            continue
        out[name] = _get(state, key, () if name == "num_batches_tracked" else (dim,))
        used.add(key)
    return out


def authors_config(state: Mapping[str, Any]) -> dict[str, Any]:
    """The :meth:`GPSEForPretraining.from_config` config that fits an authors'/PyG state.

    Sizes are read from the tensors (``dim_in``, width, layers, head sizes); dropout and pooling are not
    stored in a state dict and keep the paper values. Without ``post_mp`` keys the ``heads`` entry is
    ``None``.
    """
    st = _pyg_state(state)
    w0 = _get(st, "pre_mp.Layer_0.layer.model.weight")
    if w0.dim() != 2:
        raise CheckpointError(f"tensor 'pre_mp.Layer_0.layer.model.weight' has shape {tuple(w0.shape)}, "
                              "expected 2 dimensions")
    dim_hidden, dim_in = w0.shape
    layers = {int(m.group(1)) for k in st if (m := _MP_LAYER.match(k))}
    config: dict[str, Any] = {"encoder": {"dim_in": int(dim_in), "dim_hidden": int(dim_hidden),
                                          "num_layers": (max(layers) + 1) if layers else 0}}
    heads = {int(m.group(1)) for k in st if (m := _NODE_HEAD.match(k))}
    if any(k.startswith("post_mp.") for k in st):
        node_hidden = _get(st, "post_mp.node_post_mps.0.model.0.Layer_0.layer.model.weight").shape[0] \
            if heads else 32
        config["heads"] = {
            "dim_in": int(dim_hidden),
            "num_node_targets": (max(heads) + 1) if heads else 0,
            "num_graph_targets": int(_get(st, "post_mp.graph_post_mp.model.1.model.weight").shape[0]),
            "node_hidden": int(node_hidden),
            "graph_hidden": int(_get(st, "post_mp.graph_post_mp.model.0.Layer_0.layer.model.weight").shape[0]),
        }
    else:
        config["heads"] = None
    return config


def load_authors_state_dict(state: Mapping[str, Any], model: torch.nn.Module | None = None
                            ) -> "OrderedDict[str, torch.Tensor]":
    """Authors' checkpoint (or PyG ``GPSE`` state dict) -> state dict of :class:`GPSEForPretraining`.

    Parameters
    ----------
    state : dict
        ``{"model_state": {"model.<pyg key>": tensor}}`` as in the published files, the inner
        ``model_state``, or a bare PyG ``GPSE().state_dict()``.
    model : torch.nn.Module, optional
        A :class:`GPSEForPretraining` (or a bare :class:`GPSE`, then only encoder keys are returned,
        without the ``encoder.`` prefix) to check against: every tensor must exist in it with the same
        shape.

    Raises
    ------
    CheckpointError
        One line naming the tensor: missing, unexpected, or of the wrong shape.
    """
    st = _pyg_state(state)
    cfg = authors_config(st)
    enc, heads = cfg["encoder"], cfg["heads"]
    d, d_in, n_layers = enc["dim_hidden"], enc["dim_in"], enc["num_layers"]
    used: set = set()
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()

    out["encoder.pre_linear.weight"] = _get(st, "pre_mp.Layer_0.layer.model.weight", (d, d_in))
    used.add("pre_mp.Layer_0.layer.model.weight")
    for name, value in _bn(st, "pre_mp.Layer_0.post_layer.0.", d, used).items():
        out[f"encoder.pre_norm.{name}"] = value
    for i in range(n_layers):
        p = f"mp.layer{i}.layer.model."
        ws = []
        for part in _KQVS:
            ws.append(_get(st, f"{p}lin_{part}.weight", (d, d)))
            used.add(f"{p}lin_{part}.weight")
        bs = []
        for part in _KQVS[:3]:
            bs.append(_get(st, f"{p}lin_{part}.bias", (d,)))
            used.add(f"{p}lin_{part}.bias")
        out[f"encoder.convs.{i}.weight"] = torch.cat(ws, 0)
        out[f"encoder.convs.{i}.kqv_bias"] = torch.cat(bs, 0)
        if f"{p}bias" in st:
            out[f"encoder.convs.{i}.bias"] = _get(st, f"{p}bias", (d,))
            used.add(f"{p}bias")
        for name, value in _bn(st, f"mp.layer{i}.post_layer.0.", d, used).items():
            out[f"encoder.norms.{i}.{name}"] = value

    if heads is not None:
        k, h, gh = heads["num_node_targets"], heads["node_hidden"], heads["graph_hidden"]
        hw, hb, ow, ob = [], [], [], []
        for j in range(k):
            p = f"post_mp.node_post_mps.{j}.model."
            keys = (f"{p}0.Layer_0.layer.model.weight", f"{p}0.Layer_0.layer.model.bias",
                    f"{p}1.model.weight", f"{p}1.model.bias")
            hw.append(_get(st, keys[0], (h, d)))
            hb.append(_get(st, keys[1], (h,)))
            ow.append(_get(st, keys[2], (1, h))[0])
            ob.append(_get(st, keys[3], (1,))[0])
            used.update(keys)
        out["heads.node_hidden_weight"] = torch.stack(hw) if k else torch.empty(0, h, d)
        out["heads.node_hidden_bias"] = torch.stack(hb) if k else torch.empty(0, h)
        out["heads.node_out_weight"] = torch.stack(ow) if k else torch.empty(0, h)
        out["heads.node_out_bias"] = torch.stack(ob) if k else torch.empty(0)
        g = "post_mp.graph_post_mp.model."
        n_g = heads["num_graph_targets"]
        for ours, theirs, shape in (
                ("heads.graph_hidden_layer.weight", f"{g}0.Layer_0.layer.model.weight", (gh, d)),
                ("heads.graph_hidden_layer.bias", f"{g}0.Layer_0.layer.model.bias", (gh,)),
                ("heads.graph_out.weight", f"{g}1.model.weight", (n_g, gh)),
                ("heads.graph_out.bias", f"{g}1.model.bias", (n_g,))):
            out[ours] = _get(st, theirs, shape)
            used.add(theirs)

    for key in st:
        if key not in used:
            raise CheckpointError(f"unexpected tensor {key!r} in GPSE checkpoint")

    if model is not None:
        if isinstance(model, GPSE):
            out = OrderedDict((key[len("encoder."):], v) for key, v in out.items() if key.startswith("encoder."))
        _check_against(out, model.state_dict())
    return out


def _check_against(ours: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor]):
    """Every model tensor present in ``ours`` with its shape, nothing extra; errors name the PyG key."""
    names = _reverse_names(list(target) + list(ours))
    for key, value in target.items():
        if key not in ours:
            raise CheckpointError(f"missing tensor {names[key]!r} in GPSE checkpoint (for model parameter {key!r})")
        if tuple(ours[key].shape) != tuple(value.shape):
            raise CheckpointError(f"tensor {names[key]!r} gives {key!r} shape {tuple(ours[key].shape)}, "
                                  f"the model expects {tuple(value.shape)}")
    for key in ours:
        if key not in target:
            raise CheckpointError(f"unexpected tensor {names[key]!r} in GPSE checkpoint: the model has no "
                                  f"parameter {key!r}")


def _reverse_names(ours) -> dict[str, str]:
    """Our key -> the (first) PyG key it comes from, for error messages."""
    names = {}
    for key in ours:
        m = re.match(r"(?:encoder\.)?convs\.(\d+)\.(weight|kqv_bias|bias)$", key)
        hd = re.match(r"heads\.node_(hidden|out)_(weight|bias)$", key)
        gh = re.match(r"heads\.graph_(hidden_layer|out)\.(weight|bias)$", key)
        n = re.match(r"(?:encoder\.)?norms\.(\d+)\.(\w+)$", key)
        if key.endswith("pre_linear.weight"):
            names[key] = "pre_mp.Layer_0.layer.model.weight"
        elif key.startswith(("encoder.pre_norm.", "pre_norm.")):
            names[key] = "pre_mp.Layer_0.post_layer.0." + key.rsplit(".", 1)[1]
        elif m:
            leaf = {"weight": "lin_key.weight", "kqv_bias": "lin_key.bias", "bias": "bias"}[m.group(2)]
            names[key] = f"mp.layer{m.group(1)}.layer.model.{leaf}"
        elif n:
            names[key] = f"mp.layer{n.group(1)}.post_layer.0.{n.group(2)}"
        elif hd:
            leaf = "0.Layer_0.layer.model" if hd.group(1) == "hidden" else "1.model"
            names[key] = f"post_mp.node_post_mps.0.model.{leaf}.{hd.group(2)}"
        elif gh:
            leaf = "0.Layer_0.layer.model" if gh.group(1) == "hidden_layer" else "1.model"
            names[key] = f"post_mp.graph_post_mp.model.{leaf}.{gh.group(2)}"
        else:
            names[key] = key
    return names


def to_authors_state_dict(ours: Mapping[str, torch.Tensor], prefix: str = "model."
                          ) -> "OrderedDict[str, torch.Tensor]":
    """State dict of :class:`GPSEForPretraining` (or of a bare :class:`GPSE`) -> PyG/authors' keys.

    With the default ``prefix="model."`` the result is an authors'-style ``model_state`` (save it as
    ``{"model_state": result}``); with ``prefix=""`` it loads into ``torch_geometric.nn.GPSE()``.
    """
    ours = dict(ours)
    if not any(k.startswith("encoder.") for k in ours):
        ours = {f"encoder.{k}": v for k, v in ours.items()}
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()

    def put(key, value):
        out[prefix + key] = value.detach().clone()

    def take(key):
        if key not in ours:
            raise CheckpointError(f"missing tensor {key!r} in gpse-dgl state dict")
        return ours.pop(key)

    put("pre_mp.Layer_0.layer.model.weight", take("encoder.pre_linear.weight"))
    for name in _BN:
        put(f"pre_mp.Layer_0.post_layer.0.{name}", take(f"encoder.pre_norm.{name}"))
    layers = sorted({int(m.group(1)) for k in ours if (m := re.match(r"encoder\.convs\.(\d+)\.", k))})
    for i in layers:
        w = take(f"encoder.convs.{i}.weight")
        b = take(f"encoder.convs.{i}.kqv_bias")
        if w.shape[0] % 4 or b.shape[0] * 4 != w.shape[0] * 3:
            raise CheckpointError(f"tensor 'encoder.convs.{i}.weight' has shape {tuple(w.shape)}, "
                                  "expected (4 * d, d_in) with kqv_bias (3 * d,)")
        d = w.shape[0] // 4
        p = f"mp.layer{i}.layer.model."
        for j, part in enumerate(_KQVS):
            put(f"{p}lin_{part}.weight", w[j * d:(j + 1) * d])
            if j < 3:
                put(f"{p}lin_{part}.bias", b[j * d:(j + 1) * d])
        if f"encoder.convs.{i}.bias" in ours:
            put(f"{p}bias", take(f"encoder.convs.{i}.bias"))
        for name in _BN:
            put(f"mp.layer{i}.post_layer.0.{name}", take(f"encoder.norms.{i}.{name}"))
    if any(k.startswith("heads.") for k in ours):
        hw, hb = take("heads.node_hidden_weight"), take("heads.node_hidden_bias")
        ow, ob = take("heads.node_out_weight"), take("heads.node_out_bias")
        for j in range(hw.shape[0]):
            p = f"post_mp.node_post_mps.{j}.model."
            put(f"{p}0.Layer_0.layer.model.weight", hw[j])
            put(f"{p}0.Layer_0.layer.model.bias", hb[j])
            put(f"{p}1.model.weight", ow[j].unsqueeze(0))
            put(f"{p}1.model.bias", ob[j].reshape(1))
        g = "post_mp.graph_post_mp.model."
        put(f"{g}0.Layer_0.layer.model.weight", take("heads.graph_hidden_layer.weight"))
        put(f"{g}0.Layer_0.layer.model.bias", take("heads.graph_hidden_layer.bias"))
        put(f"{g}1.model.weight", take("heads.graph_out.weight"))
        put(f"{g}1.model.bias", take("heads.graph_out.bias"))
    if ours:
        raise CheckpointError(f"unexpected tensor {next(iter(ours))!r} in gpse-dgl state dict")
    return out


def load_authors_model(state: Mapping[str, Any], backend: str | None = None):
    """Build a :class:`GPSEForPretraining` (or a :class:`GPSE` if the state has no heads) in eval mode
    from an authors' checkpoint dict / PyG state dict."""
    cfg = authors_config(state)
    sd = load_authors_state_dict(state)
    if cfg["heads"] is None:
        model = GPSE.from_config(cfg["encoder"], backend=backend)
        sd = OrderedDict((k[len("encoder."):], v) for k, v in sd.items())
    else:
        model = GPSEForPretraining.from_config(cfg, backend=backend)
    _check_against(sd, model.state_dict())
    model.load_state_dict(sd)
    return model.eval()
