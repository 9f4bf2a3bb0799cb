// The simulator on materialized policies of a shrunk preset: invariants of the breakdown, the pipeline
// bubble, and the Chrome trace.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "testing/policy_plans.h"
#include "loom/sim/chrome_trace.h"
#include "loom/sim/device_groups.h"
#include "loom/sim/simulator.h"

namespace loom::sim {
namespace {

constexpr double kMs = 1e-3;

std::unique_ptr<exec::testing::PolicyPlan> planned(std::string_view policy, const policy::ParallelConfig& config) {
  return exec::testing::policy_plan(exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::f32), policy, config);
}

template <class T>
int count(const exec::ExecPlan& exec, int device) {
  int n = 0;
  for (const auto& instruction : exec.programs[static_cast<std::size_t>(device)]) n += std::holds_alternative<T>(instruction);
  return n;
}

// Data parallel over 2: every compute takes 1 ms and every collective 2 ms. Whatever overlaps, each
// device's compute is its compute count in ms, its communication 2 ms a collective, and the breakdown
// adds up to the step.
TEST(SimulatePolicy, DataParallelBreakdownAddsUp) {
  const auto p = planned("dp", {.dp = 2});
  auto result = simulate(p->exec, {.compute = [](const plan::SubOp&, int) { return 1 * kMs; },
                                   .collective = [](const exec::Collective&, std::int64_t) { return 2 * kMs; },
                                   .p2p = [](int, int, std::int64_t) { return 0.0; }});
  ASSERT_TRUE(result) << result.error().to_string();
  for (int d = 0; d < 2; ++d) {
    SCOPED_TRACE(d);
    const DeviceTime& t = result->devices[static_cast<std::size_t>(d)];
    EXPECT_NEAR(t.compute, count<exec::Compute>(p->exec, d) * kMs, 1e-9);
    EXPECT_NEAR(t.communication, count<exec::Collective>(p->exec, d) * 2 * kMs, 1e-9);
    EXPECT_GT(count<exec::Collective>(p->exec, d), 0);
    EXPECT_LE(t.exposed_communication, t.communication + 1e-12);
    EXPECT_NEAR(t.compute + t.exposed_communication + t.idle, result->step_time, 1e-9);
  }
  EXPECT_GE(result->step_time, result->devices[0].compute);
  // The two replicas are symmetric: equal breakdowns.
  EXPECT_NEAR(result->devices[0].idle, result->devices[1].idle, 1e-9);
}

// Pipeline bubble. The stages' op counts differ (stage 0 has the embeddings, stage 1 the head and loss),
// so durations make them uniform: each stage's forward block (one micro-batch's forward sub-ops on its
// device) takes 1 and its backward block 2. A sub-op of a micro-batch (under pp alone the only split, so
// named "op[k/m]") takes block * m / (its device's micro-batch sub-ops of its pass); the few sub-ops
// outside the blocks (position table and its gradient, the loss-gradient seed, accumulations of weight
// gradients over micro-batches) and optimizer steps take 0, as do transfers. Then a stage is busy 3m of a
// step of 3(m + p - 1), and the idle fraction is (p - 1) / (m + p - 1) for GPipe and 1F1B alike.
double bubble(plan::ScheduleKind schedule, int m) {
  constexpr int p = 2;
  const auto planned_pp = planned("pp", {.pp = p, .micro_batches = m, .schedule = schedule});
  const exec::ExecPlan& exec = planned_pp->exec;
  const plan::Plan& plan = planned_pp->plan;
  const std::string part_of_m = "/" + std::to_string(m) + "]";
  auto in_block = [&](const plan::SubOp& s) {
    const ir::Op& op = plan.graph->op(s.op);
    return op.pass != ir::Pass::optimizer && op.type != "accumulate" && s.name.ends_with(part_of_m);
  };
  std::map<std::pair<int, ir::Pass>, int> computes;  // by (device, pass): the sub-ops in blocks
  for (int d = 0; d < exec.num_devices; ++d)
    for (const auto& instruction : exec.programs[static_cast<std::size_t>(d)])
      if (const auto* c = std::get_if<exec::Compute>(&instruction); c && in_block(plan.sub_op(c->sub_op)))
        ++computes[{d, plan.op_of(c->sub_op).pass}];
  Durations durations{
      .compute =
          [&](const plan::SubOp& s, int device) {
            if (!in_block(s)) return 0.0;
            const ir::Pass pass = plan.graph->op(s.op).pass;
            const double block = pass == ir::Pass::forward ? 1.0 : 2.0;
            return block * m / computes.at({device, pass});
          },
      .collective = [](const exec::Collective&, std::int64_t) { return 0.0; },
      .p2p = [](int, int, std::int64_t) { return 0.0; }};
  auto result = simulate(exec, durations);
  EXPECT_TRUE(result) << result.error().to_string();
  if (!result) return -1;
  EXPECT_NEAR(result->step_time, 3.0 * (m + p - 1), 1e-9 * m);
  for (const DeviceTime& t : result->devices) EXPECT_NEAR(t.compute, 3.0 * m, 1e-9 * m);
  return result->idle_fraction();
}

TEST(SimulatePolicy, GPipeBubble) {
  for (int m : {2, 4}) {
    SCOPED_TRACE(m);
    EXPECT_NEAR(bubble(plan::ScheduleKind::gpipe, m), 1.0 / (m + 1), 0.01 / (m + 1));
  }
}

TEST(SimulatePolicy, OneFOneBBubble) {
  EXPECT_NEAR(bubble(plan::ScheduleKind::one_f_one_b, 4), 1.0 / 5, 0.01 / 5);
}

// One "X" event per compute, collective member, send and recv, in the Chrome trace event format, with
// each device named; the text is deterministic.
TEST(ChromeTrace, ParsesWithOneEventPerInstruction) {
  const auto p = planned("megatron", {.dp = 2, .pp = 2, .micro_batches = 2, .schedule = plan::ScheduleKind::gpipe});
  auto result = simulate(p->exec, {.compute = [](const plan::SubOp&, int) { return 1 * kMs; },
                                   .collective = [](const exec::Collective&, std::int64_t) { return 0.5 * kMs; },
                                   .p2p = [](int, int, std::int64_t) { return 0.25 * kMs; }});
  ASSERT_TRUE(result) << result.error().to_string();
  const std::string text = chrome_trace_json(p->exec, *result);
  EXPECT_EQ(text, chrome_trace_json(p->exec, *result));
  const auto trace = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(trace.is_discarded());
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<std::pair<int, std::string>, int> events;  // by (pid, cat)
  std::map<int, std::string> processes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"].get<int>()] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_GE(e["ts"].get<double>(), 0);
    EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), result->step_time * 1e6 * (1 + 1e-12));
    ++events[{e["pid"].get<int>(), e["cat"].get<std::string>()}];
  }
  // One process per device class (exec/device_classes.h), named by its representative; the classes
  // cover the 4 devices.
  const std::vector<DeviceGroup> groups = device_groups(*result);
  ASSERT_EQ(processes.size(), groups.size());
  std::size_t covered = 0;
  for (const DeviceGroup& group : groups) {
    const int d = group.representative;
    SCOPED_TRACE(d);
    covered += group.devices.size();
    EXPECT_TRUE(processes[d].contains("device " + std::to_string(d))) << processes[d];
    EXPECT_EQ((events[{d, "compute"}]), count<exec::Compute>(p->exec, d));
    EXPECT_EQ((events[{d, "collective"}]), count<exec::Collective>(p->exec, d));
    EXPECT_EQ((events[{d, "send"}]), count<exec::Send>(p->exec, d));
    EXPECT_EQ((events[{d, "recv"}]), count<exec::Recv>(p->exec, d));
    EXPECT_GT((events[{d, "compute"}]), 0);
  }
  EXPECT_EQ(covered, 4u);
  EXPECT_GT((events[{0, "collective"}]), 0);
  EXPECT_GT((events[{0, "send"}]), 0);
}

}  // namespace
}  // namespace loom::sim
