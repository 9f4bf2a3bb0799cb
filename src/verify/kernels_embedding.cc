// Embedding lookup: out[..., :] = weight[id, :] for ids of any rank (integer-valued doubles).
// Under a vocabulary split the weight is a shard whose first row is input_offsets[1][0]: ids outside
// the shard give zero rows (and no gradient), so the shards' outputs sum to the full lookup.
#include <cmath>
#include <optional>

#include "kernel_support.h"
#include "loom/verify/kernel_families.h"

namespace loom::verify {
namespace {

using namespace detail;

struct Lookup {
  std::int64_t first_row = 0;  // global id of the shard's row 0
  std::int64_t rows = 0;       // rows in the shard
  std::int64_t hidden = 0;
  std::optional<std::int64_t> padding;  // global id whose row gets no gradient
};

Expected<Lookup> lookup(const KernelContext& ctx, Inputs in) {
  LOOM_RETURN_IF_ERROR(expect_arity(in, 2, 2, "embedding"));
  if (in[1].shape.rank() != 2) return failf("embedding: weight must be [v, h], got {}", in[1].shape.to_string());
  Lookup l{0, in[1].shape[0], in[1].shape[1], std::nullopt};
  const std::span<const std::int64_t> offset = input_offset(ctx, 1);
  if (!offset.empty()) l.first_row = offset[0];
  const std::int64_t vocab = full_input_shape(ctx, in, 1)[0];
  if (ctx.attrs.contains("padding_idx")) {
    LOOM_ASSIGN_OR_RETURN(std::int64_t padding, attr(ir::get_int(ctx.attrs, "padding_idx"), "embedding"));
    if (padding < -vocab || padding >= vocab) return failf("embedding: padding_idx {} is outside a vocabulary of {}", padding, vocab);
    l.padding = padding < 0 ? padding + vocab : padding;
  }
  for (double id : in[0].data)
    if (id != std::floor(id) || id < 0 || id >= static_cast<double>(vocab))
      return failf("embedding: id {} is not an integer in [0, {})", id, vocab);
  return l;
}

ir::Shape output_shape(const NdArray& ids, std::int64_t hidden) {
  ir::Shape shape = ids.shape;
  shape.dims.push_back(hidden);
  return shape;
}

// The shard row of an id, or -1 when another shard holds it.
std::int64_t local_row(const Lookup& l, double id) {
  const std::int64_t row = static_cast<std::int64_t>(id) - l.first_row;
  return row >= 0 && row < l.rows ? row : -1;
}

Kernel embedding_kernel() {
  Kernel k;
  k.forward = [](const KernelContext& ctx, Inputs in) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Lookup l, lookup(ctx, in));
    NdArray y(output_shape(in[0], l.hidden));
    for (std::size_t t = 0; t < in[0].data.size(); ++t) {
      const std::int64_t row = local_row(l, in[0].data[t]);
      if (row < 0) continue;
      for (std::int64_t h = 0; h < l.hidden; ++h)
        y.data[t * static_cast<std::size_t>(l.hidden) + static_cast<std::size_t>(h)] =
            in[1].data[static_cast<std::size_t>(row * l.hidden + h)];
    }
    return Arrays{std::move(y)};
  };
  k.backward = [](const KernelContext& ctx, Inputs in, Inputs, Inputs grads) -> Expected<Arrays> {
    LOOM_ASSIGN_OR_RETURN(Lookup l, lookup(ctx, in));
    LOOM_ASSIGN_OR_RETURN(const NdArray* g, single_grad(grads, output_shape(in[0], l.hidden), "embedding"));
    NdArray dw(in[1].shape);
    for (std::size_t t = 0; t < in[0].data.size(); ++t) {
      const std::int64_t row = local_row(l, in[0].data[t]);
      if (row < 0 || (l.padding && static_cast<std::int64_t>(in[0].data[t]) == *l.padding)) continue;
      for (std::int64_t h = 0; h < l.hidden; ++h)
        dw.data[static_cast<std::size_t>(row * l.hidden + h)] += g->data[t * static_cast<std::size_t>(l.hidden) + static_cast<std::size_t>(h)];
    }
    return Arrays{NdArray{}, std::move(dw)};
  };
  return k;
}

}  // namespace

void register_embedding_kernels(KernelRegistry& r) { r.add("embedding", embedding_kernel()); }

}  // namespace loom::verify
