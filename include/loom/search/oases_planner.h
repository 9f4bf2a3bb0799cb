// The Oases planner (Li et al., "Oases", §V, eqs. (2)-(6)): a tensor-parallel degree per layer of a chain
// of L layers, minimizing the step time under the device memory limit. Plain data in, a choice out (the
// solver never sees the IR; api/oases_plan.h prices the terms from Loom's own slices):
//
//   minimize   base + sum_i node[i][s_i] + sum_{i<L-1} reshard[i][s_i][s_{i+1}]
//   subject to base_bytes + sum_i bytes[i][s_i] <= memory_limit
//
// node[i][d] is layer i's overlapped time at degree d (forward, recomputation and backward under the
// cross-pass schedule, eq. (3)); reshard[i][a][b] the cost of the boundary after layer i when its two
// sides differ (eq. (4): the blocked all-gather and the overlap it breaks; 0 on the diagonal in Oases,
// any value here); bytes[i][d] the model states and saved inputs layer i holds (eq. (6)).
//
// Solved exactly by dynamic programming over the chain: after layer i, per degree of layer i, the
// Pareto front of (bytes, seconds) over all prefixes ending there; a prefix dominated by another with no
// more bytes and no more seconds can never complete to a better plan, and the fronts are kept whole
// (no memory buckets), so the optimum is exact for any real costs. The fronts hold at most one point
// per distinct byte total, which for L identical layers over D degrees is at most C(L+D-1, D-1).
// Oases solves the same objective as an ILP with CBC; the chain needs no solver.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "loom/core/error.h"

namespace loom::search {

struct OasesRequest {
  std::vector<int> degrees;  // the candidate degrees, by index d (their values only label the choice)
  std::vector<std::vector<double>> node;                   // [layer][d]: seconds
  std::vector<std::vector<std::int64_t>> bytes;            // [layer][d]: bytes per device
  std::vector<std::vector<std::vector<double>>> reshard;  // [boundary i: layers i, i+1][d][d']: seconds
  double base = 0;                // seconds outside the layers (embeddings, head, loss, optimizer rest)
  std::int64_t base_bytes = 0;    // bytes outside the layers (and the transient workspace)
  std::int64_t memory_limit = 0;  // bytes per device; a plan must not exceed it
};

struct OasesChoice {
  std::vector<int> choice;  // by layer: an index into degrees
  double seconds = 0;       // the objective
  std::int64_t bytes = 0;   // base_bytes + the layers' bytes
  std::int64_t states = 0;  // Pareto points kept over the whole chain (the DP's work)
};

// The objective and memory of `choice`, recomputed term by term (the independent evaluator, as XLA's
// auto-sharding has one). Errors: a choice of the wrong length or an index out of range.
Expected<OasesChoice> evaluate_oases(const OasesRequest& request, std::span<const int> choice);

// The exact optimum; among equal times the fewest bytes, ties after that broken by the order of the terms
// (deterministic). Errors: a malformed request (no layers or degrees, a cost table of the wrong shape, a
// non-finite term), and no choice within the memory limit (naming the least memory any choice needs).
Expected<OasesChoice> solve_oases(const OasesRequest& request);

}  // namespace loom::search
