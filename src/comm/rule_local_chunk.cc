// R→D local chunk: k replicas each keep a different sub-chunk; nothing moves.
#include "loom/comm/factor_shift.h"
#include "loom/comm/intra_rules.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> local_chunk_r_to_d(const Layout& from, const TensorSpec& tensor, std::size_t dim, std::int64_t k) {
  constexpr std::string_view kRule = "R->D local chunk";
  LOOM_RETURN_IF_ERROR(detail::require_factor(kRule, "R", from.r, k));
  LOOM_RETURN_IF_ERROR(detail::require_splittable(kRule, from, tensor, dim, k));
  FactorShift shift = shift_factor(from, kAxisR, axis_of_dim(dim), k);
  Step step{std::string(kRule), Primitive::local_chunk, std::move(shift.groups), 0, 0, {}};
  return Transition{std::move(shift.after), std::move(step)};
}

}  // namespace loom::comm
