// Batch norm in batch-splittable parts (src/ops/batch_norm_parts.cc), per channel c of x [n, c, ...]:
//   batch_norm_sums:          sum_c = sum x, count_c = number of elements (of this shard)
//   batch_norm_centered_sums: squares_c = sum (x - sum_c / count_c)^2
//   batch_norm_from_sums:     y = (x - mean_c) inv_c w_c + b_c, mean = sum / count,
//                             inv = 1 / sqrt(squares / count + eps)
// Under a batch or spatial split the first two see a shard and return value parts; from_sums reads
// the summed statistics, so its shards need no offsets. Backward of from_sums: d x = g w inv,
// d sum_c = -sum g w inv / count, d squares_c = -sum g w (x - mean) inv^3 / (2 count), d w = sum g
// (x - mean) inv, d b = sum g; of centered sums d x = 2 (x - mean) d squares (the mean takes none); of
// sums d x = d sum. Composed, they are batch_norm's forward and backward.
#include <cmath>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

// x [n, c, ...]: the channel of each element.
struct Channels {
  std::size_t channels = 0;
  std::vector<std::size_t> of;  // per element
};

// Checks x (input 0) and that inputs [first, last) are [c].
Expected<Channels> channels(Inputs in, std::size_t first, std::string_view op) {
  const NdArray& x = in[0];
  if (x.shape.rank() < 2) return failf("{}: x must be [n, c, ...], got {}", op, x.shape.to_string());
  Channels ch;
  ch.channels = static_cast<std::size_t>(x.shape[1]);
  for (std::size_t i = first; i < in.size(); ++i)
    if (in[i].shape != ir::Shape{x.shape[1]})
      return failf("{}: input {} has shape {}, expected [{}]", op, i, in[i].shape.to_string(), x.shape[1]);
  const std::size_t n = x.data.size();
  const std::size_t spatial = n == 0 ? 1 : n / (static_cast<std::size_t>(x.shape[0]) * ch.channels);
  for (std::size_t i = 0; i < n; ++i) ch.of.push_back((i / spatial) % ch.channels);
  return ch;
}

// Per channel mean = sum / count; the count must be positive.
Expected<std::vector<double>> means(const NdArray& sum, const NdArray& count, std::string_view op) {
  std::vector<double> mean(sum.data.size());
  for (std::size_t c = 0; c < mean.size(); ++c) {
    if (!(count.data[c] > 0)) return failf("{}: channel {} has count {}; the count must be positive", op, c, count.data[c]);
    mean[c] = sum.data[c] / count.data[c];
  }
  return mean;
}

Kernel sums_kernel() {
  constexpr std::string_view op = "batch_norm_sums";
  Kernel k;
  k.forward = [op](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(Channels ch, channels(in, 1, op));
    const ir::Shape per_channel{in[0].shape[1]};
    NdArray sum(per_channel), count(per_channel);
    for (std::size_t i = 0; i < ch.of.size(); ++i) {
      sum.data[ch.of[i]] += in[0].data[i];
      count.data[ch.of[i]] += 1;
    }
    return Arrays{std::move(sum), std::move(count)};
  };
  // The count does not depend on x: only d sum flows back, to every element of its channel.
  k.backward = [op](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(Channels ch, channels(in, 1, op));
    if (grads.size() != 2 || grads[0].shape != ir::Shape{in[0].shape[1]})
      return failf("{}: backward expects 2 output gradients of shape [{}]", op, in[0].shape[1]);
    NdArray dx(in[0].shape);
    for (std::size_t i = 0; i < ch.of.size(); ++i) dx.data[i] = grads[0].data[ch.of[i]];
    return Arrays{std::move(dx)};
  };
  return k;
}

