// Overflow-checked integer arithmetic for sizes that come from user input (shapes, attributes):
// a wrapped product must become an error, never a wrong shape.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace loom {

inline std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

inline std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// Product of positive factors, nullopt when it exceeds `limit` (or any factor is not positive).
inline std::optional<std::int64_t> checked_product(std::span<const std::int64_t> factors, std::int64_t limit) {
  std::int64_t product = 1;
  for (std::int64_t f : factors) {
    if (f <= 0) return std::nullopt;
    auto next = checked_mul(product, f);
    if (!next || *next > limit) return std::nullopt;
    product = *next;
  }
  return product;
}

}  // namespace loom
