"""The CUDA paths of gpse-dgl against their CPU / float32 references.

What is checked, each against a reference computed here:

* every op of :mod:`gpse_dgl.nn.ops` with ``backend="torch"`` on the device against DGL's kernels on the
  CPU (values and gradients, float32), and under ``torch.autocast(bfloat16)`` against float32 (sums come
  back float32, values within bf16's rounding);
* the shipped encoders (``quickstart``, ``rdkit-base``) on the device against the CPU, in bf16 / fp16
  against fp32, and a graph's encoding alone against inside a batch;
* ``gpse-dgl encode --device`` (fp32, bf16, fp16) against a CPU run of the same command;
* ``gpse-dgl pretrain`` on the device in fp32, bf16 and fp16 (gradient scaler), and a run interrupted after
  one epoch and resumed against an uninterrupted one;
* the six explicit PSEs and the pretraining targets with their dense algebra on the device against the CPU;
* one short downstream run (CSL, GPSE features) on the device;
* the encoder's residual step on the device (torch ops) against the CPU's (the compiled kernel where built),
  and the training runs' fused optimiser on the device: its update, the weight caches it must invalidate, and
  a state saved on the CPU resumed on the device.

Run on a machine with a GPU (a CPU-only DGL is fine: message passing then takes the torch backend on
CUDA while the graphs stay on the CPU)::

    python -m pytest -q tests/test_cuda.py

Without CUDA every test is skipped. ``GPSE_DGL_TEST_CUDA_AS=cpu`` runs them with the device ``cpu`` instead,
to check their logic on a CPU-only machine (the device-vs-CPU comparisons then compare the CPU with itself;
fp16 tests skip themselves there).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import dgl
from _cli import run_cli
from _pse_graphs import GRAPH_PSES, assert_lap_pe_equivalent, random_graphs, sym_spectrum
from gpse_dgl.data.molecules import load_embedded_molecules
from gpse_dgl.encode import encode, load_gpse
from gpse_dgl.nn import ops
from gpse_dgl.nn.gpse import GPSE
from gpse_dgl.nn.residual import normalized_residual, normalized_residual_
from gpse_dgl.pse import ALL_PSES, NODE_TARGET_KEY, compute_pse_tensors, pretraining_targets
from gpse_dgl.train.pretraining.schema import load_pretrain_recipe
from gpse_dgl.train.optimizer import build_optimizer
from gpse_dgl.train.pretraining import pretrain
from gpse_dgl.utils.checkpoint import load_pretrain_checkpoint

STANDIN_ENV = "GPSE_DGL_TEST_CUDA_AS"
REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "recipes" / "quickstart.yaml"
CSL = REPO / "recipes" / "downstream" / "csl.yaml"


@pytest.fixture(scope="module")
def device() -> str:
    """``"cuda"``, or ``"cpu"`` with ``GPSE_DGL_TEST_CUDA_AS=cpu``; skips the test otherwise."""
    standin = os.environ.get(STANDIN_ENV, "")
    if standin == "cpu":
        return "cpu"
    if standin:
        pytest.fail(f"{STANDIN_ENV} must be 'cpu' or unset, got {standin!r}")
    if not torch.cuda.is_available():
        pytest.skip(f"needs CUDA (or {STANDIN_ENV}=cpu to check these tests' logic on the CPU)")
    return "cuda"


def cuda_only(device: str, what: str) -> None:
    if device != "cuda":
        pytest.skip(f"{what} needs CUDA")


@pytest.fixture(scope="module")
def molecules():
    return load_embedded_molecules()


def cosine_per_node(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a.double(), b.double(), dim=1)


# ------------------------------------------------------------------------------------------------ ops
HUB = 1024  # degree of the two hub nodes: bf16 cannot count past 256 by ones, so a bf16 sum there is far off
DIM = 4
# float32 against float32: the hubs' sums of 1024 terms move by ~1e-5 with the summation order alone
# (CUDA's atomic adds against DGL's loop), so 1e-5 would be too tight there
FP32_TOL = dict(atol=1e-4, rtol=1e-4)


def _ops_graph() -> dgl.DGLGraph:
    gen = torch.Generator().manual_seed(0)
    parts = []
    for n, m in ((7, 20), (5, 8)):  # random multigraphs (self-loops, repeated edges), node n without edges
        src, dst = torch.randint(0, n, (m,), generator=gen), torch.randint(0, n, (m,), generator=gen)
        parts.append(dgl.graph((src, dst), num_nodes=n + 1))
    parts.append(dgl.graph(([], []), num_nodes=1))  # a graph that is one isolated node
    leaves = torch.arange(1, HUB + 1)
    hub = torch.zeros_like(leaves)
    parts.append(dgl.graph((leaves, hub), num_nodes=HUB + 1))  # in-degree HUB (sums over in-edges)
    parts.append(dgl.graph((hub, leaves), num_nodes=HUB + 1))  # out-degree HUB (gradients of gathers)
    return dgl.batch(parts)


OPS_GRAPH = _ops_graph()


def _inputs(g, positive: bool, seed: int = 1) -> dict:
    """Source, destination, edge and value features; ``positive`` keeps sums free of cancellation, so
    relative tolerances mean something under bf16."""
    gen = torch.Generator().manual_seed(seed)

    def draw(rows):
        return torch.rand(rows, DIM, generator=gen) + 0.5 if positive else torch.randn(rows, DIM, generator=gen)

    return {"s": draw(g.num_src_nodes()), "d": draw(g.num_dst_nodes()), "e": draw(g.num_edges()),
            "v": draw(g.num_src_nodes())}


# name -> (fn(graph, *tensors, backend=...), input keys, dtype under bf16: float32 for sums, None = bf16)
OPS = {
    "u_add_v": (ops.u_add_v, "sd", None),
    "u_dot_v": (ops.u_dot_v, "sd", torch.float32),
    "copy_u": (ops.copy_u, "s", None),
    "copy_v": (ops.copy_v, "d", None),
    "copy_u_sum": (ops.copy_u_sum, "s", torch.float32),
    "copy_u_mean": (ops.copy_u_mean, "s", torch.float32),
    "copy_e_sum": (ops.copy_e_sum, "e", torch.float32),
    "u_mul_e_sum": (ops.u_mul_e_sum, "se", torch.float32),
    "u_mul_e_sum_bcast": (lambda g, s, e, backend: ops.u_mul_e_sum(g, s, e[:, :1], backend=backend), "se",
                          torch.float32),
    "edge_softmax": (ops.edge_softmax, "e", torch.float32),
    "gated_sum": (ops.gated_sum, "dsv", torch.float32),
    # several chunks: the path the CPU takes by default, forced here on the device
    "gated_sum_chunked": (lambda g, d, s, v, backend: ops.gated_sum(g, d, s, v, backend=backend, chunk_edges=5),
                          "dsv", torch.float32),
    # pure torch on every device (no DGL path): the reference is the same code on the CPU
    "readout_sum": (lambda g, s, backend: ops.readout(g, s, "sum"), "s", torch.float32),
    "readout_mean": (lambda g, s, backend: ops.readout(g, s, "mean"), "s", torch.float32),
    "readout_max": (lambda g, s, backend: ops.readout(g, s, "max"), "s", None),
}
def _run_op(name, device, positive, backend, low_precision=False):
    """Output and input gradients (float32 leaves, detached) of op ``name`` on ``device``."""
    fn, keys, _ = OPS[name]
    inputs = _inputs(OPS_GRAPH, positive)
    leaves = [inputs[k].to(device).requires_grad_(True) for k in keys]
    args = [leaf.to(torch.bfloat16) for leaf in leaves] if low_precision else leaves
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=low_precision):
        out = fn(OPS_GRAPH, *args, backend=backend)
    gen = torch.Generator().manual_seed(7)
    weight = (torch.rand(out.shape, generator=gen) + 0.5 if positive else torch.randn(out.shape, generator=gen))
    (out.float() * weight.to(device)).sum().backward()
    grads = [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]
    return out.detach(), [g.detach() for g in grads]


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_torch_backend_on_device_matches_dgl_on_cpu(name, device):
    out, grads = _run_op(name, device, positive=False, backend="torch")
    ref, ref_grads = _run_op(name, "cpu", positive=False, backend="dgl")
    assert out.device.type == torch.device(device).type and out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), ref, **FP32_TOL)
    for got, expected in zip(grads, ref_grads):
        torch.testing.assert_close(got.cpu(), expected, **FP32_TOL)


def test_degrees_and_segments_on_device(device):
    g = OPS_GRAPH
    assert ops.in_degrees(g, device).device.type == torch.device(device).type
    assert torch.equal(ops.in_degrees(g, device).cpu(), g.in_degrees().long())
    assert torch.equal(ops.out_degrees(g, device).cpu(), g.out_degrees().long())
    expected = torch.repeat_interleave(torch.arange(g.batch_size), g.batch_num_nodes())
    assert torch.equal(ops.segment_ids(g, device).cpu(), expected)
    assert int(ops.in_degrees(g, device).max()) == HUB  # the hubs are really there
    # "auto" must pick a backend that runs on the device (torch where DGL has no kernels for it)
    x = _inputs(g, positive=False)["s"]
    torch.testing.assert_close(ops.copy_u_sum(g, x.to(device)).cpu(), ops.copy_u_sum(g, x, backend="dgl"),
                               **FP32_TOL)


def test_info_names_the_device_and_its_backend(device, capsys):
    code, out, err = run_cli(["info"], capsys)
    assert code == 0, err
    name = "cuda:0" if device == "cuda" else "cpu"
    backend = ops.resolve_backend("auto", torch.device(name))  # what info reports: "auto", whatever the env says
    assert any(line.strip().startswith(name) and f"uses the {backend!r} backend" in line
               for line in out.splitlines()), out
    if device == "cuda":
        from gpse_dgl import kernels

        assert f"kernels: {kernels.describe('cuda:0')}" in out


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_under_bf16_autocast_is_close_to_fp32(name, device):
    out, _ = _run_op(name, device, positive=True, backend="torch", low_precision=True)
    ref, _ = _run_op(name, device, positive=True, backend="torch")
    expected_dtype = OPS[name][2] or torch.bfloat16
    assert out.dtype == expected_dtype, f"{name} returned {out.dtype} under bf16 autocast"
    # bf16 keeps 8 significant bits (0.4 % per rounding); a bf16 sum over the hub's 1024 edges stalls at 512
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=1e-5)


# readout_max is left out: values rounded to bf16 tie, and tied maxima share the gradient
@pytest.mark.parametrize("name", [n for n in sorted(OPS) if n != "readout_max"])
def test_op_gradients_under_bf16_autocast_are_close_to_fp32(name, device):
    _, grads = _run_op(name, device, positive=True, backend="torch", low_precision=True)
    _, ref_grads = _run_op(name, device, positive=True, backend="torch")
    for got, expected in zip(grads, ref_grads):
        assert got.dtype == torch.float32
        # relative to the largest gradient: edge_softmax's gradients cancel, so elementwise rtol means little
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=1e-2 * float(expected.abs().max()))


# ------------------------------------------------------------------------------------------- encoders
FEW = {"quickstart": 12, "rdkit-base": 6}  # molecules per batch (rdkit-base is 16 x 256: keep it small)


@pytest.mark.parametrize("name", sorted(FEW))
def test_shipped_encoder_on_device_matches_cpu(name, device, molecules):
    batch = dgl.batch(molecules[:FEW[name]])
    reference = encode(load_gpse(name, device="cpu"), batch, seed=0)
    model = load_gpse(name, device=device)
    assert model.pre_linear.weight.device.type == torch.device(device).type
    got = encode(model, batch, seed=0)
    assert got.device.type == "cpu" and got.dtype == torch.float32 and got.shape == reference.shape
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("name", sorted(FEW))
def test_shipped_encoder_low_precision_is_close_to_fp32(name, precision, device, molecules):
    if precision == "fp16":
        cuda_only(device, "fp16")
    model = load_gpse(name, device=device)
    batch = dgl.batch(molecules[:FEW[name]])
    reference = encode(model, batch, seed=0)
    got = encode(model, batch, seed=0, precision=precision)
    assert got.dtype == torch.float32
    assert not torch.equal(got, reference)  # autocast did run: the low-precision products change the digits
    cos = cosine_per_node(got, reference)
    assert float(cos.min()) >= 0.99, f"lowest per-node cosine {float(cos.min()):.4f}"


def test_encoding_on_device_does_not_depend_on_the_batch(device, molecules):
    # rdkit-base uses its random input (quickstart hardly does), so a changed seed must show
    model = load_gpse("rdkit-base", device=device)
    graphs = molecules[20:24]
    together = encode(model, dgl.batch(graphs[::-1]), seed=0).split([g.num_nodes() for g in graphs[::-1]])[::-1]
    for g, rows in zip(graphs, together):
        torch.testing.assert_close(encode(model, g, seed=0), rows, rtol=1e-4, atol=1e-5)
    other_seed = encode(model, graphs[0], seed=1)
    assert (other_seed - together[0]).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------- encode CLI
@pytest.fixture(scope="module")
def few_molecules_file(tmp_path_factory, molecules):
    # `encode` has no option to take part of a dataset: the first 16 embedded molecules as a DGL file
    path = tmp_path_factory.mktemp("encode_cli") / "embedded16.bin"
    dgl.save_graphs(str(path), molecules[:16])
    return path


def _cli_encodings(path) -> torch.Tensor:
    graphs, _ = dgl.load_graphs(str(path))
    return torch.cat([g.ndata["gpse"] for g in graphs])


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_encode_cli_on_device_matches_cpu(precision, device, few_molecules_file, tmp_path, capsys):
    if precision == "fp16":
        cuda_only(device, "fp16")
    runs = {"cpu": ("cpu", "fp32"), "device": (device, precision)}
    for key, (where, prec) in runs.items():  # no --checkpoint: the shipped default model (rdkit-base)
        code, _, err = run_cli(["encode", "--input", few_molecules_file, "--out", tmp_path / f"{key}.bin",
                                "--device", where, "--precision", prec, "--quiet"], capsys)
        assert code == 0, err
    reference, got = _cli_encodings(tmp_path / "cpu.bin"), _cli_encodings(tmp_path / "device.bin")
    assert got.dtype == torch.float32 and got.shape == reference.shape == (reference.shape[0], 256)
    if precision == "fp32":
        torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-5)
    else:
        assert not torch.equal(got, reference)
        assert float(cosine_per_node(got, reference).min()) >= 0.99


# ------------------------------------------------------------------------------------------- pretrain
TINY_PRETRAIN = {
    "data.max_graphs": 60, "model.num_layers": 2, "model.dim_hidden": 16,
    "general_pipeline.num_epochs": 2, "general_pipeline.batch_size": 16,
    "general_pipeline.time_limit_minutes": "null", "general_pipeline.fit_to_time_limit": "false",
    "general_pipeline.num_threads": 1,
}


@pytest.fixture(scope="module")
def targets_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("pretrain_targets")  # the targets of the 60 graphs are computed once


def _pretrain_sets(device, cache, precision) -> list[str]:
    sets = dict(TINY_PRETRAIN, **{"data.cache_dir": cache, "data.target_device": device,
                                  "general_pipeline.precision": precision})
    return [f"{key}={value}" for key, value in sets.items()]


def _pretrain_cli(out, device, cache, precision, capsys, *extra):
    argv = ["pretrain", QUICKSTART]
    for item in _pretrain_sets(device, cache, precision):
        argv += ["--set", item]
    code, _, err = run_cli(argv + ["--device", device, "--out", out, "--no-progress", "--quiet", *extra], capsys)
    assert code == 0, err


def _finite_metrics(metrics: dict) -> list[float]:
    values = [record["train"]["loss"] for record in metrics["history"]]
    values += [metrics["final"][split][key] for split in ("val", "test") for key in ("loss", "r2")]
    return values


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_pretrain_on_device(precision, device, targets_cache, molecules, tmp_path, capsys):
    if precision == "fp16":
        cuda_only(device, "fp16 with a gradient scaler")
    run = tmp_path / "run"
    _pretrain_cli(run, device, targets_cache, precision, capsys)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["status"] == "completed" and metrics["epochs_completed"] == 2
    values = _finite_metrics(metrics)
    assert all(math.isfinite(v) for v in values), values
    model = load_gpse(run / "best.pt", device=device)
    assert (model.num_layers, model.dim_hidden) == (2, 16)
    h = encode(model, molecules[0], seed=0)
    assert h.shape == (molecules[0].num_nodes(), 16) and bool(torch.isfinite(h).all())
    if precision == "fp16":  # the scaler's state goes into the checkpoint, for --resume
        scale = load_pretrain_checkpoint(run / "last.pt")["grad_scaler_state"]["scale"]
        assert math.isfinite(float(scale)) and float(scale) > 0


class Killed(Exception):
    pass


@contextlib.contextmanager
def deterministic_algorithms():
    """CUDA's index_add_ in a fixed order (ops without such a path only warn); the old mode restored after.

    Atomic adds would let two runs differ in the last bits, and fp16 rounding and Adam grow such
    differences over the steps: the comparison is about what --resume restores, not about that noise.
    """
    previous = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_pretrain_resumed_on_device_matches_uninterrupted(precision, device, targets_cache, tmp_path, capsys):
    if precision == "fp16":
        cuda_only(device, "fp16 with a gradient scaler")
    with deterministic_algorithms():
        _resume_check(precision, device, targets_cache, tmp_path, capsys)


def _resume_check(precision, device, targets_cache, tmp_path, capsys):
    _pretrain_cli(tmp_path / "straight", device, targets_cache, precision, capsys)

    def kill_after_first_epoch(record):
        if record["epoch"] == 1:
            raise Killed

    interrupted = tmp_path / "interrupted"
    recipe = load_pretrain_recipe(QUICKSTART, _pretrain_sets(device, targets_cache, precision)
                         + [f"general_pipeline.save_path={interrupted}", f"device={device}"])
    with pytest.raises(Killed):
        pretrain(recipe, progress=False, on_epoch_end=kill_after_first_epoch)
    after_one = load_pretrain_checkpoint(interrupted / "last.pt")
    assert after_one["epoch"] == 1
    _pretrain_cli(interrupted, device, targets_cache, precision, capsys, "--resume")

    straight = load_pretrain_checkpoint(tmp_path / "straight" / "last.pt")["model_state"]
    resumed = load_pretrain_checkpoint(interrupted / "last.pt")["model_state"]
    # a margin on CUDA for any op that stayed nondeterministic (it only warned); the CPU repeats itself bit for bit
    tol = dict(atol=1e-4, rtol=1e-3) if device == "cuda" else dict(atol=1e-6, rtol=1e-6)
    moved = 0.0
    for key, value in straight.items():
        torch.testing.assert_close(resumed[key], value, **tol, msg=lambda m, key=key: f"{key}: {m}")
        if value.is_floating_point():
            moved = max(moved, float((value - after_one["model_state"][key]).abs().max()))
    assert moved > 100 * tol["atol"]  # the second epoch changed the weights by far more than the tolerance


# ------------------------------------------------------------------------------------------------ PSE
@pytest.fixture(scope="module")
def pse_graphs(molecules):
    return molecules[::150] + random_graphs(seed=5, trees=8, er=8, multi=8)  # isolated nodes, several parts


def test_pses_on_device_match_cpu(device, pse_graphs):
    names = list(ALL_PSES)
    assert len(names) == 6
    reference = compute_pse_tensors(pse_graphs, names)
    got = compute_pse_tensors(pse_graphs, names, device=device)
    for name in ("ElstaticPE", "RWSE", "HKdiagSE"):
        assert got.node[name].device.type == "cpu"
        torch.testing.assert_close(got.node[name], reference.node[name], atol=1e-5, rtol=0, msg=name)
    for name in GRAPH_PSES:
        torch.testing.assert_close(got.graph[name], reference.graph[name], atol=1e-5, rtol=0, msg=name)
    counts = reference.num_nodes.tolist()
    # LapPE: compared per eigenspace, so a repeated eigenvalue's basis may differ between the solvers
    for g, ours, ref in zip(pse_graphs, got.node["LapPE"].split(counts), reference.node["LapPE"].split(counts)):
        assert_lap_pe_equivalent(ours.numpy(), ref.numpy(), sym_spectrum(g), atol=1e-5)


def test_pretraining_targets_on_device_match_cpu(device, molecules):
    graphs = molecules[5::300]
    reference_graphs, device_graphs = [g.clone() for g in graphs], [g.clone() for g in graphs]
    reference = pretraining_targets(reference_graphs)
    got = pretraining_targets(device_graphs, device=device)
    torch.testing.assert_close(got, reference, atol=1e-4, rtol=0)
    # standardised node targets, LapPE included: its canonical basis makes it solver independent
    for a, b in zip(device_graphs, reference_graphs):
        torch.testing.assert_close(a.ndata[NODE_TARGET_KEY], b.ndata[NODE_TARGET_KEY], atol=1e-4, rtol=0)


# ----------------------------------------------------------------------------------------- downstream
@pytest.mark.parametrize("model_name, precision", [("gin", "fp32"), ("gps", "bf16"), ("gps", "fp16")])
def test_downstream_epoch_on_device(model_name, precision, device, tmp_path, capsys):
    if precision == "fp16":
        cuda_only(device, "fp16 with a gradient scaler")
    sets = {"model.name": model_name, "model.dim_hidden": 16, "model.pe.dim_pe": 16, "model.num_layers": 2,
            "model.pe.source": "GPSE", "model.pe.checkpoint": "quickstart",
            "general_pipeline.num_epochs": 1, "general_pipeline.precision": precision,
            "general_pipeline.lr_scheduler.warmup_epochs": 0,  # a real step size, not the warm-up's ~0
            "data.max_folds": 1, "data.cache_dir": tmp_path / "cache"}
    if model_name == "gps":  # csl.yaml turns GPS's parts off (it runs GIN)
        sets.update({"model.local_mpnn": "gatedgcn", "model.global_attention": "transformer"})
    argv = ["train", CSL, "--seeds", 1, "--device", device, "--out", tmp_path / "run", "--no-progress", "--quiet"]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "complete" and results["runs"][0]["epochs"] == 1
    for split in ("train", "val", "test"):
        accuracy = results["summary"][split]["mean"]
        assert math.isfinite(accuracy) and 0.0 <= accuracy <= 1.0, (split, accuracy)
    # an accuracy stays finite even with NaN logits: the losses and the weights must be finite too
    last = torch.load(tmp_path / "run" / results["runs"][0]["run"] / "last.pt", weights_only=True)
    losses = [last["history"][-1][split]["loss"] for split in ("train", "val", "test")]
    assert all(math.isfinite(v) for v in losses), losses
    assert all(bool(torch.isfinite(t).all()) for t in last["model_state"].values() if t.is_floating_point())


# ------------------------------------------------------------------------------ residual step, optimiser
@pytest.mark.parametrize("with_h", [True, False])
def test_residual_step_on_device_matches_cpu(with_h, device):
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(300, 64, generator=generator) * 3
    z[:5] = -z[:5].abs()  # rows that ReLU empties: their norm is floored, their update zero
    h = torch.randn(300, 64, generator=generator) if with_h else None
    grad_out = torch.randn(300, 64, generator=generator)
    results = {}
    for where in ("cpu", device):
        zz = z.to(where, copy=True).requires_grad_()  # leaves of their own on either side
        hh = None if h is None else h.to(where, copy=True).requires_grad_()
        out = normalized_residual(hh, zz, p=0.0, training=True)
        out.backward(grad_out.to(where))
        results[where] = [out, zz.grad] + ([] if hh is None else [hh.grad])
        if hh is not None:  # the in-place update without autograd
            with torch.no_grad():
                results[where].append(normalized_residual_(h.to(where).clone(), z.to(where).clone()))
    for got, expected in zip(results[device], results["cpu"]):
        assert got.device.type == torch.device(device).type
        torch.testing.assert_close(got.cpu(), expected, atol=1e-6, rtol=1e-5)


def test_fused_optimizer_on_device(device):
    """The fused AdamW kernel on the device: same steps as ``foreach``, the weight caches see each step, and a
    state saved on the CPU (with the foreach update of older runs) resumes on the device."""
    torch.manual_seed(0)
    graph = dgl.graph(([0, 1, 2, 3], [1, 2, 3, 0]))
    x = torch.randn(4, 8, device=device)
    target = torch.randn(4, 16, device=device)  # rows of the output are unit vectors: their squares sum to 4
    recipe = {"name": "adamw", "lr": 1e-2, "weight_decay": 1e-4}
    encoder = GPSE(dim_in=8, dim_hidden=16, num_layers=2).to(device)
    twin = GPSE(dim_in=8, dim_hidden=16, num_layers=2).to(device)
    twin.load_state_dict(encoder.state_dict())
    ours = build_optimizer(encoder, recipe)
    assert ours.defaults["fused"] is True
    reference = torch.optim.AdamW(twin.parameters(), lr=1e-2, weight_decay=1e-4, foreach=True)
    for model in (encoder, twin):
        model.eval()
        with torch.no_grad():
            model(graph, x, seed=0)  # fills the cast-weight caches
    for step in range(3):
        for model, optimizer in ((encoder, ours), (twin, reference)):
            torch.manual_seed(step)  # the same dropout masks on both
            model.train()
            optimizer.zero_grad()
            (model(graph, x, seed=0) * target).sum().backward()
            optimizer.step()
    for a, b in zip(encoder.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    encoder.eval(), twin.eval()
    with torch.no_grad():  # twin's foreach step advances the counters itself: both forwards use fresh weights
        torch.testing.assert_close(encoder(graph, x, seed=0), twin(graph, x, seed=0), atol=1e-5, rtol=1e-4)
    cpu_model = GPSE(dim_in=8, dim_hidden=16, num_layers=2)
    older = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2, weight_decay=1e-4, foreach=True)
    (cpu_model(graph, x.cpu(), seed=0) * target.cpu()).sum().backward()
    older.step()
    resumed = build_optimizer(cpu_model.to(device), recipe)
    resumed.load_state_dict(older.state_dict())
    assert all(group["fused"] is True for group in resumed.param_groups)
    assert all(state["step"].device.type == torch.device(device).type for state in resumed.state.values())
    (cpu_model(graph, x, seed=0) * target).sum().backward()
    resumed.step()
    assert all(float(state["step"]) == 2.0 for state in resumed.state.values())
