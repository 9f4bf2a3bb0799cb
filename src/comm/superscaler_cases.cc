#include "loom/comm/superscaler_cases.h"

#include <numeric>
#include <utility>

namespace loom::comm {
namespace {

std::vector<int> devices_from(int first, int count) {
  std::vector<int> d(static_cast<std::size_t>(count));
  std::iota(d.begin(), d.end(), first);
  return d;
}

// kind 'R', 'V' or 'D' with factor n on `devices` (1-D tensor).
Layout one_factor(char kind, std::int64_t n, std::vector<int> devices) {
  Layout l{1, 1, {1}, std::move(devices)};
  if (kind == 'R') l.r = n;
  if (kind == 'V') l.v = n;
  if (kind == 'D') l.d[0] = n;
  return l;
}

}  // namespace

std::vector<NamedRequest> superscaler_table3_cases(const TensorSpec& tensor, int gpus_per_server) {
  const std::pair<int, int> configs[] = {{8, 8}, {8, 4}, {4, 8}};
  std::vector<NamedRequest> cases;
  for (char producer : {'R', 'V', 'D'})
    for (char consumer : {'R', 'D'})
      for (auto [i, j] : configs)
        cases.push_back({fmt::format("{}({})->{}({})", producer, i, consumer, j),
                         {tensor, one_factor(producer, i, devices_from(0, i)),
                          one_factor(consumer, j, devices_from(gpus_per_server, j))}});
  return cases;
}

}  // namespace loom::comm
