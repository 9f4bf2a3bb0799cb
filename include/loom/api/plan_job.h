// The facade behind `loom plan` and `loom compare` (and, later, the Python bindings), DESIGN.md's `api`:
// from a model preset, a cluster and a policy to a materialized, checked, simulated and costed plan, and
// the files that report it. Each stage is the library's own function; nothing here decides a plan.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/cluster/cluster.h"
#include "loom/core/error.h"
#include "loom/cost/memory_model.h"
#include "loom/exec/exec_plan.h"
#include "loom/exec/fold.h"
#include "loom/exec/materialize.h"
#include "loom/exec/passes.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph.h"
#include "loom/ir/graph_stats.h"
#include "loom/models/zoo.h"
#include "loom/plan/plan.h"
#include "loom/ops/custom_ops.h"
#include "loom/policy/policy.h"
#include "loom/sim/metrics.h"
#include "loom/sim/simulator.h"

namespace loom::api {

// Folded planning (exec/fold.h): one micro-batch of one data-parallel replica planned and materialized,
// repeated over the micro-batches and mirrored over the replicas. automatic folds a megatron plan
// without ZeRO whose explicit plan would exceed kFoldAboveSubOps sub-ops (ops x dp x tp x micro-batches).
enum class Fold : std::uint8_t { automatic, off, on };
inline constexpr std::int64_t kFoldAboveSubOps = 300'000;
// An explicit plan past this many sub-ops (estimated) is refused rather than planned for minutes.
inline constexpr std::int64_t kExplicitSubOpLimit = 3'000'000;

struct PlanRequest {
  std::string model;                   // a preset (`loom models`)
  std::string graph_file;              // or a graph JSON file (`loom.trace`), planned at its recorded sizes
  std::string graph_text;              // or that JSON itself (the Python bindings), "the graph JSON" in errors
  models::ModelOptions model_options;  // batch = the global batch; bf16 by default
  ir::OptimizerOptions optimizer;      // AdamW with fp32 master weights by default
  std::string cluster = "dgx-a100";    // a preset (`loom clusters`) or a YAML / JSON cluster file
  int gpus = 0;                        // 0: the policy's device count; else it must equal it
  std::string policy = "megatron";
  policy::ParallelConfig config;
  std::string profile;                 // a profile database (cost/profile_db.h) to override the roofline; optional
  Fold fold = Fold::automatic;
};

// Whether the request plans a traced graph (a file or its text) rather than a preset.
bool plans_a_graph(const PlanRequest& request);

// The request's forward graph: the preset built, or the graph file / text read, its custom ops (loom.register_op)
// added to `catalog`. Errors: none or more than one source, and the builder's or reader's.
Expected<ir::Graph> load_forward(const PlanRequest& request, ops::CustomCatalog& catalog);

// "megatron: dp 2 x tp 4 x pp 2, 8 micro-batches, 1f1b" — the policy and its degrees, for tables.
std::string describe(const std::string& policy, const policy::ParallelConfig& config);

// Wall-clock seconds of each stage (printed by the CLI; never written into the deterministic files).
struct StageSeconds {
  double build = 0;        // model and training graph
  double policy = 0;       // the policy over a fresh plan
  double materialize = 0;  // validation, materialization, ExecPlan check, exec passes, device classes
  double simulate = 0;     // durations, simulation, memory, metrics
  double total = 0;
};

// Everything one plan produced. Held by pointer: the plan points into the graph and the ExecPlan into
// the plan, so the object never moves.
struct PlanResult {
  PlanRequest request;
  std::string description;  // describe(policy, config)
  ir::Graph graph;
  ir::GraphStats stats;
  cluster::Cluster cluster;
  plan::Plan plan;
  exec::ExecPlan exec;       // not folded: the checked ExecPlan after the exec passes
  exec::MaterializeStats materialize_stats;
  exec::ExecPassStats passes;
  // Folded: the plan and the graph are one micro-batch of one replica over tp x pp slice devices, and
  // step is the unfolded step (exec/fold.h), its programs those of the class representatives.
  bool folded = false;
  int slice_devices = 0;
  exec::ExecPlan slice;      // folded: the slice's checked ExecPlan (after its exec passes), which exec.json holds
  exec::FoldedStep step;     // folded: the step the slice unfolds to (after its exec passes)
  sim::SimResult sim;
  cost::MemoryReport memory;
  sim::StepMetrics metrics;
  StageSeconds seconds;

  PlanResult() = default;
  PlanResult(const PlanResult&) = delete;
  PlanResult& operator=(const PlanResult&) = delete;
};

// Errors name the stage and the input: an unknown model, cluster or policy, degrees that do not match
// --gpus or exceed the cluster, a policy that cannot split the model, a malformed profile database.
// A plan that does not fit in memory is a result, not an error (metrics.out_of_memory()).
Expected<std::unique_ptr<PlanResult>> plan_model(const PlanRequest& request);

// Writes plan.json, exec.json, trace.json and report.html into `dir` (created when missing), each
// atomically; returns their paths. The files depend only on the request, so two runs give byte-identical
// files.
Expected<std::vector<std::string>> write_plan_files(const PlanResult& result, const std::string& dir);

}  // namespace loom::api
