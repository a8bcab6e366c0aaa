"""Name -> downstream model class registry (re-exported by :mod:`gpse_dgl.nn.models`)."""
from __future__ import annotations

MODEL_REGISTRY: dict[str, type] = {}


def register_model(name: str):
    """Class decorator: make the model buildable as ``build_model(name, ...)`` (names are case-insensitive)."""
    key = name.lower()

    def decorator(cls):
        if key in MODEL_REGISTRY and MODEL_REGISTRY[key] is not cls:
            raise ValueError(f"model name {name!r} is already registered to {MODEL_REGISTRY[key].__name__}")
        MODEL_REGISTRY[key] = cls
        return cls

    return decorator


def build_model(name: str, **kwargs):
    """Instantiate the model registered as ``name`` with constructor keyword arguments ``kwargs``."""
    try:
        cls = MODEL_REGISTRY[name.lower()]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODEL_REGISTRY)}") from None
    return cls(**kwargs)
