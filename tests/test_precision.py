"""Mixed precision: names and devices, bf16 encodings and training against fp32 on the same weights."""
from __future__ import annotations

import copy
import random
import warnings

import pytest
import torch
import torch.nn.functional as F

import dgl

from gpse_dgl.data.molecules import load_embedded_molecules
from gpse_dgl.encode import encode, encode_dataset, encode_large, encode_sampled, load_gpse
from gpse_dgl.nn import ops
from gpse_dgl.nn.gpse import GPSE
from gpse_dgl.train.mixed_precision import MixedPrecision
from gpse_dgl.utils import precision as prec
from gpse_dgl.utils.precision import PRECISIONS, PrecisionError, autocast, decide_precision

# bf16 keeps 8 significant bits; with float32 sums, norms and residual stream the encodings of the
# embedded molecules stay this close to fp32 (mean >= 0.9999, every node >= 0.999)
MEAN_COSINE, MIN_COSINE = 0.9999, 0.999


def _cosines(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a.double(), b.double(), dim=1)


def _molecules(count: int | None) -> list:
    """The first ``count`` embedded molecules (None: every 20th of them, across the whole set), without the
    node data other tests may have written into the shared graph objects."""
    chosen = load_embedded_molecules()[:count] if count is not None else load_embedded_molecules()[::20]
    return [dgl.graph(g.edges(), num_nodes=g.num_nodes()) for g in chosen]


@pytest.fixture
def quiet_bf16(monkeypatch):
    """bf16 without the "not native" warning (tests must not depend on the CPU they run on)."""
    monkeypatch.setattr(prec, "_cpu_native_bf16", lambda: True)


# ------------------------------------------------------------------ names and devices


def test_names_dtypes_and_recipe_choices():
    from gpse_dgl.train.downstream.schema import DOWNSTREAM_SCHEMA
    from gpse_dgl.train.pretraining.schema import PRETRAIN_SCHEMA

    assert PRECISIONS == ("fp32", "bf16", "fp16")
    assert prec.PRECISION_CHOICES == PRECISIONS + ("auto",)
    for schema in (PRETRAIN_SCHEMA, DOWNSTREAM_SCHEMA):  # the recipes take their choices from utils.precision
        assert schema["general_pipeline"]["precision"].choices == prec.PRECISION_CHOICES
    assert decide_precision("fp32", "cpu").dtype is torch.float32


def test_unknown_precision_lists_the_choices():
    with pytest.raises(PrecisionError, match=r"unknown precision 'fp8'; choose one of fp32, bf16, fp16, auto"):
        decide_precision("fp8", "cpu")


@pytest.mark.parametrize("native", [True, False])
def test_auto_is_bf16_exactly_where_it_is_native(monkeypatch, native):
    monkeypatch.setattr(prec, "_cpu_native_bf16", lambda: native)
    expected = torch.bfloat16 if native else torch.float32
    assert prec.select_precision("auto", "cpu") == ("bf16" if native else "fp32")
    decided = decide_precision("auto", "cpu")
    assert decided.dtype is expected and decided.requested == "auto"
    assert decided.why == f"auto: bf16 {'is' if native else 'is not'} native on this cpu"
    assert MixedPrecision(decided).precision.name == ("bf16" if native else "fp32")
    assert decided.record() == {"name": "bf16" if native else "fp32", "requested": "auto",
                                "dtype": "bfloat16" if native else "float32", "device": "cpu",
                                "autocast": native, "why": decided.why}
    lin = torch.nn.Linear(4, 2)
    with autocast("auto", "cpu"):
        assert lin(torch.ones(3, 4)).dtype is expected


def test_fp16_on_cpu_suggests_bf16():
    with pytest.raises(PrecisionError, match="bf16") as info:
        decide_precision("fp16", "cpu")
    assert "\n" not in str(info.value)


