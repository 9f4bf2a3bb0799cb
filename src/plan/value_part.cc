#include "loom/plan/value_part.h"

#include <fmt/format.h>

namespace loom::plan {

// 128-bit products keep rational comparisons exact; __extension__ keeps -Wpedantic quiet.
__extension__ typedef __int128 Int128;

std::string ValuePart::to_string() const {
  if (is_whole()) return "1/1";
  return fmt::format("{} of {}", index, count);
}

ValuePart nested(ValuePart outer, ValuePart inner) {
  return {outer.index * inner.count + inner.index, outer.count * inner.count};
}

namespace {
// a/b < c/d for positive denominators.
bool less(Int128 a, Int128 b, Int128 c, Int128 d) { return a * d < c * b; }
}  // namespace

bool value_overlaps(ValuePart a, ValuePart b) {
  // [a0, a1) and [b0, b1) overlap iff a0 < b1 and b0 < a1.
  return less(a.index, a.count, b.index + 1, b.count) && less(b.index, b.count, a.index + 1, a.count);
}

bool value_contains(ValuePart outer, ValuePart inner) {
  return !less(inner.index, inner.count, outer.index, outer.count) &&
         !less(outer.index + 1, outer.count, inner.index + 1, inner.count);
}

}  // namespace loom::plan
