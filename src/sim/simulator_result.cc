// The Simulator's answer (simulator_core.h): its events, sorted, and each device's compute,
// communication, exposed communication, host and idle time, represented devices copying their representative.
#include <algorithm>
#include <tuple>

#include "simulator_core.h"

namespace loom::sim::detail {

SimResult Simulator::result() {
  SimResult out;
  std::ranges::sort(events_, [](const Event& x, const Event& y) {
    return std::tie(x.device, x.stream, x.start, x.instruction) < std::tie(y.device, y.stream, y.start, y.instruction);
  });
  for (const Event& e : events_) out.step_time = std::max(out.step_time, e.end);
  out.devices.resize(static_cast<std::size_t>(exec_.num_devices));
  // Per device, the two streams' intervals are each disjoint and sorted: sum them and their overlap.
  std::size_t i = 0;
  for (const Slot& slot : slots_) {
    const int d = slot.device;
    out.simulated_devices.push_back(d);
    std::vector<std::pair<double, double>> compute, comm;
    DeviceTime& t = out.devices[static_cast<std::size_t>(d)];
    for (; i < events_.size() && events_[i].device == d; ++i) {
      if (events_[i].stream == Stream::host) t.host += events_[i].end - events_[i].start;
      else (events_[i].stream == Stream::compute ? compute : comm).emplace_back(events_[i].start, events_[i].end);
    }
    // Starts run beside the communication stream's own instructions: their union is its busy time.
    std::ranges::sort(comm);
    std::vector<std::pair<double, double>> merged;
    for (const auto& [s, e] : comm) {
      if (!merged.empty() && s < merged.back().second) merged.back().second = std::max(merged.back().second, e);
      else merged.emplace_back(s, e);
    }
    comm = std::move(merged);
    for (const auto& [s, e] : compute) t.compute += e - s;
    for (const auto& [s, e] : comm) t.communication += e - s;
    double overlap = 0;
    for (std::size_t x = 0, y = 0; x < compute.size() && y < comm.size();) {
      overlap += std::max(0.0, std::min(compute[x].second, comm[y].second) - std::max(compute[x].first, comm[y].first));
      if (compute[x].second < comm[y].second) ++x; else ++y;
    }
    t.exposed_communication = t.communication - overlap;
    t.idle = std::max(0.0, out.step_time - t.compute - t.exposed_communication - t.host);
  }
  for (int d = 0; d < exec_.num_devices; ++d) {
    const int r = represented_by_[static_cast<std::size_t>(d)];
    if (r != d) out.devices[static_cast<std::size_t>(d)] = out.devices[static_cast<std::size_t>(r)];
  }
  out.represented_by = std::move(represented_by_);
  out.events = std::move(events_);
  return out;
}

}  // namespace loom::sim::detail
