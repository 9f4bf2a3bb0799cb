// Property: every plan the primitives can build computes what the single-device graph computes. Random
// small training graphs under random plans (random_plans.h) must match run_graph to 1e-9 in every tensor. A planted wrong materialization shows the interpreter
// catches what coverage validation cannot.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "loom/plan/validate.h"
#include "loom/verify/plan_interpreter.h"
#include "random_plans.h"

namespace loom::verify {
namespace {

using plan::Plan;

constexpr std::uint64_t kBaseSeed = 20240611;
// LOOM_RANDOM_PLAN_CASES overrides the count for a deeper search (the default takes about a second).
int case_count() {
  const char* env = std::getenv("LOOM_RANDOM_PLAN_CASES");
  return env != nullptr ? std::max(1, std::atoi(env)) : 5000;
}
constexpr double kTolerance = 1e-9;

// Empty when the plan reproduces the graph; else what differs.
std::string check(const Plan& plan, int devices, const std::vector<NdArray>& initial, const std::vector<NdArray>& reference) {
  if (auto valid = plan::validate_plan(plan, devices); !valid) return "validate_plan: " + valid.error().to_string();
  auto run = run_plan(plan, devices, initial);
  if (!run) return "run_plan: " + run.error().to_string();
  return testing::disagreement(*plan.graph, reference, run->values, kTolerance);
}

TEST(RandomPlanProperty, EveryPlanMatchesTheSingleDeviceRun) {
  const auto start = std::chrono::steady_clock::now();
  const int cases = case_count();
  int failures = 0, transformed = 0, multi_device = 0;
  for (int i = 0; i < cases; ++i) {
    const std::uint64_t seed = kBaseSeed + static_cast<std::uint64_t>(i);
    auto c = testing::random_case(seed);
    ASSERT_TRUE(c) << "seed " << seed << ": " << c.error().to_string();
    transformed += c->log.empty() ? 0 : 1;
    multi_device += c->devices > 1 ? 1 : 0;
    const std::string problem = check(c->plan, c->devices, c->initial, c->reference);
    if (problem.empty()) continue;
    if (++failures <= 3) ADD_FAILURE() << "case " << i << ": " << problem << "\n" << c->describe();
  }
  EXPECT_EQ(failures, 0) << "of " << cases << " cases";
  EXPECT_GT(transformed, cases * 3 / 4);  // most cases exercise at least one accepted trans
  EXPECT_GT(multi_device, cases / 2);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d random graph x plan cases, %d transformed, %d on >1 device, %.2f s\n", cases, transformed, multi_device, seconds);
}

// The planted bug: after a column split of fc1, the two parts' weight inputs (or output boxes) are
// swapped. Every tensor is still covered exactly, so validation passes, but the data is wrong.
void expect_planted_bug_caught(bool swap_outputs) {
  const ir::Graph graph = plan::testing::mlp_training_graph();
  auto made = plan::make_plan(graph, ops::builtin_ops());
  ASSERT_TRUE(made);
  Plan plan = *made;
  auto parts = plan::trans(plan, plan::testing::only_part(plan, "fc1"), plan::SplitAlgo{"o"}, 2);
  ASSERT_TRUE(parts);
  plan::testing::assign_all(plan, 0);
  ASSERT_TRUE(plan::assign(plan, (*parts)[1], 1));
  plan::SubOp &a = plan.sub_op((*parts)[0]), &b = plan.sub_op((*parts)[1]);
  if (swap_outputs) std::swap(a.outputs[0].box, b.outputs[0].box);
  else std::swap(a.inputs[1].box, b.inputs[1].box);
  auto valid = plan::validate_plan(plan, 2);
  ASSERT_TRUE(valid) << valid.error().to_string();
  const std::vector<NdArray> initial = initial_values(graph, 5);
  auto reference = run_graph(graph, initial);
  ASSERT_TRUE(reference);
  auto run = run_plan(plan, 2, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto c = compare_runs(graph, *reference, run->values);
  ASSERT_TRUE(c);
  EXPECT_GT(c->overall.max_rel, 1e-6);
  EXPECT_GT(c->activation.max_rel, 1e-6) << c->activation.worst;
  EXPECT_GT(c->loss.max_rel, 1e-6);
}

TEST(RandomPlanProperty, PlantedSwappedOutputBoxesPassValidationButNotTheInterpreter) { expect_planted_bug_caught(true); }
TEST(RandomPlanProperty, PlantedSwappedWeightShardsPassValidationButNotTheInterpreter) { expect_planted_bug_caught(false); }

}  // namespace
}  // namespace loom::verify
