// D→R all-gather: k neighbouring chunks are gathered by each of their k holders.
#include "loom/comm/factor_shift.h"
#include "loom/comm/intra_rules.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> all_gather_d_to_r(const Layout& from, const TensorSpec& tensor, std::size_t dim, std::int64_t k) {
  constexpr std::string_view kRule = "D->R all-gather";
  LOOM_RETURN_IF_ERROR(detail::require_dim(kRule, from, dim));
  LOOM_RETURN_IF_ERROR(detail::require_factor(kRule, fmt::format("D[{}]", dim), from.d[dim], k));
  FactorShift shift = shift_factor(from, axis_of_dim(dim), kAxisR, k);
  const std::int64_t output = bytes_per_device(from, tensor) * k;  // S of the formula: the gathered size
  Step step{std::string(kRule), Primitive::all_gather, std::move(shift.groups), output, (k - 1) * output / k, {}};
  return Transition{std::move(shift.after), std::move(step)};
}

}  // namespace loom::comm
