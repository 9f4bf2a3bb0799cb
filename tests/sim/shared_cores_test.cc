// sim/shared_cores.h: the processes a computing process shares the cores with, from a simulation's events,
// and the simulation that prices the sharing by them.
#include "loom/sim/shared_cores.h"

#include <gtest/gtest.h>

#include <random>

#include "../exec/exec_test_plans.h"
#include "loom/cluster/presets.h"
#include "loom/ops/registry.h"

namespace loom::sim {
namespace {

Event busy(int device, double start, double end, EventKind kind = EventKind::compute) {
  return {.device = device, .stream = Stream::compute, .kind = kind, .name = "op", .start = start, .end = end,
          .instruction = 0};
}

SimResult with_devices(int n) {
  SimResult r;
  r.devices.resize(static_cast<std::size_t>(n));
  return r;
}

// W_busy = ∫ n² / ∫ n against n(t) sampled on a fine grid, for random intervals on random devices (each
// device's intervals apart, as on one stream); communication and idle time do not count.
TEST(BusyProcesses, IsTheMeanOfTheConcurrencyAComputingProcessSees) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> devices(1, 6), slots(1, 8), length(1, 5);
  for (int round = 0; round < 100; ++round) {
    const int w = devices(rng);
    SimResult r = with_devices(w);
    constexpr int kGrid = 60;  // unit steps: every interval starts and ends on one
    std::vector<int> n(kGrid, 0);
    for (int d = 0; d < w; ++d) {
      int t = slots(rng) - 1;
      for (int k = slots(rng); k > 0 && t < kGrid - 5; --k) {
        const int len = length(rng);
        r.events.push_back(busy(d, t, t + len, k % 2 ? EventKind::compute : EventKind::local));
        for (int s = t; s < t + len; ++s) ++n[static_cast<std::size_t>(s)];
        t += len + length(rng) - 1;
      }
      r.events.push_back({.device = d, .stream = Stream::communication, .kind = EventKind::collective,
                          .name = "ring", .start = 0, .end = kGrid, .instruction = 0});
    }
    double squares = 0, total = 0;
    for (int c : n) {
      squares += static_cast<double>(c) * c;
      total += c;
    }
    EXPECT_NEAR(busy_processes(r), total > 0 ? squares / total : 0, 1e-9) << "round " << round;
    EXPECT_LE(busy_processes(r), w);
  }
  // All computing at once: W; one at a time (a pipeline's fill): 1.
  SimResult lockstep = with_devices(4), relay = with_devices(4);
  for (int d = 0; d < 4; ++d) {
    lockstep.events.push_back(busy(d, 0, 1));
    relay.events.push_back(busy(d, d, d + 1));
  }
  EXPECT_DOUBLE_EQ(busy_processes(lockstep), 4);
  EXPECT_DOUBLE_EQ(busy_processes(relay), 1);
  // A class representative stands for the devices it represents.
  SimResult classes = with_devices(4);
  classes.represented_by = {0, 0, 2, 2};
  classes.events = {busy(0, 0, 1), busy(2, 0, 1)};
  EXPECT_DOUBLE_EQ(busy_processes(classes), 4);
}

// On a cluster whose devices share cores, the step is priced between all W processes busy and one; on
// one without sharing, exactly the plain simulation.
TEST(SimulateSharingCores, PricesTheSharingOfTheProcessesThatRunAtOnce) {
  std::unique_ptr<exec::testing::Fixture> f = exec::testing::data_parallel(2);
  cluster::Cluster c = cluster::make_cluster("dgx-a100x2").value();
  const cost::ComputeModel compute = cost::ComputeModel::make(f->plan, ops::builtin_ops(), c.gpu, nullptr).value();
  const auto run = [&](const Durations& d) { return simulate(f->exec, d); };
  const auto step = [&](const cluster::Cluster& on, DurationOptions options) {
    return run(model_durations(f->exec, compute, on, options).value()).value().step_time;
  };
  EXPECT_EQ(simulate_sharing_cores(f->exec, compute, c, {}, run).value().step_time, step(c, {}));
  c.shared = {.cores = 1, .core_sharing = 1, .time_scale = 1, .instruction_overhead = 1e-4};
  const double shared = simulate_sharing_cores(f->exec, compute, c, {}, run).value().step_time;
  EXPECT_LE(shared, step(c, {}) * (1 + 1e-12));                        // W = 2 busy throughout
  EXPECT_GE(shared, step(c, {.busy_processes = 1}) * (1 - 1e-12));  // no sharing at all
  // Given busy processes are taken as they are.
  EXPECT_EQ(simulate_sharing_cores(f->exec, compute, c, {.busy_processes = 1}, run).value().step_time,
            step(c, {.busy_processes = 1}));
}

}  // namespace
}  // namespace loom::sim
