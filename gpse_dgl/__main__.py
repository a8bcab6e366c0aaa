"""``python -m gpse_dgl VERB ...``: the ``gpse-dgl`` command line, so that
``torchrun --nproc_per_node=N -m gpse_dgl pretrain RECIPE`` starts N data-parallel processes
(docs/DISTRIBUTED.md)."""
from .cli import main

if __name__ == "__main__":
    main()
