"""Downstream training from a validated recipe (:mod:`.schema`): ``gpse-dgl train``.

``train_downstream(recipe)`` loads the dataset by name, precomputes (or reads from the cache) the
encoding ``model.pe.source`` asks for (:mod:`.features`), builds the model, and trains it
once per run:

* **Runs.** ``general_pipeline.num_seeds`` seeds ``seed, seed + 1, ...``. With cross-validation
  (``data.evaluation: cv``, the default for CSL and EXP) run ``r`` draws its own stratified
  ``cv_folds``-fold split (seed ``data.split_seed + r``) and trains one model per fold: fold ``i`` is
  the test set and fold ``i + 1`` the validation set (the benchmarking-gnns protocol).
* **Selection.** After every evaluation the model is scored on the validation and test sets with the
  dataset's metric (OGB's ``Evaluator`` for ``ogbg-*`` / ``ogbn-*``, else :mod:`gpse_dgl.train.downstream.scores`);
  a run reports the train / validation / test scores of its best validation epoch (GraphGPS's
  protocol; a tie on the metric goes to the lower validation loss), the train score being that of
  the epoch's training pass. Runs are summarised as mean +- std (population std, as GraphGPS's
  aggregation) in ``results.json``.
* **Tasks.** Graph-level tasks train on mini-batches of graphs; node-level tasks (one graph) train and
  evaluate on the full graph, or with DGL neighbour sampling (``general_pipeline.sampling: neighbor``,
  for models without edge features; evaluation then uses one fixed sampled draw per split).
  Regression targets can be standardised for training (``general_pipeline.standardize_targets``);
  scores and validation / test losses are always in the targets' units (the logged training loss is
  the standardised one that is optimised).
* **Optimisation.** Adam / AdamW; cosine schedule with linear warm-up stepped per epoch (GraphGPS),
  reduce-on-plateau on the validation metric, or a constant rate.

Outputs under ``general_pipeline.save_path``::

    results.json          per-run scores, mean +- std, feature and model summaries, the recipe
    recipe.yaml           the validated recipe
    <run>/last.pt         checkpoint after the latest epoch (what --resume continues from)
    <run>/best.pt         checkpoint of the best validation epoch
    <run>/result.json     the run's scores once it has finished (a resumed job skips finished runs)
    <run>/tensorboard/    losses, scores and learning rate per epoch

``<run>`` is ``seed<S>`` or ``seed<S>-fold<F>``. Every random draw of a run (initial weights, batch
order, dropout, neighbour sampling) is seeded from ``(seed, epoch)``, so an interrupted run resumed
from ``last.pt`` ends bit-identical to an uninterrupted one (same device and thread count).

Modules (each one concern; the names below are importable from this package)::

    schema.py       DOWNSTREAM_SCHEMA: the recipe's keys, defaults and checks; load_downstream_recipe
    features.py     the encodings model.pe.source picks (PSEs, random, GPSE), computed and cached
    evaluation.py   TaskSpec / task_spec (what is predicted, the metric), compute_loss, summaries
    scores.py       the metrics by name: MAE, RMSE, accuracy, ROC-AUC, AP (as OGB's evaluators score)
    data.py         prepare_data: the dataset, the recipe's preprocessing, the encoding; graph batches
    models.py       the model a recipe describes (model_config, model_from_config) and its capabilities
    runs.py         RunPlan / plan_runs (seeds x folds), RunState (a run's progress)
    loop.py         Trainer: epochs, steps, evaluation, best epoch, checkpoints and logs of one run
    checkpoints.py  last.pt / best.pt of a run, the job directory checks
    job.py          train_downstream: the job directory, the runs one after the other, results.json

The learning-rate schedule (:mod:`gpse_dgl.train.schedule`), the run directory, runtime helpers, metrics,
mixed precision and data parallelism are shared with pretraining, one floor up in :mod:`gpse_dgl.train`.

Example
-------
>>> from gpse_dgl.train.downstream import load_downstream_recipe, train_downstream
>>> recipe = load_downstream_recipe("recipes/downstream/csl.yaml", ["model.pe.source=RWSE"])
>>> results = train_downstream(recipe)          # doctest: +SKIP
>>> results["summary"]["test"]["mean"]          # doctest: +SKIP
1.0
"""
from .checkpoints import FORMAT
from .evaluation import TaskSpec, compute_loss, format_summary, summarize, task_spec
from .job import train_downstream
from .models import build_downstream_model, model_from_config
from .runs import RunPlan, plan_runs
from .schema import DOWNSTREAM_SCHEMA, default_downstream_recipe, load_downstream_recipe, validate_downstream_recipe

__all__ = ["train_downstream", "TaskSpec", "task_spec", "build_downstream_model", "model_from_config",
           "compute_loss", "RunPlan", "plan_runs", "summarize", "format_summary", "FORMAT", "DOWNSTREAM_SCHEMA",
           "load_downstream_recipe", "validate_downstream_recipe", "default_downstream_recipe"]
