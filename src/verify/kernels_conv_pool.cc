// Reference kernels of the conv/pool family over NCHW images, with torch.nn's semantics.
//
// Convolutions and poolings are written as "taps": every (output element, input element, weight
// element) triple the op multiplies. Forward and backward walk the same taps, so the backward is the
// exact transpose of the forward by construction.
//
// Ops whose definitions do not save their inputs (avg pools, up-sampling) still read the input's
// shape from `inputs` in the backward: the output alone cannot tell it (pooling floors).
#include <array>
#include <cmath>
#include <limits>

#include "loom/verify/kernel_families.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify {
namespace {

using Pair = std::array<std::int64_t, 2>;
using Tensors = Expected<std::vector<NdArray>>;

// A per-axis attribute (height, width): [k] means [k, k]; absent means `fallback`.
Expected<Pair> get_pair(const ir::Attrs& attrs, std::string_view op, std::string_view key, Pair fallback,
                        std::int64_t min_value) {
  if (!attrs.contains(key)) return fallback;
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> values, ir::get_int_list(attrs, key));
  if (values.size() != 1 && values.size() != 2)
    return failf("{}: attribute '{}' needs 1 or 2 values (height, width), got {}", op, key, values.size());
  Pair pair{values.front(), values.back()};
  for (std::int64_t v : pair)
    if (v < min_value) return failf("{}: attribute '{}' must be >= {}, got {}", op, key, min_value, v);
  return pair;
}

Expected<void> expect_image(std::string_view op, const NdArray& x) {
  if (x.shape.rank() != 4) return failf("{} needs an image [n c h w], got {}", op, x.shape.to_string());
  return {};
}

std::size_t at4(const ir::Shape& s, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return static_cast<std::size_t>(((a * s[1] + b) * s[2] + c) * s[3] + d);
}

// One multiply of a convolution: out[out_at] += x[x_at] * w[w_at].
struct Tap {
  std::size_t out_at, x_at, w_at;
};

struct ConvGeometry {
  ir::Shape out_shape;
  std::vector<Tap> taps;
};

// torch.nn.Conv2d: out[n, o, y, x] += in[n, g cig + c, y sh - ph + ky dh, x sw - pw + kx dw] w[o, c, ky, kx].
Expected<ConvGeometry> conv2d_geometry(const ir::Attrs& attrs, const ir::Shape& x, const ir::Shape& w) {
  constexpr std::string_view op = "conv2d";
  LOOM_ASSIGN_OR_RETURN(Pair stride, get_pair(attrs, op, "stride", {1, 1}, 1));
  LOOM_ASSIGN_OR_RETURN(Pair padding, get_pair(attrs, op, "padding", {0, 0}, 0));
  LOOM_ASSIGN_OR_RETURN(Pair dilation, get_pair(attrs, op, "dilation", {1, 1}, 1));
  LOOM_ASSIGN_OR_RETURN(std::int64_t groups, ir::get_int_or(attrs, "groups", 1));
  if (w.rank() != 4) return failf("{}: weight must be [co ci/groups kh kw], got {}", op, w.to_string());
  // The attribute counts the whole op's groups; a shard of the channels holds whole groups (the signature
  // splits g, never a group's channels), as many as its input channels make.
  if (groups > 1 && w[1] > 0 && x[1] % w[1] == 0 && x[1] < w[1] * groups) groups = x[1] / w[1];
  if (groups < 1 || w[0] % groups != 0 || w[1] * groups != x[1])
    return failf("{}: input {} and weight {} do not fit groups {}", op, x.to_string(), w.to_string(), groups);
  Pair out{};
  for (std::size_t a = 0; a < 2; ++a) {
    const std::int64_t span = x[2 + a] + 2 * padding[a] - dilation[a] * (w[2 + a] - 1) - 1;
    if (span < 0) return failf("{}: the kernel {} does not fit the padded input {}", op, w.to_string(), x.to_string());
    out[a] = span / stride[a] + 1;
  }
  ConvGeometry g{ir::Shape{x[0], w[0], out[0], out[1]}, {}};
  const std::int64_t out_per_group = w[0] / groups;
  for (std::int64_t n = 0; n < x[0]; ++n)
    for (std::int64_t o = 0; o < w[0]; ++o)
      for (std::int64_t oy = 0; oy < out[0]; ++oy)
        for (std::int64_t ox = 0; ox < out[1]; ++ox)
          for (std::int64_t c = 0; c < w[1]; ++c)
            for (std::int64_t ky = 0; ky < w[2]; ++ky)
              for (std::int64_t kx = 0; kx < w[3]; ++kx) {
                const std::int64_t iy = oy * stride[0] - padding[0] + ky * dilation[0];
                const std::int64_t ix = ox * stride[1] - padding[1] + kx * dilation[1];
                if (iy < 0 || iy >= x[2] || ix < 0 || ix >= x[3]) continue;
                const std::int64_t channel = (o / out_per_group) * w[1] + c;
                g.taps.push_back({at4(g.out_shape, n, o, oy, ox), at4(x, n, channel, iy, ix), at4(w, o, c, ky, kx)});
              }
  return g;
}

