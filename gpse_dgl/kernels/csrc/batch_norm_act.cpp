// The downstream layers' normalisation step in one pass each way:
//
//   z = x (+ pre),   y = act(BN(z)) (+ post),   BN(z) = (z - mean) * invstd * weight + bias,   act = ReLU or identity
//
// with batch statistics (training: the biased variance normalises, the running statistics take the unbiased one)
// or the running ones (evaluation). torch runs it as up to four ops (add, batch_norm, relu, add), each a pass
// over an (n, d) tensor forward and another backward, and each with its own autograd node; at a batch of small
// molecules (a few hundred rows) their fixed costs exceed their arithmetic. Here the forward is two passes for
// the statistics and one for the output, the backward one for the sums of the gradient and one for z's gradient,
// and the autograd function is C++'s own.
//
// Sums over rows run by blocks of kRowBlock rows (float32 inside a block, float64 across blocks, in block order),
// so the result does not depend on the number of threads.
#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "native.h"

namespace {

constexpr int64_t kRowBlock = 64;

int64_t num_blocks(int64_t n) { return (n + kRowBlock - 1) / kRowBlock; }

// Column sums of f(i, j) over every row i, by blocks (see the header).
template <typename F>
std::vector<double> column_sums(int64_t n, int64_t d, F&& f) {
  const int64_t blocks = num_blocks(n);
  std::vector<float> partial(blocks * d, 0.0f);
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      float* acc = partial.data() + b * d;
      for (int64_t i = b * kRowBlock; i < std::min(n, (b + 1) * kRowBlock); ++i) {
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) acc[j] += f(i, j);
      }
    }
  });
  std::vector<double> total(d, 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t j = 0; j < d; ++j) total[j] += partial[b * d + j];
  }
  return total;
}

// What the backward pass needs besides the gradient and the affine parameters: z, and per column the mean and
// invstd that normalised it (the batch's or the running ones).
struct Saved {
  at::Tensor z, mean, invstd;
};

struct Options {
  bool batch_stats, relu;
  double momentum, eps;
};

void check_rows_like(const at::Tensor& t, const char* name, const at::Tensor& like) {
  gpse_native::check(t.is_contiguous() && t.scalar_type() == at::kFloat && t.sizes() == like.sizes(),
                     "%s must be contiguous float32 of x's shape", name);
}

void check_column(const at::Tensor& t, const char* name, int64_t d) {
  gpse_native::check(t.is_contiguous() && t.scalar_type() == at::kFloat && t.dim() == 1 && t.size(0) == d,
                     "%s must be contiguous float32 of x's width", name);
}

// z = x + pre (or x itself), its batch mean and invstd (batch_stats) or the running ones, the running statistics
// updated in place when given (batch_stats).
Saved statistics(const at::Tensor& x, const at::Tensor& pre, at::Tensor running_mean, at::Tensor running_var,
                 const Options& o) {
  const int64_t n = x.size(0), d = x.size(1);
  at::Tensor z = x;
  if (pre.defined()) {
    z = at::empty_like(x);
    const float *a = x.data_ptr<float>(), *b = pre.data_ptr<float>();
    float* out = z.data_ptr<float>();
    at::parallel_for(0, n * d, 16384, [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t k = begin; k < end; ++k) out[k] = a[k] + b[k];
    });
  }
  at::Tensor mean = at::empty({d}, x.options()), invstd = at::empty({d}, x.options());
  float *m = mean.data_ptr<float>(), *s = invstd.data_ptr<float>();
  if (!o.batch_stats) {
    const float *rm = running_mean.data_ptr<float>(), *rv = running_var.data_ptr<float>();
    for (int64_t j = 0; j < d; ++j) {
      m[j] = rm[j];
      s[j] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(rv[j]) + o.eps));
    }
    return {z, mean, invstd};
  }
  const float* zp = z.data_ptr<float>();
  const std::vector<double> sums = column_sums(n, d, [&](int64_t i, int64_t j) { return zp[i * d + j]; });
  for (int64_t j = 0; j < d; ++j) m[j] = static_cast<float>(sums[j] / n);
  const std::vector<double> squares = column_sums(n, d, [&](int64_t i, int64_t j) {
    const float c = zp[i * d + j] - m[j];
    return c * c;
  });
  float* rm = running_mean.defined() ? running_mean.data_ptr<float>() : nullptr;
  float* rv = running_var.defined() ? running_var.data_ptr<float>() : nullptr;
  for (int64_t j = 0; j < d; ++j) {
    const double var = squares[j] / n;
    s[j] = static_cast<float>(1.0 / std::sqrt(var + o.eps));
    if (rm != nullptr && rv != nullptr) {
      rm[j] = static_cast<float>((1.0 - o.momentum) * rm[j] + o.momentum * m[j]);
      rv[j] = static_cast<float>((1.0 - o.momentum) * rv[j] + o.momentum * (n > 1 ? squares[j] / (n - 1) : var));
    }
  }
  return {z, mean, invstd};
}

