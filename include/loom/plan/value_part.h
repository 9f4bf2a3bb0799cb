// A value part: the tensor equals the sum of its `count` parts and this is part `index`
// (DESIGN.md: "a value part k of n"). Seen as the interval [index/count, (index+1)/count) of the
// unit interval, nested splits compose (part j of m of part k of n is part k·m+j of n·m) and a set
// of parts sums to the whole exactly when its intervals tile [0, 1).
#pragma once

#include <cstdint>
#include <string>

namespace loom::plan {

struct ValuePart {
  std::int64_t index = 0;
  std::int64_t count = 1;

  static ValuePart whole() { return {0, 1}; }
  bool is_whole() const { return count == 1; }
  std::string to_string() const;  // "1/1" for whole, else "k of n"
  bool operator==(const ValuePart&) const = default;
};

// Part `inner` of the tensor that `outer` already is.
ValuePart nested(ValuePart outer, ValuePart inner);

// Interval comparisons, exact in integers: a = [a.index/a.count, ...).
bool value_overlaps(ValuePart a, ValuePart b);
bool value_contains(ValuePart outer, ValuePart inner);

}  // namespace loom::plan
