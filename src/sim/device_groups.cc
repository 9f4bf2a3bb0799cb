#include "loom/sim/device_groups.h"

#include <map>

#include <fmt/format.h>

namespace loom::sim {

std::vector<DeviceGroup> device_groups(const SimResult& result) {
  std::map<int, std::vector<int>> by_representative;
  for (std::size_t d = 0; d < result.devices.size(); ++d) {
    const int r = d < result.represented_by.size() ? result.represented_by[d] : static_cast<int>(d);
    by_representative[r].push_back(static_cast<int>(d));
  }
  std::vector<DeviceGroup> groups;
  for (auto& [r, devices] : by_representative) groups.push_back({r, std::move(devices)});
  return groups;
}

std::string device_ranges(const std::vector<int>& devices, std::size_t max_runs) {
  std::string text;
  std::size_t runs = 0;
  for (std::size_t i = 0; i < devices.size();) {
    std::size_t j = i;
    while (j + 1 < devices.size() && devices[j + 1] == devices[j] + 1) ++j;
    if (runs == max_runs) return text + ", ...";
    if (!text.empty()) text += ", ";
    text += j == i ? fmt::format("{}", devices[i]) : fmt::format("{}-{}", devices[i], devices[j]);
    ++runs;
    i = j + 1;
  }
  return text;
}

}  // namespace loom::sim
