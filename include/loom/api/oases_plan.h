// The Oases planner on a job (search/oases_planner.h holds the solver and its formulation): per-layer
// tensor-parallel degrees for `--tp-layers auto` or `--policy oases` (megatron with --overlap oases and
// --tp-layers auto), among the divisors of the job's tp group.
//
// The terms are priced on the engine's own path, as the search's slices are (search_facts.h): the job
// at 1 and 2 layers planned, materialized and simulated in full with every degree t and every pair
// (a, b) of the candidates, with the job's other options (dp, micro-batches, overlap, recomputation).
// With A(t) the one-layer slice's step and D(a, b) the two-layer one's, and additive steps
//   A(t)    = E + N(t),               N(t): a layer at t, and its boundaries to the ops outside the layers,
//   D(a, b) = E + N(a) + N(b) + R(a, b),
// so N(t) = A(t) - E, E = 2 A(T) - D(T, T) at the group's degree T, and the reshard
// R(a, b) = D(a, b) - A(a) - A(b) + E (0 for a = b up to the slices' noise; the engine's RVD layout
// search moves the activations, and the simulator prices the overlap the boundary breaks, eq. (4)).
// Memory likewise from the slices' peak per device: bytes(t) = P_D(t, t) - P_A(t). The solver's exact
// optimum is kept unless it gains less than 0.5 % over the group's uniform degree (which fits): the
// additivity error of the slices, where a mixed plan would be noise. The choice is then planned and
// simulated in full: the job returned is that plan, its description naming the degrees.
// Where the policy refuses every lower degree (its T/t copies do not divide the batch, checked at the
// policy stage), the space holds one assignment, the group's degree throughout: it is the choice without a
// slice priced (on 64 GPUs the two tp-T slices alone take seconds), and its full plan says whether it fits.
#pragma once

#include <memory>
#include <optional>

#include "loom/api/baseline_search.h"
#include "loom/api/job.h"

namespace loom::api {

// Whether the options ask for the planner (--tp-layers auto, or --policy oases).
bool uses_oases_planner(const JobOptions& options);

// The planner's choice on a job (`--tp-layers auto` in its options, or --policy oases), before planning it.
struct OasesLayerChoice {
  JobOptions options;     // what to plan: megatron with the choice's --tp-layers (none where it is uniform)
  std::string spec;       // the degrees by layer, "2x8,4x16"
  bool uniform = true;    // every layer at the group's tp: the plain plan
  bool forced = false;    // the policy takes no lower degree: uniform without slices, nothing predicted
  double seconds = 0;     // the planner's predicted step
  std::int64_t bytes = 0; // and peak per device
  bool fits = true;
  double space = 0;       // degree assignments in the space
  std::int64_t states = 0;  // the solver's Pareto states
  int slices = 0;
  int failed = 0;         // degrees whose slices could not be planned (out of the space)
  std::string why;        // the spec, the prediction against the uniform degree, the solver's time
};
// Errors: as oases_plan's, but the choice's own plan.
Expected<OasesLayerChoice> oases_layer_degrees(const JobOptions& options);

// The planner's job (oases_layer_degrees, then its choice planned in full). `summary` gets "oases planner": the degree assignments in the space, the slices,
// the solver's states, the wall-clock, the chosen plan as its one finalist (predicted and simulated),
// and why (the spec, the prediction against the uniform degree, the solver's time).
// Errors: a policy other than megatron, a pipeline (pp > 1; the planner prices one stage), a graph file (the slices resize a preset's
// depth), a model without numbered layers, a slice that cannot be planned at the group's degree, and
// no assignment within the device memory (naming the least it needs).
Expected<std::unique_ptr<Job>> oases_plan(const JobOptions& options, std::optional<SearchSummary>* summary = nullptr);

}  // namespace loom::api