// torch.nn.ConvTranspose2d (groups 1): in[n, c, y, x] scatters into
// out[n, o, y sh - ph + ky dh, x sw - pw + kx dw] with weight w[c, o, ky, kx].
Expected<ConvGeometry> conv_transpose2d_geometry(const ir::Attrs& attrs, const ir::Shape& x, const ir::Shape& w) {
  constexpr std::string_view op = "conv_transpose2d";
  LOOM_ASSIGN_OR_RETURN(Pair stride, get_pair(attrs, op, "stride", {1, 1}, 1));
  LOOM_ASSIGN_OR_RETURN(Pair padding, get_pair(attrs, op, "padding", {0, 0}, 0));
  LOOM_ASSIGN_OR_RETURN(Pair extra, get_pair(attrs, op, "output_padding", {0, 0}, 0));
  LOOM_ASSIGN_OR_RETURN(Pair dilation, get_pair(attrs, op, "dilation", {1, 1}, 1));
  if (w.rank() != 4 || w[0] != x[1])
    return failf("{}: weight must be [ci co kh kw] with ci = {}, got {}", op, x[1], w.to_string());
  Pair out{};
  for (std::size_t a = 0; a < 2; ++a) {
    out[a] = (x[2 + a] - 1) * stride[a] - 2 * padding[a] + dilation[a] * (w[2 + a] - 1) + extra[a] + 1;
    if (out[a] <= 0) return failf("{}: output {} would be {} (<= 0)", op, a == 0 ? "height" : "width", out[a]);
  }
  ConvGeometry g{ir::Shape{x[0], w[1], out[0], out[1]}, {}};
  for (std::int64_t n = 0; n < x[0]; ++n)
    for (std::int64_t c = 0; c < x[1]; ++c)
      for (std::int64_t iy = 0; iy < x[2]; ++iy)
        for (std::int64_t ix = 0; ix < x[3]; ++ix)
          for (std::int64_t o = 0; o < w[1]; ++o)
            for (std::int64_t ky = 0; ky < w[2]; ++ky)
              for (std::int64_t kx = 0; kx < w[3]; ++kx) {
                const std::int64_t oy = iy * stride[0] - padding[0] + ky * dilation[0];
                const std::int64_t ox = ix * stride[1] - padding[1] + kx * dilation[1];
                if (oy < 0 || oy >= out[0] || ox < 0 || ox >= out[1]) continue;
                g.taps.push_back({at4(g.out_shape, n, o, oy, ox), at4(x, n, c, iy, ix), at4(w, c, o, ky, kx)});
              }
  return g;
}

using GeometryFn = Expected<ConvGeometry> (*)(const ir::Attrs&, const ir::Shape&, const ir::Shape&);

// Checks (x, w[, bias]) and builds the taps; the bias has one value per output channel.
Expected<ConvGeometry> conv_geometry(std::string_view op, GeometryFn geometry, const KernelContext& ctx,
                                     std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 3, op));
  LOOM_RETURN_IF_ERROR(expect_image(op, in[0]));
  LOOM_ASSIGN_OR_RETURN(ConvGeometry g, geometry(ctx.attrs, in[0].shape, in[1].shape));
  if (in.size() == 3 && in[2].shape != ir::Shape{g.out_shape[1]})
    return failf("{}: bias must be [{}], got {}", op, g.out_shape[1], in[2].shape.to_string());
  return g;
}

