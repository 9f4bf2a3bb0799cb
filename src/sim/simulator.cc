#include "loom/sim/simulator.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "loom/sim/comm_index.h"
#include "loom/sim/symmetry.h"
#include "simulator_core.h"

namespace loom::sim {

std::string_view name(Stream stream) {
  switch (stream) {
    case Stream::compute: return "compute";
    case Stream::communication: return "communication";
    case Stream::host: return "host";
    case Stream::pcie: return "pcie";
  }
  return "?";
}

std::string_view name(EventKind kind) {
  switch (kind) {
    case EventKind::compute: return "compute";
    case EventKind::local: return "local";
    case EventKind::collective: return "collective";
    case EventKind::send: return "send";
    case EventKind::recv: return "recv";
    case EventKind::copy: return "copy";
  }
  return "?";
}

exec::Collective priced_collective(const exec::CollectiveCall& call) {
  const bool one = call.inputs.size() == 1;
  return exec::Collective{call.kind, std::vector<int>(call.group.begin(), call.group.end()), call.tag,
                          one ? call.inputs.front() : exec::kNoBuffer, one ? call.outputs.front() : exec::kNoBuffer};
}

double SimResult::idle_fraction() const {
  if (devices.empty() || step_time <= 0) return 0;
  double idle = 0;
  for (const DeviceTime& d : devices) idle += d.idle;
  return idle / (static_cast<double>(devices.size()) * step_time);
}

using detail::Simulator;

namespace {

Expected<void> check_input(const exec::ExecPlan& exec, const Durations& durations) {
  if (exec.programs.size() != static_cast<std::size_t>(exec.num_devices))
    return fail(fmt::format("the ExecPlan has {} programs for {} devices", exec.programs.size(), exec.num_devices),
                "give every device a program");
  if (!(durations.contention >= 1) || !std::isfinite(durations.contention))
    return fail(fmt::format("a contention of {}", durations.contention),
                "contention is the slowdown of communication under compute: 1 (none) or more");
  return {};
}

}  // namespace

Expected<SimResult> simulate(const exec::FoldedStep& folded, const Durations& durations) {
  const exec::ExecPlan& exec = folded.step;
  LOOM_RETURN_IF_ERROR(check_input(exec, durations));
  // Symmetric by construction (exec/fold.h): the representatives are all there is to simulate.
  if (exec.class_of.size() != static_cast<std::size_t>(exec.num_devices))
    return fail("a folded step without device classes", "unfold it with exec::unfold_step");
  LOOM_ASSIGN_OR_RETURN(const CommIndex index, CommIndex::build(exec));
  std::vector<int> represented_by(exec.class_of.size());
  for (std::size_t d = 0; d < represented_by.size(); ++d)
    represented_by[d] = exec.representatives[static_cast<std::size_t>(exec.class_of[d])];
  Simulator by_class(exec, durations, index, std::move(represented_by), /*folded=*/true);
  LOOM_RETURN_IF_ERROR(by_class.run());
  return by_class.result();
}

Expected<SimResult> simulate(const exec::ExecPlan& exec, const Durations& durations, SimOptions options) {
  LOOM_RETURN_IF_ERROR(check_input(exec, durations));
  LOOM_ASSIGN_OR_RETURN(const CommIndex index, CommIndex::build(exec));
  std::vector<int> every_device(static_cast<std::size_t>(exec.num_devices));
  std::iota(every_device.begin(), every_device.end(), 0);
  std::string fallback;
  if (options.use_device_classes && !exec.class_of.empty()) {
    // Structure first, then the representatives' times (symmetry.h); any failure, an error included,
    // leaves the answer to the full simulation.
    fallback = symmetry_violation(exec, index, durations);
    if (fallback.empty()) {
      std::vector<int> represented_by(every_device.size());
      for (std::size_t d = 0; d < represented_by.size(); ++d)
        represented_by[d] = exec.representatives[static_cast<std::size_t>(exec.class_of[d])];
      Simulator by_class(exec, durations, index, std::move(represented_by));
      const Expected<void> ran = by_class.run();
      const Expected<std::string> mismatch = ran ? by_class.check_represented() : std::unexpected(ran.error());
      if (mismatch && mismatch->empty()) return by_class.result();
      fallback = mismatch ? *mismatch : "simulating one device per class failed: " + mismatch.error().message;
    }
  }
  Simulator full(exec, durations, index, std::move(every_device));
  LOOM_RETURN_IF_ERROR(full.run());
  SimResult result = full.result();
  result.symmetry_fallback = std::move(fallback);
  return result;
}

}  // namespace loom::sim
