// The facts the analytic costing reads (search/analytic_cost.h), measured on the engine's own path: per
// class (tp, micro-batch size, recompute, overlap) one slice of the job planned, materialized and
// simulated in full: one transformer layer of a model built here (a preset, an --arch family or a model
// file; one that needs more, as Swin's stages do, and a graph file: the whole depth, its layers
// averaged), dp 1, pp 1, on tp devices, one micro-batch of the class's size (a graph file: its batch in
// micro-batches of that size), with the class's overlap (an overlapped slice runs Oases' two sub-batches:
// what the overlap hides is measured). From device 0 of the slice:
//  - seconds: the compute stream's timeline cut into forward (until the first backward compute),
//    backward (recomputation included) and optimizer phases; each interval from one compute start to the
//    next goes to the segment of that compute's op (before the first layer, a layer, after the last), so
//    a blocking tensor-parallel collective counts for the op that waits on it; per micro-batch;
//  - bytes: op_bytes (stage_costs.h) by segment: the activations one micro-batch holds, the model state
//    (split into parameters, gradients and optimizer states as the memory report splits the slice's), and
//    the workspace: the slice's peak less its state and its held activations;
//  - boundary: the bytes of the first layer's input per device (a stage boundary's send).
#pragma once

#include <vector>

#include "loom/api/job.h"
#include "loom/core/error.h"
#include "loom/search/analytic_cost.h"
#include "loom/search/plan_space.h"

namespace loom::api {

struct MeasuredFacts {
  search::CostFacts facts;
  int slices = 0;                           // planned in full
  std::vector<search::ClassKey> failed;     // classes the policy could not plan (their candidates are skipped)
  std::string first_error;                  // why the first of them failed
};

// The facts of every class `candidates` use, for a job loaded with a search as its policy (load_job),
// measured on up to two threads. Errors: a job whose model has no forward op.
Expected<MeasuredFacts> measure_cost_facts(const Job& loaded, const std::vector<search::Candidate>& candidates);

// The transformer layers of a graph (distinct numbered layer names of forward ops, policy/stages.h); 0
// when the model has none.
int count_layers(const ir::Graph& graph);

}  // namespace loom::api
