"""Two training pipelines side by side, and the run machinery they share.

* :mod:`gpse_dgl.train.pretraining` - GPSE pretraining from a recipe (``gpse-dgl pretrain``): its schema,
  data, model, loop, checkpoints, evaluation and report.
* :mod:`gpse_dgl.train.downstream` - downstream benchmarks from a recipe (``gpse-dgl train``): its schema,
  features, data, models, runs, loop, evaluation, checkpoints and job.

The two pipelines do not import each other (``tests/test_layering.py``); what both use is here:

* :mod:`.optimizer` - the optimiser a recipe names (AdamW or Adam, fused where torch has it).
* :mod:`.schedule` - the learning-rate schedule (:class:`~gpse_dgl.train.schedule.LRSchedule`).
* :mod:`.runtime` - devices, seeds, thread counts, progress output and JSON files.
* :mod:`.run_frame` - the frame a run opens: process group, threads, the run directory on rank 0.
* :mod:`.rundir` - the run directory: preflight, lock, ``--overwrite`` and ``--resume`` checks.
* :mod:`.mixed_precision` - a loop's autocast and optimiser step in fp32 / bf16 / fp16.
* :mod:`.data_parallel` - data parallelism under torchrun (batch shares, DDP, the global-batch loss).

Submodules are imported on demand (``from gpse_dgl.train.pretraining import pretrain``), so importing
this package stays cheap.
"""
