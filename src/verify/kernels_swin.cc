// Reference kernels of Swin's data movement, channels-last [b H W c]. Every op here is a gather:
// output element i reads input element source[i]. The forward copies along that map and the
// backward scatter-adds along it, so the two are transposes by construction.
//
// The definitions save no inputs; backward kernels read only the input's shape.
#include "loom/verify/kernel_families.h"
#include "loom/verify/ndarray_ops.h"

namespace loom::verify {
namespace {

using Tensors = Expected<std::vector<NdArray>>;

// An output shape and, per output element (row-major), the flat input element it copies.
struct Gather {
  ir::Shape out_shape;
  std::vector<std::size_t> source;
};

using GatherFn = Expected<Gather> (*)(const KernelContext&, const ir::Shape& input);

Expected<std::int64_t> window_size(std::string_view op, const ir::Attrs& attrs) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t ws, ir::get_int(attrs, "window_size"));
  if (ws < 1) return failf("{}: window_size must be >= 1, got {}", op, ws);
  return ws;
}

Expected<void> expect_rank(std::string_view op, const ir::Shape& x, std::size_t rank, std::string_view layout) {
  if (x.rank() != rank) return failf("{} needs {}, got {}", op, layout, x.to_string());
  return {};
}

std::size_t at4(const ir::Shape& s, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return static_cast<std::size_t>(((a * s[1] + b) * s[2] + c) * s[3] + d);
}

// The pixel (y, x) of image b that window element (window w, position p) of a windowed map holds:
// windows are row-major over the (H/ws) x (W/ws) grid of each image, positions row-major in a window.
struct WindowPixel {
  std::int64_t b, y, x;
};
WindowPixel window_pixel(std::int64_t window, std::int64_t position, std::int64_t ws, std::int64_t height,
                         std::int64_t width) {
  const std::int64_t per_image = (height / ws) * (width / ws);
  const std::int64_t in_image = window % per_image;
  return {window / per_image, (in_image / (width / ws)) * ws + position / ws, (in_image % (width / ws)) * ws + position % ws};
}

