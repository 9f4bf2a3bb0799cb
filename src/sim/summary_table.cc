#include "loom/sim/summary_table.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/cost/memory_model.h"
#include "loom/sim/device_groups.h"

namespace loom::sim {
namespace {

std::string percent(double part, double whole) {
  return fmt::format("{:5.1f}%", whole > 0 ? 100 * part / whole : 0.0);
}

// What "simulated" says: how many devices ran, and why all of them when classes were given.
std::string simulated_line(const SimResult& sim) {
  const std::size_t devices = sim.devices.size(), simulated = sim.simulated_devices.size();
  if (simulated < devices) return fmt::format("{} of {} devices, one per device class", simulated, devices);
  if (!sim.symmetry_fallback.empty())
    return fmt::format("all {} devices (the device classes are not a symmetry of the timing: {})", devices,
                       sim.symmetry_fallback);
  return fmt::format("all {} devices", devices);
}

// "7.86 PFLOP", "312.00 TFLOP/s": decimal units with a space before the unit.
std::string si(double value, std::string_view unit) {
  static constexpr std::array<std::string_view, 7> kPrefixes = {"", "K", "M", "G", "T", "P", "E"};
  std::size_t p = 0;
  while (std::fabs(value) >= 1000 && p + 1 < kPrefixes.size()) {
    value /= 1000;
    ++p;
  }
  return fmt::format("{:.2f} {}{}", value, kPrefixes[p], unit);
}

}  // namespace

std::string format_seconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude >= 1 || magnitude == 0) return fmt::format("{:.3f} s", seconds);
  if (magnitude >= 1e-3) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.1f} us", seconds * 1e6);
}

std::string summary_table(const ReportLabels& labels, const SimResult& sim, const StepMetrics& metrics,
                          std::size_t max_rows) {
  std::string out = fmt::format("{} on {}, policy {}\n", labels.model, labels.cluster, labels.policy);
  const auto line = [&](std::string_view key, const std::string& value) { out += fmt::format("  {:<15}{}\n", key, value); };
  line("step time", format_seconds(metrics.step_time));
  std::string throughput = fmt::format("{:.2f} samples/s", metrics.samples_per_second);
  if (metrics.tokens_per_second > 0) throughput += fmt::format(", {} tokens/s", human_count(metrics.tokens_per_second));
  line("throughput", throughput);
  line("MFU", fmt::format("{:.1f} % ({} a step; {} peak {} x {} GPUs)", 100 * metrics.mfu,
                          si(metrics.model_flops, "FLOP"), cluster::name(metrics.precision),
                          si(metrics.peak_flops, "FLOP/s"), metrics.devices));
  if (metrics.max_memory_device >= 0) {
    const DeviceMetrics& top = metrics.per_device[static_cast<std::size_t>(metrics.max_memory_device)];
    line("peak memory", fmt::format("{} on device {}, of {} ({})", cost::format_bytes(static_cast<double>(top.peak_bytes)),
                                    top.device, cost::format_bytes(static_cast<double>(metrics.memory_capacity)),
                                    top.at_peak.to_string()));
  }
  line("out of memory", metrics.out_of_memory()
                            ? fmt::format("yes: {} of {} devices", metrics.out_of_memory_devices, metrics.devices)
                            : std::string("no"));
  line("simulated", simulated_line(sim));
  out += fmt::format("\n  {:<16}{:<17}{:<17}{:<17}{}\n", "devices", "compute", "exposed comm", "idle", "peak memory");
  const std::vector<DeviceGroup> groups = device_groups(sim);
  for (std::size_t g = 0; g < groups.size() && g < max_rows; ++g) {
    const DeviceGroup& group = groups[g];
    if (static_cast<std::size_t>(group.representative) >= metrics.per_device.size()) continue;
    const DeviceMetrics& d = metrics.per_device[static_cast<std::size_t>(group.representative)];
    std::int64_t peak = 0;
    bool oom = false;
    for (int member : group.devices) {
      if (static_cast<std::size_t>(member) >= metrics.per_device.size()) continue;
      peak = std::max(peak, metrics.per_device[static_cast<std::size_t>(member)].peak_bytes);
      oom = oom || metrics.per_device[static_cast<std::size_t>(member)].out_of_memory;
    }
    const auto cell = [&](double seconds) {
      return fmt::format("{:>9} {}", format_seconds(seconds), percent(seconds, metrics.step_time));
    };
    out += fmt::format("  {:<16}{:<17}{:<17}{:<17}{}{}\n", device_ranges(group.devices, 3), cell(d.compute),
                       cell(d.exposed_communication), cell(d.idle), cost::format_bytes(static_cast<double>(peak)),
                       oom ? "  OUT OF MEMORY" : "");
  }
  if (groups.size() > max_rows) out += fmt::format("  ... and {} more groups of devices\n", groups.size() - max_rows);
  return out;
}

}  // namespace loom::sim
