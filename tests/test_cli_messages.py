"""One error style, checks before work, non-finite refusals, plural-aware and "did you mean" messages,
and progress output that suits a log file."""
from __future__ import annotations

import io
import os
import re

import dgl
import pytest
import torch

from gpse_dgl.cli import main
from gpse_dgl.utils import progress as progress_module
from gpse_dgl.utils.devices import DeviceError, check_device_name, resolve_device
from gpse_dgl.utils.preflight import OutputPathError, check_output_dir, check_output_file
from gpse_dgl.utils.progress import LineProgress, progress
from gpse_dgl.utils.text import did_you_mean, plural

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpse-dgl: error: "), err
    return lines[0]


def ring_file(path, n=5):
    dgl.save_graphs(str(path), [dgl.graph((list(range(n)), [(i + 1) % n for i in range(n)]))])
    return str(path)


# ------------------------------------------------------------------ one error style


@pytest.mark.parametrize("args, code, text", [
    (["pretrain"], 2, "Missing argument 'RECIPE'. (see 'gpse-dgl pretrain --help')"),
    (["pse", "--dataset", "x", "--input", "y"], 2, "Invalid value for '--input'"),
    (["encode", "--out", "o.bin"], 2, "give exactly one of --dataset, --input, --smiles"),
    (["pretrain", "recipes/quickstart.yaml", "--device", "gpu"], 2,
     "expected auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
    (["pretrain", "recipes/quickstart.yaml", "--allow-recipe-change"], 2, "only applies with --resume"),
    (["info", "--quiet", "--verbose"], 2, "--quiet and --verbose exclude each other"),
])
def test_click_usage_errors_share_our_one_line_style(args, code, text, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    status, _, err = run_cli(args, capsys)
    assert status == code and text in one_error_line(err)


def test_every_verb_has_quiet_and_verbose():
    from gpse_dgl.cli import VERBS, cli

    for verb in VERBS:
        options = {opt for param in cli.get_command(None, verb).params for opt in param.opts}
        assert {"--quiet", "--verbose"} <= options, verb


# ------------------------------------------------------------------ one device validator


def test_device_validator_wording_is_shared():
    assert check_device_name("cuda:3") is None and check_device_name("auto") is None
    assert check_device_name("gpu") == "expected auto, cpu, cuda, cuda:N or mps, got 'gpu'"
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceError, match=r"^--device: expected auto"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="CUDA is not available here"):
            resolve_device("cuda:0")


@pytest.mark.parametrize("verb", ["pse", "encode"])
def test_pse_and_encode_use_the_shared_device_check(verb, tmp_path, capsys):
    args = [verb, "--input", ring_file(tmp_path / "g.bin"), "--out", str(tmp_path / "o.bin"), "--device", "gpu"]
    code, _, err = run_cli(args, capsys)
    assert code == 2 and one_error_line(err) == ("gpse-dgl: error: --device: expected auto, cpu, cuda, cuda:N "
                                                  "or mps, got 'gpu'")


# ------------------------------------------------------------------ outputs checked before any work


def test_preflight_refuses_unusable_locations(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(OutputPathError, match="is a directory, expected a file path"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(OutputPathError, match="is a file, not a directory"):
        check_output_file(a_file / "out.bin", "--out")
    with pytest.raises(OutputPathError, match="is a file, expected a directory"):
        check_output_dir(a_file, "--out")
    with pytest.raises(OutputPathError, match="cannot create files in /proc"):  # not writable, even for root
        check_output_dir("/proc/gpse-dgl-run", "--out")
    with pytest.raises(OutputPathError, match="MiB free"):
        check_output_file(tmp_path / "out.bin", "--out", min_free_bytes=1 << 62)
    check_output_file(tmp_path / "new" / "deeper" / "out.bin")
    check_output_dir(tmp_path / "new" / "run")


@pytest.mark.parametrize("verb", ["pse", "encode"])
def test_unwritable_out_fails_before_any_work(verb, tmp_path, capsys, monkeypatch):
    import gpse_dgl.pse as pse_package

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the output was checked")

    monkeypatch.setattr(pse_package, "compute_pses", no_work)
    monkeypatch.setattr("gpse_dgl.encode.load_gpse", no_work)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory is expected")
    out = blocker / "o.bin"
    code, _, err = run_cli([verb, "--input", ring_file(tmp_path / "g.bin"), "--out", str(out)], capsys)
    assert code == 2 and one_error_line(err).endswith(f"--out {out}: {blocker} is a file, not a directory")


def test_pretrain_checks_out_and_cache_dir_before_loading_data(tmp_path, capsys, monkeypatch):
    import gpse_dgl.train.pretraining.run as run_module

    monkeypatch.setattr(run_module, "build_pretraining_data",
                        lambda *a, **k: pytest.fail("data loaded before the directories were checked"))
    blocker = tmp_path / "blocker"
    blocker.write_text("a file")
    recipe = os.path.join(REPO, "recipes", "quickstart.yaml")
    code, _, err = run_cli(["pretrain", recipe, "--out", str(blocker / "run"), "--quiet"], capsys)
    assert code == 2 and "is a file, not a directory" in one_error_line(err)
    code, _, err = run_cli(["pretrain", recipe, "--out", str(tmp_path / "run"), "--quiet",
                            "--set", f"data.cache_dir={blocker}"], capsys)
    assert code == 2 and one_error_line(err).endswith(f"cache directory {blocker}: is a file, expected a directory")


# ------------------------------------------------------------------ zero graphs, zero nodes, NaN inputs


def zero_graph_file(path):
    from dgl.data.graph_serialize import save_heterographs

    save_heterographs(str(path), [], {"y": torch.zeros(0)}, None)  # dgl.save_graphs refuses an empty list
    return str(path)


@pytest.mark.parametrize("verb", ["pse", "encode"])
def test_empty_and_non_finite_inputs_are_one_line(verb, tmp_path, capsys):
    out = str(tmp_path / "o.bin")
    code, _, err = run_cli([verb, "--input", zero_graph_file(tmp_path / "zero.bin"), "--out", out], capsys)
    assert code == 2 and one_error_line(err).endswith("zero.bin: holds no graphs; nothing to compute")

    dgl.save_graphs(str(tmp_path / "empty.bin"), [dgl.graph(([], []), num_nodes=0)])
    code, _, err = run_cli([verb, "--input", str(tmp_path / "empty.bin"), "--out", out], capsys)
    assert code == 2 and one_error_line(err).endswith("empty.bin: 1 graph but no nodes; nothing to compute")

    g = dgl.graph(([0, 1], [1, 2]))
    g.ndata["x"] = torch.tensor([[0.0], [float("nan")], [1.0]])
    dgl.save_graphs(str(tmp_path / "nan.bin"), [dgl.graph(([0], [1])), g])
    code, _, err = run_cli([verb, "--input", str(tmp_path / "nan.bin"), "--out", out], capsys)
    assert code == 2 and one_error_line(err).endswith("nan.bin: graph 1 has NaN or Inf in ndata['x']")
    assert not os.path.exists(out)


# ------------------------------------------------------------------ checkpoints with NaN weights


def nan_checkpoints(tmp_path):
    from gpse_dgl.nn.gpse import GPSE

    encoder = GPSE(dim_in=4, dim_hidden=8, num_layers=2)
    state = encoder.state_dict()
    key = next(k for k, v in state.items() if v.is_floating_point() and v.numel() > 1)
    state[key] = state[key].clone()
    state[key].view(-1)[0] = float("nan")
    ours = tmp_path / "ours.pt"
    torch.save({"model_state": state, "model_config": encoder.to_config()}, ours)
    authors = tmp_path / "authors.pt"
    torch.save({"model_state": {"model." + k: v for k, v in state.items()}}, authors)
    return key, ours, authors


def test_checkpoints_with_nan_weights_are_refused(tmp_path, capsys):
    from gpse_dgl.encode import load_gpse
    from gpse_dgl.utils.errors import CheckpointError

    key, ours, authors = nan_checkpoints(tmp_path)
    for path in (ours, authors):
        with pytest.raises(CheckpointError, match=r"holds NaN or Inf values"):
            load_gpse(path)
    code, _, err = run_cli(["encode", "--input", ring_file(tmp_path / "g.bin"), "--checkpoint", str(ours),
                            "--out", str(tmp_path / "o.bin")], capsys)
    assert code == 2 and one_error_line(err).endswith(f"tensor 'model_state.{key}' holds NaN or Inf values "
                                                      f"(a diverged or damaged model); use an earlier checkpoint")
    assert not (tmp_path / "o.bin").exists()


# ------------------------------------------------------------------ wording


def test_plural_and_did_you_mean():
    assert [plural(n, "graph") for n in (0, 1, 2, 1234)] == ["0 graphs", "1 graph", "2 graphs", "1,234 graphs"]
    assert did_you_mean("RSWE", ["LapPE", "RWSE"]) == " (did you mean 'RWSE'?)"


def test_single_graph_messages_are_singular(tmp_path, capsys):
    main(["pse", "--input", ring_file(tmp_path / "g.bin"), "--pse", "RWSE", "--out", str(tmp_path / "o.bin")])
    captured = capsys.readouterr()
    assert "for 1 graph (5 nodes)" in captured.out
    assert not re.search(r"(?<![\d,./])1 (graph|node)s", captured.out + captured.err), captured


@pytest.mark.parametrize("args, text", [
    (["pse", "--dataset", "embedded-molecule", "--out", "o.bin"], "(did you mean 'embedded-molecules'?)"),
    (["pse", "--smiles", "README.md", "--pse", "RSWE"], "(did you mean 'RWSE'?)"),
])
def test_names_get_did_you_mean(args, text, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, _, err = run_cli(args, capsys)
    assert code == 2 and text in one_error_line(err)


def test_recipe_names_get_did_you_mean(tmp_path, capsys):
    from gpse_dgl.train.downstream.schema import load_downstream_recipe
    from gpse_dgl.utils.errors import RecipeError

    recipe = os.path.join(REPO, "recipes", "downstream", "csl.yaml")
    with pytest.raises(RecipeError, match=r"unknown dataset 'zinx' \(did you mean 'zinc'\?\)"):
        load_downstream_recipe(recipe, ["data.name=zinx"])
    with pytest.raises(RecipeError, match=r"unknown model 'gine_' \(did you mean 'gine'\?\)"):
        load_downstream_recipe(recipe, ["model.name=gine_"])
    with pytest.raises(RecipeError, match=r"unknown key \(did you mean 'num_epochs'\?\)"):
        load_downstream_recipe(recipe, ["general_pipeline.num_epoch=3"])


def test_cycle_limit_names_the_cli_flag(tmp_path, capsys):
    import networkx as nx

    graph = dgl.from_networkx(nx.complete_graph(12))
    dgl.save_graphs(str(tmp_path / "k12.bin"), [graph])
    code, _, err = run_cli(["pse", "--input", str(tmp_path / "k12.bin"), "--pse", "CycleGE",
                            "--max-cycle-paths", "10", "--no-progress"], capsys)
    line = one_error_line(err)
    assert code == 2 and "(--max-cycle-paths); pass a larger --max-cycle-paths" in line and "max_paths" not in line


# ------------------------------------------------------------------ progress for logs


def test_progress_lines_per_tenth_when_not_a_terminal(monkeypatch):
    monkeypatch.delenv(progress_module.ENV_VAR, raising=False)
    stream = io.StringIO()
    bar = LineProgress(None, total=250, desc="PSEs", unit="graph", stream=stream)
    for _ in range(250):
        bar.update(1)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10 and lines[0].startswith("PSEs: 10% (25/250 graphs,") and lines[-1].startswith("PSEs: 100%")
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_progress_mode_follows_tty_env_and_quiet(monkeypatch, capsys):
    monkeypatch.delenv(progress_module.ENV_VAR, raising=False)
    assert isinstance(progress(total=10, desc="x"), LineProgress)      # pytest's stderr is not a terminal
    assert list(progress(range(3), leave=False)) == [0, 1, 2]          # transient bars print nothing
    monkeypatch.setenv(progress_module.ENV_VAR, "1")
    forced = progress(total=10, desc="x")
    assert not isinstance(forced, LineProgress)                        # forced bars
    forced.close()
    capsys.readouterr()
    monkeypatch.setenv(progress_module.ENV_VAR, "0")
    assert not progress_module.bars_wanted(stream=open(os.devnull, "w"))
    progress_module.configure(quiet=True)
    try:
        silent = progress(total=10, desc="x")
        silent.update(10)
        silent.close()
    finally:
        progress_module.configure()
    assert capsys.readouterr().err == ""


def test_help_loads_neither_torch_nor_dgl():
    """``gpse-dgl --help`` imports every verb's module to list the verbs (gpse_dgl/commands/__init__.py): none of
    them may load torch or DGL at module level, or the help would take seconds."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from gpse_dgl.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'dgl') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "info" in result.stdout and "encode" in result.stdout  # the verbs were listed
    assert result.stdout.strip().splitlines()[-1] == "[]"