Kernel centered_sums_kernel() {
  constexpr std::string_view op = "batch_norm_centered_sums";
  Kernel k;
  k.forward = [op](const KernelContext&, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 3, 3, op));
    LOOM_ASSIGN_OR_RETURN(Channels ch, channels(in, 1, op));
    LOOM_ASSIGN_OR_RETURN(std::vector<double> mean, means(in[1], in[2], op));
    NdArray squares(ir::Shape{in[0].shape[1]});
    for (std::size_t i = 0; i < ch.of.size(); ++i) {
      const double d = in[0].data[i] - mean[ch.of[i]];
      squares.data[ch.of[i]] += d * d;
    }
    return Arrays{std::move(squares)};
  };
  k.backward = [op](const KernelContext&, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 3, 3, op));
    LOOM_ASSIGN_OR_RETURN(Channels ch, channels(in, 1, op));
    LOOM_ASSIGN_OR_RETURN(std::vector<double> mean, means(in[1], in[2], op));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, ir::Shape{in[0].shape[1]}, op));
    NdArray dx(in[0].shape);
    for (std::size_t i = 0; i < ch.of.size(); ++i) dx.data[i] = 2 * (in[0].data[i] - mean[ch.of[i]]) * g->data[ch.of[i]];
    return Arrays{std::move(dx), NdArray{}, NdArray{}};
  };
  return k;
}

struct Normalization {
  Channels ch;
  std::vector<double> mean, inv_std;  // per channel
};

// (x, sum, squares, count, weight, bias).
Expected<Normalization> normalization(const KernelContext& ctx, Inputs in, std::string_view op) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 6, 6, op));
  Normalization nz;
  LOOM_ASSIGN_OR_RETURN(nz.ch, channels(in, 1, op));
  LOOM_ASSIGN_OR_RETURN(double eps, attr(ir::get_real_or(ctx.attrs, "eps", 1e-5), op));
  LOOM_ASSIGN_OR_RETURN(nz.mean, means(in[1], in[3], op));
  for (std::size_t c = 0; c < nz.mean.size(); ++c) {
    const double variance = in[2].data[c] / in[3].data[c] + eps;
    if (!(variance > 0)) return failf("{}: channel {} has variance + eps {}; it must be positive", op, c, variance);
    nz.inv_std.push_back(1 / std::sqrt(variance));
  }
  return nz;
}

Kernel from_sums_kernel() {
  constexpr std::string_view op = "batch_norm_from_sums";
  Kernel k;
  k.forward = [op](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Normalization nz, normalization(ctx, in, op));
    NdArray y(in[0].shape);
    for (std::size_t i = 0; i < y.data.size(); ++i) {
      const std::size_t c = nz.ch.of[i];
      y.data[i] = (in[0].data[i] - nz.mean[c]) * nz.inv_std[c] * in[4].data[c] + in[5].data[c];
    }
    return Arrays{std::move(y)};
  };
  k.backward = [op](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Normalization nz, normalization(ctx, in, op));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, in[0].shape, op));
    const ir::Shape per_channel{in[0].shape[1]};
    NdArray dx(in[0].shape), d_sum(per_channel), d_squares(per_channel), dw(per_channel), db(per_channel);
    for (std::size_t i = 0; i < dx.data.size(); ++i) {
      const std::size_t c = nz.ch.of[i];
      const double gw = g->data[i] * in[4].data[c], inv = nz.inv_std[c], centered = in[0].data[i] - nz.mean[c];
      dx.data[i] = gw * inv;
      d_sum.data[c] -= gw * inv / in[3].data[c];
      d_squares.data[c] -= gw * centered * inv * inv * inv / (2 * in[3].data[c]);
      dw.data[c] += g->data[i] * centered * inv;
      db.data[c] += g->data[i];
    }
    return Arrays{std::move(dx), std::move(d_sum), std::move(d_squares), NdArray{}, std::move(dw), std::move(db)};
  };
  return k;
}

}  // namespace

void register_batch_norm_parts_kernels(KernelRegistry& r) {
  r.add("batch_norm_sums", sums_kernel());
  r.add("batch_norm_centered_sums", centered_sums_kernel());
  r.add("batch_norm_from_sums", from_sums_kernel());
}

}  // namespace loom::verify
