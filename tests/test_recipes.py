"""Recipe schema: defaults, validation errors (one line, naming file and key), --set overrides."""
from __future__ import annotations

import glob
import os
import re

import pytest
import yaml

from gpse_dgl.recipes import StrictSafeLoader, describe_schema, dump_recipe
from gpse_dgl.train.pretraining.schema import (PRETRAIN_SCHEMA, default_pretrain_recipe, load_pretrain_recipe,
                                               validate_pretrain_recipe)
from gpse_dgl.utils.errors import RecipeError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE_FILES = sorted(glob.glob(os.path.join(REPO, "recipes", "*.yaml")))


def write(tmp_path, text: str, name: str = "r.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def error_of(path, overrides=()) -> str:
    with pytest.raises(RecipeError) as info:
        load_pretrain_recipe(path, overrides)
    message = str(info.value)
    assert "\n" not in message, "errors must be one line"
    return message


# ------------------------------------------------------------------ the shipped recipes


def test_recipes_folder_has_the_required_recipes():
    names = {os.path.basename(p) for p in RECIPE_FILES}
    assert {"quickstart.yaml", "molpcba.yaml"} <= names


@pytest.mark.parametrize("path", RECIPE_FILES, ids=os.path.basename)
def test_every_shipped_recipe_validates(path):
    recipe = load_pretrain_recipe(path)
    assert set(recipe) == set(PRETRAIN_SCHEMA)


@pytest.mark.parametrize("path", RECIPE_FILES, ids=os.path.basename)
def test_every_key_in_shipped_recipes_has_a_comment(path):
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            stripped = line.strip()
            if stripped and not stripped.startswith("#") and re.match(r"^[\w-]+:", stripped):
                assert "#" in stripped, f"{os.path.basename(path)}:{number} has no comment: {stripped}"


def test_molpcba_recipe_is_the_paper_setup():
    recipe = load_pretrain_recipe(os.path.join(REPO, "recipes", "molpcba.yaml"))
    general, model = recipe["general_pipeline"], recipe["model"]
    assert recipe["data"]["source"] == "ogbg-molpcba"
    assert recipe["data"]["split"] == [0.9, 0.05, 0.05]
    assert (general["optimizer"]["name"], general["optimizer"]["lr"],
            general["optimizer"]["weight_decay"]) == ("adamw", 0.005, 0.0001)
    assert (general["clip_grad_norm"], general["batch_size"], general["num_epochs"]) == (1.0, 1024, 120)
    assert general["lr_scheduler"] == {"name": "cosine_with_warmup", "warmup_epochs": 5,
                                       "interval": "epoch"}
    assert general["loss"] == {"regression": "l1", "graph_weight": 1.0}  # the authors' loss
    assert (model["num_layers"], model["dim_hidden"], model["dropout"], model["virtual_node"]) == \
        (20, 512, 0.2, True)


# ------------------------------------------------------------------ defaults


def test_missing_keys_get_the_paper_defaults(tmp_path):
    recipe = load_pretrain_recipe(write(tmp_path, "data:\n  max_graphs: 10\n"))
    defaults = default_pretrain_recipe()
    assert recipe["data"]["max_graphs"] == 10
    assert recipe["model"] == defaults["model"]
    assert defaults["general_pipeline"]["optimizer"] == {"name": "adamw", "lr": 5e-3, "weight_decay": 1e-4}
    assert defaults["model"]["num_layers"] == 20 and defaults["model"]["dim_hidden"] == 512


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_empty_file_is_an_error(tmp_path, text):
    with pytest.raises(RecipeError, match="empty recipe"):
        load_pretrain_recipe(write(tmp_path, text))


def test_duplicate_key_names_key_and_both_lines(tmp_path):
    text = "seed: 1\nmodel:\n  num_layers: 3\n  dropout: 0.1\n  num_layers: 4\n"
    with pytest.raises(RecipeError, match=r"duplicate key 'num_layers' at lines 3 and 5"):
        load_pretrain_recipe(write(tmp_path, text))
    with pytest.raises(RecipeError, match=r"duplicate key 'seed' at lines 1 and 2"):
        load_pretrain_recipe(write(tmp_path, "seed: 1\nseed: 2\n"))


def test_merge_keys_may_be_overridden(tmp_path):
    text = "x: &base {num_layers: 3, dropout: 0.1}\n"
    raw = yaml.load(text + "model:\n  <<: *base\n  num_layers: 4\n", Loader=StrictSafeLoader)
    assert raw["model"] == {"num_layers": 4, "dropout": 0.1}


@pytest.mark.parametrize("override", ["seed=-1", f"seed={2**63}", f"seed={2**70}", f"data.split_seed={2**64}"])
def test_seed_outside_63_bits_is_an_error(tmp_path, override):
    with pytest.raises(RecipeError, match=r"seed in \[0, 2\*\*63\)"):
        load_pretrain_recipe(write(tmp_path, "seed: 0\n"), [override])


def test_largest_seed_is_accepted(tmp_path):
    assert load_pretrain_recipe(write(tmp_path, "seed: 0\n"), [f"seed={2**63 - 1}"])["seed"] == 2**63 - 1


def test_misspelled_choice_gets_did_you_mean(tmp_path):
    with pytest.raises(RecipeError, match=r"got 'summ' \(did you mean 'sum'\?\)"):
        load_pretrain_recipe(write(tmp_path, "model:\n  pooling: summ\n"))


def test_defaults_are_not_shared_between_recipes(tmp_path):
    first = default_pretrain_recipe()
    first["data"]["node_targets"].append("changed")
    assert "changed" not in default_pretrain_recipe()["data"]["node_targets"]


def test_dump_and_reload_round_trip(tmp_path):
    recipe = load_pretrain_recipe(write(tmp_path, "model:\n  num_layers: 3\n"))
    assert load_pretrain_recipe(write(tmp_path, dump_recipe(recipe), "again.yaml")) == recipe


def test_every_schema_key_is_described():
    lines = describe_schema(PRETRAIN_SCHEMA)
    assert any(line.startswith("general_pipeline.optimizer.lr (default 0.005)") for line in lines)
    assert all(line.split(": ", 1)[1] for line in lines)


# ------------------------------------------------------------------ errors in files


def test_wrong_type_names_file_and_key(tmp_path):
    path = write(tmp_path, "general_pipeline:\n  optimizer:\n    lr: fast\n")
    assert error_of(path) == f"{path}: general_pipeline.optimizer.lr: expected a number, got 'fast'"


def test_unknown_key_names_file_key_and_suggests(tmp_path):
    path = write(tmp_path, "general_pipeline:\n  optimiser:\n    lr: 0.1\n")
    message = error_of(path)
    assert message.startswith(f"{path}: general_pipeline.optimiser: unknown key")
    assert "did you mean 'optimizer'" in message


def test_unknown_top_level_key(tmp_path):
    message = error_of(write(tmp_path, "datta:\n  source: smiles\n"))
    assert ": datta: unknown key (did you mean 'data'?)" in message


@pytest.mark.parametrize("text, key, expected", [
    ("model:\n  num_layers: 2.5\n", "model.num_layers", "expected an integer"),
    ("model:\n  num_layers: true\n", "model.num_layers", "expected an integer"),
    ("model:\n  num_layers: 0\n", "model.num_layers", "expected a value >= 1"),
    ("model:\n  virtual_node: 1\n", "model.virtual_node", "expected true or false"),
    ("model:\n  pooling: avg\n", "model.pooling", "expected one of sum, mean, max"),
    ("model:\n  dropout: 1.5\n", "model.dropout", "expected a value <= 1"),
    ("data:\n  split: [0.5, 0.5]\n", "data.split", "expected 3 numbers"),
    ("data:\n  split: [0.5, 0.4, 0.4]\n", "data.split", "must sum to 1"),
    ("data:\n  node_targets: LapPE\n", "data.node_targets", "expected a list of names"),
    ("data:\n  node_targets: [LapPE, Foo]\n", "data.node_targets", "unknown PSE 'Foo'"),
    ("data:\n  graph_targets: [LapPE]\n", "data.graph_targets", "unknown PSE 'LapPE'"),
    ("data:\n  source: smiles\n", "data.smiles_file", "required when data.source is 'smiles'"),
    ("general_pipeline:\n  optimizer:\n    lr: 0\n", "general_pipeline.optimizer.lr", "expected a value > 0"),
    ("general_pipeline:\n  batch_size: null\n", "general_pipeline.batch_size", "got null"),
    ("general_pipeline: 3\n", "general_pipeline", "expected a mapping"),
    ("device: gpu\n", "device", "expected auto, cpu, cuda, cuda:N or mps"),
    ("general_pipeline:\n  fit_to_time_limit: true\n", "general_pipeline.fit_to_time_limit",
     "needs general_pipeline.time_limit_minutes"),
    ("general_pipeline:\n  fit_to_time_limit: true\n  time_limit_minutes: 5\n  lr_scheduler:\n"
     "    warmup_epochs: 0.5\n", "general_pipeline.fit_to_time_limit", "needs general_pipeline.lr_scheduler.warmup_epochs >= 1"),
    ("data:\n  skeleton_edits: -1\n", "data.skeleton_edits", "expected a value >= 0"),
    ("data:\n  regular_graphs: -0.5\n", "data.regular_graphs", "expected a value >= 0"),
])
def test_type_and_value_errors(tmp_path, text, key, expected):
    path = write(tmp_path, text)
    message = error_of(path)
    assert message.startswith(f"{path}: {key}: "), message
    assert expected in message


def test_scientific_notation_without_dot_is_a_number(tmp_path):
    # PyYAML (YAML 1.1) reads "5e-3" as a string; recipes accept it as the number users mean
    recipe = load_pretrain_recipe(write(tmp_path, "general_pipeline:\n  optimizer:\n    lr: 5e-3\n"))
    assert recipe["general_pipeline"]["optimizer"]["lr"] == pytest.approx(0.005)


def test_nullable_keys_accept_null(tmp_path):
    recipe = load_pretrain_recipe(write(tmp_path, "general_pipeline:\n  clip_grad_norm: null\n"))
    assert recipe["general_pipeline"]["clip_grad_norm"] is None


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    assert error_of(path) == f"{path}: recipe file not found"


def test_invalid_yaml_reports_line(tmp_path):
    path = write(tmp_path, "model:\n  num_layers: [1, 2\n")
    message = error_of(path)
    assert message.startswith(f"{path}: invalid YAML at line")


def test_top_level_must_be_a_mapping(tmp_path):
    assert "expected a mapping" in error_of(write(tmp_path, "- a\n- b\n"))


def test_validation_happens_before_any_work(tmp_path, monkeypatch):
    import gpse_dgl.train.pretraining.run as run_module

    monkeypatch.setattr(run_module, "pretrain", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(RecipeError):
        load_pretrain_recipe(write(tmp_path, "model:\n  num_layers: many\n"))


# ------------------------------------------------------------------ --set overrides


def test_set_overrides_and_parses_yaml_scalars(tmp_path):
    path = write(tmp_path, "model:\n  num_layers: 4\n")
    recipe = load_pretrain_recipe(path, ["model.num_layers=6", "model.virtual_node=false",
                                "general_pipeline.optimizer.lr=1e-3", "data.split=[0.8, 0.1, 0.1]",
                                "general_pipeline.save_path=runs/x"])
    assert recipe["model"]["num_layers"] == 6 and recipe["model"]["virtual_node"] is False
    assert recipe["general_pipeline"]["optimizer"]["lr"] == pytest.approx(1e-3)
    assert recipe["data"]["split"] == [0.8, 0.1, 0.1]
    assert recipe["general_pipeline"]["save_path"] == "runs/x"


def test_set_can_add_a_section_missing_from_the_file(tmp_path):
    recipe = load_pretrain_recipe(write(tmp_path, "seed: 0\n"), ["general_pipeline.lr_scheduler.warmup_epochs=1"])
    assert recipe["general_pipeline"]["lr_scheduler"]["warmup_epochs"] == 1


@pytest.mark.parametrize("override, expected", [
    ("general_pipeline.optimizer.lr=fast", "--set general_pipeline.optimizer.lr: expected a number, got 'fast'"),
    ("general_pipeline.optimiser.lr=1", "--set general_pipeline.optimiser.lr: unknown key (did you mean 'optimizer'?"),
    ("model.depth=3", "--set model.depth: unknown key"),
    ("model=3", "--set model: is a section"),
    ("num_layers", "--set 'num_layers': expected key.path=value"),
    ("model..x=1", "expected key.path=value"),
    ("data.node_targets=[Foo]", "--set data.node_targets: unknown PSE 'Foo'"),
])
def test_bad_set_names_file_and_key(tmp_path, override, expected):
    path = write(tmp_path, "seed: 0\n")
    message = error_of(path, [override])
    assert message.startswith(f"{path}: "), message
    assert expected in message


def test_validate_recipe_accepts_dicts():
    recipe = validate_pretrain_recipe({"model": {"num_layers": 2}}, "inline")
    assert recipe["model"]["num_layers"] == 2
    with pytest.raises(RecipeError, match=r"^inline: model.num_layers: expected an integer"):
        validate_pretrain_recipe({"model": {"num_layers": "2"}}, "inline")


# ------------------------------------------------------------------ base recipes


def test_base_chain_merges_and_the_recipe_wins(tmp_path):
    (tmp_path / "bases").mkdir()
    write(tmp_path, "model:\n  num_layers: 4\n  dim_hidden: 32\nseed: 3\n", "bases/root.yaml")
    write(tmp_path, "base: root.yaml\nmodel:\n  dim_hidden: 48\n", "bases/middle.yaml")
    path = write(tmp_path, "base: bases/middle.yaml\nmodel:\n  num_layers: 2\n")
    recipe = load_pretrain_recipe(path, ["seed=5"])
    assert (recipe["model"]["num_layers"], recipe["model"]["dim_hidden"], recipe["seed"]) == (2, 48, 5)
    assert recipe == load_pretrain_recipe(write(tmp_path, "model:\n  num_layers: 2\n  dim_hidden: 48\nseed: 5\n", "flat.yaml"))
    assert "base" not in dump_recipe(recipe)


def test_errors_name_the_file_the_key_was_written_in(tmp_path):
    base = write(tmp_path, "model:\n  num_layers: many\n", "base.yaml")
    path = write(tmp_path, "base: base.yaml\nseed: 1\n")
    assert error_of(path) == f"{base}: model.num_layers: expected an integer, got 'many'"
    write(tmp_path, "model:\n  num_layer: 3\n", "typo.yaml")
    assert error_of(write(tmp_path, "base: typo.yaml\n", "child.yaml")).startswith(
        f"{tmp_path / 'typo.yaml'}: model.num_layer: unknown key")
    child = write(tmp_path, "base: good.yaml\nmodel:\n  dropout: 2\n", "child2.yaml")
    write(tmp_path, "model:\n  dropout: 0.1\n", "good.yaml")
    assert error_of(child).startswith(f"{child}: model.dropout: expected a value <= 1")


def test_a_base_value_can_be_overridden_and_an_empty_section_changes_nothing(tmp_path):
    write(tmp_path, "model:\n  num_layers: many\n  dim_hidden: 32\ngeneral_pipeline:\n  eval_batch_size: 64\n",
          "base.yaml")
    path = write(tmp_path, "base: base.yaml\nmodel:\ngeneral_pipeline:\n  eval_batch_size: null\n")
    recipe = load_pretrain_recipe(path, ["model.num_layers=2"])
    assert recipe["model"]["num_layers"] == 2 and recipe["model"]["dim_hidden"] == 32
    assert recipe["general_pipeline"]["eval_batch_size"] is None


def test_missing_base_and_cycles_are_one_line_errors(tmp_path):
    path = write(tmp_path, "base: nowhere.yaml\n")
    assert error_of(path) == (f"{path}: base: base recipe nowhere.yaml not found "
                              f"(looked for {tmp_path / 'nowhere.yaml'})")
    write(tmp_path, "base: b.yaml\n", "a.yaml")
    b = write(tmp_path, "base: a.yaml\n", "b.yaml")
    message = error_of(write(tmp_path, "base: a.yaml\n", "start.yaml"))
    assert message.startswith(f"{b}: base: a.yaml is already in the chain of bases") and "cycle" in message
    assert "a cycle" in error_of(write(tmp_path, "base: self.yaml\n", "self.yaml"))
    assert "expected the file name of a base recipe" in error_of(write(tmp_path, "base: [a.yaml]\n", "list.yaml"))


# ------------------------------------------------------------------ CLI


def test_cli_reports_recipe_errors_in_one_line(tmp_path, capsys):
    from gpse_dgl.cli import main

    path = write(tmp_path, "general_pipeline:\n  optimizer:\n    lr: fast\n")
    with pytest.raises(SystemExit) as info:
        main(["pretrain", path])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == f"gpse-dgl: error: {path}: general_pipeline.optimizer.lr: expected a number, got 'fast'"


def test_cli_reports_bad_set_in_one_line(tmp_path, capsys):
    from gpse_dgl.cli import main

    with pytest.raises(SystemExit) as info:
        main(["pretrain", write(tmp_path, "seed: 0\n"), "--set", "model.depth=3"])
    assert info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_cli_help_has_an_example(capsys):
    from gpse_dgl.cli import main

    try:
        main(["pretrain", "--help"])
    except SystemExit as exc:  # click may exit 0 after printing help
        assert exc.code in (0, None)
    text = capsys.readouterr().out
    assert "gpse-dgl pretrain recipes/quickstart.yaml" in text and "--resume" in text


def test_loss_choices_match_the_loss_function():
    """The recipe schema lists the loss's regression terms without importing torch; they must agree."""
    from gpse_dgl.nn.loss import REGRESSION_TERMS

    assert PRETRAIN_SCHEMA["general_pipeline"]["loss"]["regression"].choices == REGRESSION_TERMS
