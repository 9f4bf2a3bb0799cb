// Normalizations as one computation over "statistic groups": every element belongs to a group whose
// mean and (biased) variance normalize it, and to a channel whose weight and bias scale it.
// layer_norm / rms_norm: groups are the rows of the last dim; batch_norm: a group per channel over
// batch and space (training mode, batch statistics); group_norm: per sample and group of channels.
#include <cmath>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

struct Grouping {
  std::vector<std::size_t> group;    // per element
  std::vector<std::size_t> channel;  // per element: index into weight and bias
  std::size_t groups = 0;
  std::size_t channels = 0;
};

// Rows of the last dim (layer_norm, rms_norm).
Grouping last_dim_grouping(const ir::Shape& x) {
  Grouping g;
  const auto h = static_cast<std::size_t>(x.dims.back());
  const auto n = static_cast<std::size_t>(x.numel());
  g.channels = h;
  g.groups = h == 0 ? 0 : n / h;
  for (std::size_t i = 0; i < n; ++i) {
    g.group.push_back(i / h);
    g.channel.push_back(i % h);
  }
  return g;
}

// [n, c, spatial...]: per element its channel, and as group either the channel (batch_norm) or
// (sample, channel / (c / groups)) (group_norm).
Grouping channel_grouping(const ir::Shape& x, std::int64_t group_count, bool per_sample) {
  Grouping g;
  const auto n = static_cast<std::size_t>(x[0]), c = static_cast<std::size_t>(x[1]);
  const auto spatial = static_cast<std::size_t>(x.numel()) / (n * c);
  const std::size_t per_group = c / static_cast<std::size_t>(group_count);
  g.channels = c;
  g.groups = per_sample ? n * static_cast<std::size_t>(group_count) : c;
  for (std::size_t i = 0; i < static_cast<std::size_t>(x.numel()); ++i) {
    const std::size_t channel = (i / spatial) % c, sample = i / (spatial * c);
    g.channel.push_back(channel);
    g.group.push_back(per_sample ? sample * static_cast<std::size_t>(group_count) + channel / per_group : channel);
  }
  return g;
}

struct Statistics {
  std::vector<double> mean, inv_std;  // per group; mean is 0 for rms_norm
  NdArray normalized;                 // x_hat
};

Statistics statistics(const NdArray& x, const Grouping& g, double eps, bool centered) {
  std::vector<double> sum(g.groups, 0.0), count(g.groups, 0.0), square(g.groups, 0.0);
  for (std::size_t i = 0; i < x.data.size(); ++i) {
    sum[g.group[i]] += x.data[i];
    count[g.group[i]] += 1;
  }
  Statistics s{std::vector<double>(g.groups, 0.0), std::vector<double>(g.groups), NdArray(x.shape)};
  if (centered)
    for (std::size_t k = 0; k < g.groups; ++k) s.mean[k] = sum[k] / count[k];
  for (std::size_t i = 0; i < x.data.size(); ++i) {
    const double d = x.data[i] - s.mean[g.group[i]];
    square[g.group[i]] += d * d;
  }
  for (std::size_t k = 0; k < g.groups; ++k) s.inv_std[k] = 1 / std::sqrt(square[k] / count[k] + eps);
  for (std::size_t i = 0; i < x.data.size(); ++i)
    s.normalized.data[i] = (x.data[i] - s.mean[g.group[i]]) * s.inv_std[g.group[i]];
  return s;
}

struct NormSpec {
  std::string op;
  bool centered = true;  // subtract the mean (all but rms_norm)
  std::function<Expected<Grouping>(const KernelContext&, Inputs)> grouping;
};

Expected<void> check_params(const NormSpec& spec, Inputs in, const Grouping& g) {
  for (std::size_t t = 1; t < in.size(); ++t)
    if (in[t].shape != ir::Shape{static_cast<std::int64_t>(g.channels)})
      return failf("{}: input {} has shape {}, expected [{}]", spec.op, t, in[t].shape.to_string(), g.channels);
  return {};
}

