// Test support shared by the cost, sim, policy and codegen tests (the loom_testing target): a preset's
// shrunk training graph, and a built-in policy's plan of a graph materialized and checked through the
// job pipeline (api/job.h), as `loom plan` makes it. Header-only; the target links loom_api.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "loom/api/job.h"
#include "loom/exec/check.h"
#include "loom/exec/materialize.h"
#include "loom/exec/passes.h"
#include "loom/ir/autograd.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/policy/policy.h"

namespace loom::exec::testing {

// The shrunk training graph (AdamW) of `preset`, built once per test binary.
inline const ir::Graph& shrunk_training_graph(const std::string& preset, ir::DType dtype) {
  static std::map<std::pair<std::string, ir::DType>, std::unique_ptr<ir::Graph>> graphs;
  auto& slot = graphs[{preset, dtype}];
  if (!slot) {
    auto forward = models::build_model(preset, {.dtype = dtype, .shrink = true});
    EXPECT_TRUE(forward) << forward.error().to_string();
    auto training = forward ? ir::build_training_graph(*forward, ops::builtin_ops(), {}) : Expected<ir::Graph>(ir::Graph{});
    EXPECT_TRUE(training) << training.error().to_string();
    slot = std::make_unique<ir::Graph>(training.value_or(ir::Graph{}));
  }
  return *slot;
}

// A job's plan and its checked ExecPlan (plan, exec, materialize_stats), at a fixed address.
using PolicyPlan = api::Job;

// `policy` with `config` over a copy of `graph` on the DGX-A100 nodes its devices need, moves priced by
// bandwidth alone (a shrunk graph's tiny tensors would otherwise all move point to point). Stops at
// materialization (device classes assigned, no simulation). `exec_passes`: through the exec passes (and
// the check again), as `loom plan` does; false leaves the ExecPlan as materialized. `layout_search` false:
// every move by the general fallback (sends and combines), as `loom verify --fallback-only`. Failures are
// test failures.
// `options` (policy, degrees and the rest) as given; the other form fills them from `config`.
inline std::unique_ptr<PolicyPlan> policy_plan(const ir::Graph& graph, api::JobOptions options) {
  options.shrink = true;
  api::size_to_degrees(options, /*gpus_given=*/true);  // the DGX-A100 nodes the devices need
  auto job = api::load_job(options, graph);
  EXPECT_TRUE(job) << job.error().to_string();
  if (!job) return std::make_unique<PolicyPlan>();
  auto applied = api::apply_policy(**job);
  EXPECT_TRUE(applied) << applied.error().to_string();
  if (!applied) return std::move(*job);
  auto made = api::materialize(**job);
  EXPECT_TRUE(made) << made.error().to_string();
  return std::move(*job);
}

inline std::unique_ptr<PolicyPlan> policy_plan(const ir::Graph& graph, std::string_view policy,
                                               const policy::ParallelConfig& config, bool exec_passes = false,
                                               bool layout_search = true) {
  api::JobOptions options;
  options.policy = std::string(policy);
  options.exec_passes = exec_passes;
  options.layout_search = layout_search;
  return policy_plan(graph, api::with_config(options, config));
}

}  // namespace loom::exec::testing
