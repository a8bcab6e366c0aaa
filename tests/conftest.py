"""Imported by pytest before any test module: gpse_dgl first, so that on DGL 2.x its import guard
(``gpse_dgl._dgl_compat``) is in place before a test module imports dgl itself."""
import gpse_dgl  # noqa: F401
