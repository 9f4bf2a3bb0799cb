// Memory over a simulated step: the bytes a device holds after each instruction
// (cost::bytes_after_each_instruction, memory_usage's accounting) placed at simulated times.
//
// Instruction i of a device is placed at the latest start among the device's instructions 0..i: an
// instruction's outputs exist from its start, and frees (which take no time), loads and zero-length
// locals take the time reached so far. The times never decrease, so the series keeps program order and
// its largest value is exactly memory_usage's peak for the device. A device simulated through its class
// representative takes the representative's times with its own bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/exec/exec_plan.h"
#include "loom/sim/simulator.h"

namespace loom::sim {

struct MemoryPoint {
  double time = 0;
  std::int64_t bytes = 0;
  bool operator==(const MemoryPoint&) const = default;
};

// One point per instruction of `device`'s program (`sim` must come from simulating `exec`).
std::vector<MemoryPoint> memory_over_time(const exec::ExecPlan& exec, const SimResult& sim, int device);

// At most about `max_points` points with the same envelope: the series cut into equal runs of
// instructions, each kept as its first point, its lowest and its highest (in order) and its last, so
// the peak and the troughs survive. Series already short enough come back unchanged.
std::vector<MemoryPoint> downsample(const std::vector<MemoryPoint>& series, std::size_t max_points);

}  // namespace loom::sim
