// The shape of a FullTensor: sizes per dimension; rank 0 is a scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::ir {

struct Shape {
  std::vector<std::int64_t> dims;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> sizes) : dims(sizes) {}
  explicit Shape(std::vector<std::int64_t> sizes) : dims(std::move(sizes)) {}

  std::size_t rank() const { return dims.size(); }
  std::int64_t numel() const;
  std::int64_t operator[](std::size_t i) const { return dims[i]; }
  std::string to_string() const;  // "[8, 2048, 768]"; "[]" for a scalar
  bool operator==(const Shape&) const = default;
};

}  // namespace loom::ir
