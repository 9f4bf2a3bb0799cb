#include "loom/ops/reshape_signature.h"

#include <algorithm>

#include "loom/core/checked_math.h"
#include "loom/core/strings.h"
#include "loom/ops/signature_helpers.h"

namespace loom::ops {

Expected<ir::Shape> resolve_target_shape(const ir::Shape& from, std::span<const std::int64_t> target,
                                         std::string_view op) {
  ir::Shape to(std::vector<std::int64_t>(target.begin(), target.end()));
  const auto inferred = std::count(target.begin(), target.end(), std::int64_t{-1});
  if (inferred > 1) return fail(fmt::format("{}: target shape {} has more than one -1", op, to.to_string()));
  std::int64_t known = 1;
  for (std::int64_t d : target) {
    if (d == -1) continue;
    if (d <= 0) return fail(fmt::format("{}: target shape {} has size {}", op, to.to_string(), d), "sizes must be positive or a single -1");
    const auto product = checked_mul(known, d);
    if (!product || *product > ir::kMaxElements)
      return fail(fmt::format("{}: target shape {} has more than 2^48 elements", op, to.to_string()));
    known = *product;
  }
  if (inferred == 1) {
    if (from.numel() % known != 0)
      return fail(fmt::format("{}: cannot reshape {} ({} elements) to {}: {} is not a multiple of {}", op,
                              from.to_string(), from.numel(), to.to_string(), from.numel(), known));
    *std::find(to.dims.begin(), to.dims.end(), std::int64_t{-1}) = from.numel() / known;
  }
  return to;
}

Expected<ir::OpSignature> reshape_signature(const ir::Shape& from, const ir::Shape& to, std::string_view op) {
  // Checked first: the grouping below multiplies sizes and relies on equal, bounded totals.
  for (const ir::Shape* s : {&from, &to})
    if (!s->within_limits())
      return fail(fmt::format("{}: shape {} has a non-positive size or more than 2^48 elements", op, s->to_string()));
  if (from.numel() != to.numel())
    return fail(fmt::format("{}: cannot reshape {} ({} elements) to {} ({} elements)", op, from.to_string(),
                            from.numel(), to.to_string(), to.numel()),
                "the element counts must be equal");

  // Size-1 dims stay the number 1, except a leading run both sides keep (a batch of one is still the
  // batch: the planner follows it through the reshape); the others are grouped into runs of equal
  // product.
  TensorDims in(from.rank(), "1"), out(to.rank(), "1");
  ir::OpSignature signature;
  std::size_t names = 0;
  const auto fresh = [&names] { return letter_name(names++); };
  std::size_t kept = 0;
  while (kept < from.rank() && kept < to.rank() && from[kept] == 1 && to[kept] == 1) {
    in[kept] = out[kept] = fresh();
    ++kept;
  }
  std::vector<std::size_t> in_axes, out_axes;
  for (std::size_t k = kept; k < from.rank(); ++k)
    if (from[k] != 1) in_axes.push_back(k);
  for (std::size_t k = kept; k < to.rank(); ++k)
    if (to[k] != 1) out_axes.push_back(k);

  std::size_t i = 0, j = 0;
  while (i < in_axes.size()) {
    std::size_t i_end = i + 1, j_end = j + 1;
    std::int64_t in_product = from[in_axes[i]], out_product = to[out_axes[j]];
    while (in_product != out_product) {
      if (in_product < out_product)
        in_product *= from[in_axes[i_end++]];
      else
        out_product *= to[out_axes[j_end++]];
    }
    const std::size_t in_count = i_end - i, out_count = j_end - j;
    if (in_count == 1 && out_count == 1) {
      in[in_axes[i]] = out[out_axes[j]] = fresh();
    } else if (out_count == 1) {  // merge: the output dim is the input dims, outermost first
      std::vector<std::string> atoms;
      for (std::size_t k = i; k < i_end; ++k) atoms.push_back(in[in_axes[k]] = fresh());
      out[out_axes[j]] = "(" + join(atoms, " ") + ")";
    } else if (in_count == 1) {  // split: all factors but the outermost are given
      std::vector<std::string> atoms;
      for (std::size_t k = j; k < j_end; ++k) {
        atoms.push_back(out[out_axes[k]] = fresh());
        if (k > j) signature.sizes[atoms.back()] = to[out_axes[k]];
      }
      in[in_axes[i]] = "(" + join(atoms, " ") + ")";
    } else {  // no common outer factor: frozen on both sides, output sizes given
      for (std::size_t k = i; k < i_end; ++k) in[in_axes[k]] = fresh() + "^";
      for (std::size_t k = j; k < j_end; ++k) {
        const std::string name = fresh();
        signature.sizes[name] = to[out_axes[k]];
        out[out_axes[k]] = name + "^";
      }
    }
    i = i_end;
    j = j_end;
  }
  signature.annotation = annotation_text({in}, {out});
  return signature;
}

}  // namespace loom::ops
