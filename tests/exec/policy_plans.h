// Test support shared by the cost and sim tests: a preset's shrunk training graph under a built-in
// policy, materialized and checked (and, on request, through the exec passes and checked again).
// Header-only; the including test links models, policy and exec.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "loom/cluster/presets.h"
#include "loom/exec/check.h"
#include "loom/exec/materialize.h"
#include "loom/exec/passes.h"
#include "loom/ir/autograd.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"
#include "loom/policy/policy.h"

namespace loom::exec::testing {

// The shrunk training graph (AdamW) of `preset`, built once per test binary; plans point into it.
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

// A plan with a policy applied and its checked ExecPlan, at a fixed address (the ExecPlan points at it).
struct PolicyPlan {
  plan::Plan plan;
  ExecPlan exec;
  MaterializeStats stats;
};

// `layout_search` false: every move by the general fallback (sends and combines), as `loom verify
// --fallback-only`.
inline std::unique_ptr<PolicyPlan> policy_plan(const ir::Graph& graph, std::string_view policy,
                                               const policy::ParallelConfig& config, bool exec_passes = false,
                                               bool layout_search = true) {
  auto out = std::make_unique<PolicyPlan>();
  auto made = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(made) << made.error().to_string();
  if (!made) return out;
  out->plan = std::move(*made);
  auto applied = policy::apply_policy(out->plan, policy, config);
  EXPECT_TRUE(applied) << applied.error().to_string();
  if (!applied) return out;
  // Latency would turn every transfer of a shrunk model into p2p; sizes alone pick full-size collectives.
  MaterializeOptions options;
  options.cost_model = bandwidth_only_cost(cluster::make_cluster("dgx-a100").value());
  options.use_layout_search = layout_search;
  auto materialized = materialize(out->plan, policy::device_count(config), options);
  EXPECT_TRUE(materialized) << materialized.error().to_string();
  if (!materialized) return out;
  out->exec = std::move(materialized->exec);
  out->exec.plan = &out->plan;
  out->stats = std::move(materialized->stats);
  const auto checked = check_exec_plan(out->exec);
  EXPECT_TRUE(checked) << checked.error().to_string();
  if (!exec_passes) return out;
  run_exec_passes(out->exec);
  const auto passed = check_exec_plan(out->exec);
  EXPECT_TRUE(passed) << "after the exec passes: " << passed.error().to_string();
  return out;
}

}  // namespace loom::exec::testing
