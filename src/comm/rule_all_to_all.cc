// D(i)→D(j) all-to-all: k members trade sub-chunks so the split moves from dimension i to dimension j.
#include "loom/comm/factor_shift.h"
#include "loom/comm/intra_rules.h"
#include "rule_checks.h"

namespace loom::comm {

Expected<Transition> all_to_all_d_to_d(const Layout& from, const TensorSpec& tensor, std::size_t from_dim,
                                       std::size_t to_dim, std::int64_t k) {
  constexpr std::string_view kRule = "D->D all-to-all";
  LOOM_RETURN_IF_ERROR(detail::require_dim(kRule, from, from_dim));
  if (from_dim == to_dim) return fail(fmt::format("{}: source and target dimension are both {}", kRule, from_dim));
  LOOM_RETURN_IF_ERROR(detail::require_factor(kRule, fmt::format("D[{}]", from_dim), from.d[from_dim], k));
  LOOM_RETURN_IF_ERROR(detail::require_splittable(kRule, from, tensor, to_dim, k));
  FactorShift shift = shift_factor(from, axis_of_dim(from_dim), axis_of_dim(to_dim), k);
  const std::int64_t s = bytes_per_device(from, tensor);
  Step step{std::string(kRule), Primitive::all_to_all, std::move(shift.groups), s, (k - 1) * s / k, {}};
  return Transition{std::move(shift.after), std::move(step)};
}

}  // namespace loom::comm
