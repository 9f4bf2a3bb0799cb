#include "loom/api/memory_advice.h"

#include <fmt/format.h>

namespace loom::api {
namespace {

// The options that cut each class, given what the plan already uses (ZeRO stage, recomputation).
std::string remedies(ir::TensorRole role, const policy::ParallelConfig& c) {
  const std::string more_zero = c.zero < 3 ? fmt::format("--zero {} (with dp > 1), ", c.zero < 1 ? 1 : c.zero + 1) : "";
  switch (role) {
    case ir::TensorRole::optimizer_state:
      return c.zero < 1 ? "--zero 1 (optimizer states sharded over dp), or more --tp / --pp"
                        : "more dp ranks for ZeRO to shard over, or more --tp / --pp";
    case ir::TensorRole::gradient:
      return c.zero < 2 ? "--zero 2 (gradients sharded over dp), or more --tp / --pp" : "more --tp / --pp";
    case ir::TensorRole::parameter:
      return more_zero + "more --tp / --pp";
    case ir::TensorRole::activation:
    case ir::TensorRole::input: {
      std::string text = c.recompute == policy::Recompute::full ? ""
                         : c.recompute == policy::Recompute::none ? "--recompute selective or full, "
                                                                   : "--recompute full, ";
      text += "a smaller --micro-batch-size (more --microbatches)";
      if (c.tp > 1 && !c.sequence_parallel) text += ", --sp";
      return text + ", or more --tp / --pp";
    }
    case ir::TensorRole::buffer:
      return "more --tp / --pp";
  }
  return "more --tp / --pp";
}

std::string_view plural(ir::TensorRole role) {
  switch (role) {
    case ir::TensorRole::input: return "inputs";
    case ir::TensorRole::parameter: return "parameters";
    case ir::TensorRole::activation: return "activations";
    case ir::TensorRole::gradient: return "gradients";
    case ir::TensorRole::optimizer_state: return "optimizer states";
    case ir::TensorRole::buffer: return "buffers";
  }
  return "?";
}

}  // namespace

std::string memory_advice(const Job& job) {
  const sim::StepMetrics& m = job.metrics;
  if (!m.out_of_memory() || m.max_memory_device < 0) return "";
  const sim::DeviceMetrics& d = m.per_device[static_cast<std::size_t>(m.max_memory_device)];
  std::size_t largest = 0;
  for (std::size_t r = 1; r < cost::kRoleCount; ++r)
    if (d.at_peak.bytes[r] > d.at_peak.bytes[largest]) largest = r;
  const auto role = static_cast<ir::TensorRole>(largest);
  return fmt::format("{} are the largest class at device {}'s peak ({} of {}); to cut them: {}", plural(role),
                     d.device, cost::format_bytes(static_cast<double>(d.at_peak.bytes[largest])),
                     cost::format_bytes(static_cast<double>(d.peak_bytes)), remedies(role, job.request.config));
}

}  // namespace loom::api
