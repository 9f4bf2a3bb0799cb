// V→R all-reduce: k value parts of a chunk sum into k replicas of it.
#include "loom/comm/factor_shift.h"
#include "loom/comm/intra_rules.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> all_reduce_v_to_r(const Layout& from, const TensorSpec& tensor, std::int64_t k) {
  constexpr std::string_view kRule = "V->R all-reduce";
  LOOM_RETURN_IF_ERROR(detail::require_factor(kRule, "V", from.v, k));
  FactorShift shift = shift_factor(from, kAxisV, kAxisR, k);
  const std::int64_t s = bytes_per_device(from, tensor);
  Step step{std::string(kRule), Primitive::all_reduce, std::move(shift.groups), s, 2 * (k - 1) * s / k, {}};
  return Transition{std::move(shift.after), std::move(step)};
}

}  // namespace loom::comm
