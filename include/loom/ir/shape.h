// The shape of a FullTensor: sizes per dimension; rank 0 is a scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::ir {

// The largest tensor Loom accepts (elements): far above any real model, low enough that element and
// byte counts (x 8 bytes) and sums of a few thousand of them stay exact in int64 and double.
inline constexpr std::int64_t kMaxElements = std::int64_t{1} << 48;

struct Shape {
  std::vector<std::int64_t> dims;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> sizes) : dims(sizes) {}
  explicit Shape(std::vector<std::int64_t> sizes) : dims(std::move(sizes)) {}

  std::size_t rank() const { return dims.size(); }
  std::int64_t numel() const;  // callers must hold a valid shape (see within_limits)
  // Every size positive and the element count at most kMaxElements.
  bool within_limits() const;
  std::int64_t operator[](std::size_t i) const { return dims[i]; }
  std::string to_string() const;  // "[8, 2048, 768]"; "[]" for a scalar
  bool operator==(const Shape&) const = default;
};

}  // namespace loom::ir
