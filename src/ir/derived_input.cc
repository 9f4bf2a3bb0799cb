#include "loom/ir/derived_input.h"

#include <fmt/format.h>

namespace loom::ir {

Expected<void> check_derived_inputs(const Graph& graph) {
  for (const FullTensor& t : graph.tensors) {
    if (!t.derived) continue;
    const DerivedInput& d = *t.derived;
    const std::string label = fmt::format("tensor '{}' (%{}): field \"derived\"", t.name, t.id.value);
    if (t.role != TensorRole::input || t.shape.rank() != 0 || !is_floating(t.dtype))
      return fail(fmt::format("{} is set on a {} {} of shape {}", label, name(t.dtype), name(t.role), t.shape.to_string()),
                  "only a scalar floating input (a loss's counted tokens) is derived");
    if (!d.from.valid() || d.from.index() >= graph.tensors.size())
      return fail(fmt::format("{}: 'from' names tensor #{}, out of range", label, d.from.value),
                  "name the labels input it counts");
    const FullTensor& from = graph.tensor(d.from);
    if (from.role != TensorRole::input || is_floating(from.dtype) || from.derived)
      return fail(fmt::format("{}: 'from' is '{}', a {} {}{}", label, from.name, name(from.dtype), name(from.role),
                              from.derived ? " that is derived itself" : ""),
                  "'from' must be an integer input given with the batch (the labels)");
    if (d.trim.empty()) continue;
    if (d.trim.size() != from.shape.rank())
      return fail(fmt::format("{}: 'trim' has {} pairs for '{}' of shape {}", label, d.trim.size(), from.name,
                              from.shape.to_string()),
                  "write one [front, back] pair per dim of 'from'");
    for (std::size_t k = 0; k < d.trim.size(); ++k) {
      const auto [front, back] = d.trim[k];
      if (front < 0 || back < 0 || front + back >= from.shape[k])
        return fail(fmt::format("{}: 'trim' [{}, {}] of dim {} leaves nothing of size {}", label, front, back, k,
                                from.shape[k]),
                    "trims are non-negative and leave at least one element");
    }
  }
  return {};
}

double counted_tokens(const DerivedInput& derived, const Shape& from_shape, std::span<const double> labels) {
  const std::size_t rank = from_shape.rank();
  double count = 0;
  std::vector<std::int64_t> index(rank, 0);  // row-major odometer over from_shape
  for (double label : labels) {
    bool inside = true;
    for (std::size_t k = 0; k < derived.trim.size() && inside; ++k)
      inside = index[k] >= derived.trim[k][0] && index[k] < from_shape[k] - derived.trim[k][1];
    if (inside && label != static_cast<double>(derived.ignore_index)) count += 1;
    for (std::size_t k = rank; k-- > 0;) {
      if (++index[k] < from_shape[k]) break;
      index[k] = 0;
    }
  }
  return count;
}

}  // namespace loom::ir
