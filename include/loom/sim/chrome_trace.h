// The Chrome trace event format (loads in Perfetto and chrome://tracing) of a simulation: one process a
// track (trace_devices.h: by default one per device class, "class 1: device 8 (for devices 8-15)"; every
// device or a list on request), thread 0 its compute stream and thread 1 its communication stream, and a
// complete ("ph": "X") event per timeline event, times in microseconds (a start is a collective event on
// the communication stream; a compute stream held at a blocking collective or a wait shows as a gap).
// Output is deterministic (keys sorted, events by track, then in SimResult order).
#pragma once

#include <span>
#include <string>

#include "loom/exec/exec_plan.h"
#include "loom/exec/fold.h"
#include "loom/sim/simulator.h"
#include "loom/sim/trace_devices.h"

namespace loom::sim {

// {"displayTimeUnit": "ms", "traceEvents": [metadata..., events...]}; each X event's args give its kind,
// the instruction's position and, for data movement, the bytes moved. Draws `tracks` (trace_tracks).
std::string chrome_trace_json(const exec::ExecPlan& exec, const SimResult& result, std::span<const TraceTrack> tracks);

// One track per device class (class_tracks).
std::string chrome_trace_json(const exec::ExecPlan& exec, const SimResult& result);
std::string chrome_trace_json(const exec::FoldedStep& folded, const SimResult& result);

}  // namespace loom::sim