// Per column, forward and backward: BN(z) = z * scale + shift (ReLU's mask), xhat = (z - mean) * invstd.
struct Columns {
  std::vector<float> scale, shift, mean, invstd;
};

Columns columns(const Saved& st, const at::Tensor& weight, const at::Tensor& bias) {
  const int64_t d = st.z.size(1);
  Columns c{std::vector<float>(d), std::vector<float>(d), std::vector<float>(d), std::vector<float>(d)};
  const float *m = st.mean.data_ptr<float>(), *s = st.invstd.data_ptr<float>();
  const float* w = weight.defined() ? weight.data_ptr<float>() : nullptr;
  const float* b = bias.defined() ? bias.data_ptr<float>() : nullptr;
  for (int64_t j = 0; j < d; ++j) {
    c.mean[j] = m[j];
    c.invstd[j] = s[j];
    c.scale[j] = s[j] * (w ? w[j] : 1.0f);
    c.shift[j] = (b ? b[j] : 0.0f) - m[j] * c.scale[j];
  }
  return c;
}

at::Tensor forward_output(const Saved& st, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& post,
                          bool relu) {
  const int64_t n = st.z.size(0), d = st.z.size(1);
  const Columns c = columns(st, weight, bias);
  at::Tensor y = at::empty_like(st.z);
  const float* zp = st.z.data_ptr<float>();
  const float* pp = post.defined() ? post.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const float *sc = c.scale.data(), *sh = c.shift.data();
  at::parallel_for(0, n, kRowBlock, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* zi = zp + i * d;
      float* yi = yp + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        float v = zi[j] * sc[j] + sh[j];
        if (relu) v = std::fmax(v, 0.0f);
        yi[j] = pp ? v + pp[i * d + j] : v;
      }
    }
  });
  return y;
}

// sum_g[j] = sum_i gm[i, j] and sum_gx[j] = sum_i gm[i, j] * xhat[i, j], gm = g past the activation, in one pass
// by blocks of rows (see the header).
template <bool RELU>
void gradient_sums(const float* z, const float* g, const Columns& c, int64_t n, int64_t d, std::vector<double>& sum_g,
                   std::vector<double>& sum_gx) {
  const int64_t blocks = num_blocks(n);
  std::vector<float> partial(2 * blocks * d, 0.0f);
  const float *scale = c.scale.data(), *shift = c.shift.data(), *mean = c.mean.data(), *invstd = c.invstd.data();
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      float* acc_g = partial.data() + 2 * blk * d;
      float* acc_gx = acc_g + d;
      for (int64_t i = blk * kRowBlock; i < std::min(n, (blk + 1) * kRowBlock); ++i) {
        const float* zi = z + i * d;
        const float* gi = g + i * d;
#pragma omp simd
        for (int64_t j = 0; j < d; ++j) {
          const float gm = RELU ? (zi[j] * scale[j] + shift[j] > 0.0f ? gi[j] : 0.0f) : gi[j];
          acc_g[j] += gm;
          acc_gx[j] += gm * (zi[j] - mean[j]) * invstd[j];
        }
      }
    }
  });
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (int64_t j = 0; j < d; ++j) {
      sum_g[j] += partial[2 * blk * d + j];
      sum_gx[j] += partial[2 * blk * d + d + j];
    }
  }
}

// grad_z = scale * (gm - mean_g - xhat * mean_gx); mean_g and mean_gx are zero with the running statistics.
template <bool RELU>
void grad_input(const float* z, const float* g, const Columns& c, const float* mean_g, const float* mean_gx,
                float* out, int64_t n, int64_t d) {
  const float *scale = c.scale.data(), *shift = c.shift.data(), *mean = c.mean.data(), *invstd = c.invstd.data();
  at::parallel_for(0, n, kRowBlock, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* zi = z + i * d;
      const float* gi = g + i * d;
      float* oi = out + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) {
        const float gm = RELU ? (zi[j] * scale[j] + shift[j] > 0.0f ? gi[j] : 0.0f) : gi[j];
        const float xhat = (zi[j] - mean[j]) * invstd[j];
        oi[j] = scale[j] * (gm - mean_g[j] - xhat * mean_gx[j]);
      }
    }
  });
}

