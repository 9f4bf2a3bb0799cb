// A strided set of indices along one dimension, as Python's range(start, stop, step):
// {start, start + step, ...} below stop. Step 1 is a contiguous slice; a larger step is Rhino's
// strided sharding (e.g. the rows of one head in an interleaved qkv weight).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>

namespace loom::plan {

struct IndexRange {
  std::int64_t start = 0;
  std::int64_t stop = 0;  // exclusive
  std::int64_t step = 1;  // >= 1

  static IndexRange all(std::int64_t size) { return {0, size, 1}; }

  bool empty() const { return start >= stop; }
  std::int64_t size() const { return empty() ? 0 : (stop - start + step - 1) / step; }
  std::int64_t last() const { return start + (size() - 1) * step; }  // only when !empty()
  bool contains(std::int64_t index) const {
    return index >= start && index < stop && (index - start) % step == 0;
  }
  // The same set with stop tightened to last() + 1, so equal sets compare equal.
  IndexRange normalized() const;
  std::string to_string() const;  // "0:8", "1:8:2"

  bool operator==(const IndexRange&) const = default;
  auto operator<=>(const IndexRange&) const = default;  // lexicographic (start, stop, step): a map key
};

// The indices in both ranges: again a strided range (step = lcm of the steps), found with the
// Chinese remainder theorem; empty when the residues are incompatible.
IndexRange intersect(const IndexRange& a, const IndexRange& b);

// Every index of `inner` is in `outer`.
bool contains(const IndexRange& outer, const IndexRange& inner);

// Part `index` of `parts` of `range`: even contiguous blocks, or with `strided` every parts-th
// element starting at offset index. Requires range.size() % parts == 0.
IndexRange split_range(const IndexRange& range, std::int64_t parts, std::int64_t index, bool strided);

}  // namespace loom::plan
