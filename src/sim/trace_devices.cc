#include "loom/sim/trace_devices.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/sim/device_groups.h"

namespace loom::sim {
namespace {

constexpr std::string_view kForms = "give classes, all, or device ids and ranges such as 0,5 or 0-3,8";

Expected<int> parse_device(std::string_view text) {
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < 0)
    return fail(fmt::format("'{}' is not a device id", text), std::string(kForms));
  return value;
}

// The simulated device whose times `device` has.
int source_of(const SimResult& result, int device) {
  const auto d = static_cast<std::size_t>(device);
  return d < result.represented_by.size() ? result.represented_by[d] : device;
}

bool has_classes(const exec::ExecPlan& exec) {
  return exec.class_of.size() == static_cast<std::size_t>(exec.num_devices) && !exec.representatives.empty();
}

}  // namespace

std::vector<TraceTrack> class_tracks(const exec::ExecPlan& exec, const SimResult& result) {
  if (!has_classes(exec)) {
    std::vector<TraceTrack> tracks;
    for (const DeviceGroup& g : device_groups(result)) {
      const int d = g.representative;
      tracks.push_back({d, d, g.devices.size() == 1 ? fmt::format("device {}", d)
                                                    : fmt::format("device {} (for devices {})", d, device_ranges(g.devices))});
    }
    return tracks;
  }
  std::vector<std::vector<int>> members(exec.representatives.size());
  for (int d = 0; d < exec.num_devices; ++d) members[static_cast<std::size_t>(exec.class_of[static_cast<std::size_t>(d)])].push_back(d);
  std::vector<TraceTrack> tracks;
  for (std::size_t c = 0; c < members.size(); ++c) {
    const int r = exec.representatives[c];
    const std::vector<int>& devices = members[c];
    std::string label = fmt::format("class {}: device {}", c, r);
    if (devices.size() > 1) {
      // In a symmetric simulation the class shares one timeline; in a full one each device has its own.
      const bool shared = std::ranges::all_of(devices, [&](int d) { return source_of(result, d) == source_of(result, r); });
      label += fmt::format(" (for devices {}{})", device_ranges(devices),
                           shared ? "" : "; each simulated, times may differ: --trace-devices all draws every one");
    }
    tracks.push_back({r, source_of(result, r), std::move(label)});
  }
  std::ranges::sort(tracks, {}, &TraceTrack::device);
  return tracks;
}

Expected<TraceDevices> parse_trace_devices(std::string_view text) {
  if (text == "classes" || text.empty()) return TraceDevices{};
  if (text == "all") return TraceDevices{.all = true, .listed = {}};
  TraceDevices devices;
  for (const std::string& part : split(text, ',')) {
    const std::size_t dash = part.find('-');
    LOOM_ASSIGN_OR_RETURN(const int first, parse_device(std::string_view(part).substr(0, dash)));
    int last = first;
    if (dash != std::string::npos) {
      LOOM_ASSIGN_OR_RETURN(last, parse_device(std::string_view(part).substr(dash + 1)));
      if (last < first) return fail(fmt::format("the range '{}' runs backwards", part), std::string(kForms));
    }
    for (int d = first; d <= last; ++d) devices.listed.push_back(d);
  }
  std::ranges::sort(devices.listed);
  const auto [from, to] = std::ranges::unique(devices.listed);
  devices.listed.erase(from, to);
  return devices;
}

std::string to_string(const TraceDevices& devices) {
  if (devices.all) return "all";
  if (devices.listed.empty()) return "classes";
  std::string text = device_ranges(devices.listed, devices.listed.size());
  std::erase(text, ' ');
  return text;
}

Expected<std::vector<TraceTrack>> trace_tracks(const exec::ExecPlan& exec, const SimResult& result,
                                               const TraceDevices& devices) {
  if (!devices.all && devices.listed.empty()) return class_tracks(exec, result);
  const int count = static_cast<int>(result.devices.size());
  std::vector<int> drawn = devices.listed;
  if (devices.all)
    for (int d = 0; d < count; ++d) drawn.push_back(d);
  std::vector<TraceTrack> tracks;
  for (int d : drawn) {
    if (d >= count)
      return fail(fmt::format("device {} is not in the plan, which has {} devices", d, count),
                  fmt::format("give device ids from 0 to {}", count - 1));
    const int source = source_of(result, d);
    tracks.push_back({d, source, source == d ? fmt::format("device {}", d)
                                             : fmt::format("device {} (the times of its class representative {})", d, source)});
  }
  return tracks;
}

}  // namespace loom::sim