// Gradients of z, weight and bias from y's (post's is y's own).
std::vector<at::Tensor> backward_grads(const Saved& st, const at::Tensor& weight, const at::Tensor& bias,
                                       at::Tensor grad, const Options& o) {
  const int64_t n = st.z.size(0), d = st.z.size(1);
  grad = grad.to(at::kFloat).contiguous();
  const Columns c = columns(st, weight, bias);
  const float *z = st.z.data_ptr<float>(), *g = grad.data_ptr<float>();
  std::vector<double> sum_g(d, 0.0), sum_gx(d, 0.0);
  (o.relu ? gradient_sums<true> : gradient_sums<false>)(z, g, c, n, d, sum_g, sum_gx);
  std::vector<float> mean_g(d, 0.0f), mean_gx(d, 0.0f);
  if (o.batch_stats) {
    for (int64_t j = 0; j < d; ++j) {
      mean_g[j] = static_cast<float>(sum_g[j] / n);
      mean_gx[j] = static_cast<float>(sum_gx[j] / n);
    }
  }
  at::Tensor grad_z = at::empty_like(st.z);
  (o.relu ? grad_input<true> : grad_input<false>)(z, g, c, mean_g.data(), mean_gx.data(), grad_z.data_ptr<float>(),
                                                   n, d);
  at::Tensor grad_w, grad_b;
  if (weight.defined()) {
    grad_w = at::empty({d}, weight.options());
    grad_b = at::empty({d}, weight.options());
    for (int64_t j = 0; j < d; ++j) {
      grad_w.data_ptr<float>()[j] = static_cast<float>(sum_gx[j]);
      grad_b.data_ptr<float>()[j] = static_cast<float>(sum_g[j]);
    }
  }
  return {grad_z, grad_w, grad_b};
}

// An optional operand as the autograd function receives it (empty: absent) as the helpers above take it.
at::Tensor given(const at::Tensor& t) { return t.numel() > 0 ? t : at::Tensor(); }

struct BatchNormAct : public torch::autograd::Function<BatchNormAct> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, at::Tensor pre, at::Tensor post,
                            at::Tensor weight, at::Tensor bias, at::Tensor running_mean, at::Tensor running_var,
                            bool batch_stats, bool relu, double momentum, double eps) {
    // absent operands arrive as empty tensors: a C++ autograd function takes no undefined ones, and the position of
    // each operand must stay fixed, since needs_input_grad counts the tensors passed
    pre = given(pre), post = given(post), weight = given(weight), bias = given(bias);
    running_mean = given(running_mean), running_var = given(running_var);
    const Options o{batch_stats, relu, momentum, eps};
    check_rows_like(x, "x", x);
    gpse_native::check(x.dim() == 2, "x must be 2-D");
    if (pre.defined()) check_rows_like(pre, "pre", x);
    if (post.defined()) check_rows_like(post, "post", x);
    const int64_t d = x.size(1);
    if (weight.defined()) check_column(weight, "weight", d);
    if (bias.defined()) check_column(bias, "bias", d);
    gpse_native::check(batch_stats || (running_mean.defined() && running_var.defined()),
                       "evaluation needs the running statistics");
    if (running_mean.defined()) check_column(running_mean, "running_mean", d);
    if (running_var.defined()) check_column(running_var, "running_var", d);
    gpse_native::check(!batch_stats || x.size(0) > 1, "batch statistics need more than one row");
    Saved st = statistics(x, pre, running_mean, running_var, o);
    at::Tensor y = forward_output(st, weight, bias, post, relu);
    ctx->save_for_backward({st.z, st.mean, st.invstd, weight, bias});
    ctx->saved_data["batch_stats"] = batch_stats;
    ctx->saved_data["relu"] = relu;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Options o{ctx->saved_data["batch_stats"].toBool(), ctx->saved_data["relu"].toBool(), 0.0, 0.0};
    auto g = backward_grads(Saved{saved[0], saved[1], saved[2]}, saved[3], saved[4], grads[0], o);
    at::Tensor grad_x = g[0];
    at::Tensor grad_pre = ctx->needs_input_grad(1) ? grad_x.clone() : at::Tensor();  // two owners, two tensors
    at::Tensor grad_post = ctx->needs_input_grad(2) ? grads[0] : at::Tensor();
    return {ctx->needs_input_grad(0) ? grad_x : at::Tensor(), grad_pre, grad_post,
            ctx->needs_input_grad(3) ? g[1] : at::Tensor(), ctx->needs_input_grad(4) ? g[2] : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// y = act(BN(x + pre)) + post, with autograd; pre, post, weight, bias, running_mean, running_var may be None.
at::Tensor batch_norm_act(at::Tensor x, c10::optional<at::Tensor> pre, c10::optional<at::Tensor> post,
                          c10::optional<at::Tensor> weight, c10::optional<at::Tensor> bias,
                          c10::optional<at::Tensor> running_mean, c10::optional<at::Tensor> running_var,
                          bool batch_stats, bool relu, double momentum, double eps) {
  GPSE_PROFILED("BatchNormAct");
  auto get = [&](const c10::optional<at::Tensor>& t) { return t.has_value() ? *t : at::empty({0}, x.options()); };
  return BatchNormAct::apply(x, get(pre), get(post), get(weight), get(bias), get(running_mean), get(running_var),
                             batch_stats, relu, momentum, eps);
}

}  // namespace

static const gpse_native::Binding binding([](pybind11::module_& m) {
  m.def("batch_norm_act", &batch_norm_act, "act(BatchNorm(x + pre)) + post with autograd");
});
