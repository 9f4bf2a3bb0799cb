// Bilinear resizing with torch's source coordinates: src = (dst + 0.5) * in / out - 0.5, clamped at 0
// (align_corners = false), or src = dst * (in - 1) / (out - 1) (true). Each output pixel blends the
// two nearest rows and columns; the backward scatters the gradient with the same weights.
#include <cmath>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

// One output coordinate's two source positions and the weight of the second.
struct Tap {
  std::int64_t lo = 0, hi = 0;
  double weight_hi = 0;
};

std::vector<Tap> taps(std::int64_t in, std::int64_t out, bool align_corners) {
  std::vector<Tap> result(static_cast<std::size_t>(out));
  for (std::int64_t d = 0; d < out; ++d) {
    double src = 0;
    if (align_corners) {
      src = out > 1 ? static_cast<double>(d) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
    } else {
      src = std::max((static_cast<double>(d) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5, 0.0);
    }
    Tap& t = result[static_cast<std::size_t>(d)];
    t.lo = std::min(static_cast<std::int64_t>(std::floor(src)), in - 1);
    t.hi = std::min(t.lo + 1, in - 1);
    t.weight_hi = src - static_cast<double>(t.lo);
  }
  return result;
}

struct Resize {
  std::vector<Tap> rows, cols;
  ir::Shape output;
};

Expected<Resize> resize(const KernelContext& ctx, Inputs in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "upsample_bilinear2d"));
  const ir::Shape& x = in[0].shape;
  if (x.rank() != 4) return failf("upsample_bilinear2d: x has shape {}, expected [n, c, h, w]", x.to_string());
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> size, attr(ir::get_int_list(ctx.attrs, "output_size"), "upsample_bilinear2d"));
  if (size.size() != 2 || size[0] < 1 || size[1] < 1) return fail("upsample_bilinear2d: 'output_size' must be [oh, ow]");
  LOOM_ASSIGN_OR_RETURN(bool align, attr(ir::get_bool_or(ctx.attrs, "align_corners", false), "upsample_bilinear2d"));
  return Resize{taps(x[2], size[0], align), taps(x[3], size[1], align), ir::Shape{x[0], x[1], size[0], size[1]}};
}

// Visits every (output pixel, input pixel, weight) link of the resize.
void for_each_link(const ir::Shape& x, const Resize& r,
                   const std::function<void(std::size_t out_at, std::size_t in_at, double weight)>& visit) {
  const std::int64_t planes = x[0] * x[1], h = x[2], w = x[3], oh = r.output[2], ow = r.output[3];
  for (std::int64_t p = 0; p < planes; ++p)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j) {
        const Tap& row = r.rows[static_cast<std::size_t>(i)];
        const Tap& col = r.cols[static_cast<std::size_t>(j)];
        const auto out_at = static_cast<std::size_t>((p * oh + i) * ow + j);
        const auto at = [&](std::int64_t y, std::int64_t x_) { return static_cast<std::size_t>((p * h + y) * w + x_); };
        visit(out_at, at(row.lo, col.lo), (1 - row.weight_hi) * (1 - col.weight_hi));
        visit(out_at, at(row.lo, col.hi), (1 - row.weight_hi) * col.weight_hi);
        visit(out_at, at(row.hi, col.lo), row.weight_hi * (1 - col.weight_hi));
        visit(out_at, at(row.hi, col.hi), row.weight_hi * col.weight_hi);
      }
}

Kernel upsample_bilinear2d_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Resize r, resize(ctx, in));
    NdArray y(r.output);
    for_each_link(in[0].shape, r, [&](std::size_t out_at, std::size_t in_at, double weight) {
      y.data[out_at] += weight * in[0].data[in_at];
    });
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Resize r, resize(ctx, in));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, r.output, "upsample_bilinear2d"));
    NdArray dx(in[0].shape);
    for_each_link(in[0].shape, r, [&](std::size_t out_at, std::size_t in_at, double weight) {
      dx.data[in_at] += weight * g->data[out_at];
    });
    return Arrays{std::move(dx)};
  };
  return k;
}

}  // namespace

void register_resample_kernels(KernelRegistry& r) { r.add("upsample_bilinear2d", upsample_bilinear2d_kernel()); }

}  // namespace loom::verify
