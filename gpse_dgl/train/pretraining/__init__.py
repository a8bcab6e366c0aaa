"""GPSE pretraining from a validated recipe: ``gpse-dgl pretrain``.

:func:`pretrain` runs the paper's procedure on the graphs ``data`` names: unique skeletons split
90 / 5 / 5, PSE targets computed once and cached, fresh random input features at every step, AdamW with
a cosine schedule after a linear warm-up, R^2 on the validation split after every epoch and the best
checkpoint evaluated on the test split (:mod:`.run` has the outputs and the reproducibility contract).

Modules (each one concern; the names below are importable from this package)::

    schema.py          PRETRAIN_SCHEMA: the recipe's keys, defaults and checks; load_pretrain_recipe
    graph_sources.py   source graphs, evaluation graphs left out, subset and split, added training graphs
    graph_collection.py  graphs as flat edge and target tensors, batched without dgl.batch
    data.py            build_pretraining_data: sources + targets, cached on disk
    model.py           the model a recipe describes and its random input features (the optimiser is
                       gpse_dgl.train.optimizer's, re-exported here)
    r2.py              the paper's R^2: per target column, per PSE and overall, accumulated batch by batch
    evaluation.py      the loss with the recipe's options, evaluate (loss and R^2 per PSE), R^2 tables
    checkpoints.py     RunPaths, TrainState, last.pt / best.pt: resuming and model.init_from warm starts
    loop.py            Trainer: epochs, steps, validation, time-limit fitting, checkpoints and logs
    time_budget.py     general_pipeline.time_limit_minutes: what is left for training, the final evaluation kept
    run.py             pretrain: the run directory, building the run, training, the final evaluation
    report.py          report.html of a run or any checkpoint (figures in report_figures.py)

The optimiser, learning-rate schedule, run directory, runtime helpers, mixed precision and data
parallelism are shared with the downstream pipeline, one floor up in :mod:`gpse_dgl.train`.

Example
-------
>>> from gpse_dgl.train.pretraining import load_pretrain_recipe, pretrain
>>> recipe = load_pretrain_recipe("recipes/quickstart.yaml", ["general_pipeline.num_epochs=1"])
>>> summary = pretrain(recipe, progress=False)          # doctest: +SKIP
>>> summary["r2_table"][-1]["pse"]                      # doctest: +SKIP
'Overall'
"""
from .evaluation import evaluate, format_r2_table, r2_table
from .model import build_model, build_optimizer, evaluation_features, model_config_from_recipe, training_features
from .run import pretrain
from .schema import PRETRAIN_SCHEMA, default_pretrain_recipe, load_pretrain_recipe, validate_pretrain_recipe

__all__ = ["pretrain", "PRETRAIN_SCHEMA", "load_pretrain_recipe", "validate_pretrain_recipe",
           "default_pretrain_recipe", "evaluate", "r2_table", "format_r2_table", "build_model",
           "build_optimizer", "model_config_from_recipe", "training_features", "evaluation_features"]
