// V→D reduce-scatter: k value parts of a chunk sum into k sub-chunks, one per member.
#include "loom/comm/factor_shift.h"
#include "loom/comm/intra_rules.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> reduce_scatter_v_to_d(const Layout& from, const TensorSpec& tensor, std::size_t dim,
                                           std::int64_t k) {
  constexpr std::string_view kRule = "V->D reduce-scatter";
  LOOM_RETURN_IF_ERROR(detail::require_factor(kRule, "V", from.v, k));
  LOOM_RETURN_IF_ERROR(detail::require_splittable(kRule, from, tensor, dim, k));
  FactorShift shift = shift_factor(from, kAxisV, axis_of_dim(dim), k);
  const std::int64_t s = bytes_per_device(from, tensor);
  Step step{std::string(kRule), Primitive::reduce_scatter, std::move(shift.groups), s, (k - 1) * s / k, {}};
  return Transition{std::move(shift.after), std::move(step)};
}

}  // namespace loom::comm
