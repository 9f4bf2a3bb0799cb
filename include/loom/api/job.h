// The one job pipeline (DESIGN.md, "Job"): every front end — `loom plan`, `compare`, `verify`,
// `profile`, the baselines' searches, the Python bindings and the tests — builds a Job with the same
// staged functions:
//
//   load_job      cluster, profile database, model (preset, graph file or JSON), the options resolved
//                 (resolve_request.h), the fold decided, the training graph and its statistics;
//   apply_policy  a fresh plan transformed by the named built-in policy (a search plans its finalists
//                 this way: auto_search.h);
//   materialize   validation, materialization, the ExecPlan check, the exec passes (exec/passes.h: every
//                 communication decision, as instructions) and the check again, device classes; a folded
//                 job's slice unfolded into the step (exec/fold.h) and passed again;
//   simulate      durations, the simulation, memory and step metrics.
//
// plan_job runs the four. A Job owns everything its stages make and never moves (it is held by
// unique_ptr): the plan points into its graph and the ExecPlan into its plan once, when they are made.
// Each stage is the library's own function; nothing here decides a plan.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/api/job_options.h"
#include "loom/api/resolve_request.h"
#include "loom/cluster/cluster.h"
#include "loom/core/error.h"
#include "loom/core/output_set.h"
#include "loom/cost/memory_model.h"
#include "loom/cost/profile_db.h"
#include "loom/exec/exec_plan.h"
#include "loom/exec/fold.h"
#include "loom/exec/materialize.h"
#include "loom/exec/passes.h"
#include "loom/ir/graph.h"
#include "loom/ir/graph_stats.h"
#include "loom/ops/custom_ops.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan.h"
#include "loom/policy/plan_size.h"
#include "loom/sim/metrics.h"
#include "loom/sim/simulator.h"

namespace loom::api {

// An explicit (unfolded) plan above kFoldAboveSubOps sub-ops folds when it can (Fold::automatic); one
// whose planning memory exceeds what kExplicitSubOpLimit sub-ops take and that does not fold, --fold off
// included, is refused before planning (policy/plan_size.h, shared with the search).
using policy::kExplicitSubOpLimit;
using policy::kFoldAboveSubOps;

// Wall-clock seconds of each stage (printed by the CLI; never written into the deterministic files).
struct StageSeconds {
  double build = 0;        // model and training graph
  double policy = 0;       // the policy over a fresh plan
  double materialize = 0;  // validation, materialization, ExecPlan check, device classes, exec passes
  double simulate = 0;     // durations, simulation, memory, metrics
  double total = 0;
};

enum class Stage : std::uint8_t { loaded, planned, materialized, simulated };

struct Job {
  JobOptions options;        // as given
  ResolvedRequest request;   // resolved once (resolve_request.h)
  std::string description;   // "megatron: dp 2 x tp 4 x pp 1, 4 micro-batches"
  cluster::Cluster cluster;
  cluster::Cluster layout_cluster;  // prices the layout search: options.layout_cluster, else `cluster`
  ops::CustomCatalog catalog{ops::builtin_ops()};  // the built-in ops and the graph's own (loom.register_op)
  std::optional<cost::ProfileDb> profile;
  sim::Workload workload;    // the whole step's samples and tokens
  ir::Graph graph;           // the training graph (folded: one micro-batch of one replica)
  ir::GraphStats stats;
  plan::Plan plan;
  exec::ExecPlan exec;       // not folded: the checked ExecPlan after the exec passes
  exec::MaterializeStats materialize_stats;
  exec::ExecPassStats passes;
  // Folded (exec/fold.h): the plan and the graph are one micro-batch of one replica over tp x pp slice
  // devices, `slice` their checked ExecPlan after its exec passes (which exec.json holds) and `step` the
  // step it unfolds to (after its own passes: dp buckets), programs for the class representatives only.
  bool folded = false;
  // Folded ZeRO (exec/fold.h): the slice holds every dp replica (one micro-batch each), only the
  // micro-batches repeat.
  bool slice_keeps_replicas = false;
  int slice_devices = 0;
  exec::ExecPlan slice;
  exec::FoldedStep step;
  sim::SimResult sim;
  cost::MemoryReport memory;
  sim::StepMetrics metrics;
  StageSeconds seconds;
  Stage stage = Stage::loaded;

  Job() = default;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
};

// Loads and resolves. Errors name the stage and the input: no or several model sources, an unknown
// model, cluster or policy, degrees that do not use the GPUs, a malformed profile database.
Expected<std::unique_ptr<Job>> load_job(const JobOptions& options);

// A job over a training graph already built (tests and tools that make graphs by hand): the options'
// model source and sizes are not read, the degrees resolve against the graph's batch, and it never folds.
// With options.shrink (a shrunk graph), moves are priced by bandwidth alone, as for a shrunk preset.
Expected<std::unique_ptr<Job>> load_job(const JobOptions& options, ir::Graph training_graph);

// The policy over a fresh plan of the job's graph. Errors: a policy that cannot split the model.
Expected<void> apply_policy(Job& job);

// A policy given as a function (the Python bindings' policies, written with the primitives): it transforms
// the job's fresh plan under the resolved degrees (op_seconds filled as for the built-in policies).
using PolicyFunction = std::function<Expected<void>(plan::Plan&, const policy::ParallelConfig&)>;

// apply_policy with `policy` in the built-in policy's place: the same fresh plan, config and stage.
Expected<void> apply_policy(Job& job, const PolicyFunction& policy);

// Materializes, checks and passes the plan (and unfolds a folded one).
Expected<void> materialize(Job& job);

// The step the simulator prices: the ExecPlan, or a folded job's unfolded step (its representatives).
const exec::ExecPlan& step_programs(const Job& job);

// Prices the step. A plan that does not fit in memory is a result, not an error (metrics.out_of_memory()).
Expected<void> simulate(Job& job);

// load_job, apply_policy, materialize and simulate: a built-in policy's whole job. (The baselines'
// searches are plan_or_search, baseline_search.h.)
Expected<std::unique_ptr<Job>> plan_job(const JobOptions& options);

// "megatron: dp 2 x tp 4 x pp 2, 8 micro-batches, 1f1b" — the policy and its degrees, for tables.
std::string describe(const std::string& policy, const policy::ParallelConfig& config);

// Adds plan.json, exec.json, trace.json and report.html in `dir` to `set` (written all or none by
// OutputSet::commit). The files depend only on the options, so two runs give byte-identical files. Needs a
// simulated job.
Expected<void> add_plan_files(const Job& job, const std::string& dir, OutputSet& set);

// add_plan_files as a set of its own, committed; returns the paths written.
Expected<std::vector<std::string>> write_plan_files(const Job& job, const std::string& dir);

}  // namespace loom::api