Tensors conv_forward(std::string_view op, GeometryFn geometry, const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(op, geometry, ctx, in));
  NdArray out(g.out_shape);
  for (const Tap& tap : g.taps) out.data[tap.out_at] += in[0].data[tap.x_at] * in[1].data[tap.w_at];
  if (in.size() == 3) {
    const std::size_t plane = static_cast<std::size_t>(g.out_shape[2] * g.out_shape[3]);
    for (std::size_t i = 0; i < out.data.size(); ++i)
      out.data[i] += in[2].data[(i / plane) % static_cast<std::size_t>(g.out_shape[1])];
  }
  return std::vector<NdArray>{std::move(out)};
}

Tensors conv_backward(std::string_view op, GeometryFn geometry, const KernelContext& ctx, std::span<const NdArray> in,
                      std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(ConvGeometry g, conv_geometry(op, geometry, ctx, in));
  if (grad_out.size() != 1 || grad_out[0].shape != g.out_shape)
    return failf("{}: backward needs one output gradient {}", op, g.out_shape.to_string());
  const NdArray& dout = grad_out[0];
  std::vector<NdArray> grads = {NdArray(in[0].shape), NdArray(in[1].shape)};
  for (const Tap& tap : g.taps) {
    grads[0].data[tap.x_at] += dout.data[tap.out_at] * in[1].data[tap.w_at];
    grads[1].data[tap.w_at] += dout.data[tap.out_at] * in[0].data[tap.x_at];
  }
  if (in.size() == 3) {
    NdArray& dbias = grads.emplace_back(in[2].shape);
    const std::size_t plane = static_cast<std::size_t>(g.out_shape[2] * g.out_shape[3]);
    for (std::size_t i = 0; i < dout.data.size(); ++i)
      dbias.data[(i / plane) % static_cast<std::size_t>(g.out_shape[1])] += dout.data[i];
  }
  return grads;
}

// A pooling window: the in-bounds input elements one output element reads, and its divisor.
struct Window {
  std::vector<std::size_t> inputs;
  double divisor = 1;
};

struct PoolGeometry {
  ir::Shape out_shape;
  std::vector<Window> windows;  // one per output element, row-major
};

// max_pool2d / avg_pool2d: torch defaults (stride = kernel, padding 0, ceil_mode false). Padding is
// -inf for max; for avg it counts in the divisor (count_include_pad true), which with ceil_mode
// false makes every divisor kh * kw.
Expected<PoolGeometry> pool_geometry(std::string_view op, const ir::Attrs& attrs, const ir::Shape& x) {
  LOOM_ASSIGN_OR_RETURN(Pair kernel, get_pair(attrs, op, "kernel", {0, 0}, 1));
  if (!attrs.contains("kernel")) return failf("{}: attribute 'kernel' is required", op);
  LOOM_ASSIGN_OR_RETURN(Pair stride, get_pair(attrs, op, "stride", kernel, 1));
  LOOM_ASSIGN_OR_RETURN(Pair padding, get_pair(attrs, op, "padding", {0, 0}, 0));
  Pair out{};
  for (std::size_t a = 0; a < 2; ++a) {
    if (2 * padding[a] > kernel[a]) return failf("{}: padding {} exceeds half the kernel {}", op, padding[a], kernel[a]);
    const std::int64_t span = x[2 + a] + 2 * padding[a] - kernel[a];
    if (span < 0) return failf("{}: kernel {} does not fit the padded input {}", op, kernel[a], x.to_string());
    out[a] = span / stride[a] + 1;
  }
  PoolGeometry g{ir::Shape{x[0], x[1], out[0], out[1]}, {}};
  for (std::int64_t n = 0; n < x[0]; ++n)
    for (std::int64_t c = 0; c < x[1]; ++c)
      for (std::int64_t oy = 0; oy < out[0]; ++oy)
        for (std::int64_t ox = 0; ox < out[1]; ++ox) {
          Window& window = g.windows.emplace_back();
          window.divisor = static_cast<double>(kernel[0] * kernel[1]);
          for (std::int64_t ky = 0; ky < kernel[0]; ++ky)
            for (std::int64_t kx = 0; kx < kernel[1]; ++kx) {
              const std::int64_t iy = oy * stride[0] - padding[0] + ky, ix = ox * stride[1] - padding[1] + kx;
              if (iy >= 0 && iy < x[2] && ix >= 0 && ix < x[3]) window.inputs.push_back(at4(x, n, c, iy, ix));
            }
        }
  return g;
}

