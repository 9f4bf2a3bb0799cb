// The roofline next to measured times, per distinct key and per op class.
#include "loom/cost/roofline_check.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace loom::cost {

std::vector<RooflineComparison> compare_roofline(const plan::Plan& plan, const ir::OpCatalog& catalog,
                                                 const ComputeModel& roofline, const ProfileDb& measured) {
  std::map<ProfileKey, RooflineComparison> rows;
  for (plan::SubOpId id : plan.live_sub_ops()) {
    ProfileKey key = roofline.profile_key(id);
    if (rows.contains(key)) continue;
    const std::optional<double> seconds = measured.find(key);
    if (!seconds) continue;
    const ir::OpDef* def = catalog.find(plan.op_of(id).type);
    RooflineComparison row{.key = key,
                           .op_class = def != nullptr ? def->op_class : ir::OpClass::elementwise,
                           .roofline = roofline.estimate(id),
                           .measured_seconds = *seconds};
    rows.emplace(std::move(key), std::move(row));
  }
  std::vector<RooflineComparison> out;
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  return out;
}

std::vector<ClassAccuracy> accuracy_by_class(std::span<const RooflineComparison> rows) {
  std::map<ir::OpClass, std::vector<const RooflineComparison*>> by_class;
  for (const RooflineComparison& row : rows)
    if (row.roofline.seconds > 0 && row.measured_seconds > 0) by_class[row.op_class].push_back(&row);
  std::vector<ClassAccuracy> out;
  for (auto& [op_class, members] : by_class) {
    std::vector<double> ratios;
    for (const RooflineComparison* row : members) ratios.push_back(row->ratio());
    std::sort(ratios.begin(), ratios.end());
    const std::size_t n = ratios.size();
    const double median = n % 2 == 1 ? ratios[n / 2] : std::sqrt(ratios[n / 2 - 1] * ratios[n / 2]);
    const auto worst = std::max_element(members.begin(), members.end(), [](const auto* a, const auto* b) {
      return std::abs(std::log(a->ratio())) < std::abs(std::log(b->ratio()));
    });
    out.push_back({.op_class = op_class, .keys = n, .median_ratio = median, .worst_ratio = (*worst)->ratio(),
                   .worst = (*worst)->key});
  }
  return out;
}

}  // namespace loom::cost
