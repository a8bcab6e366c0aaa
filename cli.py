#!/usr/bin/env python
"""Run the gpse-dgl command line from a checkout: ``python cli.py ...`` == ``gpse-dgl ...``."""
from gpse_dgl.cli import main

if __name__ == "__main__":
    main()
