"""Downstream training (gpse_dgl.train.downstream): recipes, metrics, runs, CV, node tasks, resume."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gpse_dgl.train.downstream import scores as metrics
from gpse_dgl.utils.checkpoint import load_checkpoint
from gpse_dgl.train.downstream import compute_loss, plan_runs, task_spec, train_downstream
from gpse_dgl.train.downstream.schema import (DOWNSTREAM_SCHEMA, load_downstream_recipe,
                                              validate_downstream_recipe)
from gpse_dgl.utils.errors import CheckpointError, RecipeError

REPO = Path(__file__).resolve().parent.parent
RECIPES = sorted(p for p in (REPO / "recipes" / "downstream").glob("*.yaml") if not p.name.startswith("_"))
BASES = sorted((REPO / "recipes" / "downstream").glob("_*.yaml"))  # what the recipes start from (base:)
FIXTURES = REPO / "tests" / "fixtures" / "datasets"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    """A private copy of the dataset fixtures (loaders write caches next to the data)."""
    root = tmp_path_factory.mktemp("datasets")
    shutil.copytree(FIXTURES, root, dirs_exist_ok=True)
    return root


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("feature_cache")


def csl_recipe(save_path, cache_dir, *extra):
    """CSL, one fold, small GIN: about a second per epoch on a loaded CPU."""
    return load_downstream_recipe(REPO / "recipes/downstream/csl.yaml", [
        "model.pe.source=RWSE", "model.dim_hidden=32", "model.pe.dim_pe=32", "general_pipeline.num_epochs=2",
        "data.max_folds=1", f"data.cache_dir={cache_dir}", f"general_pipeline.save_path={save_path}",
        "general_pipeline.num_threads=1", "device=cpu", *extra])


# ------------------------------------------------------------------ recipes


def test_recipe_list_covers_the_papers_benchmarks():
    names = {p.stem for p in RECIPES}
    expected = {"zinc", "ogbg-molhiv", "ogbg-molpcba", "pcqm4mv2-subset", "peptides-func", "peptides-struct",
                "cifar10", "mnist", "ogbn-arxiv", "ogbn-proteins", "csl", "exp"}
    expected |= {f"molnet-{n}" for n in ("bace", "bbbp", "clintox", "muv", "sider", "tox21", "toxcast", "hiv")}
    assert expected <= names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_validates_and_comments_every_key(path):
    recipe = load_downstream_recipe(path)
    assert recipe["model"]["pe"]["source"] in ("none", "GPSE", "RWSE", "LapPE")
    text = path.read_text(encoding="utf-8").splitlines()
    keyed = [line for line in text if ":" in line and not line.lstrip().startswith("#")]
    assert keyed and all("#" in line for line in keyed), [line for line in keyed if "#" not in line][:3]


def test_recipes_resolve_to_the_snapshot():
    """Each recipe, base recipes merged in, is the recipe it was when every file listed every key."""
    snapshot = json.loads((REPO / "tests" / "fixtures" / "downstream_recipes_resolved.json").read_text())
    assert sorted(snapshot) == [p.name for p in RECIPES]
    for path in RECIPES:
        assert load_downstream_recipe(path) == snapshot[path.name], path.name


@pytest.mark.parametrize("path", BASES, ids=lambda p: p.stem)
def test_base_recipes_validate_and_comment_every_key(path):
    load_downstream_recipe(path)
    keyed = [line for line in path.read_text(encoding="utf-8").splitlines()
             if ":" in line and not line.lstrip().startswith("#")]
    assert all("#" in line for line in keyed)


def test_the_base_recipe_lists_every_key():
    import yaml

    def keys(tree, prefix=""):
        return {k for key, value in tree.items()
                for k in (keys(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key})}

    written = yaml.safe_load((REPO / "recipes" / "downstream" / "_base.yaml").read_text(encoding="utf-8"))
    assert keys(written) == keys(DOWNSTREAM_SCHEMA)


@pytest.mark.parametrize("override, fragment", [
    ("model.pe.source=LapPE+", "model.pe.source: unknown PE source"),
    ("model.pe.dim_pe=999", "model.pe.dim_pe: 999 is larger than model.dim_hidden"),
    ("data.name=nope", "data.name: unknown dataset 'nope'"),
    ("model.name=gat", "model.name: unknown model 'gat'"),
    ("general_pipeline.fanouts=[10, 5]", "needs one fan-out per layer"),
    ("model.pe.colour=1", "unknown key"),
])
def test_recipe_errors_are_one_line(override, fragment):
    with pytest.raises(RecipeError) as info:
        sampling = ["general_pipeline.sampling=neighbor"] if "fanouts" in override else []
        load_downstream_recipe(REPO / "recipes/downstream/csl.yaml", sampling + [override])
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_defaults_cover_the_schema():
    recipe = validate_downstream_recipe({})
    assert set(recipe) == set(DOWNSTREAM_SCHEMA)
    assert recipe["model"]["pe"]["source"] == "none" and recipe["data"]["name"] == "csl"


# ------------------------------------------------------------------ metrics


def _binary(rng, n=200, tasks=3):
    y = (rng.random((n, tasks)) < 0.3).astype(float)
    y[rng.random((n, tasks)) < 0.1] = np.nan
    score = np.round(rng.normal(size=(n, tasks)) + y * 0.8, 1)  # rounding makes ties
    return y, score


def test_roc_auc_and_ap_match_sklearn_per_task_mean():
    from sklearn.metrics import average_precision_score, roc_auc_score

    y, score = _binary(np.random.default_rng(0))
    keep = [~np.isnan(y[:, t]) for t in range(y.shape[1])]
    auc = np.mean([roc_auc_score(y[k, t], score[k, t]) for t, k in enumerate(keep)])
    ap = np.mean([average_precision_score(y[k, t], score[k, t]) for t, k in enumerate(keep)])
    assert metrics.roc_auc(torch.tensor(y), torch.tensor(score)) == pytest.approx(auc, abs=1e-12)
    assert metrics.average_precision(y, score) == pytest.approx(ap, abs=1e-12)


def test_binary_metrics_skip_single_class_tasks_and_match_ogb():
    from ogb.graphproppred import Evaluator

    y, score = _binary(np.random.default_rng(1), tasks=2)
    y[:, 1] = np.where(np.isnan(y[:, 1]), np.nan, 0.0)  # task 1 has no positive label
    ogb_auc = Evaluator("ogbg-molhiv").eval({"y_true": y[:, :1], "y_pred": score[:, :1]})["rocauc"]
    assert metrics.roc_auc(y, score) == pytest.approx(ogb_auc)  # task 1 left out
    ogb_ap = Evaluator("ogbg-molpcba")._eval_ap(y, score)["ap"]
    assert metrics.average_precision(y, score) == pytest.approx(ogb_ap)
    assert math.isnan(metrics.roc_auc(np.zeros((4, 1)), np.arange(4.0)[:, None]))


def test_binary_metrics_on_ties_and_single_class_batches_by_hand():
    """Tied scores count 1/2 in the AUC and form one threshold in AP; a batch whose labelled rows hold one
    class scores nothing (NaN), and such a task leaves the mean over the others unchanged."""
    y = np.array([[0.0, 1.0], [1.0, 1.0], [0.0, np.nan], [1.0, 1.0]])
    score = np.array([[0.5, 0.1], [0.5, 0.9], [0.2, 0.3], [0.8, 0.3]])
    # task 0: positives 0.5 and 0.8 against negatives 0.5 and 0.2: (0.5 + 1 + 1 + 1) / 4
    assert metrics.roc_auc(y, score) == pytest.approx(0.875, abs=1e-12)
    # thresholds 0.8 (precision 1, recall 1/2) and 0.5 (precision 2/3, recall 1)
    assert metrics.average_precision(y, score) == pytest.approx(0.5 + 0.5 * 2 / 3, abs=1e-12)
    assert math.isnan(metrics.roc_auc(y[:, 1:], score[:, 1:]))
    assert math.isnan(metrics.average_precision(np.ones((3, 2)), np.arange(6.0).reshape(3, 2)))


def test_accuracy_mae_rmse_against_direct_computation():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [0.0, 0.0, 5.0], [1.0, 0.0, 0.0]])
    labels = torch.tensor([0, 1, 1, 0])
    assert metrics.accuracy(labels, logits) == 0.75
    assert metrics.accuracy(torch.tensor([1, 0]), torch.tensor([[0.3], [-2.0]])) == 1.0  # binary logits
    true = torch.tensor([[1.0, float("nan")], [2.0, 4.0], [3.0, 0.0]])
    pred = torch.tensor([[1.5, 9.0], [2.0, 1.0], [1.0, 0.0]])
    assert metrics.mae(true, pred) == pytest.approx((0.5 + 0 + 2 + 3 + 0) / 5)
    assert metrics.rmse(true, pred) == pytest.approx((math.sqrt((0.25 + 4) / 3) + math.sqrt(9 / 2)) / 2)
    assert metrics.score("mae", true, pred) == metrics.mae(true, pred)
    with pytest.raises(ValueError, match="unknown metric"):
        metrics.score("f1", true, pred)


def test_losses_ignore_missing_labels():
    pred = torch.tensor([[0.0, 5.0], [1.0, -1.0]], requires_grad=True)
    target = torch.tensor([[1.0, float("nan")], [0.0, 0.0]])
    loss = compute_loss("bce", pred, target)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(pred[~target.isnan()], target[~target.isnan()])
    assert torch.allclose(loss, expected)
    loss.backward()
    assert pred.grad[0, 1] == 0
    assert compute_loss("l1", pred, torch.full((2, 2), float("nan"))).item() == 0.0


# ------------------------------------------------------------------ runs and protocols


def test_cv_plan_partitions_and_differs_between_repeats():
    from gpse_dgl.data.synthetic import csl_dataset

    dataset = csl_dataset()
    recipe = validate_downstream_recipe({"data": {"name": "csl"}})
    plans = plan_runs(dataset, recipe, [0, 1])
    assert [p.name for p in plans[:2]] == ["seed0-fold0", "seed0-fold1"] and len(plans) == 10
    for plan in plans:
        parts = torch.cat([plan.splits[s] for s in ("train", "val", "test")])
        assert sorted(parts.tolist()) == list(range(150))
        assert len(plan.splits["test"]) == 30 and torch.bincount(dataset.labels[plan.splits["test"]]).eq(3).all()
    assert not torch.equal(plans[0].splits["test"], plans[5].splits["test"])
    limited = validate_downstream_recipe({"data": {"name": "csl", "max_folds": 2}})
    assert len(plan_runs(dataset, limited, [0, 1, 2])) == 6


def test_csl_end_to_end(tmp_path, cache_dir):
    summary = train_downstream(csl_recipe(tmp_path / "job", cache_dir), progress=False)
    assert summary["status"] == "complete" and summary["num_runs"] == 1
    run = summary["runs"][0]
    assert run["run"] == "seed0-fold0" and 1 <= run["best_epoch"] <= 2
    assert all(0.0 <= run[s] <= 1.0 for s in ("train", "val", "test"))
    assert summary["summary"]["test"]["mean"] == run["test"] and summary["summary"]["test"]["std"] == 0.0
    assert summary["features"]["dim"] == 20 and summary["model"]["config"]["pe_only"]
    job = tmp_path / "job"
    on_disk = json.loads((job / "results.json").read_text())
    assert on_disk["summary"]["test"]["mean"] == run["test"]
    ran = on_disk["environment"]  # how the job ran
    assert (ran["world_size"], ran["device"], ran["precision"]["name"], ran["threads"]) == (1, "cpu", "fp32", 1)
    assert ran["versions"]["torch"] == torch.__version__ and ran["cpu_cores"] >= 1
    assert {p.name for p in (job / "seed0-fold0").iterdir()} >= {"last.pt", "best.pt", "result.json", "tensorboard"}
    assert (job / "recipe.yaml").is_file()
    with pytest.raises(CheckpointError, match="already holds a run"):
        train_downstream(csl_recipe(tmp_path / "job", cache_dir), progress=False)


def _killed_after(recipe, epoch: int | None = None) -> None:
    """Run ``recipe`` (seed 0) until a simulated kill after ``epoch`` (None: the first)."""
    def crash(record):
        if epoch is None or record["epoch"] == epoch:
            raise RuntimeError("simulated kill")

    with pytest.raises(RuntimeError, match="simulated kill"):
        train_downstream(recipe, progress=False, seeds=[0], on_epoch_end=crash)


@pytest.mark.parametrize("every", [1, 2])
def test_resume_equals_uninterrupted(tmp_path, cache_dir, every):
    extra = ["general_pipeline.num_epochs=5", "model.dropout=0.2", "general_pipeline.lr_scheduler.warmup_epochs=1",
             f"general_pipeline.checkpoint_every={every}"]
    whole = train_downstream(csl_recipe(tmp_path / "whole", cache_dir, *extra), progress=False, seeds=[0])
    _killed_after(csl_recipe(tmp_path / "split", cache_dir, *extra), epoch=3)
    # killed after epoch 3: with checkpoints every 2 epochs, the resumed run repeats epoch 3
    assert load_checkpoint(tmp_path / "split/seed0-fold0/last.pt")["epoch"] == (3 if every == 1 else 2)
    resumed = train_downstream(csl_recipe(tmp_path / "split", cache_dir, *extra), progress=False, seeds=[0],
                               resume=True)
    for key in ("best_epoch", "train", "val", "test", "epochs"):
        assert resumed["runs"][0][key] == whole["runs"][0][key], key
    a = load_checkpoint(tmp_path / "whole/seed0-fold0/last.pt")["model_state"]
    b = load_checkpoint(tmp_path / "split/seed0-fold0/last.pt")["model_state"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a finished job resumes by reading its runs back
    again = train_downstream(csl_recipe(tmp_path / "split", cache_dir, *extra), progress=False, seeds=[0],
                             resume=True)
    assert again["runs"] == resumed["runs"]


def test_resume_restores_the_gradient_scale(tmp_path, cache_dir, monkeypatch):
    """An fp16 run's gradient scale goes into last.pt and comes back on --resume. fp16 needs CUDA, so the run's
    scaler is turned on here on the CPU, growing at every step: a resume that restarted it would end at another
    scale than the uninterrupted run."""
    from gpse_dgl.train.downstream import job
    from gpse_dgl.train.mixed_precision import MixedPrecision

    class ScaledOnCpu(MixedPrecision):
        def __init__(self, precision):
            super().__init__(precision)
            self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=1)

    monkeypatch.setattr(job, "MixedPrecision", ScaledOnCpu)
    extra = ["general_pipeline.num_epochs=4", "general_pipeline.lr_scheduler.warmup_epochs=1",
             "general_pipeline.checkpoint_every=1"]
    train_downstream(csl_recipe(tmp_path / "whole", cache_dir, *extra), progress=False, seeds=[0])
    _killed_after(csl_recipe(tmp_path / "split", cache_dir, *extra), epoch=2)
    saved = load_checkpoint(tmp_path / "split/seed0-fold0/last.pt")["grad_scaler_state"]
    assert saved["scale"] > 2.0 ** 8  # it grew before the kill
    train_downstream(csl_recipe(tmp_path / "split", cache_dir, *extra), progress=False, seeds=[0], resume=True)
    whole = load_checkpoint(tmp_path / "whole/seed0-fold0/last.pt")
    resumed = load_checkpoint(tmp_path / "split/seed0-fold0/last.pt")
    assert resumed["grad_scaler_state"] == whole["grad_scaler_state"]
    assert all(torch.equal(whole["model_state"][k], resumed["model_state"][k]) for k in whole["model_state"])


def test_resume_from_states_that_do_not_fit_is_one_line(tmp_path, cache_dir):
    from gpse_dgl.utils.checkpoint import save_checkpoint

    extra = ["general_pipeline.num_epochs=2", "general_pipeline.checkpoint_every=1"]
    _killed_after(csl_recipe(tmp_path / "job", cache_dir, *extra))
    last = tmp_path / "job/seed0-fold0/last.pt"
    payload = load_checkpoint(last)
    payload["model_state"].pop(next(iter(payload["model_state"])))
    save_checkpoint(last, payload)
    with pytest.raises(CheckpointError, match=r"last\.pt: cannot resume from it \(") as error:
        train_downstream(csl_recipe(tmp_path / "job", cache_dir, *extra), progress=False, seeds=[0], resume=True)
    assert "\n" not in str(error.value)


def test_resume_refuses_another_recipe(tmp_path, cache_dir):
    train_downstream(csl_recipe(tmp_path / "job", cache_dir, "general_pipeline.num_epochs=1"), progress=False)
    (tmp_path / "job/seed0-fold0/result.json").unlink()  # make the run look interrupted
    changed = csl_recipe(tmp_path / "job", cache_dir, "general_pipeline.num_epochs=1", "model.dropout=0.5")
    with pytest.raises(RecipeError, match=r"recipe differs from the run's \(model.dropout: 0.0 -> 0.5\); .*"
                                          r"--allow-recipe-change"):
        train_downstream(changed, progress=False, resume=True)
    summary = train_downstream(changed, progress=False, resume=True, allow_recipe_change=True)
    assert summary["recipe_changes"] == ["seed0-fold0: model.dropout: 0.0 -> 0.5"]


def test_graph_regression_with_edge_features_and_standardised_targets(tmp_path, data_root, cache_dir):
    recipe = load_downstream_recipe(REPO / "recipes/downstream/zinc.yaml", [
        f"data.root={data_root}", "model.pe.source=LapPE+RWSE", "model.num_layers=2", "model.dim_hidden=16",
        "model.pe.dim_pe=8", "general_pipeline.num_epochs=2", "general_pipeline.num_seeds=2",
        "general_pipeline.standardize_targets=true", f"data.cache_dir={cache_dir}",
        f"general_pipeline.save_path={tmp_path}", "device=cpu"])
    summary = train_downstream(recipe, progress=False)
    assert summary["metric"] == "mae" and summary["num_runs"] == 2
    assert [r["seed"] for r in summary["runs"]] == [0, 1]
    assert all(math.isfinite(r["test"]) for r in summary["runs"])
    assert summary["model"]["config"]["kwargs"]["edge_encoder"] == "type"


def test_ogb_dataset_is_scored_by_the_ogb_evaluator(data_root):
    from gpse_dgl.data.registry import load_dataset

    dataset = load_dataset("ogbg-moltox21", root=data_root)
    spec = task_spec(dataset)
    assert spec.ogb_name == "ogbg-moltox21" and spec.loss == "bce" and spec.dim_out == 12
    y, score = _binary(np.random.default_rng(2), n=40, tasks=12)
    assert spec.score(torch.tensor(y), torch.tensor(score)) == pytest.approx(metrics.roc_auc(y, score))
    assert task_spec(dataset, metric="ap").ogb_name is None


@pytest.mark.parametrize("name, extra", [
    ("ogbn-arxiv", []),
    ("ogbn-proteins", ["general_pipeline.batch_size=4"]),  # neighbour sampling
])
def test_node_level_tasks(tmp_path, data_root, cache_dir, name, extra):
    recipe = load_downstream_recipe(REPO / f"recipes/downstream/{name}.yaml", [
        f"data.root={data_root}", "model.pe.source=RWSE", "model.dim_hidden=16", "model.pe.dim_pe=4",
        "general_pipeline.num_epochs=2", "general_pipeline.num_seeds=1", f"data.cache_dir={cache_dir}",
        f"general_pipeline.save_path={tmp_path}", "device=cpu", *extra])
    summary = train_downstream(recipe, progress=False)
    assert summary["task"] == "node" and summary["runs"][0]["epochs"] == 2
    assert summary["metric"] == ("accuracy" if name == "ogbn-arxiv" else "rocauc")


def test_dim_pe_equal_to_dim_hidden_needs_a_featureless_dataset(tmp_path, data_root, cache_dir):
    recipe = load_downstream_recipe(REPO / "recipes/downstream/exp.yaml", [
        f"data.root={data_root}", "model.pe.source=RWSE", "model.pe.dim_pe=128", f"data.cache_dir={cache_dir}",
        f"general_pipeline.save_path={tmp_path}"])
    with pytest.raises(RecipeError, match="leaves no room"):
        train_downstream(recipe, progress=False)


# ------------------------------------------------------------------ model capabilities


def test_models_declare_the_options_they_fix():
    """A recipe option is passed to a model unless the model class lists it in ``fixed_options``."""
    from gpse_dgl.nn.models import GPS, Transformer
    from gpse_dgl.train.downstream.models import _constructor_options

    class LocalOnly(GPS):  # a new model that fixes one option, named unlike any built-in
        fixed_options = {"global_attention": None}

        def __init__(self, dim_in, dim_out, **kwargs):
            super().__init__(dim_in, dim_out, **self.fixed_options, **kwargs)

    assert {"local_mpnn", "global_attention", "num_heads"} <= _constructor_options(GPS)
    assert not {"local_mpnn", "global_attention"} & _constructor_options(Transformer)
    options = _constructor_options(LocalOnly)
    assert "global_attention" not in options and "local_mpnn" in options


@pytest.mark.parametrize("general, gpse, expected", [
    ("bf16", None, "bf16"),     # the encoder pass follows the model's precision by default
    ("bf16", "fp32", "fp32"),   # unless the recipe keeps encodings exact (CSL, EXP)
    ("fp32", "bf16", "bf16"),
    ("auto", None, "fp32"),     # auto is resolved for the device before it keys the features cache
])
def test_gpse_encodings_take_their_own_precision(monkeypatch, general, gpse, expected):
    from gpse_dgl.train.downstream import data as downstream_data
    from gpse_dgl.train.downstream.job import decide_precisions
    from gpse_dgl.utils import precision as prec

    monkeypatch.setattr(prec, "_cpu_native_bf16", lambda: False)
    seen = {}

    def fake_load_features(graphs, name, pe_recipe, **kwargs):
        seen.update(pe_recipe)
        raise StopIteration  # the recipe handed to the features is all this test needs

    monkeypatch.setattr(downstream_data, "load_features", fake_load_features)
    recipe = load_downstream_recipe(REPO / "recipes/downstream/csl.yaml", [
        f"general_pipeline.precision={general}", f"model.pe.gpse_precision={'null' if gpse is None else gpse}"])
    training, encoder = decide_precisions(recipe, "cpu")  # once, by the job
    with pytest.raises(StopIteration):
        downstream_data.prepare_data(recipe, device="cpu", gpse_precision=encoder)
    assert seen["gpse_precision"] is encoder and encoder.name == expected
