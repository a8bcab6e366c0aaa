"""One graph on several machines: GPSE encoding on ``dgl.distributed`` (docs/DISTRIBUTED.md).

* :mod:`.partition` -- cut a graph into partitions once (``gpse-dgl partition``), with what the
  encoding needs to reproduce a one-process run (original node ids, the random-feature key).
* :mod:`.launch` -- start one graph server per partition and its trainer processes, on this host over
  loopback or on the hosts of a host file (ssh or SLURM ``srun``); one line per failure, no process left.
* :mod:`.runtime` -- what a started process does first: a server serves its partition, a trainer joins
  DGL's servers and a ``torch.distributed`` group.
* :mod:`.encode` -- exact layer-wise GPSE encoding on the ``DistGraph``; :mod:`.shards` reads its output.
"""
