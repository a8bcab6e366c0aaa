"""One module per CLI verb; each exposes a click command named ``command``."""
