#include "loom/sim/shared_cores.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace loom::sim {

double busy_processes(const SimResult& result) {
  // How many devices each simulated device stands for.
  std::vector<int> copies(result.devices.size(), 0);
  if (result.represented_by.size() == result.devices.size()) {
    for (int rep : result.represented_by)
      if (rep >= 0 && static_cast<std::size_t>(rep) < copies.size()) ++copies[static_cast<std::size_t>(rep)];
  } else {
    std::fill(copies.begin(), copies.end(), 1);
  }
  std::vector<std::pair<double, int>> edges;  // (time, change of n)
  for (const Event& e : result.events) {
    if (e.stream != Stream::compute || (e.kind != EventKind::compute && e.kind != EventKind::local)) continue;
    if (e.end <= e.start || e.device < 0 || static_cast<std::size_t>(e.device) >= copies.size()) continue;
    const int n = copies[static_cast<std::size_t>(e.device)];
    edges.emplace_back(e.start, n);
    edges.emplace_back(e.end, -n);
  }
  std::ranges::sort(edges);
  double weighted = 0, busy = 0, last = 0;
  int n = 0;
  for (const auto& [time, change] : edges) {
    const double span = time - last;
    weighted += static_cast<double>(n) * n * span;
    busy += static_cast<double>(n) * span;
    n += change;
    last = time;
  }
  return busy > 0 ? weighted / busy : 0;
}

Expected<SimResult> simulate_sharing_cores(const exec::ExecPlan& exec, const cost::ComputeModel& compute,
                                           const cluster::Cluster& cluster, DurationOptions options,
                                           const SimulateWith& run) {
  LOOM_ASSIGN_OR_RETURN(Durations durations, model_durations(exec, compute, cluster, options));
  LOOM_ASSIGN_OR_RETURN(SimResult result, run(durations));
  // Processes no more than the cores share nothing, however many run at once.
  if (cluster.shared.cores <= 0 || options.busy_processes > 0 || exec.num_devices <= cluster.shared.cores)
    return result;
  double previous = exec.num_devices;
  for (int round = 0; round < kSharingRounds; ++round) {
    const double busy = std::min(busy_processes(result), static_cast<double>(exec.num_devices));
    if (!(busy > 0) || std::abs(busy - previous) <= 1e-6 * previous) break;  // settled: the same durations again
    previous = options.busy_processes = busy;
    LOOM_ASSIGN_OR_RETURN(durations, model_durations(exec, compute, cluster, options));
    LOOM_ASSIGN_OR_RETURN(result, run(durations));
  }
  return result;
}

}  // namespace loom::sim