def test_bf16_warns_only_where_it_is_not_native(monkeypatch):
    monkeypatch.setattr(prec, "_cpu_native_bf16", lambda: False)
    with pytest.warns(RuntimeWarning, match="not native") as record:
        assert decide_precision("bf16", "cpu").dtype is torch.bfloat16
    assert "\n" not in str(record[0].message)
    monkeypatch.setattr(prec, "_cpu_native_bf16", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decide_precision("bf16", "cpu")
    assert prec.suggested_precision("cpu") == "bf16"


def test_native_bf16_from_cpu_flags(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(prec, "_cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    assert prec.native_support("cpu") == {"bf16": True, "fp16": False}
    monkeypatch.setattr(prec, "_cpu_flags", lambda: frozenset({"avx2", "amx_bf16"}))
    assert prec.native_support("cpu")["bf16"]
    monkeypatch.setattr(prec, "_cpu_flags", lambda: frozenset({"avx2"}))
    assert prec.native_support("cpu") == {"bf16": False, "fp16": False}
    assert prec.suggested_precision("cpu") == "fp32"


def test_autocast_regions():
    lin = torch.nn.Linear(4, 3)
    with autocast("fp32", "cpu"):
        assert lin(torch.ones(2, 4)).dtype == torch.float32
    with autocast("bf16", "cpu"):
        assert lin(torch.ones(2, 4)).dtype == torch.bfloat16
    assert prec.to_accumulation(torch.ones(2, dtype=torch.bfloat16)).dtype == torch.float32
    x = torch.ones(2)
    assert prec.to_accumulation(x) is x


# ------------------------------------------------------------------ float32 accumulation


@pytest.mark.parametrize("backend", ["dgl", "torch"])
@pytest.mark.usefixtures("gated_path")
def test_sums_accumulate_in_float32(backend):
    g = dgl.graph((torch.zeros(300, dtype=torch.int64), torch.arange(300) % 3), num_nodes=3)
    value = torch.full((3, 4), 1.0 + 2 ** -7, dtype=torch.bfloat16)  # exact in bf16
    # 100 equal terms: exact in float32, not in a bf16 running sum
    out = ops.copy_u_sum(g, value, backend=backend)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.full((3, 4), 100 * (1.0 + 2 ** -7)), rtol=0, atol=0)
    key = torch.zeros(3, 4, dtype=torch.bfloat16)
    gated = ops.gated_sum(g, key, torch.zeros(3, 4, dtype=torch.bfloat16), value, backend=backend,
                          out=torch.zeros(3, 4, dtype=torch.bfloat16))
    assert gated.dtype == torch.float32
    torch.testing.assert_close(gated, torch.full((3, 4), 50 * (1.0 + 2 ** -7)), rtol=0, atol=0)


@pytest.mark.usefixtures("gated_path")
def test_gated_sum_gradients_in_bf16_match_float32():
    gen = torch.Generator().manual_seed(0)
    g = dgl.rand_graph(40, 300)
    inputs = [torch.randn(40, 8, generator=gen) for _ in range(3)]
    grads = {}
    for dtype in (torch.float32, torch.bfloat16):
        leaves = [t.detach().to(dtype).requires_grad_() for t in inputs]
        out = ops.gated_sum(g, *leaves, backend="torch")
        assert out.dtype == torch.float32
        (out * torch.linspace(-1, 1, 8)).sum().backward()
        assert all(t.grad.dtype == dtype for t in leaves)
        grads[dtype] = [t.grad.float() for t in leaves]
    for low, ref in zip(grads[torch.bfloat16], grads[torch.float32]):
        torch.testing.assert_close(low, ref, rtol=0.05, atol=0.05)


# ------------------------------------------------------------------ encodings


# The fast suite checks the first few molecules (bf16 is slow where it is emulated); -m slow every 20th of
# the set (all ~3,070 took 6 minutes of CI's budget at paper size).
_SLOW = pytest.mark.slow


@pytest.mark.parametrize("backend,count", [("torch", 8), pytest.param("dgl", 8, marks=_SLOW),
                                           pytest.param("torch", None, marks=_SLOW),
                                           pytest.param("dgl", None, marks=_SLOW)])
def test_bf16_encodings_of_a_paper_size_model(quiet_bf16, backend, count):
    torch.manual_seed(0)
    model = GPSE(backend=backend)  # 20 x 512, random weights
    graphs = _molecules(count)
    batch = dgl.batch(graphs)
    ref = encode(model, batch, seed=0)
    low = encode(model, batch, seed=0, precision="bf16")
    assert low.dtype == torch.float32 and low.shape == ref.shape
    cos = _cosines(low, ref)
    assert cos.mean() >= MEAN_COSINE and cos.min() >= MIN_COSINE, (cos.mean(), cos.min())
    assert not torch.equal(low, ref)  # the products did run in bf16


@pytest.mark.parametrize("count", [100, pytest.param(None, marks=_SLOW)])
@pytest.mark.parametrize("backend", ["dgl", "torch"])
@pytest.mark.parametrize("name", ["rdkit-base", "quickstart"])
def test_bf16_encodings_of_the_shipped_models(quiet_bf16, backend, count, name):
    model = load_gpse(name)
    model.backend = backend
    graphs = _molecules(count)
    ref = torch.cat(encode_dataset(model, graphs, batch_size=200, progress=False))
    low = torch.cat(encode_dataset(model, graphs, batch_size=200, progress=False, precision="bf16"))
    cos = _cosines(low, ref)
    assert cos.mean() >= MEAN_COSINE and cos.min() >= MIN_COSINE, (cos.mean(), cos.min())


def test_bf16_encodings_do_not_depend_on_the_batch(quiet_bf16):
    torch.manual_seed(1)
    model = GPSE(dim_hidden=64, num_layers=4)
    graphs = _molecules(12)
    reference = encode_dataset(model, graphs, batch_size=12, seed=3, progress=False, precision="bf16")
    order = list(range(len(graphs)))
    random.Random(0).shuffle(order)
    for batch_size in (1, 7):
        shuffled = encode_dataset(model, [graphs[i] for i in order], batch_size=batch_size, seed=3,
                                  progress=False, precision="bf16")
        for position, index in enumerate(order):
            # the same tolerance as fp32's test: rows of a product do not depend on the other rows
            torch.testing.assert_close(shuffled[position], reference[index], rtol=0, atol=1e-6)


def test_bf16_large_graph_paths_agree_with_the_module(quiet_bf16):
    torch.manual_seed(2)
    model = GPSE(dim_hidden=32, num_layers=3)
    g = dgl.to_bidirected(dgl.rand_graph(300, 900))
    full = encode(model, g, precision="bf16")
    layerwise = encode_large(model, g, chunk_edges=200, precision="bf16")
    assert layerwise.dtype == torch.float32
    assert _cosines(layerwise, full).min() >= MIN_COSINE
    sampled = encode_sampled(model, g, fanouts=(-1,), precision="bf16")  # all neighbours: exact
    assert sampled.dtype == torch.float32 and _cosines(sampled, full).min() >= MIN_COSINE
    with pytest.raises(PrecisionError, match="bf16"):
        encode_large(model, g, precision="fp16")


def test_fp32_is_the_default_and_unchanged():
    torch.manual_seed(3)
    model = GPSE(dim_hidden=16, num_layers=2)
    g = dgl.batch(_molecules(5))
    assert torch.equal(encode(model, g), encode(model, g, precision="fp32"))
    with pytest.raises(PrecisionError, match="choose one of"):
        encode_dataset(model, [g], precision="half", progress=False)


# ------------------------------------------------------------------ training


def test_bf16_pretraining_follows_fp32_and_resumes(tmp_path, quiet_bf16):
    from gpse_dgl.train.pretraining import pretrain, validate_pretrain_recipe
    from gpse_dgl.utils.checkpoint import load_pretrain_checkpoint

    def recipe(precision, save, epochs=2):
        return validate_pretrain_recipe({
            "data": {"max_graphs": 40, "cache_dir": str(tmp_path / "cache"), "split": [0.8, 0.1, 0.1]},
            "model": {"dim_hidden": 32, "num_layers": 4, "head_hidden": 8, "graph_head_hidden": 16,
                      "dropout": 0.0},
            "general_pipeline": {"num_epochs": epochs, "batch_size": 8, "save_path": str(tmp_path / save),
                                 "num_threads": 1, "optimizer": {"lr": 0.003},
                                 "lr_scheduler": {"warmup_epochs": 1}, "precision": precision},
            "device": "cpu"}, "test")

    runs = {p: pretrain(recipe(p, p), progress=False) for p in ("fp32", "bf16")}
    losses = {p: [r["train"]["loss"] for r in run["history"]] for p, run in runs.items()}
    # 8 steps from the same weights: the loss curves agree within 2 % per epoch
    for low, ref in zip(losses["bf16"], losses["fp32"]):
        assert abs(low - ref) <= 0.02 * abs(ref), (losses)
    payload = load_pretrain_checkpoint(tmp_path / "bf16" / "last.pt")
    assert all(t.dtype in (torch.float32, torch.int64) for t in payload["model_state"].values())
    # resume: 1 epoch, then 1 more, ends where the 2-epoch run ended
    pretrain(recipe("bf16", "resumed", epochs=1), progress=False)
    resumed = pretrain(recipe("bf16", "resumed"), resume=True, progress=False, allow_recipe_change=True)
    assert resumed["history"][-1]["train"]["loss"] == pytest.approx(losses["bf16"][-1], rel=1e-6)


def test_fp16_on_cpu_fails_before_training(tmp_path):
    from gpse_dgl.train.pretraining import pretrain, validate_pretrain_recipe

    recipe = validate_pretrain_recipe({"general_pipeline": {"precision": "fp16", "save_path": str(tmp_path / "r")},
                                       "device": "cpu"}, "test")
    with pytest.raises(PrecisionError, match="use bf16"):
        pretrain(recipe, progress=False)


def test_scaled_step_skips_overflow_and_clips_unscaled_gradients():
    """The fp16 logic of MixedPrecision (a CPU GradScaler stands in for the CUDA one)."""
    model = torch.nn.Linear(3, 1, bias=False)
    torch.nn.init.ones_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    mixed = MixedPrecision(decide_precision("fp32", "cpu"))
    mixed.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    loss = model(torch.full((1, 3), float("inf"))).sum()
    mixed.backward_and_step(loss, optimizer, model.parameters(), clip_grad_norm=1.0)
    assert torch.equal(model.weight.detach(), torch.ones(1, 3))  # overflow: step skipped
    assert mixed.scaler.get_scale() < 2.0 ** 10
    optimizer.zero_grad()
    mixed.backward_and_step(model(torch.full((1, 3), 4.0)).sum(), optimizer, model.parameters(),
                            clip_grad_norm=1.0)
    # gradient (4, 4, 4) unscaled and clipped to norm 1 before the step
    torch.testing.assert_close(model.weight.detach(), torch.full((1, 3), 1 - 3 ** -0.5))
    state = copy.deepcopy(mixed.state_dict())
    assert state["scale"] == mixed.scaler.get_scale()
    assert MixedPrecision(decide_precision("fp32", "cpu")).state_dict() == {}
