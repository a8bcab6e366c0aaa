"""Small helpers shared by every sub-package (no imports from the rest of gpse_dgl)."""
