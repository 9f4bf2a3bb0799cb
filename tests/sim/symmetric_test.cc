// Symmetric devices simulated once (simulator.h, symmetry.h): on shrunk policy plans priced by the real
// models, simulating one program per device class gives exactly the full simulation's step and device
// times; classes that are not a true symmetry are detected and simulated in full.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "../exec/exec_test_plans.h"
#include "loom/sim/symmetry.h"
#include "sim_support.h"

namespace loom::sim {
namespace {

using ::testing::HasSubstr;
using testing::classed_plan;
using testing::priced;

struct Case {
  std::string name;
  std::string policy;
  policy::ParallelConfig config;
  bool one_class = false;  // every device shares one program: the symmetric run simulates one device
};

std::vector<Case> cases() {
  using plan::ScheduleKind;
  return {{"dp4", "dp", {.dp = 4}, true},
          {"tp4", "tp", {.tp = 4}, true},
          {"dp2_tp2", "dp-tp", {.dp = 2, .tp = 2}},
          {"pp2_1f1b", "pp", {.pp = 2, .micro_batches = 4, .schedule = ScheduleKind::one_f_one_b}},
          {"megatron_tp2_pp2", "megatron", {.tp = 2, .pp = 2, .micro_batches = 2}},
          {"megatron_dp2_tp2_pp2", "megatron",
           {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2, .schedule = ScheduleKind::one_f_one_b}}};
}

void expect_same_times(const exec::ExecPlan& exec, const SimResult& symmetric, const SimResult& full) {
  EXPECT_EQ(symmetric.step_time, full.step_time);
  ASSERT_EQ(symmetric.devices.size(), full.devices.size());
  for (std::size_t d = 0; d < full.devices.size(); ++d) {
    SCOPED_TRACE(d);
    EXPECT_EQ(symmetric.devices[d], full.devices[d]);
    if (symmetric.symmetry_fallback.empty()) {
      EXPECT_EQ(symmetric.represented_by[d], exec.representatives[static_cast<std::size_t>(exec.class_of[d])]);
    }
  }
  // The representatives' events are the full simulation's, event for event.
  std::set<int> simulated(symmetric.simulated_devices.begin(), symmetric.simulated_devices.end());
  std::vector<Event> full_events;
  for (const Event& e : full.events)
    if (simulated.contains(e.device)) full_events.push_back(e);
  EXPECT_EQ(symmetric.events, full_events);
}

// Whatever the classes materialization gives these plans, the answer is the full simulation's: by one
// device per class where the classes are a symmetry of the timing, else in full. Today dp4 and tp4 are
// one class; dp2 x tp2 has classes {0}, {1}, {2, 3} that pass both checks (devices 2 and 3 receive
// embedding-gradient pieces from devices 0 and 1, of different classes, that send at the same moment);
// megatron tp2 x pp2's stage-0 pair receives from stage-1 devices of different classes that send at
// different moments, which the check on the times catches.
TEST(SimulateSymmetric, EqualsTheFullSimulationOnPolicyPlans) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto p = classed_plan(c.policy, c.config);
    const auto model = priced(p->exec);
    for (double contention : {1.0, 1.7}) {
      SCOPED_TRACE(contention);
      Durations durations = model->durations;
      durations.contention = contention;
      auto symmetric = simulate(p->exec, durations);
      auto full = simulate(p->exec, durations, {.use_device_classes = false});
      ASSERT_TRUE(symmetric) << symmetric.error().to_string();
      ASSERT_TRUE(full) << full.error().to_string();
      EXPECT_EQ(full->simulated_devices.size(), static_cast<std::size_t>(p->exec.num_devices));
      EXPECT_EQ(full->symmetry_fallback, "");
      if (symmetric->symmetry_fallback.empty()) {
        EXPECT_EQ(symmetric->simulated_devices, p->exec.representatives);
      } else {
        EXPECT_EQ(symmetric->simulated_devices, full->simulated_devices);
      }
      if (c.one_class) {
        EXPECT_EQ(symmetric->symmetry_fallback, "");
        EXPECT_EQ(symmetric->simulated_devices, (std::vector<int>{0}));
      }
      EXPECT_GT(symmetric->step_time, 0);
      expect_same_times(p->exec, *symmetric, *full);
    }
  }
}

// Regroups data_parallel(4)'s loss all-reduce into pairs {0, 1} and {2, 3}: the four programs stay
// equal up to renaming, one class.
std::unique_ptr<exec::testing::Fixture> paired_data_parallel() {
  auto f = exec::testing::data_parallel(4);
  for (int d = 0; d < 4; ++d) {
    auto& c = std::get<exec::Collective>(f->exec.programs[static_cast<std::size_t>(d)][6]);
    c.group = d < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    c.tag = d < 2 ? 0 : 1;
  }
  exec::assign_device_classes(f->exec);
  return f;
}

