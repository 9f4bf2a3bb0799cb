// Precondition checks shared by the rule files (private to src/comm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loom/comm/layout.h"

namespace loom::comm::detail {

inline Expected<void> require_factor(std::string_view rule, std::string_view axis, std::int64_t size, std::int64_t k) {
  if (k < 2 || size % k != 0)
    return fail(fmt::format("{}: factor {} does not divide {}({}) (or is below 2)", rule, k, axis, size));
  return {};
}

inline Expected<void> require_dim(std::string_view rule, const Layout& from, std::size_t dim) {
  if (dim >= from.d.size()) return fail(fmt::format("{}: dimension {} is beyond the tensor's rank {}", rule, dim, from.d.size()));
  return {};
}

// shape[dim] must split into d[dim]·k even chunks.
inline Expected<void> require_splittable(std::string_view rule, const Layout& from, const TensorSpec& tensor,
                                         std::size_t dim, std::int64_t k) {
  LOOM_RETURN_IF_ERROR(require_dim(rule, from, dim));
  if (k < 2 || tensor.shape[dim] % (from.d[dim] * k) != 0)
    return fail(fmt::format("{}: dimension {} of size {} does not split into {}·{} chunks", rule, dim, tensor.shape[dim],
                            from.d[dim], k));
  return {};
}

}  // namespace loom::comm::detail
