// Constant padding: x copied into the interior of a `value`-filled array; the gradient of x is the
// output gradient's interior (the border is a constant).
#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

// Where x starts inside the padded output, and the output's shape.
struct Placement {
  std::vector<std::int64_t> start;
  ir::Shape padded;
};

Expected<Placement> placement(const KernelContext& ctx, const NdArray& x) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::int64_t> pads, attr(ir::get_int_list(ctx.attrs, "pads"), "pad"));
  const std::size_t rank = x.shape.rank();
  if (pads.size() % 2 != 0 || pads.size() / 2 > rank)
    return failf("pad: 'pads' has {} values for x {}", pads.size(), x.shape.to_string());
  Placement p{std::vector<std::int64_t>(rank, 0), x.shape};
  for (std::size_t pair = 0; pair < pads.size() / 2; ++pair) {
    const std::size_t axis = rank - 1 - pair;
    const std::int64_t before = pads[2 * pair], after = pads[2 * pair + 1];
    if (before < 0 || after < 0) return failf("pad: negative padding on dim {}", axis);
    p.start[axis] = before;
    p.padded.dims[axis] += before + after;
  }
  return p;
}

Kernel pad_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "pad"));
    LOOM_ASSIGN_OR_RETURN(Placement p, placement(ctx, in[0]));
    LOOM_ASSIGN_OR_RETURN(double value, attr(ir::get_real_or(ctx.attrs, "value", 0.0), "pad"));
    NdArray y(p.padded, value);
    const std::vector<std::int64_t> y_strides = strides_of(y.shape);
    std::vector<std::int64_t> target(p.start.size());
    std::size_t source = 0;
    for_each_index(in[0].shape, [&](std::span<const std::int64_t> index) {
      for (std::size_t d = 0; d < index.size(); ++d) target[d] = index[d] + p.start[d];
      y.data[static_cast<std::size_t>(flat_offset(target, y_strides))] = in[0].data[source++];
    });
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_RETURN_IF_ERROR(expect_arity(in, 1, 1, "pad"));
    LOOM_ASSIGN_OR_RETURN(Placement p, placement(ctx, in[0]));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, p.padded, "pad"));
    return Arrays{slice_box(*g, p.start, in[0].shape)};
  };
  return k;
}

}  // namespace

void register_padding_kernels(KernelRegistry& r) { r.add("pad", pad_kernel()); }

}  // namespace loom::verify
