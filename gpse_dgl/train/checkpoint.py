"""``gpse_dgl.train.checkpoint``: the public name of :mod:`gpse_dgl.utils.checkpoint`, kept for code that imports it.

Checkpoint I/O lives in :mod:`gpse_dgl.utils.checkpoint` so that :mod:`gpse_dgl.encode` (which loads
encoders) and :mod:`gpse_dgl.train` (which writes runs) both use it from below.
"""
from ..utils.checkpoint import *  # noqa: F401,F403
from ..utils.checkpoint import __all__  # noqa: F401