Kernel norm_kernel(NormSpec spec) {
  Kernel k;
  k.forward = [spec](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Grouping g, spec.grouping(ctx, in));
    LOOM_RETURN_IF_ERROR(check_params(spec, in, g));
    LOOM_ASSIGN_OR_RETURN(double eps, attr(ir::get_real_or(ctx.attrs, "eps", 1e-5), spec.op));
    Statistics s = statistics(in[0], g, eps, spec.centered);
    NdArray y(in[0].shape);
    for (std::size_t i = 0; i < y.data.size(); ++i) {
      y.data[i] = s.normalized.data[i] * in[1].data[g.channel[i]];
      if (in.size() == 3) y.data[i] += in[2].data[g.channel[i]];
    }
    return Arrays{std::move(y)};
  };
  // dx = inv_std (dxh - mean(dxh) - xh mean(dxh xh)) per group, with dxh = g w (no mean(dxh) term
  // for rms_norm); dw = sum g xh, db = sum g per channel.
  k.backward = [spec](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Grouping g, spec.grouping(ctx, in));
    LOOM_RETURN_IF_ERROR(check_params(spec, in, g));
    LOOM_ASSIGN_OR_RETURN(double eps, attr(ir::get_real_or(ctx.attrs, "eps", 1e-5), spec.op));
    LOOM_ASSIGN_OR_RETURN(const NdArray* grad, single_grad(grads, in[0].shape, spec.op));
    const Statistics s = statistics(in[0], g, eps, spec.centered);
    std::vector<double> mean_dxh(g.groups, 0.0), mean_dxh_xh(g.groups, 0.0), count(g.groups, 0.0);
    NdArray dxh(in[0].shape), dw(in[1].shape), db(in[1].shape);
    for (std::size_t i = 0; i < dxh.data.size(); ++i) {
      const std::size_t grp = g.group[i], ch = g.channel[i];
      dxh.data[i] = grad->data[i] * in[1].data[ch];
      dw.data[ch] += grad->data[i] * s.normalized.data[i];
      db.data[ch] += grad->data[i];
      mean_dxh[grp] += dxh.data[i];
      mean_dxh_xh[grp] += dxh.data[i] * s.normalized.data[i];
      count[grp] += 1;
    }
    NdArray dx(in[0].shape);
    for (std::size_t i = 0; i < dx.data.size(); ++i) {
      const std::size_t grp = g.group[i];
      const double centered_term = spec.centered ? mean_dxh[grp] / count[grp] : 0.0;
      dx.data[i] = s.inv_std[grp] * (dxh.data[i] - centered_term - s.normalized.data[i] * mean_dxh_xh[grp] / count[grp]);
    }
    Arrays result{std::move(dx), std::move(dw)};
    if (in.size() == 3) result.push_back(std::move(db));
    return result;
  };
  return k;
}

std::function<Expected<Grouping>(const KernelContext&, Inputs)> last_dim(std::string op, std::size_t min, std::size_t max) {
  return [op, min, max](const KernelContext&, Inputs in) -> Expected<Grouping> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, min, max, op));
    if (in[0].shape.rank() < 1) return failf("{}: x must have a last dim, got a scalar", op);
    return last_dim_grouping(in[0].shape);
  };
}

std::function<Expected<Grouping>(const KernelContext&, Inputs)> channels(std::string op, bool per_sample) {
  return [op, per_sample](const KernelContext& ctx, Inputs in) -> Expected<Grouping> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 3, 3, op));
    if (in[0].shape.rank() < 2) return failf("{}: x must be [n, c, ...], got {}", op, in[0].shape.to_string());
    std::int64_t group_count = 1;
    if (per_sample) {
      LOOM_ASSIGN_OR_RETURN(group_count, attr(ir::get_int(ctx.attrs, "groups"), op));
      if (group_count <= 0 || in[0].shape[1] % group_count != 0)
        return failf("{}: {} channels cannot form {} groups", op, in[0].shape[1], group_count);
    }
    return channel_grouping(in[0].shape, group_count, per_sample);
  };
}

}  // namespace

void register_norm_kernels(KernelRegistry& r) {
  r.add("layer_norm", norm_kernel({"layer_norm", true, last_dim("layer_norm", 2, 3)}));
  r.add("rms_norm", norm_kernel({"rms_norm", false, last_dim("rms_norm", 2, 2)}));
  r.add("batch_norm", norm_kernel({"batch_norm", true, channels("batch_norm", false)}));
  r.add("group_norm", norm_kernel({"group_norm", true, channels("group_norm", true)}));
  register_batch_norm_parts_kernels(r);
}

}  // namespace loom::verify
