// The machine-readable summary of a simulated step (the `loom plan --json` output and summary.json): the
// labels, the headline metrics, how the simulation ran, and every device's time breakdown and memory.
// Keys are fixed; times in seconds, memory in bytes, MFU as a fraction.
#pragma once

#include <nlohmann/json.hpp>

#include "loom/sim/metrics.h"
#include "loom/sim/report_labels.h"
#include "loom/sim/simulator.h"

namespace loom::sim {

//  {"model", "cluster", "policy", "devices", "simulated_devices", "symmetry_fallback",
//   "step_time_s", "samples_per_s", "tokens_per_s", "mfu", "model_flops_per_step", "precision",
//   "peak_flops_per_device", "memory_capacity_bytes", "max_memory_device", "out_of_memory_devices",
//   "per_device": [{"device", "represented_by", "compute_s", "exposed_communication_s", "idle_s",
//                   "peak_bytes", "peak_by_role": {role: bytes, non-zero roles}, "out_of_memory"}]}
nlohmann::json summary_json(const ReportLabels& labels, const SimResult& sim, const StepMetrics& metrics);

}  // namespace loom::sim
