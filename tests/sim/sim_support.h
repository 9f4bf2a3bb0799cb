// Test support for the sim tests: shrunk policy plans (tests/testing/policy_plans.h) with device classes,
// priced by the real models on a cluster preset.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "testing/policy_plans.h"
#include "loom/cluster/presets.h"
#include "loom/cost/compute_model.h"
#include "loom/exec/device_classes.h"
#include "loom/ops/registry.h"
#include "loom/sim/durations.h"

namespace loom::sim::testing {

// A shrunk preset's training graph under a policy, materialized, checked, with device classes filled.
inline std::unique_ptr<exec::testing::PolicyPlan> classed_plan(std::string_view policy, const policy::ParallelConfig& config,
                                                              const std::string& preset = "gpt3-125m",
                                                              ir::DType dtype = ir::DType::f32) {
  auto p = exec::testing::policy_plan(exec::testing::shrunk_training_graph(preset, dtype), policy, config);
  exec::assign_device_classes(p->exec);
  return p;
}

// The cost models of `cluster` and the Durations they give for one plan, kept together (the Durations
// point into the compute model).
struct Priced {
  cluster::Cluster cluster;
  std::unique_ptr<cost::ComputeModel> compute;
  Durations durations;
};

inline std::unique_ptr<Priced> priced(const exec::ExecPlan& exec, cluster::Cluster cluster, DurationOptions options = {},
                                      cost::ComputeConstants constants = {}) {
  auto out = std::make_unique<Priced>();
  out->cluster = std::move(cluster);
  auto compute = cost::ComputeModel::make(*exec.plan, ops::builtin_ops(), out->cluster.gpu, nullptr, constants);
  EXPECT_TRUE(compute) << compute.error().to_string();
  out->compute = std::make_unique<cost::ComputeModel>(std::move(*compute));
  auto durations = model_durations(exec, *out->compute, out->cluster, options);
  EXPECT_TRUE(durations) << durations.error().to_string();
  if (durations) out->durations = std::move(*durations);
  return out;
}

inline std::unique_ptr<Priced> priced(const exec::ExecPlan& exec, std::string_view cluster_name = "dgx-a100",
                                      DurationOptions options = {}, cost::ComputeConstants constants = {}) {
  return priced(exec, cluster::make_cluster(cluster_name).value(), options, constants);
}

}  // namespace loom::sim::testing
