// nnScaler's 3F1B pipeline (Lin et al., OSDI '24, §4.2 Table 7, Fig. 2) for models that run their layers
// several times with shared weights, only the last pass having a backward (AlphaFold2's recycles).
//
// With P passes over S pipeline devices, pass p's part of device s is stage p * S + s (the passes are
// the model chunks: ScheduleKind::three_f_one_b with chunks = P), so every pass runs layer l on the same
// device and the weights stay put. A block is (stage, micro-batch, part): the forward of every pass (f_p,
// "recycles" for p < P - 1) and the backward of the last pass only. On device s, with ofst = S - 1 - s
// (Table 7's S - i for the 1-based stage i), the order obeys
//   (1), (2)  F(p, j) before F(p + 1, j - 1)        for p < P - 1 and P - 1 <= j < m
//   (3)       F(P - 1, j) before B(j - ofst)         for ofst < j < m
// (the paper's three constraints for P = 3), each pass's forwards and the backwards in micro-batch order,
// and the data dependencies (F of stage v after F of stage v - 1; B after its F and the next stage's B).
// Warm-up and cool-down are what the constraints leave open: a search finds them (search_three_f_one_b).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/plan/schedule.h"
#include "loom/plan/schedule_eval.h"

namespace loom::plan {

// The Table 7 constraints, stream order and placement a 3F1B template must obey, checked on `devices`
// (per pipeline device, its blocks in order) for `passes` passes and `micro_batches` micro-batches:
// one line per violation, empty when it obeys them all. Besides the constraints: every block on its
// stage's device (stage mod devices), each forward of every pass and each last-pass backward exactly
// once, no other block.
std::vector<std::string> three_f_one_b_violations(const std::vector<std::vector<Block>>& devices, int passes,
                                                  int micro_batches);

struct ThreeFOneBSearch {
  std::vector<std::vector<Block>> devices;  // per pipeline device, its blocks in order
  ScheduleEvaluation evaluation;            // evaluate_schedule's numbers for them
  int recycles_ahead = 0;                   // the in-flight bound chosen: S - s + this on device s
  std::int64_t rollouts = 0;                // greedy completions the search priced
};

// The search: the template is built in time order (a list schedule of active schedules, Giffler and
// Thompson): at each step the device that can start a block earliest chooses among its legal blocks
// (constraints above, inputs done, and at most S - s last-pass activations and S - s + P - 1
// micro-batches in flight on device s: 1F1B's peak, and the recycles running P - 1 micro-batches
// ahead). Where there is a choice, each candidate is priced by completing the template greedily
// (backward first, then later passes first) and the cheapest is taken (makespan, then the sum of the
// devices' last ends; ties to the greedy's order): a pilot search with a one-step look-ahead over full
// roll-outs, so the result is never worse than the greedy one. Deterministic. Block costs: F for every
// forward, backward + weight for the whole backward (evaluate_schedule's pricing). Errors: fewer than 1
// device or micro-batch, fewer than 2 passes, and a search that finds no complete template (it cannot
// for these constraints, reported rather than asserted).
Expected<ThreeFOneBSearch> search_three_f_one_b(int devices, int passes, int micro_batches, BlockCosts costs = {});

}  // namespace loom::plan
