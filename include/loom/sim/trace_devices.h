// Which devices a Chrome trace draws (`loom plan --trace-devices`): by default one track per device
// class (its representative, named by the class and the devices it stands for), so a 64-GPU data-parallel
// step is one track rather than 64 copies of it; every device, or a list, on request. A device the
// simulation did not run (symmetric classes, simulator.h) is drawn with its representative's events,
// which are its own times (symmetry.h); a plan simulated in full draws each device's own events.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/exec/exec_plan.h"
#include "loom/sim/simulator.h"

namespace loom::sim {

struct TraceDevices {
  bool all = false;         // every device
  std::vector<int> listed;  // these devices, ascending and unique; with !all and empty: one per class

  bool operator==(const TraceDevices&) const = default;
};

// "classes" (the default), "all", or device ids and ranges: "0,5" or "0-3,8". Errors say what is wrong
// with the text, not which option it is.
Expected<TraceDevices> parse_trace_devices(std::string_view text);
std::string to_string(const TraceDevices& devices);  // the text parse_trace_devices reads back

// One track of the trace: a process named `label` holding the events of simulated device `source`.
struct TraceTrack {
  int device = 0;  // the process id: the device drawn
  int source = 0;  // the simulated device whose events it shows (`device` itself when simulated)
  std::string label;
};

// One track per device class, by device ascending. Classes come from exec.class_of (a plan without
// classes: one track per group of devices sharing their times, device_groups.h).
std::vector<TraceTrack> class_tracks(const exec::ExecPlan& exec, const SimResult& result);

// The tracks `devices` asks for, by device ascending. Errors: a listed device outside the plan.
Expected<std::vector<TraceTrack>> trace_tracks(const exec::ExecPlan& exec, const SimResult& result,
                                               const TraceDevices& devices);

}  // namespace loom::sim
