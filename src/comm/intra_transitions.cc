// Enumerates the intra-group rules over every admissible factor and dimension.
#include "loom/comm/intra_rules.h"

namespace loom::comm {
namespace {

std::vector<std::int64_t> divisors_above_one(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t k = 2; k <= n; ++k)
    if (n % k == 0) out.push_back(k);
  return out;
}

void keep(std::vector<Transition>& out, Expected<Transition> t) {
  if (t) out.push_back(std::move(*t));
}

}  // namespace

std::vector<Transition> intra_transitions(const Layout& from, const TensorSpec& tensor) {
  std::vector<Transition> out;
  const std::size_t rank = from.d.size();
  for (std::int64_t k : divisors_above_one(from.v)) {
    keep(out, all_reduce_v_to_r(from, tensor, k));
    for (std::size_t dim = 0; dim < rank; ++dim) keep(out, reduce_scatter_v_to_d(from, tensor, dim, k));
  }
  for (std::size_t dim = 0; dim < rank; ++dim)
    for (std::int64_t k : divisors_above_one(from.d[dim])) {
      keep(out, all_gather_d_to_r(from, tensor, dim, k));
      for (std::size_t to = 0; to < rank; ++to)
        if (to != dim) keep(out, all_to_all_d_to_d(from, tensor, dim, to, k));
    }
  for (std::int64_t k : divisors_above_one(from.r)) {
    for (std::size_t dim = 0; dim < rank; ++dim) keep(out, local_chunk_r_to_d(from, tensor, dim, k));
    keep(out, local_value_split_r_to_v(from, tensor, k));
  }
  return out;
}

}  // namespace loom::comm