// torch.nn.AdaptiveAvgPool2d: output cell i covers [floor(i H / oh), ceil((i + 1) H / oh)).
Expected<PoolGeometry> adaptive_geometry(std::string_view op, const ir::Attrs& attrs, const ir::Shape& x) {
  if (!attrs.contains("output_size")) return failf("{}: attribute 'output_size' is required", op);
  LOOM_ASSIGN_OR_RETURN(Pair out, get_pair(attrs, op, "output_size", {0, 0}, 1));
  if (out[0] > x[2] || out[1] > x[3])
    return failf("{}: output {}x{} is larger than the input {}", op, out[0], out[1], x.to_string());
  const auto start = [](std::int64_t i, std::int64_t in, std::int64_t o) { return i * in / o; };
  const auto end = [](std::int64_t i, std::int64_t in, std::int64_t o) { return ((i + 1) * in + o - 1) / o; };
  PoolGeometry g{ir::Shape{x[0], x[1], out[0], out[1]}, {}};
  for (std::int64_t n = 0; n < x[0]; ++n)
    for (std::int64_t c = 0; c < x[1]; ++c)
      for (std::int64_t oy = 0; oy < out[0]; ++oy)
        for (std::int64_t ox = 0; ox < out[1]; ++ox) {
          Window& window = g.windows.emplace_back();
          for (std::int64_t iy = start(oy, x[2], out[0]); iy < end(oy, x[2], out[0]); ++iy)
            for (std::int64_t ix = start(ox, x[3], out[1]); ix < end(ox, x[3], out[1]); ++ix)
              window.inputs.push_back(at4(x, n, c, iy, ix));
          window.divisor = static_cast<double>(window.inputs.size());
        }
  return g;
}

using PoolGeometryFn = Expected<PoolGeometry> (*)(std::string_view, const ir::Attrs&, const ir::Shape&);

Expected<PoolGeometry> checked_pool(std::string_view op, PoolGeometryFn geometry, const KernelContext& ctx,
                                    std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
  LOOM_RETURN_IF_ERROR(expect_image(op, in[0]));
  return geometry(op, ctx.attrs, in[0].shape);
}

Expected<void> expect_grad(std::string_view op, std::span<const NdArray> grad_out, const ir::Shape& shape) {
  if (grad_out.size() != 1 || grad_out[0].shape != shape)
    return failf("{}: backward needs one output gradient {}", op, shape.to_string());
  return {};
}

// The first maximum in scan order wins ties, as torch's kernel does.
std::size_t argmax(const NdArray& x, const Window& window) {
  std::size_t best = window.inputs.front();
  for (std::size_t i : window.inputs)
    if (x.data[i] > x.data[best]) best = i;
  return best;
}

Tensors max_pool_forward(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(PoolGeometry g, checked_pool("max_pool2d", pool_geometry, ctx, in));
  NdArray out(g.out_shape);
  for (std::size_t o = 0; o < g.windows.size(); ++o) out.data[o] = in[0].data[argmax(in[0], g.windows[o])];
  return std::vector<NdArray>{std::move(out)};
}

Tensors max_pool_backward(const KernelContext& ctx, std::span<const NdArray> in, std::span<const NdArray>,
                          std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(PoolGeometry g, checked_pool("max_pool2d", pool_geometry, ctx, in));
  LOOM_RETURN_IF_ERROR(expect_grad("max_pool2d", grad_out, g.out_shape));
  NdArray grad(in[0].shape);
  for (std::size_t o = 0; o < g.windows.size(); ++o) grad.data[argmax(in[0], g.windows[o])] += grad_out[0].data[o];
  return std::vector<NdArray>{std::move(grad)};
}

Tensors average_forward(std::string_view op, PoolGeometryFn geometry, const KernelContext& ctx,
                        std::span<const NdArray> in) {
  LOOM_ASSIGN_OR_RETURN(PoolGeometry g, checked_pool(op, geometry, ctx, in));
  NdArray out(g.out_shape);
  for (std::size_t o = 0; o < g.windows.size(); ++o) {
    for (std::size_t i : g.windows[o].inputs) out.data[o] += in[0].data[i];
    out.data[o] /= g.windows[o].divisor;
  }
  return std::vector<NdArray>{std::move(out)};
}

