// The one place a job's defaults are resolved (DESIGN.md, "Job"): from the options as given
// (job_options.h, 0 meaning "not given") to the GPU count, degrees, micro-batches and model sizes every
// stage uses. The rules are Megatron-LM's:
//   GPUs           --gpus, else every GPU of the cluster;
//   degrees        none given: the policy's defaults on the GPUs (policy::default_degrees); else tp and pp
//                  default to 1 and dp, where the policy has one, to GPUs / (tp x pp). The degrees must use
//                  exactly the GPUs: a remainder or GPUs left unused is an error with the fix;
//   micro-batches  --micro-batch-size b: global batch / (dp x b); else --microbatches; else 2 x pp when
//                  pipelined (a multiple of pp, as interleaving needs), else 1.
// The searches (auto, megatron-best, deepspeed-best: api/auto_search.h) choose their own degrees; for
// them only the GPU count is resolved.
#pragma once

#include <cstdint>
#include <string>

#include "loom/api/job_options.h"
#include "loom/cluster/cluster.h"
#include "loom/core/error.h"
#include "loom/ir/autograd.h"
#include "loom/models/zoo.h"
#include "loom/policy/policy.h"

namespace loom::api {

struct ResolvedRequest {
  models::ModelOptions model_options;  // a preset's build options (batch: the global batch option, 0 the preset's)
  ir::OptimizerOptions optimizer;
  int gpus = 0;                        // the GPUs the plan uses
  policy::ParallelConfig config;       // degrees and micro-batches (unset for a baseline's search)
};

// Whether the options plan a traced graph (a file or its text) rather than a preset.
bool plans_a_graph(const JobOptions& options);

// The checks that need no model: exactly one model source, no resizing of a graph, a known policy.
Expected<void> check_options(const JobOptions& options);

// The model that --model, --model-file or --arch names, as a preset (the one path from options to a model,
// for building it and rebuilding it at micro-batch size). Errors name the preset, the file or the flag.
Expected<models::ModelPreset> model_preset_of(const JobOptions& options);

// That preset's forward graph at the options' sizes (model_options_of): what `loom plan` and `loom graph` build.
Expected<ir::Graph> build_model_of(const JobOptions& options);

// The spec --arch states: `options.arch` with the depth, sequence, vocabulary and batch of the size options.
models::ModelSpec arch_spec_of(const JobOptions& options);

// What the model is called in reports: the preset, the model file, "--arch gpt", the graph file.
std::string model_label(const JobOptions& options);

// A preset's build options: the sizes as given (0: the preset's), which depend on nothing else. With --arch
// the sizes are the architecture's own (arch_spec_of), so none is passed twice.
models::ModelOptions model_options_of(const JobOptions& options);

// For the commands that run a plan on simulated devices or time its ops (`verify`, `profile`) rather than
// fill a cluster: the GPUs are --gpus/--devices when given, else those the degrees name (dp x tp x pp, each
// 1 when not given), else 2; the cluster is the DGX-A100 nodes they need (its links price the layout
// search). `plan`, `compare` and the bindings take the cluster's GPUs instead (resolve_request).
void size_to_degrees(JobOptions& options, bool gpus_given);

// `options` with every degree, the micro-batches, the schedule, ZeRO and recomputation of `config` given
// explicitly and the GPU count their product: the options that resolve to `config` (searches, tests).
JobOptions with_config(JobOptions options, const policy::ParallelConfig& config);

// Errors name the option: an unknown policy, GPUs the degrees do not use, indivisible micro-batches.
// `global_batch`: the loaded model's (its first input's batch).
Expected<ResolvedRequest> resolve_request(const JobOptions& options, const cluster::Cluster& cluster,
                                          std::int64_t global_batch);

}  // namespace loom::api
