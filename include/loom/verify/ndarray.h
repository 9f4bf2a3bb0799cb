// A dense float64 array in row-major order: the value type of the reference interpreter, which
// checks plans on small shapes where speed does not matter and rounding must not hide bugs.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/ir/shape.h"

namespace loom::verify {

struct NdArray {
  ir::Shape shape;
  std::vector<double> data;  // shape.numel() values, row-major

  NdArray() = default;
  explicit NdArray(ir::Shape s, double fill = 0.0) : shape(std::move(s)), data(static_cast<std::size_t>(shape.numel()), fill) {}
  NdArray(ir::Shape s, std::vector<double> values) : shape(std::move(s)), data(std::move(values)) {}

  std::int64_t numel() const { return shape.numel(); }
  bool empty() const { return data.empty() && shape.rank() > 0; }
  double& operator[](std::size_t i) { return data[i]; }
  double operator[](std::size_t i) const { return data[i]; }
  bool operator==(const NdArray&) const = default;
};

// Row-major strides of a shape (elements, not bytes).
std::vector<std::int64_t> strides_of(const ir::Shape& shape);

}  // namespace loom::verify
