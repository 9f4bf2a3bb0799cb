// Devices grouped by the simulated device whose times they share (SimResult::represented_by): one group
// per device class when the simulation ran one program per class, one group per device otherwise. The
// reports draw one timeline lane per group.
#pragma once

#include <string>
#include <vector>

#include "loom/sim/simulator.h"

namespace loom::sim {

struct DeviceGroup {
  int representative = 0;    // the simulated device
  std::vector<int> devices;  // ascending, the representative first
};

// By representative ascending. A result without represented_by (hand-made) gives one group per device.
std::vector<DeviceGroup> device_groups(const SimResult& result);

// "0-3, 8, 10-11": ascending device ids with runs collapsed; at most `max_runs` runs, then ", ...".
std::string device_ranges(const std::vector<int>& devices, std::size_t max_runs = 6);

}  // namespace loom::sim
