// The schedule evaluator (DESIGN.md, "Search": an independent evaluator): a template (schedule_blocks)
// run on uniform block costs, a pure function of the template. Each device runs its blocks in order,
// each as soon as the device is free and its inputs are done: F(s, m) after F(s - 1, m); B(s, m) after
// F(s, m) and B(s + 1, m); W(s, m) after B(s, m). With no W blocks for (s, m), its B is the whole
// backward and costs backward + weight. Leading stages without any B or W run forward only (the recycled
// passes of 3F1B, schedule_3f1b.h): their forwards hold no activations.
#pragma once

#include <vector>

#include "loom/core/error.h"
#include "loom/plan/schedule.h"

namespace loom::plan {

struct BlockCosts {
  double forward = 1;   // F
  double backward = 1;  // B (the input part)
  double weight = 1;    // W (the weight part)
};

struct ScheduleEvaluation {
  double makespan = 0;          // the last block's end, the first starting at 0
  std::vector<double> idle;     // per device: the bubble, its span (first start to last end) less its work
  std::vector<int> peak_held;   // per device: the most micro-batch stages whose activations are held at once
                                // (F done, its W, or its whole B, not yet)
};

// Errors: a stage outside [0, stages), a micro-batch outside [0, micro_batches), a block given twice, a
// (stage, micro-batch) without its F or B (but a forward-only leading stage; the last stage has a B),
// W blocks for some micro-batches of a stage but not for all,
// and a template that deadlocks (naming the blocks each device waits at).
Expected<ScheduleEvaluation> evaluate_schedule(const std::vector<std::vector<Block>>& devices, int stages,
                                               int micro_batches, BlockCosts costs = {});

}  // namespace loom::plan