// Property: with random durations that depend only on what classes compare (the op; a collective's
// kind and bytes; a transfer's bytes) and random contention, the answer is the full simulation's, by
// classes or by the fallback.
TEST(SimulateSymmetric, RandomDurationsProperty) {
  const std::vector<std::pair<std::string, policy::ParallelConfig>> plans = {
      {"dp", {.dp = 4}}, {"tp", {.tp = 4}}, {"dp-tp", {.dp = 2, .tp = 2}}, {"megatron", {.tp = 2, .pp = 2, .micro_batches = 2}}};
  for (const auto& [policy, config] : plans) {
    const auto p = classed_plan(policy, config);
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
      SCOPED_TRACE(policy + " seed " + std::to_string(seed));
      // A fixed pseudo-random time in [1, 100] us for each key.
      const auto random_time = [seed](std::uint64_t key) {
        std::uint64_t z = (key + seed * 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
        z ^= z >> 31;
        return (1 + static_cast<double>(z % 1000) / 10) * 1e-6;
      };
      Durations durations{
          .compute = [&](const plan::SubOp& s, int) { return random_time(s.op.value); },
          .collective =
              [&](const exec::Collective& c, std::int64_t bytes) {
                return random_time(1000003 * static_cast<std::uint64_t>(c.kind) + static_cast<std::uint64_t>(bytes));
              },
          .p2p = [&](int, int, std::int64_t bytes) { return random_time(7 * static_cast<std::uint64_t>(bytes)); },
          .local = [&](const exec::Local& l, std::int64_t bytes) {
            return random_time(static_cast<std::uint64_t>(l.kind) * 31 + static_cast<std::uint64_t>(bytes)) / 10;
          },
          .contention = 1 + static_cast<double>(seed % 4) / 2};
      auto symmetric = simulate(p->exec, durations);
      auto full = simulate(p->exec, durations, {.use_device_classes = false});
      ASSERT_TRUE(symmetric && full);
      expect_same_times(p->exec, *symmetric, *full);
    }
  }
}

// A class member's collectives must time as its representative's. On a cluster of 3 GPUs a node, the
// pair {0, 1} stays inside node 0 while {2, 3} crosses to node 1: the one class is not a symmetry of
// the timing under the real cost model. The structural check sees it, and the full simulation answers.
TEST(SimulateSymmetric, CollectivesCrossingNodesUnevenlyFallBack) {
  auto f = paired_data_parallel();
  ASSERT_EQ(f->exec.representatives, (std::vector<int>{0}));
  cluster::Cluster uneven = cluster::make_cluster("dgx-a100x2").value();
  uneven.gpus_per_node = 3;
  const auto model = priced(f->exec, uneven);
  auto symmetric = simulate(f->exec, model->durations);
  auto full = simulate(f->exec, model->durations, {.use_device_classes = false});
  ASSERT_TRUE(symmetric) << symmetric.error().to_string();
  ASSERT_TRUE(full) << full.error().to_string();
  EXPECT_THAT(symmetric->symmetry_fallback, HasSubstr("device 2's instruction 6"));
  EXPECT_THAT(symmetric->symmetry_fallback, HasSubstr("times differently from its class representative 0"));
  EXPECT_THAT(symmetric->symmetry_fallback, HasSubstr(" s, not "));
  EXPECT_EQ(symmetric->simulated_devices.size(), 4u);
  EXPECT_EQ(symmetric->step_time, full->step_time);
  EXPECT_EQ(symmetric->devices, full->devices);
  EXPECT_NE(full->devices[0], full->devices[2]);
  // On 8-GPU nodes both pairs are inside node 0: one device simulated, the same answer.
  const auto even = priced(f->exec, "dgx-a100");
  auto fine = simulate(f->exec, even->durations);
  auto fine_full = simulate(f->exec, even->durations, {.use_device_classes = false});
  ASSERT_TRUE(fine && fine_full);
  EXPECT_EQ(fine->symmetry_fallback, "");
  EXPECT_EQ(fine->simulated_devices, (std::vector<int>{0}));
  EXPECT_EQ(fine->devices, fine_full->devices);
}