// Reads only the input's shape (the op does not save its values).
Tensors average_backward(std::string_view op, PoolGeometryFn geometry, const KernelContext& ctx,
                         std::span<const NdArray> in, std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(PoolGeometry g, checked_pool(op, geometry, ctx, in));
  LOOM_RETURN_IF_ERROR(expect_grad(op, grad_out, g.out_shape));
  NdArray grad(in[0].shape);
  for (std::size_t o = 0; o < g.windows.size(); ++o)
    for (std::size_t i : g.windows[o].inputs) grad.data[i] += grad_out[0].data[o] / g.windows[o].divisor;
  return std::vector<NdArray>{std::move(grad)};
}

Expected<std::int64_t> upsample_scale(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t scale, ir::get_int(ctx.attrs, "scale"));
  if (scale < 1) return failf("upsample_nearest2d: scale must be >= 1, got {}", scale);
  return scale;
}

// out[n, c, y, x] = in[n, c, y / scale, x / scale] (torch's nearest mode with an integer scale).
Tensors upsample_forward(const KernelContext& ctx, std::span<const NdArray> in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "upsample_nearest2d"));
  LOOM_RETURN_IF_ERROR(expect_image("upsample_nearest2d", in[0]));
  LOOM_ASSIGN_OR_RETURN(std::int64_t scale, upsample_scale(ctx));
  const ir::Shape& x = in[0].shape;
  NdArray out(ir::Shape{x[0], x[1], x[2] * scale, x[3] * scale});
  for (std::int64_t p = 0; p < x[0] * x[1]; ++p)
    for (std::int64_t y = 0; y < x[2] * scale; ++y)
      for (std::int64_t z = 0; z < x[3] * scale; ++z)
        out.data[at4(out.shape, 0, p, y, z)] = in[0].data[at4(x, 0, p, y / scale, z / scale)];
  return std::vector<NdArray>{std::move(out)};
}

// Sums each output block back to its source pixel; the input shape follows from the gradient's.
Tensors upsample_backward(const KernelContext& ctx, std::span<const NdArray>, std::span<const NdArray>,
                          std::span<const NdArray> grad_out) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t scale, upsample_scale(ctx));
  if (grad_out.size() != 1 || grad_out[0].shape.rank() != 4 || grad_out[0].shape[2] % scale != 0 ||
      grad_out[0].shape[3] % scale != 0)
    return failf("upsample_nearest2d: backward needs one output gradient [n c h*{} w*{}]", scale, scale);
  const ir::Shape& o = grad_out[0].shape;
  NdArray grad(ir::Shape{o[0], o[1], o[2] / scale, o[3] / scale});
  for (std::int64_t p = 0; p < o[0] * o[1]; ++p)
    for (std::int64_t y = 0; y < o[2]; ++y)
      for (std::int64_t z = 0; z < o[3]; ++z)
        grad.data[at4(grad.shape, 0, p, y / scale, z / scale)] += grad_out[0].data[at4(o, 0, p, y, z)];
  return std::vector<NdArray>{std::move(grad)};
}

Kernel conv_kernel(std::string_view op, GeometryFn geometry) {
  return {[op, geometry](const KernelContext& ctx, std::span<const NdArray> in) {
            return conv_forward(op, geometry, ctx, in);
          },
          [op, geometry](const KernelContext& ctx, std::span<const NdArray> in, std::span<const NdArray>,
                         std::span<const NdArray> grad_out) { return conv_backward(op, geometry, ctx, in, grad_out); }};
}

Kernel average_kernel(std::string_view op, PoolGeometryFn geometry) {
  return {[op, geometry](const KernelContext& ctx, std::span<const NdArray> in) {
            return average_forward(op, geometry, ctx, in);
          },
          [op, geometry](const KernelContext& ctx, std::span<const NdArray> in, std::span<const NdArray>,
                         std::span<const NdArray> grad_out) {
            return average_backward(op, geometry, ctx, in, grad_out);
          }};
}


}  // namespace

void register_conv_pool_kernels(KernelRegistry& r) {
  r.add("conv2d", conv_kernel("conv2d", conv2d_geometry));
  r.add("conv_transpose2d", conv_kernel("conv_transpose2d", conv_transpose2d_geometry));
  r.add("max_pool2d", {max_pool_forward, max_pool_backward});
  r.add("avg_pool2d", average_kernel("avg_pool2d", pool_geometry));
  r.add("adaptive_avg_pool2d", average_kernel("adaptive_avg_pool2d", adaptive_geometry));
  r.add("upsample_nearest2d", {upsample_forward, upsample_backward});
}

}  // namespace loom::verify
