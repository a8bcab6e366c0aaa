"""Source ``none``: no encoding; the model sees the dataset's node features only (no PE encoder)."""
from __future__ import annotations

from .spec import PESource


def describe():
    return PESource("none", "no encoding", compute=None, encoder={"kind": None}, kinds=())
