// Processes sharing a host's cores (cluster::SharedCores, the CPU cluster `loom calibrate` fits) slow each
// other only while they run: a pipeline stage waiting for its input, or a rank waiting in a collective for a
// late peer, takes no core. The slowdown a computing process sees is that of the processes computing beside
// it, over its computing time:
//     W_busy = ∫ n(t)² dt / ∫ n(t) dt,      n(t) the processes running a compute or local instruction at t,
// the mean of n as a computing process samples it (data parallelism: every process computes at once, W_busy
// = W; a 4-stage pipeline of 4 micro-batches on 2 cores: much less). It is found by simulating: first with
// all W processes busy, then each round with the previous simulation's W_busy, until it settles or for
// kSharingRounds rounds at most (deterministic either way). W no more than the cores: one simulation.
#pragma once

#include <functional>

#include "loom/cluster/cluster.h"
#include "loom/core/error.h"
#include "loom/cost/compute_model.h"
#include "loom/exec/exec_plan.h"
#include "loom/sim/durations.h"
#include "loom/sim/simulator.h"

namespace loom::sim {

inline constexpr int kSharingRounds = 4;

// W_busy of a simulation (above): every device counted, a device a class representative stands for at its
// representative's times; 0 when nothing computes.
double busy_processes(const SimResult& result);

// Simulates `exec`'s step (run: the plain or the folded simulation of it) on `cluster`, with W_busy found as
// above where the cluster's devices share cores; one simulation otherwise (options.busy_processes as given).
using SimulateWith = std::function<Expected<SimResult>(const Durations&)>;
Expected<SimResult> simulate_sharing_cores(const exec::ExecPlan& exec, const cost::ComputeModel& compute,
                                           const cluster::Cluster& cluster, DurationOptions options,
                                           const SimulateWith& run);

}  // namespace loom::sim
