// R→V local value split: of k replicas one keeps the value and the others hold zeros, so the k sum
// to the tensor; nothing moves.
#include "loom/comm/factor_shift.h"
#include "loom/comm/intra_rules.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> local_value_split_r_to_v(const Layout& from, const TensorSpec& tensor, std::int64_t k) {
  constexpr std::string_view kRule = "R->V local value split";
  (void)tensor;
  LOOM_RETURN_IF_ERROR(detail::require_factor(kRule, "R", from.r, k));
  FactorShift shift = shift_factor(from, kAxisR, kAxisV, k);
  Step step{std::string(kRule), Primitive::local_value_split, std::move(shift.groups), 0, 0, {}};
  return Transition{std::move(shift.after), std::move(step)};
}

}  // namespace loom::comm
