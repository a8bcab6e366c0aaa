"""gpse_dgl.nn.dropout: masks from the compiled counter-based generator, against torch's dropout's
contract (values, keep rate, gradients, seeding) and the fallback."""
import pytest
import torch
import torch.nn.functional as F

from gpse_dgl.kernels import cpu
from gpse_dgl.nn.dropout import Dropout, dropout


MASK64 = (1 << 64) - 1


def splitmix64(seed: int, i: int) -> int:
    """SplitMix64's output for ``seed`` advanced ``i + 1`` steps, written out in Python integers."""
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernel_is_splitmix64_thresholded(compiled, dtype):
    """Bit for bit against the generator written out: element i is kept iff its draw is >= p * 2^64, and
    holds torch's own scale for that p and dtype."""
    seed, p, n = 0x1234_5678_9ABC_DEF0, 0.15, 4099
    noise = torch.empty(n, dtype=dtype)
    cpu.kernel().dropout_noise(seed, p, noise)
    threshold = int(p * 2.0 ** 64)  # p * 2^64 is exact in double arithmetic up to its last bit here
    expected_kept = torch.tensor([splitmix64(seed, i) >= threshold for i in range(n)])
    assert torch.equal(noise != 0, expected_kept)
    torch_scale = F.dropout(torch.ones(1000, dtype=dtype), p).max()  # what torch's dropout multiplies by
    assert torch.equal(noise[expected_kept].unique(), torch_scale.reshape(1))


def test_kernel_checks_its_output(compiled):
    kernel = cpu.kernel()
    with pytest.raises(RuntimeError, match="contiguous float32 or bfloat16 CPU tensor"):
        kernel.dropout_noise(1, 0.5, torch.empty(4, 4).t())
    with pytest.raises(RuntimeError, match="contiguous float32 or bfloat16 CPU tensor"):
        kernel.dropout_noise(1, 0.5, torch.empty(4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"p must be in \[0, 1\)"):
        kernel.dropout_noise(1, 1.0, torch.empty(4))


def test_compiled_masks_are_not_torchs(compiled):
    """The compiled path runs (with the same seed, torch's dropout would give another mask)."""
    x = torch.ones(64, 64)
    torch.manual_seed(9)
    ours = dropout(x, 0.5)
    torch.manual_seed(9)
    assert not torch.equal(ours, F.dropout(x, 0.5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.15, 0.2, 0.5, 0.9])
def test_values_and_keep_rate(compiled, dtype, p):
    torch.manual_seed(0)
    x = torch.rand(1000, 1000).add_(0.5).to(dtype)
    y = dropout(x, p)
    assert y.dtype == dtype and y.shape == x.shape
    kept = y != 0
    scale = F.dropout(torch.ones(100, dtype=dtype), p).max()
    assert torch.equal(y[kept], x[kept] * scale)  # kept elements are scaled as torch's dropout scales them
    n = x.numel()
    sd = (n * p * (1 - p)) ** 0.5
    assert abs(int(kept.sum()) - n * (1 - p)) < 5 * sd


def test_draws_are_independent(compiled):
    """Neighbouring elements, rows and consecutive calls: no visible correlation (each pair both kept
    with probability (1 - p)^2, within five standard deviations)."""
    torch.manual_seed(1)
    p, shape = 0.5, (1000, 1024)
    a = dropout(torch.ones(shape), p) != 0
    b = dropout(torch.ones(shape), p) != 0
    pairs = {"neighbours": (a[:, 1:], a[:, :-1]), "rows": (a[1:], a[:-1]), "calls": (a, b),
             "columns 64 apart": (a[:, 64:], a[:, :-64])}
    for name, (u, v) in pairs.items():
        n = u.numel()
        both = int((u & v).sum())
        q = (1 - p) ** 2
        assert abs(both - n * q) < 5 * (n * q * (1 - q)) ** 0.5, name
    assert not torch.equal(a, b)


def test_seeded_by_torch_and_independent_of_threads(compiled):
    x = torch.randn(300, 700)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        torch.manual_seed(7)
        one = dropout(x, 0.3)
        torch.set_num_threads(2)
        torch.manual_seed(7)
        two = dropout(x, 0.3)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    state = torch.get_rng_state()
    first = dropout(x, 0.3)
    torch.set_rng_state(state)
    assert torch.equal(dropout(x, 0.3), first)
    assert not torch.equal(dropout(x, 0.3), first)


def test_gradient_is_the_mask(compiled):
    torch.manual_seed(3)
    x = torch.randn(64, 32, requires_grad=True)
    y = dropout(x, 0.25)
    y.sum().backward()
    expected = (y != 0).float() / 0.75
    assert torch.allclose(x.grad, expected)


def test_identity_cases_and_inplace(compiled):
    x = torch.randn(8, 4)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    y = x.clone()
    torch.manual_seed(5)
    out = dropout(y, 0.5, inplace=True)
    assert out is y
    torch.manual_seed(5)
    assert torch.equal(dropout(x, 0.5), out)
    with pytest.raises(ValueError, match="between 0 and 1"):
        dropout(x, 1.5)
    assert dropout(torch.empty(0, 4), 0.5).shape == (0, 4)


def test_strided_input_gets_the_mask_of_its_contiguous_copy(compiled):
    x = torch.randn(30, 40)
    torch.manual_seed(6)
    strided = dropout(x.t(), 0.3)
    torch.manual_seed(6)
    assert torch.equal(strided, dropout(x.t().contiguous(), 0.3))


def test_module_matches_function_and_eval(compiled):
    module = Dropout(0.4)
    x = torch.randn(50, 20)
    torch.manual_seed(11)
    y = module(x)
    torch.manual_seed(11)
    assert torch.equal(y, dropout(x, 0.4))
    assert module.eval()(x) is x
    assert module.state_dict() == {}


def test_without_the_kernel_it_is_torch_dropout(no_kernel):
    x = torch.randn(40, 30)
    torch.manual_seed(2)
    ours = dropout(x, 0.3)
    torch.manual_seed(2)
    assert torch.equal(ours, F.dropout(x, 0.3))


def test_float64_takes_torch_dropout(compiled):
    x = torch.randn(40, 30, dtype=torch.float64)
    torch.manual_seed(4)
    ours = dropout(x, 0.3)
    torch.manual_seed(4)
    assert torch.equal(ours, F.dropout(x, 0.3))