// [b H W c] -> [b nH nW, ws ws, c].
Expected<Gather> window_partition(const KernelContext& ctx, const ir::Shape& x) {
  constexpr std::string_view op = "window_partition";
  LOOM_RETURN_IF_ERROR(expect_rank(op, x, 4, "[b H W c]"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t ws, window_size(op, ctx.attrs));
  if (x[1] % ws != 0 || x[2] % ws != 0) return failf("{}: window size {} does not divide {}", op, ws, x.to_string());
  const std::int64_t windows = x[0] * (x[1] / ws) * (x[2] / ws);
  Gather g{ir::Shape{windows, ws * ws, x[3]}, {}};
  for (std::int64_t w = 0; w < windows; ++w)
    for (std::int64_t p = 0; p < ws * ws; ++p) {
      const WindowPixel px = window_pixel(w, p, ws, x[1], x[2]);
      for (std::int64_t c = 0; c < x[3]; ++c) g.source.push_back(at4(x, px.b, px.y, px.x, c));
    }
  return g;
}

// [b nH nW, ws ws, c] -> [b H W c], H and W from the attributes.
Expected<Gather> window_reverse(const KernelContext& ctx, const ir::Shape& x) {
  constexpr std::string_view op = "window_reverse";
  LOOM_RETURN_IF_ERROR(expect_rank(op, x, 3, "windows [b*nW ws*ws c]"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t ws, window_size(op, ctx.attrs));
  LOOM_ASSIGN_OR_RETURN(std::int64_t height, ir::get_int(ctx.attrs, "height"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t width, ir::get_int(ctx.attrs, "width"));
  if (height < 1 || width < 1 || height % ws != 0 || width % ws != 0 || x[1] != ws * ws)
    return failf("{}: windows {} do not tile a {}x{} map with window size {}", op, x.to_string(), height, width, ws);
  const std::int64_t per_image = (height / ws) * (width / ws);
  if (x[0] % per_image != 0)
    return failf("{}: {} windows are not a whole number of images ({} windows each)", op, x[0], per_image);
  Gather g{ir::Shape{x[0] / per_image, height, width, x[2]}, std::vector<std::size_t>(static_cast<std::size_t>(x.numel()))};
  for (std::int64_t w = 0; w < x[0]; ++w)
    for (std::int64_t p = 0; p < ws * ws; ++p) {
      const WindowPixel px = window_pixel(w, p, ws, height, width);
      for (std::int64_t c = 0; c < x[2]; ++c)
        g.source[at4(g.out_shape, px.b, px.y, px.x, c)] = static_cast<std::size_t>((w * x[1] + p) * x[2] + c);
    }
  return g;
}

// [b H W c] -> [b H/2 W/2 4c], channel c * 4 + k holding 2x2 offset k in Swin's concat order
// (x0 = (0,0), x1 = (1,0), x2 = (0,1), x3 = (1,1), as (dy, dx)): the op definition puts c first.
Expected<Gather> patch_merging(const KernelContext&, const ir::Shape& x) {
  constexpr std::string_view op = "patch_merging";
  LOOM_RETURN_IF_ERROR(expect_rank(op, x, 4, "[b H W c]"));
  if (x[1] % 2 != 0 || x[2] % 2 != 0) return failf("{}: the map {} must have even sides", op, x.to_string());
  Gather g{ir::Shape{x[0], x[1] / 2, x[2] / 2, 4 * x[3]}, {}};
  for (std::int64_t b = 0; b < x[0]; ++b)
    for (std::int64_t y = 0; y < x[1] / 2; ++y)
      for (std::int64_t z = 0; z < x[2] / 2; ++z)
        for (std::int64_t c = 0; c < x[3]; ++c)
          for (std::int64_t k = 0; k < 4; ++k) g.source.push_back(at4(x, b, 2 * y + k % 2, 2 * z + k / 2, c));
  return g;
}

// torch.roll(x, (shift, shift), dims=(1, 2)): out[y, x] = in[(y - shift) mod H, (x - shift) mod W].
Expected<Gather> cyclic_shift(const KernelContext& ctx, const ir::Shape& x) {
  constexpr std::string_view op = "cyclic_shift";
  LOOM_RETURN_IF_ERROR(expect_rank(op, x, 4, "[b H W c]"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t shift, ir::get_int(ctx.attrs, "shift"));
  const auto wrap = [](std::int64_t i, std::int64_t n) { return ((i % n) + n) % n; };
  Gather g{x, {}};
  for (std::int64_t b = 0; b < x[0]; ++b)
    for (std::int64_t y = 0; y < x[1]; ++y)
      for (std::int64_t z = 0; z < x[2]; ++z)
        for (std::int64_t c = 0; c < x[3]; ++c)
          g.source.push_back(at4(x, b, wrap(y - shift, x[1]), wrap(z - shift, x[2]), c));
  return g;
}

// Swin's relative position index: query i and key j of a window at (yi, xi), (yj, xj) read table
// row (yi - yj + ws - 1) (2 ws - 1) + (xi - xj + ws - 1). Output [heads, ws², ws²] from [(2ws-1)², heads].
Expected<Gather> relative_position_bias(const KernelContext& ctx, const ir::Shape& table) {
  constexpr std::string_view op = "relative_position_bias";
  LOOM_RETURN_IF_ERROR(expect_rank(op, table, 2, "a table [(2ws-1)^2 heads]"));
  LOOM_ASSIGN_OR_RETURN(std::int64_t ws, window_size(op, ctx.attrs));
  const std::int64_t span = 2 * ws - 1, tokens = ws * ws, heads = table[1];
  if (table[0] != span * span) return failf("{}: window size {} needs {} table rows, got {}", op, ws, span * span, table[0]);
  Gather g{ir::Shape{heads, tokens, tokens}, {}};
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t i = 0; i < tokens; ++i)
      for (std::int64_t j = 0; j < tokens; ++j) {
        const std::int64_t row = (i / ws - j / ws + ws - 1) * span + (i % ws - j % ws + ws - 1);
        g.source.push_back(static_cast<std::size_t>(row * heads + h));
      }
  return g;
}

Kernel gather_kernel(std::string_view op, GatherFn gather) {
  ForwardKernel forward = [op, gather](const KernelContext& ctx, std::span<const NdArray> in) -> Tensors {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(Gather g, gather(ctx, in[0].shape));
    NdArray out(g.out_shape);
    for (std::size_t i = 0; i < g.source.size(); ++i) out.data[i] = in[0].data[g.source[i]];
    return std::vector<NdArray>{std::move(out)};
  };
  BackwardKernel backward = [op, gather](const KernelContext& ctx, std::span<const NdArray> in,
                                         std::span<const NdArray>, std::span<const NdArray> grad_out) -> Tensors {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, op));
    LOOM_ASSIGN_OR_RETURN(Gather g, gather(ctx, in[0].shape));
    if (grad_out.size() != 1 || grad_out[0].shape != g.out_shape)
      return failf("{}: backward needs one output gradient {}", op, g.out_shape.to_string());
    NdArray grad(in[0].shape);
    for (std::size_t i = 0; i < g.source.size(); ++i) grad.data[g.source[i]] += grad_out[0].data[i];
    return std::vector<NdArray>{std::move(grad)};
  };
  return {std::move(forward), std::move(backward)};
}


}  // namespace

void register_swin_kernels(KernelRegistry& r) {
  r.add("window_partition", gather_kernel("window_partition", window_partition));
  r.add("window_reverse", gather_kernel("window_reverse", window_reverse));
  r.add("patch_merging", gather_kernel("patch_merging", patch_merging));
  r.add("cyclic_shift", gather_kernel("cyclic_shift", cyclic_shift));
  r.add("relative_position_bias", gather_kernel("relative_position_bias", relative_position_bias));
}

}  // namespace loom::verify
