#include "loom/ir/shape.h"

#include <fmt/format.h>

#include "loom/core/checked_math.h"
#include <fmt/ranges.h>

namespace loom::ir {

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  return n;
}

bool Shape::within_limits() const { return checked_product(dims, kMaxElements).has_value(); }

std::string Shape::to_string() const { return fmt::format("[{}]", fmt::join(dims, ", ")); }

}  // namespace loom::ir
