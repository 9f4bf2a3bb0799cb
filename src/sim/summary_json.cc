#include "loom/sim/summary_json.h"

namespace loom::sim {

nlohmann::json summary_json(const ReportLabels& labels, const SimResult& sim, const StepMetrics& metrics) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceMetrics& d : metrics.per_device) {
    nlohmann::json roles = nlohmann::json::object();
    for (std::size_t r = 0; r < cost::kRoleCount; ++r)
      if (d.at_peak.bytes[r] != 0) roles[std::string(ir::name(static_cast<ir::TensorRole>(r)))] = d.at_peak.bytes[r];
    const auto i = static_cast<std::size_t>(d.device);
    devices.push_back({{"device", d.device},
                       {"represented_by", i < sim.represented_by.size() ? sim.represented_by[i] : d.device},
                       {"compute_s", d.compute},
                       {"exposed_communication_s", d.exposed_communication},
                       {"idle_s", d.idle},
                       {"peak_bytes", d.peak_bytes},
                       {"peak_by_role", std::move(roles)},
                       {"out_of_memory", d.out_of_memory}});
  }
  return {{"model", labels.model},
          {"cluster", labels.cluster},
          {"policy", labels.policy},
          {"devices", metrics.devices},
          {"simulated_devices", sim.simulated_devices.size()},
          {"symmetry_fallback", sim.symmetry_fallback},
          {"step_time_s", metrics.step_time},
          {"samples_per_s", metrics.samples_per_second},
          {"tokens_per_s", metrics.tokens_per_second},
          {"mfu", metrics.mfu},
          {"model_flops_per_step", metrics.model_flops},
          {"precision", std::string(cluster::name(metrics.precision))},
          {"peak_flops_per_device", metrics.peak_flops},
          {"memory_capacity_bytes", metrics.memory_capacity},
          {"max_memory_device", metrics.max_memory_device},
          {"out_of_memory_devices", metrics.out_of_memory_devices},
          {"per_device", std::move(devices)}};
}

}  // namespace loom::sim