// Classes whose members wait for different classes: the pairs {0, 1} and {2, 3} with classes
// {0, 0, 0, 1}. Device 2 is in class 0 but all-reduces with class 1, whose compute is slower; trusted,
// the classes would give device 2 device 0's times. The structure passes (it has the same program and
// durations); the check on the simulated times catches it.
TEST(SimulateSymmetric, MembersWaitingForOtherClassesFallBack) {
  auto f = paired_data_parallel();
  f->exec.class_of = {0, 0, 0, 1};
  f->exec.representatives = {0, 3};
  Durations durations{.compute = [](const plan::SubOp&, int device) { return device == 3 ? 2e-3 : 1e-3; },
                      .collective = [](const exec::Collective&, std::int64_t) { return 1e-3; },
                      .p2p = [](int, int, std::int64_t) { return 0.0; }};
  const auto index = CommIndex::build(f->exec);
  ASSERT_TRUE(index);
  EXPECT_EQ(symmetry_violation(f->exec, *index, durations), "");
  auto result = simulate(f->exec, durations);
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_THAT(result->symmetry_fallback, HasSubstr("device 2's instruction 6"));
  EXPECT_THAT(result->symmetry_fallback, HasSubstr("waits differently from its class representative 0"));
  EXPECT_THAT(result->symmetry_fallback, HasSubstr("[0.006, 0.007] s, the representative's over [0.003, 0.004] s"));
  EXPECT_EQ(result->simulated_devices.size(), 4u);
  // Device 2's all-reduce waits for device 3 to issue it after its computes, at 6 ms, where device 0's
  // runs as soon as device 1's computes end, at 3 ms.
  const auto start_on = [&](int device) {
    for (const Event& e : result->events)
      if (e.device == device && e.kind == EventKind::collective) return e.start;
    return -1.0;
  };
  EXPECT_NEAR(start_on(0), 3e-3, 1e-12);
  EXPECT_NEAR(start_on(2), 6e-3, 1e-12);
}

TEST(SimulateSymmetric, MalformedClassesFallBack) {
  auto f = exec::testing::pipeline(2);  // stages {0, 1} and {2, 3}: different programs
  Durations durations{.compute = [](const plan::SubOp&, int) { return 1e-3; },
                      .collective = [](const exec::Collective&, std::int64_t) { return 1e-3; },
                      .p2p = [](int, int, std::int64_t) { return 1e-4; }};
  const auto index = CommIndex::build(f->exec);
  ASSERT_TRUE(index);
  EXPECT_EQ(symmetry_violation(f->exec, *index, durations), "the plan has no device classes");
  f->exec.class_of = {0, 0, 0, 0};
  f->exec.representatives = {0};
  EXPECT_THAT(symmetry_violation(f->exec, *index, durations), HasSubstr("device 2 runs 4 instructions"));
  f->exec.class_of = {0, 0, 1};
  EXPECT_THAT(symmetry_violation(f->exec, *index, durations), HasSubstr("class_of has 3 entries for 4 devices"));
  f->exec.class_of = {0, 0, 1, 1};
  f->exec.representatives = {0, 1};
  EXPECT_THAT(symmetry_violation(f->exec, *index, durations), HasSubstr("representative 1 is not a device of the class"));
  f->exec.representatives = {0, 2};
  EXPECT_EQ(symmetry_violation(f->exec, *index, durations), "");
  auto symmetric = simulate(f->exec, durations);
  auto full = simulate(f->exec, durations, {.use_device_classes = false});
  ASSERT_TRUE(symmetric && full);
  EXPECT_EQ(symmetric->simulated_devices, (std::vector<int>{0, 2}));
  EXPECT_EQ(symmetric->devices, full->devices);
  EXPECT_EQ(symmetric->step_time, full->step_time);
}

// A p2p time that depends on the pair: stage 0's device 1 sends over a slower link than device 0.
TEST(SimulateSymmetric, UnevenTransfersFallBack) {
  auto f = exec::testing::pipeline(2);
  exec::assign_device_classes(f->exec);
  Durations durations{.compute = [](const plan::SubOp&, int) { return 1e-3; },
                      .collective = [](const exec::Collective&, std::int64_t) { return 1e-3; },
                      .p2p = [](int src, int, std::int64_t) { return src == 1 ? 5e-3 : 1e-4; }};
  auto symmetric = simulate(f->exec, durations);
  auto full = simulate(f->exec, durations, {.use_device_classes = false});
  ASSERT_TRUE(symmetric && full);
  EXPECT_THAT(symmetric->symmetry_fallback, HasSubstr("device 1's instruction 3"));
  EXPECT_EQ(symmetric->devices, full->devices);
  EXPECT_NE(full->devices[2], full->devices[3]);  // one class, different times
}

}  // namespace
}  // namespace loom::sim
