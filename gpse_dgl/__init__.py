"""gpse-dgl: GPSE (Graph Positional and Structural Encoder) and fast explicit PSEs on DGL."""
from . import _env  # noqa: F401  (must run before dgl/ogb imports)

__version__ = "0.1.0"
